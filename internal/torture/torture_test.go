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
// repeated effect must be matched to one injected event of the attempt it
// repeats.
func TestTorture(t *testing.T) {
	t.Parallel()
	for name, storeURL := range storeURLs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			runStore(t, name, Config{Store: storeURL(t), Duration: duration(t), Faults: true, Dir: outDir(t, name)})
		})
	}
}

// TestTortureResolve is TestTorture in the resolve mode: the gateways ask
// the upstream's resolve URL, which answers honestly from its effect log,
// and run the completer; no operation may run twice, and every unknown
// outcome must end resolved. It runs before the parallel tests (it is not
// parallel itself, its stores are), for half the duration, so that the
// package's runs do not all load the machine at once.
func TestTortureResolve(t *testing.T) {
	for name, storeURL := range storeURLs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			u := runStore(t, name, Config{Store: storeURL(t), Duration: duration(t) / 2, Faults: true, Resolve: true, Dir: outDir(t, "resolve-"+name)})
			if !testing.Short() && os.Getenv("RETRYSAFE_TORTURE_DURATION") == "" && u.Total == 0 {
				t.Fatalf("no unknown outcome in %s: the resolve mode was not exercised", duration(t)/2)
			}
		})
	}
}

// runStore runs one store's torture, checks it and writes the report; it
// fails on any anomaly. It returns the unknown outcomes of a resolve-mode
// run (zero otherwise).
func runStore(t *testing.T, name string, cfg Config) Unknowns {
	cfg.Binary, cfg.Logf = retrysafeBinary(t), t.Logf
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
	res := Check(h, CheckOptionsFor(h.Params))
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
	var u Unknowns
	if res.Unknowns != nil {
		u = *res.Unknowns
	}
	t.Logf("%s (resolve %v): %d requests, %d effects, %d faults, repeats %v, unknown outcomes %+v, 0 anomalies; report in %s",
		name, cfg.Resolve, res.Requests, res.Effects, len(h.Faults), res.RepeatsByCause(), u, cfg.Dir)
	return u
}

// TestTortureCatchesMutations breaks the gateways (or the upstream) on
// purpose, as clients see them, and requires the checker to catch each
// break.
func TestTortureCatchesMutations(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		want     string
		resolve  bool
		faults   bool
		duration time.Duration
	}{
		MutationDropReplayHeader: {want: AnomalyReplayDiffers},
		MutationStripKey:         {want: AnomalyUnkeyed},
		MutationSharedScope:      {want: AnomalyCrossTenant},
		// Repeats need unknown outcomes and a lease to run out.
		MutationSilentCut:         {want: AnomalyDuplicate, duration: 12 * time.Second},
		MutationDishonestResolver: {want: AnomalyResolvedRepeat, resolve: true, faults: true, duration: 15 * time.Second},
	}
	for mutation, tc := range tests {
		t.Run(mutation, func(t *testing.T) {
			t.Parallel()
			if tc.duration == 0 {
				tc.duration = 4 * time.Second
			}
			cfg := Config{Binary: retrysafeBinary(t), Store: storeURLs["sqlite"](t), Gateways: 2, Clients: 6, Tenants: 2,
				Duration: tc.duration, Mutation: mutation, Resolve: tc.resolve, Faults: tc.faults, Dir: t.TempDir(), Logf: t.Logf}
			h, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			res := Check(h, CheckOptionsFor(h.Params))
			got := res.AnomaliesByKind()
			if got[tc.want] == 0 {
				t.Fatalf("mutation %s: no %s anomaly; found %v\n%s", mutation, tc.want, got, NewReport(h, res, nil).Markdown())
			}
			t.Logf("mutation %s caught: %v", mutation, got)
		})
	}
}
