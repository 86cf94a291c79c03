package storeurl_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/redisserver"
	"github.com/retrysafe/retrysafe/internal/storeurl"
	"github.com/retrysafe/retrysafe/internal/testenv"
	"github.com/retrysafe/retrysafe/store/redis"
)

// TestRedisURLErrors: bad values of the Redis parameters and bad cluster
// URLs are refused before any connection, with the password redacted.
func TestRedisURLErrors(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		url  string
		want []string
	}{
		"wait replicas not a number": {"redis://127.0.0.1:1/0?retrysafe_wait_replicas=two", []string{"retrysafe_wait_replicas", `"two"`}},
		"wait replicas negative":     {"redis://127.0.0.1:1/0?retrysafe_wait_replicas=-1", []string{"retrysafe_wait_replicas"}},
		"wait timeout":               {"redis://127.0.0.1:1/0?retrysafe_wait_replicas=1&retrysafe_wait_timeout=100", []string{"retrysafe_wait_timeout", "100ms"}},
		"cluster db":                 {"redis+cluster://u:hunter2@127.0.0.1:1,127.0.0.1:2/3", []string{"only database 0", "xxxxx"}},
		"cluster no host":            {"redis+cluster://", []string{"no seed node"}},
		"cluster bad seed":           {"redis+cluster://127.0.0.1:1,,127.0.0.1:2", []string{"not HOST:PORT"}},
		"cluster unknown option":     {"redis+cluster://127.0.0.1:1?bogus=1", []string{"bogus"}},
		"cluster with wait":          {"redis+cluster://127.0.0.1:1?retrysafe_wait_replicas=1", []string{"WaitReplicas", "ClusterClient"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, _, err := storeurl.Open(ctx, tc.url)
			if err == nil {
				t.Fatal("Open succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error %q shows the password", err)
			}
		})
	}
}

// TestOpenRedisWaitReplicas: the wait parameters reach the store. The
// machine's Redis has no replica, so WAIT 1 times out and a claim fails
// with ErrNotReplicated (and ErrStoreUnavailable), leaving no record.
func TestOpenRedisWaitReplicas(t *testing.T) {
	t.Parallel()
	addr := testenv.RedisAddr()
	if c, err := net.DialTimeout("tcp", addr, 2*time.Second); err != nil {
		testenv.Unreachable(t, "Redis", err)
	} else {
		c.Close()
	}
	prefix := "storeurl-test:" + retrysafe.NewToken()[:8] + ":"
	s, closeFn, err := storeurl.Open(context.Background(), "redis://"+addr+"/0?retrysafe_prefix="+prefix+"&retrysafe_wait_replicas=1&retrysafe_wait_timeout=50ms")
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	ctx := context.Background()
	claim := &retrysafe.ClaimParams{Scope: "s", Key: "k", Fingerprint: "f", Token: retrysafe.NewToken(), Now: time.Now(), Lease: time.Minute}
	start := time.Now()
	_, err = s.Claim(ctx, claim)
	if !errors.Is(err, redis.ErrNotReplicated) || !errors.Is(err, retrysafe.ErrStoreUnavailable) {
		t.Fatalf("Claim with 1 replica wanted and none present = %v; want ErrNotReplicated and ErrStoreUnavailable", err)
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Fatalf("Claim failed after %s, before the 50ms WAIT timeout", d)
	}
	if _, err := s.Get(ctx, &retrysafe.GetParams{Scope: "s", Key: "k", Now: time.Now()}); !errors.Is(err, retrysafe.ErrNotFound) {
		t.Fatalf("Get after the unreplicated claim = %v; want ErrNotFound (the claim is released)", err)
	}
}

// TestOpenRedisCluster opens redis+cluster:// with two of three seed
// nodes of a private cluster and round-trips a record.
func TestOpenRedisCluster(t *testing.T) {
	t.Parallel()
	c := redisserver.StartCluster(t, 3)
	s, closeFn, err := storeurl.Open(context.Background(), "redis+cluster://"+c.Nodes[0].Addr+","+c.Nodes[1].Addr+"?retrysafe_prefix=storeurl-test:&dial_timeout=2s")
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	if _, ok := s.(*redis.Store); !ok {
		t.Fatalf("got %T", s)
	}
	for range 20 { // 20 keys: nearly surely on more than one node
		roundTrip(t, s)
	}
}
