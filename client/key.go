package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"strings"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/keyquote"
)

// Header names used by the transport.
const (
	// HeaderKey carries the idempotency key of a request.
	HeaderKey = "Idempotency-Key"
	// HeaderReplayed is set to "true" by a server on an answer replayed from
	// its record rather than produced by running the operation.
	HeaderReplayed = "Idempotent-Replayed"
	// HeaderShouldRetry is retrysafe's explicit retry hint: "true" or
	// "false" overrides the transport's own decision.
	HeaderShouldRetry = "Retrysafe-Should-Retry"
	// HeaderStripeShouldRetry is Stripe's retry hint, honoured the same way.
	HeaderStripeShouldRetry = "Stripe-Should-Retry"
)

// NewKey returns a new random idempotency key: a version 4 UUID (122 random
// bits from crypto/rand) in its canonical 8-4-4-4-12 lowercase hex form,
// for example "8e03978e-40d5-43e8-bc93-6894a57f9324".
//
// [Transport] calls it for requests that carry no key. Call it yourself when
// the key must be persisted with the pending operation before the first
// attempt, then pass it with [WithKey] or the Idempotency-Key header.
func NewKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])  // crypto/rand.Read never fails on supported platforms
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 9562 variant
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:])
}

type keyContextKey struct{}

// WithKey returns a copy of ctx that makes [Transport] use key for a
// protected request sent with that context, unless the request already has
// an Idempotency-Key header. key is the key itself, not a header value: it
// is sent bare when it can be, else as a quoted string that servers decode
// back to key. It must be at most 255 printable ASCII characters, or the
// request fails before it is sent. An empty key is ignored.
//
// Use one context per logical operation: every request sent with it carries
// the same key.
func WithKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, keyContextKey{}, key)
}

func keyFromContext(ctx context.Context) string {
	k, _ := ctx.Value(keyContextKey{}).(string)
	return k
}

// KeyFromResponse returns the idempotency key that was sent with the request
// that produced resp (read from resp.Request), or "" if there was none. A
// key sent as a quoted string is returned decoded, as servers read it
// ([retrysafe.ParseKey]), so WithKey(ctx, KeyFromResponse(resp)) names the
// same operation again; a header value that does not parse is returned as
// is.
func KeyFromResponse(resp *http.Response) string {
	if resp == nil || resp.Request == nil {
		return ""
	}
	return decodeKey(resp.Request.Header.Get(HeaderKey))
}

// decodeKey returns the key in an Idempotency-Key header value, or v itself
// when it does not parse.
func decodeKey(v string) string {
	if k, err := retrysafe.ParseKey(v); err == nil {
		return k
	}
	return v
}

// encodeKey returns the header value for key: the key bare when servers read
// it back unchanged, else quoted.
func encodeKey(key string) string {
	if k, err := retrysafe.ParseKey(key); err == nil && k == key {
		return key
	}
	return keyquote.Quote(key)
}

// Replayed reports whether resp is an answer the server replayed from its
// record (Idempotent-Replayed: true) rather than a fresh execution.
func Replayed(resp *http.Response) bool {
	return resp != nil && strings.EqualFold(strings.TrimSpace(resp.Header.Get(HeaderReplayed)), "true")
}

// validKey reports why key cannot be sent as an Idempotency-Key, or "".
func validKey(key string) string {
	if len(key) > 255 {
		return "longer than 255 characters"
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 || c > 0x7e {
			return "not printable ASCII"
		}
	}
	return ""
}
