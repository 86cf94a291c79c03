// Package retrysafe makes non-idempotent operations safe to retry: a double
// click on "Pay", a mobile client retrying after a timeout, a proxy resending
// a POST or a worker taking the same message off a queue twice each produce
// one business effect and the same answer.
//
// # How it works
//
// A protected request carries an Idempotency-Key header (IETF
// draft-ietf-httpapi-idempotency-key-header; a Structured-Field string such
// as "8e03978e-…" or a bare token). The middleware derives:
//
//   - the scope: the caller's identity (by default a SHA-256 of the
//     Authorization header; see [ScopeFromHeaders] and [ScopeFromCookie]),
//     so tenants never share keys or see each other's stored responses.
//     Callers that send no identity all share the empty scope, unless
//     [Config].RequireScope refuses them (400 empty-scope);
//   - the fingerprint: method, route path, canonical query and body (JSON
//     bodies canonicalised: key order and whitespace do not matter).
//
// It then claims the record scope+key in the [Store] in one atomic step.
//
// # The state machine
//
//		(absent) --Claim--> processing --Complete--> completed --TTL--> (absent)
//		                     |  |   \--Release--> (absent)
//		                     |  \--Abandon--> processing, abandoned (outcome unknown)
//		                     \--lease runs out (outcome unknown)--> Config.OnUnknown:
//		                          takeover: the next Claim takes it over (Attempt+1)
//		                          block: 409 until resolved; a Resolver re-runs,
//		                          completes or keeps it blocked
//
//	  - processing: one owner holds a lease (default 30s) renewed by a
//	    heartbeat while the handler runs, and a random owner token. Complete,
//	    Release and Extend are fenced by that token, so an owner whose lease
//	    was taken over cannot overwrite the new owner's record. The owner
//	    may record checkpoints ([Operation.Checkpoint]), which a later
//	    owner reads ([Operation.Resumed]), and may give up without a result
//	    ([Operation.Abandon]): the record is then marked abandoned and
//	    every retry learns at once that the outcome is unknown.
//	  - completed: the stored status, headers and body are replayed byte for
//	    byte with Idempotent-Replayed: true until the TTL (default 24h) ends.
//	    Expiry is enforced on read, never only by a sweeper.
//
// A duplicate gets 422 if its fingerprint differs (checked first), 409 with
// Retry-After (or waits, bounded, and replays) while the original is
// processing, and the stored answer once it completed.
//
// # Failure modes
//
//   - Client hangs up: the handler's context is not cancelled; the result is
//     stored for the retry.
//   - Handler panics: before writing a status, the record is released and
//     the panic propagates; a retry runs again (as after a crash, without
//     waiting for the lease). After the status, the record is marked
//     abandoned: its outcome is unknown.
//   - Process crashes mid-operation: the record stays processing until its
//     lease runs out. Then, by default, the next retry takes it over
//     (Attempt+1, resuming from the last checkpoint if the operation wrote
//     one); if the side effect had happened before the crash, it happens
//     again unless the operation itself is idempotent below (unique
//     constraints, provider keys derived with the client package). With
//     Config.OnUnknown block it never runs again on its own, and a
//     [Resolver] decides instead (also in the background:
//     [Executor.ResolveStranded]). See docs/guarantees.md.
//   - Store unavailable: 503 with Retry-After and nothing runs (fail
//     closed), unless Config.FailOpen. A full store (ErrStoreFull) gets
//     503 store-full and never fails open.
//   - A duplicate of an attempt whose outcome is unknown (its owner
//     abandoned it, or stopped renewing the lease) gets 409
//     outcome-unknown, also in wait mode: a waiter never takes a record
//     over.
//
// [Do] applies the same state machine to any function, for queue consumers
// and webhook handlers; [NewDoer] and [Run] prepare one policy for many calls.
// [Executor] is the same engine without HTTP or result encoding, for
// adapters of other transports (status, metadata and body in a [Response]).
//
// An [Observer] receives each protected request's [Outcome] for metrics; a
// [RequestObserver] also receives the request, so that request logs, metrics
// and traces read one account of what happened. Tests of handlers that use
// the [Operation] get one from package retrysafetest.
package retrysafe
