package client

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"

	"github.com/retrysafe/retrysafe"
)

// DerivedKeyPrefix starts every key returned by [DeriveKey].
const DerivedKeyPrefix = "rsd_"

// derivedKeyDomain separates these HMAC inputs from any other use of the same
// secret. Changing it changes every derived key.
const derivedKeyDomain = "retrysafe/client/derived-key/v1"

// DeriveKey returns a stable idempotency key for an outbound call made on
// behalf of the idempotent operation in ctx (see
// [retrysafe.OperationFromContext]). label names the call within the
// operation, for example "psp-charge" or "send-receipt". It returns
// ok=false when ctx carries no operation.
//
// The same operation (scope and key) and label always give the same key, so
// when the incoming request is retried the outbound call is retried with the
// same key too and the provider can replay its answer. A different scope, key
// or label gives a different key.
//
// The key is HMAC-SHA256 over the length-prefixed scope, key and label,
// encoded as [DerivedKeyPrefix] followed by the 43-character unpadded
// base64url form of the 32-byte MAC: 47 characters from [A-Za-z0-9_-],
// valid wherever an Idempotency-Key of up to 255 printable characters is.
//
// DeriveKey uses no secret: the derivation is one-way, but anyone who sees a
// derived key and knows the scope can test guesses of the incoming key. That
// is hopeless for random keys such as UUIDs (122 bits), but a low-entropy
// incoming key (an order number, a counter) could be brute-forced. Use
// [DeriveKeyWithSecret] when incoming keys may be guessable or when the
// derived key should not be linkable across deployments.
func DeriveKey(ctx context.Context, label string) (key string, ok bool) {
	return DeriveKeyWithSecret(ctx, nil, label)
}

// DeriveKeyWithSecret is [DeriveKey] with the HMAC keyed by secret. Different
// secrets give unrelated keys; without the secret the incoming key cannot be
// tested against a derived one. Keep the secret stable: changing it changes
// every derived key, so a retry after the change would not be recognised by
// the provider.
func DeriveKeyWithSecret(ctx context.Context, secret []byte, label string) (key string, ok bool) {
	op := retrysafe.OperationFromContext(ctx)
	if op == nil {
		return "", false
	}
	return deriveKey(secret, op.Scope(), op.Key(), label), true
}

// WithDerivedKey returns a copy of ctx that makes [Transport] send the key
// [DeriveKey] derives for label, as if given with [WithKey]. When ctx carries
// no operation it returns ctx unchanged, and the transport falls back to a
// random key. To derive with a secret, use
// WithKey(ctx, key) with the key from [DeriveKeyWithSecret].
func WithDerivedKey(ctx context.Context, label string) context.Context {
	key, ok := DeriveKey(ctx, label)
	if !ok {
		return ctx
	}
	return WithKey(ctx, key)
}

func deriveKey(secret []byte, scope, key, label string) string {
	mac := hmac.New(sha256.New, secret)
	var n [8]byte
	mac.Write([]byte(derivedKeyDomain))
	for _, s := range [...]string{scope, key, label} {
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		mac.Write(n[:])
		mac.Write([]byte(s))
	}
	return DerivedKeyPrefix + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}
