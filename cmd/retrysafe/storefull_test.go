package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/internal/redisserver"
)

// TestServeStoreFullNeverFailsOpen runs the real binary with --fail-open
// on a Redis whose memory is full under noeviction: a new key gets 503
// store-full with Retry-After and nothing reaches the upstream (a full
// store is a capacity error, not an outage, so fail-open never applies),
// while a completed key still replays. Once Redis has room again, the same
// key runs.
func TestServeStoreFullNeverFailsOpen(t *testing.T) {
	t.Parallel()
	srv := redisserver.Start(t, "--maxmemory-policy", "noeviction")
	bin := buildBinary(t)
	up := newChargeUpstream(t, nil)
	gw := startServe(t, bin, "--upstream", up.URL, "--store", "redis://"+srv.Addr, "--fail-open")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prefix := fmt.Sprint(time.Now().UnixNano())
	send := func(key string) *answer {
		t.Helper()
		a, err := post(ctx, gw.url+"/payments", prefix+"-"+key, `{"amount":10}`)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	if a := send("stored"); a.status != 201 {
		t.Fatalf("first key = %d %s, want 201", a.status, a.body)
	}

	// Every write is now over maxmemory: Redis answers OOM.
	srv.CLI("CONFIG", "SET", "maxmemory", "1")
	for range 3 {
		a := send("new")
		var p struct{ Type string }
		_ = json.Unmarshal([]byte(a.body), &p)
		if a.status != 503 || !strings.HasSuffix(p.Type, "/store-full") || a.header.Get("Retry-After") == "" {
			t.Fatalf("new key on a full store = %d %s (Retry-After %q), want 503 store-full with Retry-After",
				a.status, a.body, a.header.Get("Retry-After"))
		}
	}
	if n := up.calls.Load(); n != 1 {
		t.Fatalf("the upstream ran %d times, want 1: a full store failed open", n)
	}
	if a := send("stored"); a.status != 201 || a.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay on a full store = %d %s (replayed %q), want the stored 201", a.status, a.body, a.header.Get("Idempotent-Replayed"))
	}

	srv.CLI("CONFIG", "SET", "maxmemory", "0")
	if a := send("new"); a.status != 201 || a.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("the refused key once Redis has room = %d %s, want a new 201", a.status, a.body)
	}
	if n := up.calls.Load(); n != 2 {
		t.Fatalf("the upstream ran %d times, want 2", n)
	}
}
