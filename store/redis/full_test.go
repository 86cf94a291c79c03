package redis_test

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/redisserver"
	redisstore "github.com/retrysafe/retrysafe/store/redis"
)

// TestOutOfMemory: a Redis that refuses writes with OOM under
// maxmemory-policy noeviction (what docs/redis.md recommends) is full, not
// down: Claim and Complete fail with an error that matches
// retrysafe.ErrStoreFull and not ErrStoreUnavailable, so the middleware
// answers 503 store-full and never fails open. Reads still work: a replay
// of a stored record is answered.
func TestOutOfMemory(t *testing.T) {
	t.Parallel()
	srv := redisserver.Start(t, "--maxmemory-policy", "noeviction")
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = c.Close() })
	s, err := redisstore.New(c, redisstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := t.Context()
	now := time.Now()

	// A record stored before the server fills, and one claimed.
	done := claimParams("scope", "done", now, time.Minute)
	mustClaim(t, s, done)
	mustComplete(t, s, done, now, time.Hour)
	held := claimParams("scope", "held", now, time.Minute)
	mustClaim(t, s, held)

	used, err := strconv.ParseInt(strings.TrimSpace(srv.Info("memory", "used_memory")), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	srv.CLI("CONFIG", "SET", "maxmemory", strconv.FormatInt(used+1<<20, 10))
	// Fill it with ever smaller values, so that not even a small record
	// fits (a large value's own request buffer counts while it is read).
	n := 0
	for _, size := range []int{64 << 10, 1 << 10, 16} {
		value := strings.Repeat("x", size)
		for {
			n++
			err := c.Set(ctx, fmt.Sprint("filler-", n), value, 0).Err()
			if err != nil && strings.HasPrefix(err.Error(), "OOM ") {
				break
			}
			if err != nil || n > 100000 {
				t.Fatalf("filling the server: %d keys, %v", n, err)
			}
		}
	}
	filler := strings.Repeat("x", 64<<10)

	check := func(op string, err error) {
		t.Helper()
		if !errors.Is(err, retrysafe.ErrStoreFull) || errors.Is(err, retrysafe.ErrStoreUnavailable) {
			t.Errorf("%s on a full Redis: %v; want ErrStoreFull and not ErrStoreUnavailable", op, err)
		}
	}
	_, err = s.Claim(ctx, claimParams("scope", "new", now, time.Minute))
	check("Claim", err)
	err = s.Complete(ctx, &retrysafe.CompleteParams{Scope: "scope", Key: "held", Token: held.Token, Now: now, TTL: time.Hour,
		Response: &retrysafe.Response{Status: 201, Body: []byte(filler)}})
	check("Complete", err)
	err = s.Extend(ctx, &retrysafe.ExtendParams{Scope: "scope", Key: "held", Token: held.Token, Now: now, Lease: time.Minute})
	check("Extend", err)

	res, err := s.Claim(ctx, claimParams("scope", "done", now, time.Minute))
	if err != nil || res.Claimed || res.Record.State != retrysafe.StateCompleted {
		t.Fatalf("replay on a full Redis: %+v, %v; want the stored record", res, err)
	}
}
