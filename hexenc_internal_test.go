package retrysafe

import (
	"encoding/hex"
	"testing"
)

// TestEncodeHex checks encodeHex against encoding/hex for every byte value
// and for the lengths the fingerprint and the token use.
func TestEncodeHex(t *testing.T) {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	for _, src := range [][]byte{all, all[:1], all[200:232], all[7:23]} {
		dst := make([]byte, 2*len(src))
		encodeHex(dst, src)
		if got, want := string(dst), hex.EncodeToString(src); got != want {
			t.Fatalf("encodeHex(% x) = %s, want %s", src, got, want)
		}
	}
}
