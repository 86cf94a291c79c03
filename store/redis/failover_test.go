package redis_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/redisserver"
	"github.com/retrysafe/retrysafe/internal/testenv"
	redisstore "github.com/retrysafe/retrysafe/store/redis"
)

// failoverRig is a private primary with one replica, a store whose client
// always dials the current primary, and a payments service behind the
// retrysafe middleware that counts how often each key's operation ran.
type failoverRig struct {
	t       *testing.T
	primary *redisserver.Server
	replica *redisserver.Server
	current atomic.Pointer[string] // address the client dials
	srv     *httptest.Server

	mu   sync.Mutex
	runs map[string]int
	hold chan struct{} // when set, an operation waits for it to close
	in   chan string   // receives the key of each operation that starts
}

func newFailoverRig(t *testing.T, cfg redisstore.Config) *failoverRig {
	r := &failoverRig{t: t, runs: map[string]int{}, in: make(chan string, 16)}
	r.primary = redisserver.Start(t)
	r.replica = redisserver.StartReplica(t, r.primary)
	addr := r.primary.Addr
	r.current.Store(&addr)
	client := goredis.NewClient(&goredis.Options{
		Addr: "primary",
		Dialer: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, *r.current.Load())
		},
		DialTimeout:     time.Second,
		ReadTimeout:     2 * time.Second,
		MaxRetries:      5,
		MinRetryBackoff: 20 * time.Millisecond,
	})
	t.Cleanup(func() { _ = client.Close() })
	cfg.Prefix = "failover:"
	store, err := redisstore.New(client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	mw, err := retrysafe.NewMiddleware(retrysafe.Config{Store: store,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	r.srv = httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		key := req.Header.Get(retrysafe.HeaderKey)
		r.mu.Lock()
		r.runs[key]++
		n := r.runs[key]
		hold := r.hold
		r.mu.Unlock()
		r.in <- key
		if hold != nil {
			<-hold
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "charge %s run %d", key, n)
	})))
	t.Cleanup(r.srv.Close)
	return r
}

