// Package client is the calling side of retrysafe: an [http.RoundTripper]
// that makes POST and PATCH requests safe to retry, and derived keys for the
// calls a protected handler makes to other providers.
//
// # The contract on the client side
//
// An Idempotency-Key names one logical operation. The client must create it
// before the first attempt, send exactly the same key on every retry of that
// operation, and create a new key only for a new operation. A timeout or a
// 500 is never proof that nothing happened: the only safe retry is one that
// carries the original key, so the server can answer it from its record
// instead of running the operation twice.
//
// [Transport] does this for every request whose method is protected (POST and
// PATCH by default):
//
//   - The key comes from the request's Idempotency-Key header if present,
//     else from the context ([WithKey], [WithDerivedKey]), else a new random
//     key from [NewKey]. It is fixed before the first attempt and reused on
//     every retry. The caller's *http.Request is never modified; the key
//     used is on resp.Request ([KeyFromResponse]) and in [AttemptInfo].
//   - It retries network errors, attempt timeouts, 408, 409 (in flight),
//     429, 502, 503 and 504, honouring Retry-After; it does not retry 500
//     or other final answers (see [DefaultRetryOn]). A server can override
//     the decision with Retrysafe-Should-Retry or Stripe-Should-Retry.
//   - It waits with capped exponential backoff and equal jitter, stops after
//     MaxAttempts attempts or MaxElapsed time, and stops at once when the
//     request's context ends.
//   - It retries only requests whose body can be sent again: bodies with
//     GetBody, or bodies it could buffer within MaxBufferedBody. Any other
//     request is sent once and the reason it was not retried is reported.
//
// Answers that a server replayed from its record carry
// Idempotent-Replayed: true; [Replayed] reports it.
//
// # Keys for calls to providers
//
// A handler running behind retrysafe's middleware (or a function run by Do)
// may call other services, such as a payment provider. Those calls need a key
// too, and it must be the same each time the incoming operation is retried,
// or a retry after a lost provider answer charges twice. [DeriveKey] computes
// such a key from the operation's scope and key and a label naming the call;
// [WithDerivedKey] puts it in a context so [Transport] sends it.
package client
