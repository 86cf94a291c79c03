// Package keyquote writes an Idempotency-Key in the form the draft
// standard gives for the header: a Structured-Field (RFC 9651) String. The
// root package quotes keys in its error messages and the client package
// quotes the keys it sends; retrysafe.ParseKey reads both forms back.
package keyquote

import "strings"

// Quote returns key in double quotes, with '\' and '"' escaped. For a
// valid key, retrysafe.ParseKey(Quote(key)) returns key.
func Quote(key string) string {
	var b strings.Builder
	b.Grow(len(key) + 2)
	b.WriteByte('"')
	for i := 0; i < len(key); i++ {
		if c := key[i]; c == '"' || c == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(key[i])
	}
	b.WriteByte('"')
	return b.String()
}