// post sends a charge with key and returns status, body and whether it
// was a replay.
func (r *failoverRig) post(key string) (int, string, bool) {
	r.t.Helper()
	req, _ := http.NewRequest("POST", r.srv.URL+"/charges", strings.NewReader(`{"amount":100}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(retrysafe.HeaderKey, key)
	resp, err := testenv.HTTPClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header.Get("Idempotent-Replayed") == "true"
}

func (r *failoverRig) ran(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs[key]
}

// cutReplication stops the replica (SIGSTOP) and closes its replication
// link on the primary: from now on the primary acknowledges writes that
// the replica will never receive. (SIGSTOP alone is not enough: the
// primary would still write the stream into the stopped replica's socket
// buffer, and the replica would read it after SIGCONT.)
func (r *failoverRig) cutReplication() {
	r.replica.Pause()
	r.primary.CLI("CLIENT", "KILL", "TYPE", "replica")
	redisserver.WaitFor(r.t, 5*time.Second, "the primary to see no replica", func() bool {
		return r.primary.Info("replication", "connected_slaves") == "0"
	})
}

// failover kills the primary (SIGKILL: what it did not replicate is
// gone), promotes the replica with REPLICAOF NO ONE and points the client
// at it.
func (r *failoverRig) failover() {
	r.primary.Kill()
	r.replica.Resume()
	r.replica.CLI("REPLICAOF", "NO", "ONE")
	redisserver.WaitFor(r.t, 5*time.Second, "the replica to become primary", func() bool {
		return r.replica.Info("replication", "role") == "master"
	})
	addr := r.replica.Addr
	r.current.Store(&addr)
}

// TestFailoverLosesClaimWithoutWait shows the window WaitReplicas closes.
// The primary acknowledges a claim and the charge runs; the primary dies
// before its replica got the claim; the replica is promoted; the client's
// retry of the same key finds no record and the charge runs a second time.
func TestFailoverLosesClaimWithoutWait(t *testing.T) {
	t.Parallel()
	r := newFailoverRig(t, redisstore.Config{})
	r.cutReplication()
	status, body, _ := r.post("order-1")
	if status != http.StatusCreated {
		t.Fatalf("first request: %d %s", status, body)
	}
	r.failover()
	status, body, replayed := r.post("order-1")
	t.Logf("retry after failover: %d %q replayed=%v; the charge ran %d times", status, body, replayed, r.ran("order-1"))
	if status != http.StatusCreated || replayed || r.ran("order-1") != 2 {
		t.Fatalf("retry after failover: %d %q replayed=%v, ran %d times; want the lost claim to make it run a second time",
			status, body, replayed, r.ran("order-1"))
	}
}

// TestFailoverWaitReplicasRefusesUnreplicatedClaim: the same sequence with
// WaitReplicas 1. The claim is not acknowledged by the replica, so it is
// released and the request gets 503 without running; after the failover
// (and once the new primary has a replica of its own) the retry runs the
// charge: once in all.
func TestFailoverWaitReplicasRefusesUnreplicatedClaim(t *testing.T) {
	t.Parallel()
	r := newFailoverRig(t, redisstore.Config{WaitReplicas: 1, WaitTimeout: time.Second})
	r.cutReplication()
	status, body, _ := r.post("order-1")
	if status != http.StatusServiceUnavailable || r.ran("order-1") != 0 {
		t.Fatalf("request whose claim no replica acknowledged: %d %q, ran %d times; want 503 and no run", status, body, r.ran("order-1"))
	}
	r.failover()
	// The new primary has no replica yet: fail closed.
	status, _, _ = r.post("order-1")
	if status != http.StatusServiceUnavailable || r.ran("order-1") != 0 {
		t.Fatalf("retry on a primary without replicas: %d, ran %d times; want 503 and no run", status, r.ran("order-1"))
	}
	redisserver.StartReplica(t, r.replica)
	status, body, replayed := r.post("order-1")
	if status != http.StatusCreated || replayed || r.ran("order-1") != 1 {
		t.Fatalf("retry with a replica: %d %q replayed=%v, ran %d times; want 201, run once", status, body, replayed, r.ran("order-1"))
	}
	status, body2, replayed := r.post("order-1")
	t.Logf("first request 503 (not run); retry %d %q; next retry replayed=%v; the charge ran %d time(s)", http.StatusCreated, body, replayed, r.ran("order-1"))
	if status != http.StatusCreated || !replayed || body2 != body || r.ran("order-1") != 1 {
		t.Fatalf("second retry: %d %q replayed=%v, ran %d times; want the replay", status, body2, replayed, r.ran("order-1"))
	}
}

// TestFailoverWaitReplicasKeepsInFlightClaim: with WaitReplicas 1 and a
// healthy replica, a claim is forwarded only once the replica has it. The
// primary dies while the charge runs; on the promoted replica a duplicate
// gets 409 instead of running. The charge then completes on the new
// primary and the duplicate replays it.
func TestFailoverWaitReplicasKeepsInFlightClaim(t *testing.T) {
	t.Parallel()
	r := newFailoverRig(t, redisstore.Config{WaitReplicas: 1, WaitTimeout: time.Second})
	hold := make(chan struct{})
	r.mu.Lock()
	r.hold = hold
	r.mu.Unlock()
	first := make(chan [2]any, 1)
	go func() {
		req, _ := http.NewRequest("POST", r.srv.URL+"/charges", strings.NewReader(`{"amount":100}`))
		req.Header.Set(retrysafe.HeaderKey, "order-1")
		req.Header.Set("Content-Type", "application/json")
		resp, err := testenv.HTTPClient.Do(req)
		if err != nil {
			first <- [2]any{0, err.Error()}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		first <- [2]any{resp.StatusCode, string(b)}
	}()
	select {
	case <-r.in:
	case <-time.After(10 * time.Second):
		t.Fatal("the first request did not reach the service")
	}
	r.failover()
	r.mu.Lock()
	r.hold = nil
	r.mu.Unlock()
	status, body, _ := r.post("order-1")
	if status != http.StatusConflict || r.ran("order-1") != 1 {
		t.Fatalf("duplicate after failover while the charge runs: %d %q, ran %d times; want 409", status, body, r.ran("order-1"))
	}
	redisserver.StartReplica(t, r.replica) // so that Complete's WAIT is acknowledged
	close(hold)
	res := <-first
	if res[0] != http.StatusCreated {
		t.Fatalf("first request: %v", res)
	}
	status, body, replayed := r.post("order-1")
	t.Logf("duplicate during failover: 409; first request %v; retry %d %q replayed=%v; the charge ran %d time(s)", res, status, body, replayed, r.ran("order-1"))
	if status != http.StatusCreated || !replayed || body != res[1] || r.ran("order-1") != 1 {
		t.Fatalf("retry after completion: %d %q replayed=%v ran %d; want a replay of %v", status, body, replayed, r.ran("order-1"), res)
	}
}
