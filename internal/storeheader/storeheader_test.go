package storeheader_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/storeheader"
)

// referenceStoreHeader is Default as first written: canonicalise
// the name, then look it up.
func referenceStoreHeader(name string) bool {
	switch http.CanonicalHeaderKey(name) {
	case "Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
		"Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
		"Set-Cookie", "Content-Length", retrysafe.HeaderReplayed, "Date":
		return false
	}
	return true
}

// TestDefault checks Default against canonicalising
// the name first, for the dropped names in every case, near misses, names
// that CanonicalHeaderKey leaves alone (a space, a non-ASCII byte, the
// Kelvin sign that Unicode folds to k) and ordinary fields.
func TestDefault(t *testing.T) {
	names := []string{
		"Content-Type", "ETag", "Location", "X-Request-Id", "", "-", "Dates",
		"Dat", "Set-Cookie2", "Content-Lengt", "\u212Aeep-Alive", "Keep Alive",
		"keep-alive ", "Set-Cookie\x00", "Connection\xff", "Te\u212A", "TE_",
		"Trailers", "Idempotent-Replayed", "idempotent_replayed",
	}
	for _, n := range []string{
		"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
		"Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
		"Set-Cookie", "Content-Length", retrysafe.HeaderReplayed, "Date",
	} {
		names = append(names, n, strings.ToLower(n), strings.ToUpper(n), n+"x", n[1:])
		// Alternate cases, letter by letter.
		b := []byte(n)
		for i := range b {
			if i%2 == 0 {
				b[i] = strings.ToUpper(string(b[i]))[0]
			} else {
				b[i] = strings.ToLower(string(b[i]))[0]
			}
		}
		names = append(names, string(b))
	}
	dropped := 0
	for _, n := range names {
		got, want := storeheader.Default(n), referenceStoreHeader(n)
		if got != want {
			t.Errorf("Default(%q) = %v, want %v", n, got, want)
		}
		if !got {
			dropped++
		}
	}
	if dropped < 13*4 { // each name in four cases
		t.Errorf("only %d names dropped", dropped)
	}
}
