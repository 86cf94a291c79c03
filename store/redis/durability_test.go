package redis_test

import (
	"context"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/internal/redisserver"
	redisstore "github.com/retrysafe/retrysafe/store/redis"
)

// TestCheckDurability: the shared test server runs without persistence
// (appendonly no, save ""), so the store warns about it; a server of the
// test's own with appendonly yes, or with snapshots, gives no warning.
func TestCheckDurability(t *testing.T) {
	t.Parallel()
	shared, c, _ := newStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg, err := c.ConfigGet(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	warnings, err := shared.CheckDurability(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cfg["appendonly"] == "no" && cfg["save"] == "" {
		if len(warnings) != 1 || warnings[0].Setting != "appendonly" || !strings.Contains(warnings[0].Risk, "restart loses every one") {
			t.Errorf("a Redis without persistence: warnings %+v, want one about appendonly", warnings)
		}
	} else {
		t.Errorf("the test server is expected to run without persistence (as CI runs it): appendonly %q, save %q", cfg["appendonly"], cfg["save"])
	}

	for name, args := range map[string][]string{
		"appendonly yes": {"--appendonly", "yes"},
		"snapshots":      {"--save", "3600 1"},
	} {
		srv := redisserver.Start(t, args...)
		own := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
		t.Cleanup(func() { _ = own.Close() })
		s, err := redisstore.New(own, redisstore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if w, err := s.CheckDurability(ctx); err != nil || len(w) != 0 {
			t.Errorf("%s: warnings %+v, %v; want none", name, w, err)
		}
	}
}

// TestCheckDurabilityRefused: a server that refuses CONFIG (renamed away,
// as managed services do) gives no warning and no error.
func TestCheckDurabilityRefused(t *testing.T) {
	t.Parallel()
	srv := redisserver.Start(t, "--rename-command", "CONFIG", "")
	own := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = own.Close() })
	s, err := redisstore.New(own, redisstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := own.ConfigGet(ctx, "appendonly").Err(); err == nil {
		t.Fatal("CONFIG still answers on a server started with it renamed away")
	}
	if w, err := s.CheckDurability(ctx); err != nil || len(w) != 0 {
		t.Errorf("CONFIG refused: warnings %+v, %v; want none and no error", w, err)
	}
	var _ admin.DurabilityChecker = s
}
