package redis_test

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/retrysafe/retrysafe"
	redisstore "github.com/retrysafe/retrysafe/store/redis"
	"github.com/retrysafe/retrysafe/store/storetest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) retrysafe.Store {
		s, _, _ := newStore(t)
		return s
	})
}

func TestUnavailable(t *testing.T) {
	t.Parallel()
	t.Run("closed port", func(t *testing.T) {
		t.Parallel()
		addr := refusedAddr(t)
		storetest.RunUnavailable(t, func(t *testing.T) retrysafe.Store {
			c := goredis.NewClient(&goredis.Options{Addr: addr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1, DialerRetries: 1})
			t.Cleanup(func() { _ = c.Close() })
			s, err := redisstore.New(c, redisstore.Config{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		})
	})
	t.Run("closed client", func(t *testing.T) {
		t.Parallel()
		storetest.RunUnavailable(t, func(t *testing.T) retrysafe.Store {
			s, c, _ := newStore(t)
			_ = c.Close()
			return s
		})
	})
	t.Run("Open", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(t.Context(), storetest.UnavailableTimeout)
		defer cancel()
		_, err := redisstore.Open(ctx, "redis://127.0.0.1:1/0?dial_timeout=200ms&max_retries=-1", redisstore.Config{})
		if err == nil {
			t.Fatal("Open of a closed port succeeded")
		}
		if !errorsIsUnavailable(err) {
			t.Fatalf("Open of a closed port: %v, want ErrStoreUnavailable", err)
		}
	})
}

func TestShared(t *testing.T) {
	t.Parallel()
	storetest.RunShared(t, func(t *testing.T) (a, b retrysafe.Store) {
		prefix := testPrefix(t)
		for _, dst := range []*retrysafe.Store{&a, &b} {
			s, err := redisstore.New(newClient(t), redisstore.Config{Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			*dst = s
		}
		return a, b
	})
}

// TestCheckReadyRefused: with go-redis's default retries, Ping on a port
// that refuses fails only after about 1.7 s (4 attempts of 5 dials, 100 ms
// apart); CheckReady fails at once, every time, with ErrStoreUnavailable.
func TestCheckReadyRefused(t *testing.T) {
	t.Parallel()
	c := goredis.NewClient(&goredis.Options{Addr: refusedAddr(t)}) // default retries
	t.Cleanup(func() { _ = c.Close() })
	s, err := redisstore.New(c, redisstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	for i := range 3 {
		start := time.Now()
		err := s.CheckReady(t.Context())
		took := time.Since(start)
		if !errorsIsUnavailable(err) {
			t.Fatalf("CheckReady #%d on a refused port: %v, want ErrStoreUnavailable", i+1, err)
		}
		if took > storetest.ReadyCheckLimit {
			t.Fatalf("CheckReady #%d on a refused port took %s, want at most %s", i+1, took, storetest.ReadyCheckLimit)
		}
	}
}

// refusedAddr returns an address where connections are refused:
// 127.0.0.1:1, where nothing listens. Not a port that was just free: a
// redis-server the cluster and failover tests start meanwhile on a random
// port may take it (a PostgreSQL test's dead port was taken once).
func refusedAddr(t *testing.T) string {
	t.Helper()
	return "127.0.0.1:1"
}
