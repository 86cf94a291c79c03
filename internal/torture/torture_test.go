package torture

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/internal/e2e/stores"

	"github.com/retrysafe/retrysafe/internal/storeurl"
	"github.com/retrysafe/retrysafe/internal/testenv"
)

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
	binDir    string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// retrysafeBinary builds the real command once per test binary.
func retrysafeBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "retrysafe-torture-")
		if buildErr == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			binary, buildErr = BuildBinary(ctx, binDir, os.Getenv("RETRYSAFE_TORTURE_RACE") == "1")
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

// duration is the length of each store's run: a few seconds under -short,
// 60s by default (CI), RETRYSAFE_TORTURE_DURATION when set.
func duration(t *testing.T) time.Duration {
	if v := os.Getenv("RETRYSAFE_TORTURE_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("RETRYSAFE_TORTURE_DURATION: %v", err)
		}
		return d
	}
	if testing.Short() {
		return 5 * time.Second
	}
	return 60 * time.Second
}

// outDir is where a run's report goes: RETRYSAFE_TORTURE_OUT/name when set,
// else the test's temp dir.
func outDir(t *testing.T, name string) string {
	base := os.Getenv("RETRYSAFE_TORTURE_OUT")
	if base == "" {
		return t.TempDir()
	}
	dir := filepath.Join(base, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// storeURLs gives each store's --store URL, isolated for one test.
var storeURLs = map[string]func(t *testing.T) string{
	"sqlite": func(t *testing.T) string { return "sqlite:" + testenv.SQLitePath(t) },
	"postgres": func(t *testing.T) string {
		u, _ := stores.PostgresSchemaURL(t)
		return u
	},
	"mysql": func(t *testing.T) string {
		u, _ := stores.MySQLTableURL(t)
		return u
	},
	"dynamodb": func(t *testing.T) string {
		u, _ := stores.DynamoDBTableURL(t)
		return u
	},
	"redis": func(t *testing.T) string {
		u, err := url.Parse(stores.RedisURL(t))
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		q.Set(storeurl.ParamPrefix, stores.RedisPrefix(t))
		u.RawQuery = q.Encode()
		return u.String()
	},
}

// TestTorture runs the harness with every kind of fault against each
// shared store and checks the history: no anomaly may be found, and every
// duplicate must be matched to a fault.
func TestTorture(t *testing.T) {
	t.Parallel()
	for name, storeURL := range storeURLs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := Config{Binary: retrysafeBinary(t), Store: storeURL(t), Duration: duration(t), Faults: true, Dir: outDir(t, name), Logf: t.Logf}
			if name == "sqlite" {
				cfg.Gateways = 2 // two processes on one file
			}
			if v := os.Getenv("RETRYSAFE_TORTURE_OPS"); v != "" {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					t.Fatalf("RETRYSAFE_TORTURE_OPS: %v", err)
				}
				cfg.MaxOps, cfg.Duration = n, 24*time.Hour
			}
			h, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			res := Check(h, CheckOptionsFor(&cfg))
			rep := NewReport(h, res, nil)
			if err := rep.WriteFiles(cfg.Dir, h); err != nil {
				t.Fatal(err)
			}
			if len(h.Effects) == 0 || res.Outcomes["replayed"] == 0 {
				t.Fatalf("the run did nothing useful:\n%s", rep.Markdown())
			}
			if cfg.Faults && len(h.Faults) == 0 && cfg.Duration > 10*time.Second {
				t.Fatalf("no fault was injected:\n%s", rep.Markdown())
			}
			if as := rep.Anomalies(); len(as) > 0 {
				t.Fatalf("%d anomalies; report in %s:\n%s", len(as), cfg.Dir, rep.Markdown())
			}
			t.Logf("%s: %d requests, %d effects, %d faults, %d documented-window duplicates, 0 anomalies; report in %s",
				name, res.Requests, res.Effects, len(h.Faults), len(res.Documented), cfg.Dir)
		})
	}
}

// TestTortureCatchesMutations breaks the gateways on purpose, as clients
// see them, and requires the checker to catch each break.
func TestTortureCatchesMutations(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		MutationDropReplayHeader: AnomalyReplayDiffers,
		MutationStripKey:         AnomalyUnkeyed,
		MutationSharedScope:      AnomalyCrossTenant,
	}
	for mutation, want := range tests {
		t.Run(mutation, func(t *testing.T) {
			t.Parallel()
			cfg := Config{Binary: retrysafeBinary(t), Store: storeURLs["sqlite"](t), Gateways: 2, Clients: 6, Tenants: 2,
				Duration: 4 * time.Second, Mutation: mutation, Dir: t.TempDir(), Logf: t.Logf}
			h, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			res := Check(h, CheckOptionsFor(&cfg))
			got := res.AnomaliesByKind()
			if got[want] == 0 {
				t.Fatalf("mutation %s: no %s anomaly; found %v\n%s", mutation, want, got, NewReport(h, res, nil).Markdown())
			}
			t.Logf("mutation %s caught: %v", mutation, got)
		})
	}
}
