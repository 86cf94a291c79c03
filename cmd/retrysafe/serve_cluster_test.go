package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/redisserver"
)

// TestServeRedisCluster runs the real binary with --store
// redis+cluster://SEED,SEED against a private three-master Redis Cluster.
// 300 keys, each sent three times at once, spread over all slots: every
// charge runs once, every retry replays, the records land on all three
// masters, and `retrysafe keys list` on the cluster URL sees all of them.
func TestServeRedisCluster(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	c := redisserver.StartCluster(t, 3)
	const prefix = "rs-serve-cluster:"
	storeURL := "redis+cluster://" + c.Nodes[0].Addr + "," + c.Nodes[2].Addr + "?retrysafe_prefix=" + prefix

	var mu sync.Mutex
	runs := map[string]int{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get(retrysafe.HeaderKey)
		mu.Lock()
		runs[key]++
		mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":%q}`, key)
	}))
	t.Cleanup(up.Close)
	gw := startServe(t, bin, "--upstream", up.URL, "--store", storeURL, "--in-flight", "wait")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const keys = 300
	var wg sync.WaitGroup
	sem := make(chan struct{}, 24)
	errs := make(chan error, keys*3)
	for i := range keys {
		key := fmt.Sprintf("order-%03d", i)
		for range 3 {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				a, err := post(ctx, gw.url+"/charges", key, `{"amount":1}`)
				switch {
				case err != nil:
					errs <- err
				case a.status != http.StatusCreated || a.body != fmt.Sprintf(`{"charge":%q}`, key):
					errs <- fmt.Errorf("%s: %d %s", key, a.status, a.body)
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := range keys {
		key := fmt.Sprintf("order-%03d", i)
		if runs[key] != 1 {
			t.Errorf("%s ran %d times", key, runs[key])
		}
		a, err := post(ctx, gw.url+"/charges", key, `{"amount":1}`)
		if err != nil || a.header.Get(retrysafe.HeaderReplayed) != "true" {
			t.Fatalf("retry of %s: %+v, %v; want a replay", key, a, err)
		}
	}
	total := 0
	for _, n := range c.Nodes {
		got := len(strings.Fields(n.CLI("--scan", "--pattern", prefix+"*")))
		t.Logf("master %s holds %d records", n.Addr, got)
		if got == 0 {
			t.Errorf("master %s holds no record: keys did not spread over every master", n.Addr)
		}
		total += got
	}
	if total != keys {
		t.Errorf("the masters hold %d records, want %d", total, keys)
	}

	// The admin CLI lists every master's records through the same URL.
	var out, stderr strings.Builder
	if code := run(ctx, []string{"keys", "list", "--store", storeURL, "--limit", "1000", "--json"}, &out, &stderr); code != 0 {
		t.Fatalf("keys list: exit %d: %s", code, stderr.String())
	}
	var listed struct {
		Records []json.RawMessage `json:"records"`
	}
	if err := json.Unmarshal([]byte(out.String()), &listed); err != nil || len(listed.Records) != keys {
		t.Fatalf("keys list --json: %d records, %v; want %d\n%s", len(listed.Records), err, keys, out.String()[:min(len(out.String()), 500)])
	}
}
