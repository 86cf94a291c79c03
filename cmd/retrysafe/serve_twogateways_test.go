package main

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
)

// checkTwoGateways runs two gateways (serve, in-process) with --store
// storeURL, as two instances behind a load balancer would, and checks that
// concurrent duplicates sent to both reach the upstream once and get its
// one answer, retries on either replay it, another body under the key gets
// 422, and distinct keys each run once. s is the store of storeURL, empty
// at the start; keys are prefixed with name.
func checkTwoGateways(t *testing.T, s retrysafe.Store, storeURL, name string) {
	t.Helper()
	ctx := t.Context()
	up := newChargeUpstream(t, func(n int64) {
		if n == 1 {
			time.Sleep(300 * time.Millisecond) // the duplicates arrive while the first runs
		}
	})
	proxies := []string{serveUntilEnd(t, "--upstream", up.URL, "--store", storeURL), serveUntilEnd(t, "--upstream", up.URL, "--store", storeURL)}

	// Ten concurrent duplicates, alternating between the gateways.
	const dups = 10
	dup := name + "-dup"
	answers := make([]*answer, dups)
	errs := make([]error, dups)
	var wg sync.WaitGroup
	for i := range dups {
		wg.Go(func() { answers[i], errs[i] = post(ctx, proxies[i%2]+"/payments", dup, `{"amount":1}`) })
	}
	wg.Wait()
	winners := 0
	for i, a := range answers {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		switch a.status {
		case 201:
			winners++
			if a.body != `{"charge":1}` {
				t.Fatalf("duplicate %d got %q, want the first answer", i, a.body)
			}
		case 409: // in flight at the other gateway or this one
		default:
			t.Fatalf("duplicate %d: %d %s", i, a.status, a.body)
		}
	}
	if n := up.calls.Load(); n != 1 || winners == 0 {
		t.Fatalf("upstream called %d times for one key through two gateways (%d answers 201), want 1", n, winners)
	}
	for i, p := range proxies {
		again, err := post(ctx, p+"/payments", dup, `{"amount":1}`)
		if err != nil || again.status != 201 || again.body != `{"charge":1}` || again.header.Get(retrysafe.HeaderReplayed) != "true" {
			t.Fatalf("retry through gateway %d = %+v, %v; want the replayed first answer", i, again, err)
		}
	}
	if a, err := post(ctx, proxies[1]+"/payments", dup, `{"amount":2}`); err != nil || a.status != 422 {
		t.Fatalf("same key, other body = %+v, %v; want 422", a, err)
	}

	// Distinct keys, spread over both gateways: each runs once.
	const keys = 20
	for i := range keys {
		a, err := post(ctx, proxies[i%2]+"/payments", fmt.Sprintf("%s-key-%d", name, i), `{"amount":1}`)
		if err != nil || a.status != 201 {
			t.Fatalf("key %d = %+v, %v", i, a, err)
		}
	}
	if n := up.calls.Load(); n != keys+1 {
		t.Fatalf("upstream calls = %d, want %d", n, keys+1)
	}
	recs, err := s.(admin.Admin).List(ctx, &admin.ListParams{})
	if err != nil || len(recs) != keys+1 {
		t.Fatalf("List = %d records, %v; want %d", len(recs), err, keys+1)
	}
}

// serveUntilEnd runs `retrysafe serve` with args in this process
// (serveInProcess) until the test ends, checks that it then exits 0, and
// returns its proxy URL.
func serveUntilEnd(t *testing.T, args ...string) string {
	t.Helper()
	proxyURL, stop := serveInProcess(t, args...)
	t.Cleanup(func() {
		if code, stderr := stop(); code != 0 {
			t.Errorf("serve exited %d; stderr:\n%s", code, stderr)
		}
	})
	return proxyURL
}
