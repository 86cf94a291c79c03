//go:build !retrysafe_noredis

package storeurl

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"

	goredis "github.com/redis/go-redis/v9"
	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/redis"
)

// openRedis opens the Redis store of rawURL.
func openRedis(ctx context.Context, rawURL string, opts Options) (retrysafe.Store, func() error, error) {
	u, prefix, err := redisURL(rawURL)
	if err != nil {
		return nil, nil, err
	}
	s, err := redis.Open(ctx, u, redis.Config{Prefix: prefix, ProcessingRetention: opts.ProcessingRetention})
	if err != nil {
		return nil, nil, err
	}
	return s, s.Close, nil
}

// routeRedisLogs sends go-redis's own log lines (connection-pool failures
// and the like, printed on stderr by default) to l. go-redis has one
// logger per process.
func routeRedisLogs(l *slog.Logger) {
	goredis.SetLogger(redis.NewLogger(l))
}

// redisURL removes the retrysafe_prefix parameter, which go-redis would
// reject.
func redisURL(raw string) (string, string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", "", fmt.Errorf("store %q: %w", Redact(raw), err)
	}
	q := u.Query()
	if !q.Has(ParamPrefix) {
		return raw, "", nil
	}
	prefix := q.Get(ParamPrefix)
	q.Del(ParamPrefix)
	u.RawQuery = q.Encode()
	return u.String(), prefix, nil
}
