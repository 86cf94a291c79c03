package redis_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/testenv"
	redisstore "github.com/retrysafe/retrysafe/store/redis"
)

// redisAddr is the test server: RETRYSAFE_REDIS_ADDR, default 127.0.0.1:6379.
func redisAddr() string {
	if a := os.Getenv("RETRYSAFE_REDIS_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:6379"
}

// requireRedis skips the test when Redis does not answer, or fails it
// under CI=true, where every store test must run.
func requireRedis(t testing.TB) {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: redisAddr(), DialTimeout: 2 * time.Second, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		testenv.Unreachable(t, "Redis at "+redisAddr(), err)
	}
}

// newClient returns a client of the test server, closed at cleanup.
// opts may adjust the options before the client is built.
func newClient(t testing.TB, opts ...func(*goredis.Options)) *goredis.Client {
	t.Helper()
	requireRedis(t)
	o := &goredis.Options{Addr: redisAddr()}
	for _, f := range opts {
		f(o)
	}
	c := goredis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// testPrefix returns a fresh key prefix and deletes its keys at cleanup.
func testPrefix(t testing.TB) string {
	t.Helper()
	var b [8]byte
	_, _ = rand.Read(b[:])
	prefix := "retrysafe-test:" + hex.EncodeToString(b[:]) + ":"
	t.Cleanup(func() { deletePrefix(t, prefix) })
	return prefix
}

// deletePrefix deletes every key under prefix (which has no glob
// characters) with a client of its own.
func deletePrefix(t testing.TB, prefix string) {
	c := goredis.NewClient(&goredis.Options{Addr: redisAddr()})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 500 {
			c.Unlink(ctx, batch...)
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		c.Unlink(ctx, batch...)
	}
	if err := iter.Err(); err != nil {
		t.Errorf("cleanup of %s*: %v", prefix, err)
	}
}

// newStore returns a store on its own client and prefix.
func newStore(t testing.TB, opts ...func(*goredis.Options)) (*redisstore.Store, *goredis.Client, string) {
	t.Helper()
	c := newClient(t, opts...)
	prefix := testPrefix(t)
	s, err := redisstore.New(c, redisstore.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, c, prefix
}

// commandCounter is a goredis.Hook that counts round trips: one per
// command, one per pipeline.
type commandCounter struct {
	n atomic.Int64
}

func (c *commandCounter) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (c *commandCounter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *commandCounter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmds)
	}
}

// claimParams returns claim parameters with a fresh token.
func claimParams(scope, key string, now time.Time, lease time.Duration) *retrysafe.ClaimParams {
	return &retrysafe.ClaimParams{
		Scope:       scope,
		Key:         key,
		Fingerprint: "fp",
		Token:       retrysafe.NewToken(),
		Now:         now,
		Lease:       lease,
	}
}
