package redis

import (
	"context"
	"errors"

	goredis "github.com/redis/go-redis/v9"
	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
)

var _ admin.DurabilityChecker = (*Store)(nil)

// CheckDurability implements [admin.DurabilityChecker]: a Redis that
// neither appends to a log (appendonly no) nor snapshots (save "") keeps
// its records in memory only. A server that refuses CONFIG GET (renamed
// or blocked, as managed services do, or an ACL without it) gives no
// warning. On a cluster the node that answers speaks for all.
func (s *Store) CheckDurability(ctx context.Context) ([]admin.DurabilityWarning, error) {
	aof, err := s.configGet(ctx, "appendonly")
	if err != nil || aof == nil {
		return nil, err
	}
	save, err := s.configGet(ctx, "save")
	if err != nil || save == nil {
		return nil, err
	}
	if *aof == "no" && *save == "" {
		return []admin.DurabilityWarning{{
			Setting: "appendonly",
			Value:   `no (and save "")`,
			Risk:    "Redis keeps the records in memory only: a restart loses every one, and retries of completed operations run again (docs/redis.md)",
		}}, nil
	}
	return nil, nil
}

// configGet returns the value of a CONFIG GET parameter; nil when the
// server refuses the command.
func (s *Store) configGet(ctx context.Context, name string) (*string, error) {
	m, err := s.client.ConfigGet(ctx, name).Result()
	var rerr goredis.Error
	if errors.As(err, &rerr) {
		return nil, nil // an answer, a refusal: NOPERM, unknown command
	}
	if err != nil {
		return nil, retrysafe.Unavailable("config get "+name, err)
	}
	v, ok := m[name]
	if !ok {
		return nil, nil
	}
	return &v, nil
}
