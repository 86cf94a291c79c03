package redis_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/redisserver"
	"github.com/retrysafe/retrysafe/internal/testenv"
	redisstore "github.com/retrysafe/retrysafe/store/redis"
	"github.com/retrysafe/retrysafe/store/storetest"
)

func TestWaitConfig(t *testing.T) {
	t.Parallel()
	plain := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1", ReadTimeout: time.Second})
	t.Cleanup(func() { _ = plain.Close() })
	cluster := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	t.Cleanup(func() { _ = cluster.Close() })
	for name, tc := range map[string]struct {
		client goredis.UniversalClient
		cfg    redisstore.Config
		ok     bool
	}{
		"default timeout":          {plain, redisstore.Config{WaitReplicas: 1}, false}, // 1s is not below ReadTimeout 1s
		"timeout below read":       {plain, redisstore.Config{WaitReplicas: 1, WaitTimeout: 500 * time.Millisecond}, true},
		"negative replicas":        {plain, redisstore.Config{WaitReplicas: -1}, false},
		"negative timeout":         {plain, redisstore.Config{WaitReplicas: 1, WaitTimeout: -time.Second}, false},
		"cluster":                  {cluster, redisstore.Config{WaitReplicas: 1, WaitTimeout: time.Millisecond}, false},
		"cluster without waiting":  {cluster, redisstore.Config{}, true},
		"timeout without replicas": {plain, redisstore.Config{WaitTimeout: 5 * time.Second}, true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, err := redisstore.New(tc.client, tc.cfg)
			if (err == nil) != tc.ok {
				t.Fatalf("New(%+v) = %v; want ok=%v", tc.cfg, err, tc.ok)
			}
			if s != nil {
				_ = s.Close()
			}
		})
	}
}

