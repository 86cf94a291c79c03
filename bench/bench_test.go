package bench

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/internal/storeurl"
	"github.com/retrysafe/retrysafe/internal/testenv"
	"github.com/retrysafe/retrysafe/store/memory"
	"github.com/retrysafe/retrysafe/store/mysql"
	"github.com/retrysafe/retrysafe/store/postgres"
	"github.com/retrysafe/retrysafe/store/sqlite"
)

func init() {
	flag.Var(&concurrency, "concurrency", "parallel client connections of the load generator; a comma-separated list (32,128) measures each in turn")
}

// clientCounts is the -concurrency flag: one or more client counts.
type clientCounts []int

func (c *clientCounts) String() string {
	parts := make([]string, len(*c))
	for i, n := range *c {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ",")
}

func (c *clientCounts) Set(v string) error {
	var out clientCounts
	for f := range strings.SplitSeq(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("bad client count %q", f)
		}
		out = append(out, n)
	}
	*c = out
	return nil
}

var (
	concurrency = clientCounts{32}
	replayKeys  = flag.Int("replay-keys", 256, "distinct keys cycled through by the replay scenarios")
	rounds      = flag.Int("rounds", 8, "rounds per scenario, each interleaved with a plain-proxy round")
)

// benchStore is one store under test.
type benchStore struct {
	name  string
	store retrysafe.Store
	close func()
	// floor, when not nil, opens the store's durability floor (floor_test.go)
	// on the same server with the same settings.
	floor func(ctx context.Context) (*floor, error)
}

