package redis_test

import (
	"errors"
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
