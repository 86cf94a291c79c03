//go:build !retrysafe_noredis

package storeurl

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/redis"
)

// openRedis opens the Redis store of rawURL.
func openRedis(ctx context.Context, rawURL string, opts Options) (retrysafe.Store, func() error, error) {
	u, cfg, err := redisURL(rawURL, opts.ProcessingRetention)
	if err != nil {
		return nil, nil, err
	}
	s, err := redis.Open(ctx, u, cfg)
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

// redisURL removes the parameters of storeurl (retrysafe_prefix,
// retrysafe_wait_replicas, retrysafe_wait_timeout), which go-redis would
// reject, and returns them as the store's configuration. It works on the
// query alone, so the comma-separated hosts of a cluster URL pass through.
func redisURL(raw string, retention time.Duration) (string, redis.Config, error) {
	cfg := redis.Config{ProcessingRetention: retention}
	base, query, ok := strings.Cut(raw, "?")
	if !ok {
		return raw, cfg, nil
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return "", cfg, fmt.Errorf("store %q: query: %w", Redact(raw), err)
	}
	if q.Has(ParamPrefix) {
		cfg.Prefix = q.Get(ParamPrefix)
		q.Del(ParamPrefix)
	}
	if q.Has(ParamWaitReplicas) {
		n, err := strconv.Atoi(q.Get(ParamWaitReplicas))
		if err != nil || n < 0 {
			return "", cfg, fmt.Errorf("store %q: %s must be a number of replicas, not %q", Redact(raw), ParamWaitReplicas, q.Get(ParamWaitReplicas))
		}
		cfg.WaitReplicas = n
		q.Del(ParamWaitReplicas)
	}
	if q.Has(ParamWaitTimeout) {
		d, err := time.ParseDuration(q.Get(ParamWaitTimeout))
		if err != nil || d <= 0 {
			return "", cfg, fmt.Errorf("store %q: %s must be a positive duration such as 100ms, not %q", Redact(raw), ParamWaitTimeout, q.Get(ParamWaitTimeout))
		}
		cfg.WaitTimeout = d
		q.Del(ParamWaitTimeout)
	}
	if len(q) == 0 {
		return base, cfg, nil
	}
	return base + "?" + q.Encode(), cfg, nil
}