// TestWaitNoReplica: on the machine's Redis, which has no replica, a
// claim with WaitReplicas 1 fails with ErrNotReplicated (and
// ErrStoreUnavailable) and leaves no record, and a Complete reports
// ErrNotReplicated (but not ErrStoreUnavailable, so the engine does not
// retry it) while the result is stored on the primary.
func TestWaitNoReplica(t *testing.T) {
	t.Parallel()
	plain, c, prefix := newStore(t)
	waited, err := redisstore.New(c, redisstore.Config{Prefix: prefix, WaitReplicas: 1, WaitTimeout: 30 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	now := time.Now()
	_, err = waited.Claim(ctx, claimParams("s", "k1", now, time.Minute))
	var rerr *redisstore.ReplicationError
	if !errors.Is(err, redisstore.ErrNotReplicated) || !errors.Is(err, retrysafe.ErrStoreUnavailable) || !errors.As(err, &rerr) ||
		rerr.Op != "claim" || rerr.Want != 1 || rerr.Acked != 0 {
		t.Fatalf("claim: %v; want a ReplicationError for 1 replica, 0 acknowledged", err)
	}
	if _, err := plain.Get(ctx, &retrysafe.GetParams{Scope: "s", Key: "k1", Now: now}); !errors.Is(err, retrysafe.ErrNotFound) {
		t.Fatalf("record after the refused claim: %v; want none", err)
	}
	// A blocked claim writes nothing and needs no WAIT.
	res, err := plain.Claim(ctx, claimParams("s", "k2", now, time.Minute))
	if err != nil || !res.Claimed {
		t.Fatal(res, err)
	}
	if res2, err := waited.Claim(ctx, claimParams("s", "k2", now, time.Minute)); err != nil || res2.Claimed {
		t.Fatalf("duplicate through the waiting store: %+v, %v; want the in-flight record", res2, err)
	}
	err = waited.Complete(ctx, &retrysafe.CompleteParams{Scope: "s", Key: "k2", Token: res.Record.Token, Now: now, TTL: time.Hour,
		Response: &retrysafe.Response{Status: 201, Body: []byte("ok")}})
	if !errors.Is(err, redisstore.ErrNotReplicated) || errors.Is(err, retrysafe.ErrStoreUnavailable) || errors.Is(err, retrysafe.ErrLeaseLost) {
		t.Fatalf("complete: %v; want ErrNotReplicated only", err)
	}
	rec, err := plain.Get(ctx, &retrysafe.GetParams{Scope: "s", Key: "k2", Now: now})
	if err != nil || rec.State != retrysafe.StateCompleted || string(rec.Response.Body) != "ok" {
		t.Fatalf("record after the unreplicated complete: %+v, %v; want it completed on the primary", rec, err)
	}
	// A takeover that no replica acknowledged is kept to its lease, not
	// released, so that the next claimant still learns of the earlier
	// attempts.
	if res, err := plain.Claim(ctx, claimParams("s", "k3", now, time.Minute)); err != nil || !res.Claimed {
		t.Fatal(res, err)
	}
	later := now.Add(2 * time.Minute)
	if _, err := waited.Claim(ctx, claimParams("s", "k3", later, time.Minute)); !errors.Is(err, redisstore.ErrNotReplicated) {
		t.Fatalf("takeover: %v; want ErrNotReplicated", err)
	}
	rec, err = plain.Get(ctx, &retrysafe.GetParams{Scope: "s", Key: "k3", Now: later})
	if err != nil || rec.State != retrysafe.StateProcessing || rec.Attempt != 2 {
		t.Fatalf("record after the unreplicated takeover: %+v, %v; want processing, attempt 2", rec, err)
	}
	if res, err := plain.Claim(ctx, claimParams("s", "k3", later.Add(2*time.Minute), time.Minute)); err != nil || !res.Claimed || res.Record.Attempt != 3 {
		t.Fatalf("takeover after that lease: %+v, %v; want attempt 3", res, err)
	}
	// A fenced Complete still reports a lost lease first.
	err = waited.Complete(ctx, &retrysafe.CompleteParams{Scope: "s", Key: "k2", Token: "other", Now: now, TTL: time.Hour})
	if !errors.Is(err, retrysafe.ErrLeaseLost) {
		t.Fatalf("complete with a stranger's token: %v; want ErrLeaseLost", err)
	}
}

// TestConformanceWaitReplicas runs the conformance suite with
// WaitReplicas 1 against a private primary with one replica: every claim
// and completion goes through the pipelined script + WAIT path.
func TestConformanceWaitReplicas(t *testing.T) {
	t.Parallel()
	primary := redisserver.Start(t)
	redisserver.StartReplica(t, primary)
	storetest.Run(t, func(t *testing.T) retrysafe.Store {
		c := goredis.NewClient(&goredis.Options{Addr: primary.Addr})
		t.Cleanup(func() { _ = c.Close() })
		s, err := redisstore.New(c, redisstore.Config{Prefix: testenv.Name("rs-wait-") + ":", WaitReplicas: 1, WaitTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

// pipelineRetrier is a goredis.Hook that, when armed, runs the next
// pipeline (script + WAIT) and then runs it again on a connection of
// another client, returning the second answer: what go-redis does when a
// pipeline's connection breaks after the server ran it.
type pipelineRetrier struct {
	armed *atomic.Bool
	other *goredis.Client
}

func (r pipelineRetrier) DialHook(next goredis.DialHook) goredis.DialHook          { return next }
func (r pipelineRetrier) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }

func (r pipelineRetrier) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		if len(cmds) != 2 || cmds[1].Name() != "wait" || !r.armed.CompareAndSwap(true, false) {
			return next(ctx, cmds) // not script + WAIT (Claim's read, say)
		}
		_ = next(ctx, cmds) // ran on the server; the reply is "lost"
		_, err := r.other.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for _, c := range cmds {
				_ = p.Process(ctx, c)
			}
			return nil
		})
		return err
	}
}

// TestWaitRetriedOnNewConnection: a claim or completion that go-redis
// resends on a new connection must still wait for the replicas to have the
// write. The replica is stopped (SIGSTOP) but still connected, so the
// primary counts it with its old acknowledged offset, and a WAIT on a
// connection that had sent nothing would return 1 at once. The resent
// script recognises its nonce and rewrites it, so the new connection's
// WAIT covers the first run's write and times out: both are refused.
// (Redis 7.0 also records a connection's offset after a command that
// writes nothing, so there the rewrite is a second line of defence; the
// test checks the outcome either way.)
func TestWaitRetriedOnNewConnection(t *testing.T) {
	t.Parallel()
	primary := redisserver.Start(t)
	replica := redisserver.StartReplica(t, primary)
	other := goredis.NewClient(&goredis.Options{Addr: primary.Addr})
	t.Cleanup(func() { _ = other.Close() })
	c := goredis.NewClient(&goredis.Options{Addr: primary.Addr})
	t.Cleanup(func() { _ = c.Close() })
	var armed atomic.Bool
	c.AddHook(pipelineRetrier{&armed, other})
	s, err := redisstore.New(c, redisstore.Config{Prefix: "retry:", WaitReplicas: 1, WaitTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := t.Context()
	now := time.Now()

	// Load the scripts, so that the retried pipelines below run EVALSHA
	// twice instead of stopping at NOSCRIPT.
	if res, err := s.Claim(ctx, claimParams("s", "warm", now, time.Minute)); err != nil || !res.Claimed {
		t.Fatalf("warm-up claim: %+v, %v", res, err)
	}
	if err := s.Complete(ctx, &retrysafe.CompleteParams{Scope: "s", Key: "warm", Token: "x", Now: now, TTL: time.Hour}); !errors.Is(err, retrysafe.ErrLeaseLost) {
		t.Fatalf("warm-up complete: %v", err)
	}
	// With the replica running, a retried claim and completion succeed.
	p := claimParams("s", "k1", now, time.Minute)
	armed.Store(true)
	if res, err := s.Claim(ctx, p); err != nil || !res.Claimed {
		t.Fatalf("retried claim, replica running: %+v, %v", res, err)
	}
	armed.Store(true)
	if err := s.Complete(ctx, &retrysafe.CompleteParams{Scope: "s", Key: "k1", Token: p.Token, Now: now, TTL: time.Hour}); err != nil {
		t.Fatalf("retried complete, replica running: %v", err)
	}

	// With the replica stopped, neither may report success.
	p2 := claimParams("s", "k2", now, time.Minute)
	if res, err := s.Claim(ctx, p2); err != nil || !res.Claimed {
		t.Fatalf("claim k2, replica running: %+v, %v", res, err)
	}
	replica.Pause()
	defer replica.Resume()
	armed.Store(true)
	if _, err := s.Claim(ctx, claimParams("s", "k3", now, time.Minute)); !errors.Is(err, redisstore.ErrNotReplicated) {
		t.Fatalf("retried claim, replica stopped: %v; want ErrNotReplicated", err)
	}
	armed.Store(true)
	err = s.Complete(ctx, &retrysafe.CompleteParams{Scope: "s", Key: "k2", Token: p2.Token, Now: now, TTL: time.Hour})
	if !errors.Is(err, redisstore.ErrNotReplicated) {
		t.Fatalf("retried complete, replica stopped: %v; want ErrNotReplicated", err)
	}
}
