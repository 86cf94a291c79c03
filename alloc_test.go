//go:build !race

package retrysafe_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/memory"
)

// TestMiddlewareAllocations guards the allocations the middleware adds to
// a request on the memory store, a new key (claim, run, capture, complete)
// and a replay, against explosions, so a refactor that moves a few
// allocations passes and a leak per request does not (bench/peers
// measures time). The bounds are about twice what the code adds today
// (24 per new key, 6 per replay: 4 of them the memory store decoding the
// record it keeps, see store/memory), and no looser
// than the v0.1.0 bar for a replay (15 per new key, 6 per replay). Not
// run with -race, which allocates on its own: .ci/run runs it without.
func TestMiddlewareAllocations(t *testing.T) {
	store := memory.New(memory.Config{})
	t.Cleanup(func() { _ = store.Close() })
	mw, err := retrysafe.NewMiddleware(retrysafe.Config{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	protected := mw(ordersHandler)
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%d", i)
	}
	w := &benchWriter{header: make(http.Header)}
	n := 0
	serve := func(h http.Handler, key string) { serveOrders(t, h, w, key) }
	bare := testing.AllocsPerRun(200, func() { serve(ordersHandler, "k") })
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
