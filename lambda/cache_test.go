package retrysafelambda

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
)

// TestCacheLRU: the cache holds at most its size, evicts the least
// recently used entry, and drops an entry at its expiry.
func TestCacheLRU(t *testing.T) {
	t.Parallel()
	now := time.Now()
	c := newCache(2)
	live := cacheEntry{body: []byte("1"), expires: now.Add(time.Hour)}
	c.put("s", "a", live)
	c.put("s", "b", live)
	if _, ok := c.get("s", "a", now); !ok { // a is now the most recent
		t.Fatal("a missing")
	}
	c.put("s", "c", live) // evicts b
	if _, ok := c.get("s", "b", now); ok {
		t.Fatal("b, the least recently used, was not evicted")
	}
	for _, k := range []string{"a", "c"} {
		if _, ok := c.get("s", k, now); !ok {
			t.Fatalf("%s evicted", k)
		}
	}
	if _, ok := c.get("other", "a", now); ok {
		t.Fatal("another scope's entry was returned")
	}
	if c.len() != 2 {
		t.Fatalf("len %d, want 2", c.len())
	}
	c.put("s", "a", cacheEntry{expires: now.Add(time.Second)})
	if _, ok := c.get("s", "a", now.Add(time.Second)); ok || c.len() != 1 {
		t.Fatalf("an entry at its expiry was returned, or kept (len %d)", c.len())
	}

	// Many goroutines at once stay within the bound.
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				c.put("s", fmt.Sprint(g, i), live)
				c.get("s", fmt.Sprint(g, i-1), now)
			}
		})
	}
	wg.Wait()
	if c.len() != 2 {
		t.Fatalf("len %d after concurrent use, want 2", c.len())
	}
}

// TestLocalCache: with CacheSize, a duplicate of a result this
// environment stored or replayed is answered without a store call, a
// key reused with another payload fails from the cache too, and an
// expired result is asked of the store again.
func TestLocalCache(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := newCounting(t)
	var clock atomic.Pointer[time.Time]
	start := time.Now()
	clock.Store(&start)
	var runs atomic.Int64
	cfg := Config{Store: store, Key: "/orderId", CacheSize: 2, TTL: time.Hour, Now: func() time.Time { return *clock.Load() }}
	fn := func(ctx context.Context, o order) (receipt, error) {
		return receipt{Charge: o.OrderID, Run: runs.Add(1)}, nil
	}
	h, err := Func(cfg, fn)
	if err != nil {
		t.Fatal(err)
	}
	ev := event(t, order{OrderID: "c1", Amount: 1})
	if _, err := h(ctx, ev); err != nil {
		t.Fatal(err)
	}
	calls := store.claims.Load() + store.gets.Load()
	for range 3 {
		if got, err := h(ctx, ev); err != nil || got.Run != 1 {
			t.Fatalf("cached replay: %+v, %v", got, err)
		}
	}
	if store.claims.Load()+store.gets.Load() != calls {
		t.Fatal("a cached result was asked of the store")
	}
	if _, err := h(ctx, event(t, order{OrderID: "c1", Amount: 2})); !errors.Is(err, retrysafe.ErrMismatch) {
		t.Fatalf("another payload with a cached key: %v, want ErrMismatch", err)
	}

	// A second environment (its own wrapper) finds the result in the
	// store, then in its cache.
	other, err := Func(cfg, fn)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := other(ctx, ev); err != nil || got.Run != 1 {
		t.Fatalf("other environment: %+v, %v", got, err)
	}
	calls = store.claims.Load() + store.gets.Load()
	if got, err := other(ctx, ev); err != nil || got.Run != 1 || store.claims.Load()+store.gets.Load() != calls {
		t.Fatalf("other environment's cached replay: %+v, %v", got, err)
	}

	// Past the TTL the store's record has expired: the cache does not
	// answer for it, and the handler runs anew.
	later := start.Add(time.Hour + time.Second)
	clock.Store(&later)
	if got, err := h(ctx, ev); err != nil || got.Run != 2 {
		t.Fatalf("after the TTL: %+v, %v; want a new run", got, err)
	}
}
