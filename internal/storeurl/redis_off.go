//go:build retrysafe_noredis

package storeurl

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/retrysafe/retrysafe"
)

// openRedis refuses: this binary was built without the Redis store.
func openRedis(ctx context.Context, rawURL string, opts Options) (retrysafe.Store, func() error, error) {
	return nil, nil, fmt.Errorf("store %s: Redis is %w (built with -tags retrysafe_noredis)", Redact(rawURL), ErrNotBuiltIn)
}

// routeRedisLogs has nothing to do without go-redis.
func routeRedisLogs(*slog.Logger) {}
