//go:build !race

package retrysafe

import (
	"bytes"
	"testing"
)

// TestNewResponse: a captured body is copied exactly (nil stays nil, an
// empty body stays non-nil, capacity is the length so an append never
// writes into shared memory), and a body of up to 216 bytes shares the
// Response's allocation. Not run with -race, which allocates on its own.
func TestNewResponse(t *testing.T) {
	if r := newResponse(nil); r.Body != nil {
		t.Fatalf("nil body: got %q, want nil", r.Body)
	}
	for _, n := range []int{0, 1, 24, 25, 88, 89, 216, 217, 4096} {
		body := bytes.Repeat([]byte{'x'}, n)
		for i := range body {
			body[i] = byte(i)
		}
		r := newResponse(body)
		if r.Body == nil || !bytes.Equal(r.Body, body) || cap(r.Body) != n {
			t.Fatalf("%d bytes: body %v (nil %v, cap %d), want a copy of length and capacity %d", n, r.Body, r.Body == nil, cap(r.Body), n)
		}
		if n > 0 && &r.Body[0] == &body[0] {
			t.Fatalf("%d bytes: body shares memory with the captured one", n)
		}
		want := 1.0
		if n > 216 {
			want = 2
		}
		if got := testing.AllocsPerRun(50, func() { newResponse(body) }); got != want {
			t.Errorf("%d bytes: %v allocations, want %v", n, got, want)
		}
	}
}
