// Package sealed encrypts stored responses at rest. It wraps any
// [retrysafe.Store]: on Complete it seals the response's header values and
// body with AES-256-GCM under the newest key of a [KeyRing]; on Claim, Get
// and Admin.List it opens them again, with whichever key of the ring sealed
// them.
//
//	ring, err := sealed.ParseKeyRing(keyFileContents)
//	...
//	store, err := sealed.New(inner, ring, sealed.Config{})
//
// # What is protected
//
// The response body and every header value are encrypted and authenticated.
// The associated data binds each sealed response to its key id, scope,
// idempotency key and status code, so a sealed response copied to another
// record, another tenant's scope, or given another status fails to open
// with [ErrCannotDecrypt]; it is never replayed. Header values are sealed
// together with their names, so they cannot be swapped between headers.
//
// Checkpoints ([retrysafe.Checkpoint], written through Extend) are sealed
// too: their data is encrypted and bound to its key id, scope, idempotency
// key and checkpoint name; the name and time stay in the clear. Their data
// grows by at most 130 bytes (a marker, the key id, a nonce and a tag),
// within [retrysafe.CheckpointStoreLimit].
//
// The scope and the fingerprint are kept keyed with the ring's
// [HMACKeyID] secret (see [KeyRing.Scope]): the scope as its HMAC, the
// fingerprint encrypted deterministically, so that equal values stay
// equal (claims, takeovers and mismatches work as before) but neither
// can be reversed with a word list. Claim and Get give the caller's
// values back; Admin shows and takes the stored scopes. That secret is
// never rotated; [Check] makes an instance without it, or with another
// one, refuse to start.
//
// What stays in the clear, because the store needs it or operators do:
// idempotency key, state, status code, times, and the
// header names (each sealed header keeps one placeholder value,
// [HeaderPlaceholder]). A sealed response also carries [MarkerHeader],
// with the id of its key: that header, which only the wrapper writes, is
// what makes a response sealed, never the look of its body. The length of the body is visible, give or take the
// fixed overhead.
//
// # Keys and rotation
//
// A [KeyRing] holds one or more 256-bit keys, each with an id. New writes use
// the newest key (the last one); reads accept every key in the ring, and each
// sealed body names the id of its key. To rotate, append a new key and
// restart; remove an old key only once every response sealed with it has
// expired (the TTL after the rotation). The key file format is described at
// [ParseKeyRing].
//
// Each response gets a random 96-bit nonce, so one key must seal no more
// than 2^32 responses (the AES-GCM limit for random nonces): rotate well
// before that. At 100 new keys a second that is 16 months; at 1,000 a
// second, 7 weeks.
//
// # When a response cannot be opened
//
// Claim and Get return an error wrapping [ErrCannotDecrypt] when a stored
// response was sealed with a key id the ring lacks, fails authentication, or
// (unless [Config.AcceptPlaintext]) was stored without encryption. The error
// does not match retrysafe.ErrStoreUnavailable, so the middleware answers
// 503 and never forwards the request (not even with FailOpen): the
// operation does not run again, and the retry succeeds once the right key
// is back in the ring, or runs as new once the record has expired or was
// deleted (retrysafe keys delete).
//
// # Transactions
//
// A store's CompleteTx writes what it is given. Seal the parameters first
// with [KeyRing.SealComplete]; see its example. The same holds for a
// store's CheckpointTx: seal with [KeyRing.SealExtend].
package sealed
