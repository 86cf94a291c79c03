package redis_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	goredis "github.com/redis/go-redis/v9"
	"github.com/retrysafe/retrysafe/store/redis"
)

// A *Logger is what goredis.SetLogger takes (checked at compile time).
var _ = func(l *redis.Logger) { goredis.SetLogger(l) }

// TestLogger: a go-redis log line becomes one JSON record at warn level,
// without its "redis: " prefix, and lines below the handler's level are
// dropped.
func TestLogger(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	l := redis.NewLogger(slog.New(slog.NewJSONHandler(&buf, nil)))
	l.Printf(context.Background(), "redis: connection pool: failed to dial after %d attempts: %s", 5, "dial tcp 127.0.0.1:1: connect: connection refused")
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("not one JSON record: %v\n%s", err, &buf)
	}
	want := map[string]any{
		"level":  "WARN",
		"msg":    "connection pool: failed to dial after 5 attempts: dial tcp 127.0.0.1:1: connect: connection refused",
		"logger": "go-redis",
	}
	for k, v := range want {
		if rec[k] != v {
			t.Errorf("%s = %v, want %v", k, rec[k], v)
		}
	}

	buf.Reset()
	quiet := redis.NewLogger(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelError})))
	quiet.Printf(context.Background(), "redis: %s", "something")
	if buf.Len() != 0 {
		t.Fatalf("logged below the handler's level: %s", &buf)
	}
}