// openStores opens every store the harness measures: memory, SQLite as
// Open configures it (synchronous=FULL), SQLite with synchronous=NORMAL
// (to show what durability costs), SQLite with the default settings on a
// tmpfs (/dev/shm, when there is one: the same code with an fsync that
// costs nothing, to show what the disk costs), and PostgreSQL and Redis
// when they are reachable. Each gets a fresh file, schema or key prefix.
func openStores(tb testing.TB, all bool) []benchStore {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []benchStore

	mem := memory.New(memory.Config{})
	out = append(out, benchStore{"memory", mem, func() { _ = mem.Close() }, nil})

	dir := tb.TempDir()
	full, err := sqlite.Open(ctx, filepath.Join(dir, "full.db"), sqlite.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	out = append(out, benchStore{"sqlite", full, func() { _ = full.Close() }, func(ctx context.Context) (*floor, error) {
		return sqliteFloor(ctx, filepath.Join(dir, "floor.db"), sqlite.Config{})
	}})
	if !all {
		return out
	}

	// synchronous=NORMAL: in WAL mode a commit no longer waits for fsync;
	// a power loss (not a process crash) may lose the last commits.
	dsn := sqlite.DSN(filepath.Join(dir, "normal.db"), sqlite.Config{Synchronous: "NORMAL"})
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		tb.Fatal(err)
	}
	normal, err := sqlite.New(db, sqlite.Config{})
	if err == nil {
		err = normal.Migrate(ctx)
	}
	if err != nil {
		tb.Fatal(err)
	}
	out = append(out, benchStore{"sqlite-normal", normal, func() { _ = normal.Close(); _ = db.Close() }, func(ctx context.Context) (*floor, error) {
		return sqliteFloor(ctx, filepath.Join(dir, "floor-normal.db"), sqlite.Config{Synchronous: "NORMAL"})
	}})

	// tmpfs keeps nothing across a reboot: this row is a measurement of
	// the disk's share, not a configuration to run.
	if shm, err := os.MkdirTemp("/dev/shm", "retrysafe-bench-"); err == nil {
		fast, err := sqlite.Open(ctx, filepath.Join(shm, "tmpfs.db"), sqlite.Config{})
		if err != nil {
			_ = os.RemoveAll(shm)
			tb.Fatal(err)
		}
		out = append(out, benchStore{"sqlite-tmpfs", fast, func() { _ = fast.Close(); _ = os.RemoveAll(shm) }, func(ctx context.Context) (*floor, error) {
			return sqliteFloor(ctx, filepath.Join(shm, "floor.db"), sqlite.Config{})
		}})
	}

	suffix := randomSuffix(tb)
	pgURL := cmpEnv("RETRYSAFE_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	if u, err := url.Parse(pgURL); err == nil {
		schema := "rs_bench_" + suffix
		q := u.Query()
		q.Set(postgres.URLParamSchema, schema)
		u.RawQuery = q.Encode()
		if s, closeStore, err := storeurl.Open(ctx, u.String()); err != nil {
			unreachable(tb, "PostgreSQL", err)
		} else {
			pg := s.(*postgres.Store)
			out = append(out, benchStore{"postgres", pg, func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_, _ = pg.Pool().Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
				_ = closeStore()
			}, func(ctx context.Context) (*floor, error) {
				return postgresFloor(ctx, pgURL, "rs_benchfloor_"+suffix)
			}})
		}
	}

	// The same PostgreSQL through PgBouncer in transaction mode
	// (docs/postgres.md; Subscribe polls).
	if u, err := url.Parse(cmpEnv("RETRYSAFE_PGBOUNCER_URL", "postgres://postgres@127.0.0.1:6432/test?sslmode=disable")); err == nil {
		schema := "rs_benchpgb_" + suffix
		q := u.Query()
		q.Set(postgres.URLParamSchema, schema)
		q.Set(postgres.URLParamPoolMode, postgres.PoolModeTransaction)
		u.RawQuery = q.Encode()
		if s, closeStore, err := storeurl.Open(ctx, u.String()); err != nil {
			unreachable(tb, "PgBouncer", err)
		} else {
			pg := s.(*postgres.Store)
			out = append(out, benchStore{"postgres-pgbouncer", pg, func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_, _ = pg.Pool().Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
				_ = closeStore()
			}, nil})
		}
	}

	myURL := cmpEnv("RETRYSAFE_MYSQL_URL", "mysql://root@127.0.0.1:3306/test")
	if u, err := url.Parse(myURL); err == nil {
		table := "rs_bench_" + suffix
		q := u.Query()
		q.Set(mysql.URLParamTable, table)
		u.RawQuery = q.Encode()
		if s, closeStore, err := storeurl.Open(ctx, u.String()); err != nil {
			unreachable(tb, "MySQL/MariaDB", err)
		} else {
			my := s.(*mysql.Store)
			out = append(out, benchStore{"mysql", my, func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				for _, stmt := range testenv.MySQLDropStatements(table) {
					_, _ = my.DB().ExecContext(ctx, stmt)
				}
				_ = closeStore()
			}, func(ctx context.Context) (*floor, error) {
				return openMySQLFloor(ctx, myURL, "rs_benchfloor_"+suffix)
			}})
		}
	}

	redisURL := "redis://" + cmpEnv("RETRYSAFE_REDIS_ADDR", "127.0.0.1:6379") + "/0?" +
		storeurl.ParamPrefix + "=" + url.QueryEscape("retrysafe-bench:"+suffix+":")
	if s, closeStore, err := storeurl.Open(ctx, redisURL); err != nil {
		unreachable(tb, "Redis", err)
	} else {
		out = append(out, benchStore{"redis", s, func() {
			deleteAll(s)
			_ = closeStore()
		}, func(ctx context.Context) (*floor, error) {
			return redisFloor(ctx, cmpEnv("RETRYSAFE_REDIS_ADDR", "127.0.0.1:6379"), "retrysafe-benchfloor:"+suffix+":")
		}})
	}
	return out
}

func unreachable(tb testing.TB, what string, err error) {
	tb.Helper()
	if os.Getenv("CI") == "true" {
		tb.Fatalf("%s is unreachable (CI=true): %v", what, err)
	}
	tb.Logf("%s is unreachable; not measured: %v", what, err)
}

func cmpEnv(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func randomSuffix(tb testing.TB) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		tb.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// deleteAll removes the records a run left in a shared server (Redis).
func deleteAll(s retrysafe.Store) {
	a, ok := s.(admin.Admin)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		recs, err := a.List(ctx, &admin.ListParams{Limit: 1000})
		if err != nil || len(recs) == 0 {
			return
		}
		for _, r := range recs {
			_ = a.Delete(ctx, r.Scope, r.Key)
		}
	}
}

