package redis

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
)

// Logger passes go-redis's own log lines to an [slog.Logger]. go-redis
// prints some failures itself (a connection pool that cannot dial, a
// broken pub/sub connection), by default as plain text on stderr; a
// service that logs JSON installs a Logger once, before creating clients:
//
//	goredis.SetLogger(redis.NewLogger(logger))
//
// Each line is logged at warn level, its "redis: " prefix removed, with
// the attribute logger=go-redis.
type Logger struct {
	l *slog.Logger
}

// NewLogger returns a Logger writing to l; nil means slog.Default().
func NewLogger(l *slog.Logger) *Logger {
	if l == nil {
		l = slog.Default()
	}
	return &Logger{l: l}
}

// Printf implements go-redis's logging interface (the argument of
// goredis.SetLogger).
func (g *Logger) Printf(ctx context.Context, format string, v ...any) {
	if !g.l.Enabled(ctx, slog.LevelWarn) {
		return
	}
	msg := strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: ")
	g.l.LogAttrs(ctx, slog.LevelWarn, strings.TrimRight(msg, "\n"), slog.String("logger", "go-redis"))
}
