// Package retrysafegrpc makes unary gRPC calls safe to retry: a server
// interceptor runs each call that carries an idempotency-key at most once
// per caller and key, and answers its retries with the stored result,
// message bytes, status and metadata alike; a client interceptor sends one
// key per logical call, kept across grpc-go's retries and the caller's own.
//
// It builds on [retrysafe.Executor], the engine under the HTTP middleware,
// so records, stores, leases, unknown outcomes and the Observer work as
// they do there (see the root package's documentation and
// docs/guarantees.md). How the HTTP answers map to gRPC statuses:
//
//	HTTP                            gRPC (ErrorInfo reason, domain retrysafe.dev)
//	400 missing-key / invalid-key   InvalidArgument (MISSING_KEY, INVALID_KEY)
//	400 empty-scope                 Unauthenticated (EMPTY_SCOPE)
//	422 key-reused                  FailedPrecondition (KEY_REUSED)
//	409 request-in-progress         Aborted (REQUEST_IN_PROGRESS) + RetryInfo
//	409 outcome-unknown             Aborted (OUTCOME_UNKNOWN) + RetryInfo: the lease left
//	503 store-unavailable           Unavailable (STORE_UNAVAILABLE) + RetryInfo
//	503 store-full                  ResourceExhausted (STORE_FULL)
//	Idempotent-Replayed: true       header metadata idempotent-replayed: true
//
// Streaming calls cannot be replayed: a keyed one is refused with
// InvalidArgument (KEYED_STREAM), an unkeyed one passes through, as does
// an unkeyed call in another codec than protobuf (a keyed one:
// UNSUPPORTED_CODEC). The health and reflection services, and methods
// marked NO_SIDE_EFFECTS, pass untouched ([DefaultProtect]).
package retrysafegrpc
