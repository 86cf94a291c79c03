package gateway_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/gateway"
	"github.com/retrysafe/retrysafe/store/memory"
)

// TestSweeperRetiresUnknownOutcome: a request whose outcome is unknown
// (the upstream hung up: 502) leaves a processing record. On a memory store
// with room for one record, every new key then gets 503, until the
// background sweeper retires the record once Config.ProcessingRetention has
// passed since its lease ran out (the store's own default, 7 days, has
// not).
func TestSweeperRetiresUnknownOutcome(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	clock := time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	store := memory.New(memory.Config{MaxRecords: 1, JanitorInterval: -1})
	t.Cleanup(func() { store.Close() })
	up := newUpstream(t)
	const lease, retention = 30 * time.Second, time.Hour
	gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: store, Now: now,
		UpstreamTimeout: 10 * time.Second, Defaults: gateway.Policy{Lease: lease}, ProcessingRetention: retention})

	if res := send(t, gw.URL, "POST", "/hangup", newKey(), `{"amount":1}`); res.Status != 502 || problemType(t, res) != gateway.ProblemOutcomeUnknown {
		t.Fatalf("answer = %s, want 502 %s", res, gateway.ProblemOutcomeUnknown)
	}
	if res := send(t, gw.URL, "POST", "/payments", newKey(), `{}`); res.Status != 503 {
		t.Fatalf("a new key with the store full of the unknown outcome = %s, want 503", res)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		gw.RunSweeper(ctx, 10*time.Millisecond)
		close(done)
	}()
	defer func() { cancel(); <-done }()
	mu.Lock()
	clock = clock.Add(lease + retention)
	mu.Unlock()
	eventually(t, 10*time.Second, "the sweeper to retire the unknown outcome", func() bool {
		return store.Len() == 0
	})
	if res := send(t, gw.URL, "POST", "/payments", newKey(), `{}`); res.Status != 201 {
		t.Fatalf("a new key after the sweeper retired the unknown outcome = %s, want 201", res)
	}
}
