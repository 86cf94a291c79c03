//go:build !race

package retrysafe_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"testing"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/memory"
)

// reusedWriter is a ResponseWriter whose header map is reset per request.
type reusedWriter struct {
	header http.Header
	status int
}

func (w *reusedWriter) Header() http.Header         { return w.header }
func (w *reusedWriter) WriteHeader(code int)        { w.status = code }
func (w *reusedWriter) Write(p []byte) (int, error) { return len(p), nil }

// TestMiddlewareAllocations guards the allocations the middleware adds to
// a request on the memory store, a new key (claim, run, capture, complete)
// and a replay, against explosions, so a refactor that moves a few
// allocations passes and a leak per request does not (bench/peers
// measures time). The bounds are about twice what the code adds today
// (23 per new key, 6 per replay: 4 of them the memory store decoding the
// record it keeps, see store/memory), and no looser
// than the v0.1.0 bar for a replay (15 per new key, 6 per replay). Not
// run with -race, which allocates on its own: .ci/run runs it without.
func TestMiddlewareAllocations(t *testing.T) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var buf [64]byte
		for {
			if _, err := r.Body.Read(buf[:]); err != nil {
				break
			}
		}
		w.Header()["Content-Type"] = []string{"application/json"}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"ord_1"}`))
	})
	store := memory.New(memory.Config{})
	t.Cleanup(func() { _ = store.Close() })
	mw, err := retrysafe.NewMiddleware(retrysafe.Config{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	protected := mw(handler)
	body := []byte(`{"sku":"abc","qty":1}`)
	u := &url.URL{Path: "/orders"}
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%d", i)
	}
	w := &reusedWriter{header: make(http.Header)}
	n := 0
	serve := func(h http.Handler, key string) {
		r := (&http.Request{
			Method: http.MethodPost, URL: u, Header: http.Header{"Idempotency-Key": {key}},
			Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)),
		}).WithContext(context.Background())
		clear(w.header)
		h.ServeHTTP(w, r)
		if w.status != http.StatusCreated {
			t.Fatalf("status %d", w.status)
		}
	}
	bare := testing.AllocsPerRun(200, func() { serve(handler, "k") })
	newKey := testing.AllocsPerRun(200, func() { serve(protected, keys[n]); n++ })
	n = 0
	replay := testing.AllocsPerRun(200, func() { serve(protected, keys[n]); n++ })
	t.Logf("allocations: bare handler %.0f, new key %+.0f, replay %+.0f", bare, newKey-bare, replay-bare)
	const maxNew, maxReplay = 50, 6
	if newKey-bare > maxNew {
		t.Errorf("a new key adds %.0f allocations, want at most %d", newKey-bare, maxNew)
	}
	if replay-bare > maxReplay {
		t.Errorf("a replay adds %.0f allocations, want at most %d", replay-bare, maxReplay)
	}
}
