package sealed_test

import (
	"bytes"
	"errors"
	"net/http"
	"slices"
	"testing"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/sealed"
)

// FuzzSealOpen: whatever the response, opening what was sealed gives it
// back; opening it for another scope or key fails.
func FuzzSealOpen(f *testing.F) {
	ring := testRing(f, "old", "new")
	f.Add("scope", "key", 201, "Content-Type", "application/json", "", []byte(`{"id":1}`))
	f.Add("", "", 0, "", "", "second", []byte{})
	f.Add("s", "k", -1, "X-Bin", "r\xe9sum\xe9\x00", "\xff", []byte{0xff, 'R', 'S', 1, 3})
	f.Fuzz(func(t *testing.T, scope, key string, status int, name, v1, v2 string, body []byte) {
		resp := &retrysafe.Response{Status: status, Body: body}
		if name != "" {
			resp.Header = http.Header{name: {v1, v2}, "X-Other": {v2}}
		}
		s, err := ring.Seal(scope, key, resp)
		if err != nil {
			t.Fatal(err)
		}
		if id, ok := sealed.KeyID(s); !ok || id != "new" {
			t.Fatalf("KeyID = %q, %v; want new, true", id, ok)
		}
		got, err := ring.Open(scope, key, s)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != status || !bytes.Equal(got.Body, body) || len(got.Header) != len(resp.Header) || got.Header[sealed.MarkerHeader] != nil {
			t.Fatalf("round trip: got %+v, want %+v", got, resp)
		}
		for n, vs := range resp.Header {
			if !slices.Equal(got.Header[n], vs) {
				t.Fatalf("header %q: got %q, want %q", n, got.Header[n], vs)
			}
		}
		if _, err := ring.Open(scope+"x", key, s); !errors.Is(err, sealed.ErrCannotDecrypt) {
			t.Fatalf("opened for another scope: %v", err)
		}
		if _, err := ring.Open(scope, key+"x", s); !errors.Is(err, sealed.ErrCannotDecrypt) {
			t.Fatalf("opened for another key: %v", err)
		}
		// Opening arbitrary bytes never panics and never succeeds, with or
		// without the marker.
		if _, err := ring.Open(scope, key, &retrysafe.Response{Status: status, Body: body}); err == nil {
			t.Fatalf("opened a body that was never sealed: %q", body)
		}
		marked := &retrysafe.Response{Status: status, Header: http.Header{sealed.MarkerHeader: {"new"}}, Body: body}
		if _, err := ring.Open(scope, key, marked); err == nil {
			t.Fatalf("opened a marked body that was never sealed: %q", body)
		}
	})
}

// FuzzParseKeyRing: the parser never panics; a ring it accepts has a
// newest key that seals and opens.
func FuzzParseKeyRing(f *testing.F) {
	f.Add([]byte("# keys\nk1:" + "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n"))
	f.Add([]byte("a:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8,b:AQECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="))
	f.Add([]byte("k:::\n#\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ring, err := sealed.ParseKeyRing(data)
		if err != nil {
			return
		}
		if len(ring.IDs()) == 0 || ring.Newest() != ring.IDs()[len(ring.IDs())-1] {
			t.Fatalf("IDs %v, Newest %q", ring.IDs(), ring.Newest())
		}
		s, err := ring.Seal("s", "k", &retrysafe.Response{Status: 200, Body: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ring.Open("s", "k", s); err != nil {
			t.Fatal(err)
		}
	})
}
