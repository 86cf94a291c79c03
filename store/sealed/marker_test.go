package sealed_test

import (
	"net/http"
	"testing"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/memory"
	"github.com/retrysafe/retrysafe/store/sealed"
)

// magicBody starts with the bytes the sealed format once used to tell
// ciphertext from a body: an upstream may answer with any bytes.
func magicBody() *retrysafe.Response {
	return &retrysafe.Response{Status: 200, Header: http.Header{"Content-Type": {"application/octet-stream"}},
		Body: []byte("\xffRS\x01\x02k1 not ciphertext at all")}
}

// TestPlainBodyLikeCiphertext: a response is sealed when the wrapper
// marked it, never because of what its body looks like. Without a ring, a
// body that starts like the sealed format replays as it is; with a ring
// and AcceptPlaintext, a record stored in the clear with such a body
// replays too; without AcceptPlaintext it is refused as not encrypted
// (not blamed on a missing key).
func TestPlainBodyLikeCiphertext(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	inner := memory.New(memory.Config{})
	t.Cleanup(func() { inner.Close() })

	clear := wrap(t, inner, nil, sealed.Config{})
	complete(t, clear, scopeA, "magic", magicBody())
	rec, err := claimExisting(clear, ctx, scopeA, "magic")
	if err != nil {
		t.Fatalf("replay without a ring of a body that starts like ciphertext: %v", err)
	}
	wantResponse(t, "replay without a ring", rec.Response, magicBody())
	if id, ok := sealed.KeyID(rec.Response); ok {
		t.Errorf("KeyID of a plain response = %q, true; want not sealed", id)
	}

	ring := testRing(t, "k1")
	accepting := wrap(t, inner, ring, sealed.Config{AcceptPlaintext: true})
	rec, err = claimExisting(accepting, ctx, scopeA, "magic")
	if err != nil {
		t.Fatalf("replay with AcceptPlaintext of a plain body that starts like ciphertext: %v", err)
	}
	wantResponse(t, "replay with AcceptPlaintext", rec.Response, magicBody())

	complete(t, inner, ring.Scope(scopeA), "magic", magicBody())
	_, err = claimExisting(wrap(t, inner, ring, sealed.Config{}), ctx, scopeA, "magic")
	wantCannotDecrypt(t, "strict replay of a plain record", err)

	// And a body sealed by the wrapper still replays through it.
	complete(t, accepting, scopeA, "sealed", magicBody())
	rec, err = claimExisting(accepting, ctx, scopeA, "sealed")
	if err != nil {
		t.Fatal(err)
	}
	wantResponse(t, "sealed replay", rec.Response, magicBody())
}

// TestMarkerNotForgeable: a handler that sets the wrapper's marker header
// itself does not make its plain response pass for a sealed one: the
// wrapper without a ring drops it before storing.
func TestMarkerNotForgeable(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	inner := memory.New(memory.Config{})
	t.Cleanup(func() { inner.Close() })
	clear := wrap(t, inner, nil, sealed.Config{})
	forged := payment()
	forged.Header[sealed.MarkerHeader] = []string{"k1"}
	complete(t, clear, scopeA, "forged", forged)
	rec, err := claimExisting(clear, ctx, scopeA, "forged")
	if err != nil {
		t.Fatalf("replay of a response with a forged marker: %v", err)
	}
	wantResponse(t, "replay of a forged marker", rec.Response, payment())
}