func report(b *testing.B, r Result) {
	b.ReportMetric(r.RPS(), "req/s")
	b.ReportMetric(float64(r.P50.Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(r.P99.Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(r.CPUPerRequest().Microseconds()), "cpu-µs/req")
	if r.Errors > 0 {
		b.Errorf("%d of %d requests failed or did not answer 201", r.Errors, r.Requests)
	}
}

// BenchmarkGateway measures a plain ReverseProxy and the gateway on new
// keys and on replays for each store, at each -concurrency over loopback
// sockets, and prints the ratios gateway/plain at the end.
//
// The machine is shared, so its speed drifts during a run. Each gateway
// scenario is therefore measured in rounds interleaved with the plain
// proxy: round i sends b.N/rounds requests through the plain proxy, then
// (for new keys on a store with a floor) as many through the plain proxy
// in front of the store's durability floor (floor_test.go: an upstream
// doing the same durable writes itself), then as many through the
// gateway. The reported ratios (x-plain, x-floor, floor-x-plain) are the
// medians of the rounds' ratios. req/s, p50-ms and p99-ms are the
// gateway's over all its rounds.
func BenchmarkGateway(b *testing.B) {
	ctx := context.Background()
	upstream := StartUpstream()
	defer upstream.Close()
	plain := StartPlainProxy(upstream.URL)
	defer plain.Close()
	client := Client(slices.Max(concurrency))
	defer client.CloseIdleConnections()

	type row struct {
		name       string
		clients    int
		res, plain Result
		ratio      float64
		// floor is the floor's result over the same rounds (Requests 0
		// without one); xFloor the median of gateway/floor, floorPlain
		// the median of floor/plain.
		floor              Result
		xFloor, floorPlain float64
	}
	var rows []row
	record := func(r row) {
		if len(rows) > 0 && rows[len(rows)-1].name == r.name {
			rows[len(rows)-1] = r // a longer run of the same benchmark
		} else {
			rows = append(rows, r)
		}
	}
	named := func(name string, clients int) string {
		if len(concurrency) == 1 {
			return name
		}
		return fmt.Sprintf("%s-c%d", name, clients)
	}
	median := func(v []float64) float64 {
		if len(v) == 0 {
			return 0
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	// measure runs one scenario interleaved with the plain proxy (and
	// with floorURL, the plain proxy in front of the store's floor, when
	// not empty), its load split between targets; extraCPU, when not nil,
	// reads the CPU time of the other processes the scenario runs (its
	// gateways). batches, when not nil, is the store's group-commit counts
	// (admin.Batcher): the scenario then reports the mean batch and the
	// share of batches of one.
	measure := func(name string, clients int, targets []string, extraCPU func() time.Duration, keys Keys, check func(b *testing.B, r Result), batches admin.Batcher, floorURL string) {
		name = named(name, clients)
		b.Run(name, func(b *testing.B) {
			var gw, base, fl Result
			var ratios, xFloor, floorPlain []float64
			var batches0 admin.BatchStats
			if batches != nil {
				batches0 = batches.BatchStats()
			}
			per := max(b.N / *rounds, 1)
			for done := 0; done < b.N; done += per {
				n := min(per, b.N-done)
				p := Load(ctx, client, plain.URL, FreshKeys(), n, clients)
				var f Result
				if floorURL != "" {
					f = Load(ctx, client, floorURL, FreshKeys(), n, clients)
					fl = fl.Merge(f)
				}
				var cpu0 time.Duration
				if extraCPU != nil {
					cpu0 = extraCPU()
				}
				g := LoadSplit(ctx, client, targets, keys, n, clients)
				if extraCPU != nil {
					g.CPU += extraCPU() - cpu0
				}
				base, gw = base.Merge(p), gw.Merge(g)
				if p.RPS() > 0 {
					ratios = append(ratios, g.RPS()/p.RPS())
					if floorURL != "" {
						floorPlain = append(floorPlain, f.RPS()/p.RPS())
					}
				}
				if floorURL != "" && f.RPS() > 0 {
					xFloor = append(xFloor, g.RPS()/f.RPS())
				}
			}
			report(b, gw)
			if base.Errors > 0 {
				b.Errorf("plain proxy: %d errors", base.Errors)
			}
			if fl.Errors > 0 {
				b.Errorf("floor: %d of %d requests failed", fl.Errors, fl.Requests)
			}
			ratio := median(ratios)
			b.ReportMetric(ratio, "x-plain")
			r := row{name: name, clients: clients, res: gw, plain: base, ratio: ratio}
			if floorURL != "" {
				r.floor, r.xFloor, r.floorPlain = fl, median(xFloor), median(floorPlain)
				b.ReportMetric(r.xFloor, "x-floor")
				b.ReportMetric(r.floorPlain, "floor-x-plain")
			}
			if batches != nil {
				st := batches.BatchStats()
				if n := st.Batches - batches0.Batches; n > 0 {
					b.ReportMetric(float64(st.Items-batches0.Items)/float64(n), "ops/batch")
					b.ReportMetric(float64(st.Single-batches0.Single)/float64(n), "single/batch")
				}
			}
			if check != nil {
				check(b, gw)
			}
			record(r)
		})
	}
	fresh := func(b *testing.B, r Result) {
		if r.Replayed != 0 {
			b.Errorf("%d answers to new keys were replays", r.Replayed)
		}
	}
	replayed := func(b *testing.B, r Result) {
		if r.Replayed != r.Requests {
			b.Errorf("%d of %d replay requests were replayed", r.Replayed, r.Requests)
		}
	}

	for _, c := range concurrency {
		b.Run(named("plain", c), func(b *testing.B) {
			r := Load(ctx, client, plain.URL, FreshKeys(), b.N, c)
			report(b, r)
			record(row{name: named("plain", c), clients: c, res: r, plain: r, ratio: 1})
		})
	}
	for _, s := range openStores(b, true) {
		gw, err := StartGateway(upstream.URL, s.store)
		if err != nil {
			b.Fatal(err)
		}
		var fl *floor
		if s.floor != nil {
			if fl, err = s.floor(ctx); err != nil {
				unreachable(b, s.name+" floor", err)
				fl = nil
			}
		}
		floorURL := ""
		if fl != nil {
			floorURL = fl.proxy.URL
		}
		batches, _ := s.store.(admin.Batcher)
		keys := FixedKeys(*replayKeys)
		if r := Load(ctx, client, gw.URL, keys, *replayKeys, concurrency[0]); r.Errors > 0 {
			b.Fatalf("%s: storing the replay keys: %d errors", s.name, r.Errors)
		}
		for _, c := range concurrency {
			measure(s.name+"/new", c, []string{gw.URL}, nil, FreshKeys(), fresh, batches, floorURL)
			measure(s.name+"/replay", c, []string{gw.URL}, nil, keys, replayed, batches, "")
		}
		if fl != nil {
			fl.close()
		}
		gw.Close()
		s.close()
	}

	// The fleet case: `retrysafe serve` processes sharing one PostgreSQL
	// schema, the clients split evenly between them, against the same
	// plain proxy with the same total clients. One process first (the
	// same gateway out of process), then -fleet of them.
	if *fleetSize > 0 {
		if storeURL, drop, ok := fleetStore(b); ok {
			bin, err := retrysafeBinary(b)
			if err != nil {
				drop()
				b.Fatal(err)
			}
			for _, n := range slices.Compact([]int{1, *fleetSize}) {
				f, err := startFleet(bin, n, upstream.URL, storeURL)
				if err != nil {
					drop()
					b.Fatal(err)
				}
				name := fmt.Sprintf("postgres-fleet-%d", n)
				keys := FixedKeys(*replayKeys)
				if r := LoadSplit(ctx, client, f.urls, keys, *replayKeys, concurrency[0]); r.Errors > 0 {
					f.close()
					drop()
					b.Fatalf("%s: storing the replay keys: %d errors", name, r.Errors)
				}
				for _, c := range concurrency {
					measure(name+"/new", c, f.urls, f.cpu, FreshKeys(), fresh, nil, "")
					measure(name+"/replay", c, f.urls, f.cpu, keys, replayed, nil, "")
				}
				f.close()
			}
			drop()
		}
	}

	var sb strings.Builder
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "scenario\tclients\treq/s\tp50 ms\tp99 ms\tcpu µs/req\tplain req/s (same rounds)\tplain cpu µs/req\tx plain (median of rounds)\tfloor req/s\tfloor cpu µs/req\tx floor\tfloor x plain\t\n")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.2f\t%.2f\t%d\t%.0f\t%d\t%.2f\t", r.name, r.clients, r.res.RPS(),
			float64(r.res.P50.Microseconds())/1000, float64(r.res.P99.Microseconds())/1000,
			r.res.CPUPerRequest().Microseconds(), r.plain.RPS(), r.plain.CPUPerRequest().Microseconds(), r.ratio)
		if r.floor.Requests > 0 {
			fmt.Fprintf(tw, "%.0f\t%d\t%.2f\t%.2f\t\n", r.floor.RPS(), r.floor.CPUPerRequest().Microseconds(), r.xFloor, r.floorPlain)
		} else {
			fmt.Fprintf(tw, "\t\t\t\t\n")
		}
	}
	_ = tw.Flush()
	fmt.Printf("\nclients %s, GOMAXPROCS %d, %d interleaved rounds per scenario\n%s\n",
		concurrency.String(), runtime.GOMAXPROCS(0), *rounds, sb.String())
}

// TestHarness runs every scenario briefly on the memory and SQLite stores,
// so that "go test ./..." covers the harness, and checks what it measures:
// new keys reach the upstream once each, replays never reach it.
func TestHarness(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const n, conc = 30, 8
	upstream := StartUpstream()
	defer upstream.Close()
	plain := StartPlainProxy(upstream.URL)
	defer plain.Close()
	client := Client(conc)
	defer client.CloseIdleConnections()

	if r := Load(ctx, client, plain.URL, FreshKeys(), n, conc); r.Errors != 0 || r.Requests != n || r.P99 < r.P50 || r.RPS() <= 0 {
		t.Fatalf("plain: %+v", r)
	}
	for _, s := range openStores(t, false) {
		t.Run(s.name, func(t *testing.T) {
			defer s.close()
			gw, err := StartGateway(upstream.URL, s.store)
			if err != nil {
				t.Fatal(err)
			}
			defer gw.Close()

			before := upstream.Calls()
			r := Load(ctx, client, gw.URL, FreshKeys(), n, conc)
			if r.Errors != 0 || r.Replayed != 0 {
				t.Errorf("new keys: %+v", r)
			}
			if got := upstream.Calls() - before; got != n {
				t.Errorf("new keys: the upstream got %d calls, want %d", got, n)
			}

			keys := FixedKeys(10)
			if r := Load(ctx, client, gw.URL, keys, 10, conc); r.Errors != 0 || r.Replayed != 0 {
				t.Fatalf("storing replay keys: %+v", r)
			}
			before = upstream.Calls()
			r = Load(ctx, client, gw.URL, keys, n, conc)
			if r.Errors != 0 || r.Replayed != n {
				t.Errorf("replays: %+v", r)
			}
			if got := upstream.Calls() - before; got != 0 {
				t.Errorf("replays reached the upstream %d times", got)
			}
		})
	}
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	for name, tc := range map[string]struct {
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		"empty":          {nil, 0.5, 0},
		"one":            {ms(7), 0.99, 7 * time.Millisecond},
		"median of four": {ms(1, 2, 3, 4), 0.5, 2 * time.Millisecond},
		"p99 of 100":     {ms(seq(100)...), 0.99, 99 * time.Millisecond},
		"p50 of 100":     {ms(seq(100)...), 0.5, 50 * time.Millisecond},
	} {
		if got := percentile(tc.sorted, tc.p); got != tc.want {
			t.Errorf("%s: percentile = %s, want %s", name, got, tc.want)
		}
	}
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i + 1
	}
	return out
}
