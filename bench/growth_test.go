package bench

import (
	"context"
	"database/sql"
	"encoding/hex"
	"flag"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/internal/storeurl"
	"github.com/retrysafe/retrysafe/internal/testenv"
	"github.com/retrysafe/retrysafe/store/mysql"
	"github.com/retrysafe/retrysafe/store/postgres"
	"github.com/retrysafe/retrysafe/store/sqlite"
)

var (
	growthSizes  = flag.String("growth", "", "BenchmarkGrowth: comma-separated record counts to prefill and measure at, ascending (10000,1000000,10000000); empty skips it")
	growthStores = flag.String("growth-stores", "sqlite,postgres,mysql,redis", "BenchmarkGrowth: the stores to measure")
	growthOps    = flag.Int("growth-ops", 4000, "BenchmarkGrowth: claims, and as many replays, measured at each size")
	sweepTimeout = flag.Duration("sweep-timeout", 10*time.Minute, "BenchmarkGrowth: how long the sweep may run before it is reported unfinished")
	sweepBatch   = flag.Int("sweep-batch", 0, "BenchmarkGrowth: SweepParams.BatchSize of the sweep; 0 is the store's default")
	sweepRecords = flag.Int("sweep", 0, "BenchmarkGrowth: expired records to add after the largest size and sweep while traffic runs; 0 skips the sweep")
)

const (
	growScope   = "grow-scope"
	growFP      = "grow-fingerprint"
	growClients = 32
)

// growStore is a store under BenchmarkGrowth with its bulk loader.
type growStore struct {
	store retrysafe.Store
	close func()
	// copyTemplate adds the records keyPrefix+i for i in [from, to), each
	// a copy of the completed record growScope/"template" with ExpiresAt
	// expires (Unix ns), in bulk (one statement or pipeline per chunk).
	copyTemplate func(ctx context.Context, keyPrefix string, from, to int, expires int64) error
	// size is the bytes the store's records take, on disk (SQL: table
	// and indexes) or in memory (Redis: MEMORY USAGE of a sample).
	size func(ctx context.Context, records int) (int64, error)
}

// BenchmarkGrowth measures what a store costs as it fills up (issue 31,
// item 5). It is run only when asked for, with -growth:
//
//	cd bench && go test -run '^$' -bench '^BenchmarkGrowth$' -benchtime 1x -timeout 3h . \
//	    -args -growth 10000,1000000,10000000 -sweep 1000000
//
// For each store it prefills completed records in bulk (copies of one
// record written through the store, by INSERT … SELECT over a generated
// series, or Redis pipelines) up to each size, and at each size measures,
// with 32 concurrent callers on the store API, the latency of a claim of a
// new key (then completed) and of a replay (a claim of a random prefilled
// key), and the bytes per record. With -sweep it then adds that many
// expired records and sweeps them while new-key traffic runs, reporting
// the traffic's p99 before and during the sweep.
func BenchmarkGrowth(b *testing.B) {
	if *growthSizes == "" {
		b.Skip("no -growth sizes given")
	}
	var sizes []int
	for f := range strings.SplitSeq(*growthSizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			b.Fatalf("-growth: bad size %q", f)
		}
		sizes = append(sizes, n)
	}
	if !slices.IsSorted(sizes) {
		b.Fatal("-growth: sizes must ascend")
	}
	var out strings.Builder
	tw := tabwriter.NewWriter(&out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "store\trecords\tprefill s\tbytes/record\tclaim p50 ms\tclaim p99 ms\treplay p50 ms\treplay p99 ms\tload avg\t\n")
	var sweeps []string
	for name := range strings.SplitSeq(*growthStores, ",") {
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			g := openGrowStore(b, name)
			if g == nil {
				return
			}
			defer g.close()
			writeTemplate(b, g.store)
			have := 0
			for _, size := range sizes {
				t0 := time.Now()
				const chunk = 100_000
				for from := have; from < size; from += chunk {
					if err := g.copyTemplate(ctx, "g", from, min(from+chunk, size), time.Now().Add(24*time.Hour).UnixNano()); err != nil {
						b.Fatalf("prefill to %d: %v", size, err)
					}
				}
				prefill := time.Since(t0)
				have = size
				checkPrefilled(b, g.store, size)
				bytes, err := g.size(ctx, size+1)
				if err != nil {
					b.Fatal(err)
				}
				claims, replays := growthLatencies(b, g.store, size)
				line := fmt.Sprintf("%s\t%d\t%.0f\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%s\t\n", name, size, prefill.Seconds(),
					bytes/int64(size+1), ms(percentile(claims, 0.5)), ms(percentile(claims, 0.99)),
					ms(percentile(replays, 0.5)), ms(percentile(replays, 0.99)), loadAvg())
				fmt.Fprint(tw, line)
				fmt.Fprintf(os.Stderr, "growth: %s", line)
			}
			if *sweepRecords > 0 {
				line := sweepUnderTraffic(b, g, *sweepRecords)
				sweeps = append(sweeps, name+": "+line)
				fmt.Fprintf(os.Stderr, "sweep: %s: %s\n", name, line)
			}
		})
	}
	_ = tw.Flush()
	fmt.Printf("\n%d concurrent callers, %d claims and %d replays per size\n%s\n%s\n", growClients, *growthOps, *growthOps, out.String(), strings.Join(sweeps, "\n"))
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}

// writeTemplate stores the completed record every prefilled one copies:
// the response the harness's upstream gives.
func writeTemplate(tb testing.TB, s retrysafe.Store) {
	tb.Helper()
	ctx := context.Background()
	now := time.Now()
	res, err := s.Claim(ctx, &retrysafe.ClaimParams{Scope: growScope, Key: "template", Fingerprint: growFP, Token: "tok-template", Now: now, Lease: 30 * time.Second})
	if err != nil || !res.Claimed {
		tb.Fatalf("template claim: %v %+v", err, res)
	}
	if err := s.Complete(ctx, &retrysafe.CompleteParams{Scope: growScope, Key: "template", Token: "tok-template", Now: now, TTL: 24 * time.Hour,
		Response: growResponse()}); err != nil {
		tb.Fatal(err)
	}
}

func growResponse() *retrysafe.Response {
	return &retrysafe.Response{Status: http.StatusCreated, Header: http.Header{"Content-Type": {"application/json"}},
		Body: []byte(`{"paymentId":"pay_123456","status":"succeeded"}`)}
}

// checkPrefilled asserts that the copies are records the store reads as
// its own: the first and the last prefilled key replay the template.
func checkPrefilled(tb testing.TB, s retrysafe.Store, size int) {
	tb.Helper()
	for _, key := range []string{"g0", "g" + strconv.Itoa(size-1)} {
		rec, err := s.Get(context.Background(), &retrysafe.GetParams{Scope: growScope, Key: key, Now: time.Now()})
		if err != nil || rec == nil || rec.State != retrysafe.StateCompleted || rec.Response == nil || rec.Response.Status != http.StatusCreated {
			tb.Fatalf("prefilled record %s: %v %+v", key, err, rec)
		}
	}
}

var growRun atomic.Int64

// newKeyOp claims a never used key and completes it; it returns the time
// the claim took.
func newKeyOp(ctx context.Context, s retrysafe.Store, prefix string, i int) (time.Duration, error) {
	key := prefix + strconv.Itoa(i)
	tok := "tok-" + key
	t0 := time.Now()
	res, err := s.Claim(ctx, &retrysafe.ClaimParams{Scope: growScope, Key: key, Fingerprint: growFP, Token: tok, Now: t0, Lease: 30 * time.Second})
	d := time.Since(t0)
	if err != nil {
		return d, err
	}
	if !res.Claimed {
		return d, fmt.Errorf("new key %s not claimed", key)
	}
	return d, s.Complete(ctx, &retrysafe.CompleteParams{Scope: growScope, Key: key, Token: tok, Now: time.Now(), TTL: 24 * time.Hour, Response: growResponse()})
}

// growthLatencies measures -growth-ops new-key claims, then as many
// replays of random prefilled keys, from 32 callers.
func growthLatencies(tb testing.TB, s retrysafe.Store, size int) (claims, replays []time.Duration) {
	tb.Helper()
	ctx := context.Background()
	prefix := fmt.Sprintf("n%d-%d-", time.Now().UnixNano(), growRun.Add(1))
	claims = parallelOps(tb, *growthOps, func(i int) (time.Duration, error) { return newKeyOp(ctx, s, prefix, i) })
	replays = parallelOps(tb, *growthOps, func(int) (time.Duration, error) {
		key := "g" + strconv.Itoa(rand.IntN(size))
		t0 := time.Now()
		res, err := s.Claim(ctx, &retrysafe.ClaimParams{Scope: growScope, Key: key, Fingerprint: growFP, Token: "tok-r", Now: t0, Lease: 30 * time.Second})
		d := time.Since(t0)
		if err == nil && (res.Claimed || res.Record == nil || res.Record.State != retrysafe.StateCompleted) {
			err = fmt.Errorf("replay of %s: %+v", key, res)
		}
		return d, err
	})
	return claims, replays
}

// parallelOps runs op(0..n-1) from growClients goroutines and returns the
// sorted latencies; an error fails the benchmark.
func parallelOps(tb testing.TB, n int, op func(i int) (time.Duration, error)) []time.Duration {
	tb.Helper()
	lat := make([]time.Duration, n)
	var next atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for range growClients {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				d, err := op(i)
				lat[i] = d
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
				}
			}
		})
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		tb.Fatal(err)
	}
	slices.Sort(lat)
	return lat
}

// sweepUnderTraffic adds n expired records, then runs new-key traffic from
// 32 callers for a baseline, then again while one Sweep deletes them, and
// returns a line comparing the traffic's p99 in both.
func sweepUnderTraffic(tb testing.TB, g *growStore, n int) string {
	tb.Helper()
	ctx := context.Background()
	sw, ok := retrysafe.As[admin.Sweeper](g.store)
	if !ok {
		return "no Sweeper (the server expires records itself)"
	}
	expired := time.Now().Add(-time.Hour).UnixNano()
	t0 := time.Now()
	for from := 0; from < n; from += 100_000 {
		if err := g.copyTemplate(ctx, "x", from, min(from+100_000, n), expired); err != nil {
			tb.Fatalf("expired prefill: %v", err)
		}
	}
	fill := time.Since(t0)
	// traffic runs new-key claims+completes until stop is closed.
	traffic := func(stop <-chan struct{}) []time.Duration {
		prefix := fmt.Sprintf("s%d-%d-", time.Now().UnixNano(), growRun.Add(1))
		var mu sync.Mutex
		var all []time.Duration
		var next atomic.Int64
		var wg sync.WaitGroup
		var firstErr atomic.Value
		for range growClients {
			wg.Go(func() {
				var mine []time.Duration
				for {
					select {
					case <-stop:
						mu.Lock()
						all = append(all, mine...)
						mu.Unlock()
						return
					default:
					}
					t := time.Now()
					if _, err := newKeyOp(ctx, g.store, prefix, int(next.Add(1))); err != nil {
						firstErr.CompareAndSwap(nil, err)
					}
					mine = append(mine, time.Since(t))
				}
			})
		}
		wg.Wait()
		if err, _ := firstErr.Load().(error); err != nil {
			tb.Fatal(err)
		}
		slices.Sort(all)
		return all
	}
	timed := func(d time.Duration) []time.Duration {
		stop := make(chan struct{})
		time.AfterFunc(d, func() { close(stop) })
		return traffic(stop)
	}
	before := timed(15 * time.Second)
	stop := make(chan struct{})
	var during []time.Duration
	done := make(chan struct{})
	go func() { during = traffic(stop); close(done) }()
	s0 := time.Now()
	sctx, cancel := context.WithTimeout(ctx, *sweepTimeout)
	deleted, err := sw.Sweep(sctx, &admin.SweepParams{Now: time.Now(), BatchSize: *sweepBatch})
	cancel()
	took := time.Since(s0)
	close(stop)
	<-done
	unfinished := ""
	switch {
	case err != nil && sctx.Err() != nil:
		unfinished = fmt.Sprintf(" NOT FINISHED within -sweep-timeout %s", *sweepTimeout)
	case err != nil:
		tb.Fatal(err)
	case deleted < n:
		tb.Fatalf("the sweep deleted %d records, want at least %d", deleted, n)
	}
	after := timed(15 * time.Second)
	return fmt.Sprintf("%d expired records (added in %.0f s; batch size %d, 0 = default) swept in %.1f s%s (%d deleted, load avg %s); new-key claim+complete p50/p99 ms: before %.2f/%.2f (%d ops), during %.2f/%.2f (%d ops), after %.2f/%.2f (%d ops)",
		n, fill.Seconds(), *sweepBatch, took.Seconds(), unfinished, deleted, loadAvg(),
		ms(percentile(before, 0.5)), ms(percentile(before, 0.99)), len(before),
		ms(percentile(during, 0.5)), ms(percentile(during, 0.99)), len(during),
		ms(percentile(after, 0.5)), ms(percentile(after, 0.99)), len(after))
}

// columns returns the columns of a table, in order, from query (one name
// per row).
func columns(ctx context.Context, db *sql.DB, query string, args ...any) ([]string, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var cols []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return nil, err
		}
		cols = append(cols, c)
	}
	return cols, rows.Err()
}

// copySelect returns the column list and the SELECT list of a copy of
// the template row: keyCol becomes keyExpr, the columns of times (Unix
// ns) the values of a record completed 24 h before exp (its creation and
// update 24 h before, its lease 30 s after that), the others themselves
// (quoted with q). Real records' times move together, and so do the
// copies': an index on any of them finds the expired ones first.
func copySelect(cols []string, q func(string) string, keyCol, keyExpr string, times map[string]string, exp int64) (list, sel string) {
	var l, s []string
	at := exp - int64(24*time.Hour)
	vals := map[string]int64{"expires": exp, "created": at, "updated": at, "lease": at + int64(30*time.Second)}
	for _, c := range cols {
		l = append(l, q(c))
		if c == keyCol {
			s = append(s, keyExpr)
		} else if v, ok := times[c]; ok {
			s = append(s, strconv.FormatInt(vals[v], 10))
		} else {
			s = append(s, "tpl."+q(c))
		}
	}
	return strings.Join(l, ", "), strings.Join(s, ", ")
}

var (
	sqliteTimes = map[string]string{"expires_at": "expires", "created_at": "created", "updated_at": "updated", "lease_until": "lease"}
	nsTimes     = map[string]string{"expires_at_ns": "expires", "created_at_ns": "created", "updated_at_ns": "updated", "lease_until_ns": "lease"}
)

func openGrowStore(tb testing.TB, name string) *growStore {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	suffix := randomSuffix(tb)
	dq := func(c string) string { return `"` + c + `"` }
	switch name {
	case "sqlite":
		path := filepath.Join(tb.TempDir(), "grow.db")
		s, err := sqlite.Open(ctx, path, sqlite.Config{})
		if err != nil {
			tb.Fatal(err)
		}
		db := s.DB()
		table := sqlite.DefaultTable
		return &growStore{store: s, close: func() { _ = s.Close() },
			copyTemplate: func(ctx context.Context, p string, from, to int, exp int64) error {
				cols, err := columns(ctx, db, `SELECT name FROM pragma_table_info(?)`, table)
				if err != nil {
					return err
				}
				list, sel := copySelect(cols, dq, "idem_key", "? || s.i", sqliteTimes, exp)
				_, err = db.ExecContext(ctx, `WITH RECURSIVE s(i) AS (SELECT ? UNION ALL SELECT i + 1 FROM s WHERE i + 1 < ?) `+
					`INSERT INTO `+dq(table)+` (`+list+`) SELECT `+sel+` FROM s, `+dq(table)+` AS tpl WHERE tpl.scope = ? AND tpl.idem_key = 'template'`,
					from, to, p, growScope)
				return err
			},
			size: func(ctx context.Context, _ int) (int64, error) {
				if _, err := db.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
					return 0, err
				}
				var n int64
				err := db.QueryRowContext(ctx, `SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()`).Scan(&n)
				return n, err
			}}
	case "postgres":
		pgURL := cmpEnv("RETRYSAFE_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
		u, err := url.Parse(pgURL)
		if err != nil {
			tb.Fatal(err)
		}
		schema := "rs_grow_" + suffix
		q := u.Query()
		q.Set(postgres.URLParamSchema, schema)
		u.RawQuery = q.Encode()
		s, closeStore, err := storeurl.Open(ctx, u.String())
		if err != nil {
			unreachable(tb, "PostgreSQL", err)
			return nil
		}
		pool := s.(*postgres.Store).Pool()
		table := schema + "." + postgres.DefaultTable
		return &growStore{store: s, close: func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
			_ = closeStore()
		}, copyTemplate: func(ctx context.Context, p string, from, to int, exp int64) error {
			rows, err := pool.Query(ctx, `SELECT column_name FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position`, schema, postgres.DefaultTable)
			if err != nil {
				return err
			}
			var cols []string
			for rows.Next() {
				var c string
				if err := rows.Scan(&c); err != nil {
					rows.Close()
					return err
				}
				cols = append(cols, c)
			}
			rows.Close()
			list, sel := copySelect(cols, dq, "key", "$3 || i", nsTimes, exp)
			_, err = pool.Exec(ctx, `INSERT INTO `+table+` (`+list+`) SELECT `+sel+` FROM generate_series($1::bigint, $2::bigint - 1) AS i, `+table+
				` AS tpl WHERE tpl.scope = $4 AND tpl.key = 'template'`, from, to, p, growScope)
			return err
		}, size: func(ctx context.Context, _ int) (int64, error) {
			var n int64
			if _, err := pool.Exec(ctx, `VACUUM ANALYZE `+table); err != nil {
				return 0, err
			}
			err := pool.QueryRow(ctx, `SELECT pg_total_relation_size($1::regclass)`, table).Scan(&n)
			return n, err
		}}
	case "mysql":
		myURL := cmpEnv("RETRYSAFE_MYSQL_URL", "mysql://root@127.0.0.1:3306/test")
		u, err := url.Parse(myURL)
		if err != nil {
			tb.Fatal(err)
		}
		table := "rs_grow_" + suffix
		q := u.Query()
		q.Set(mysql.URLParamTable, table)
		u.RawQuery = q.Encode()
		s, closeStore, err := storeurl.Open(ctx, u.String())
		if err != nil {
			unreachable(tb, "MySQL/MariaDB", err)
			return nil
		}
		db := s.(*mysql.Store).DB()
		bq := func(c string) string { return "`" + c + "`" }
		// digits is 0..9; five of them cross-joined make 100,000 rows.
		const digits = `(SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)`
		return &growStore{store: s, close: func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			for _, stmt := range testenv.MySQLDropStatements(table) {
				_, _ = db.ExecContext(ctx, stmt)
			}
			_ = closeStore()
		}, copyTemplate: func(ctx context.Context, p string, from, to int, exp int64) error {
			cols, err := columns(ctx, db, `SELECT column_name FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = ? ORDER BY ordinal_position`, table)
			if err != nil {
				return err
			}
			list, sel := copySelect(cols, bq, "idem_key", "CONCAT(?, s.i)", nsTimes, exp)
			_, err = db.ExecContext(ctx, "INSERT INTO `"+table+"` ("+list+") SELECT "+sel+
				" FROM (SELECT ? + a.d + 10*b.d + 100*c.d + 1000*e.d + 10000*f.d AS i FROM "+digits+" a, "+digits+" b, "+digits+" c, "+digits+" e, "+digits+" f) s, `"+table+
				"` AS tpl WHERE s.i < ? AND tpl.scope = ? AND tpl.idem_key = 'template'", p, from, to, growScope)
			return err
		}, size: func(ctx context.Context, _ int) (int64, error) {
			if _, err := db.ExecContext(ctx, "ANALYZE TABLE `"+table+"`"); err != nil {
				return 0, err
			}
			var n int64
			err := db.QueryRowContext(ctx, `SELECT data_length + index_length FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?`, table).Scan(&n)
			return n, err
		}}
	case "redis":
		addr := cmpEnv("RETRYSAFE_REDIS_ADDR", "127.0.0.1:6379")
		prefix := "retrysafe-grow:" + suffix + ":"
		s, closeStore, err := storeurl.Open(ctx, "redis://"+addr+"/0?"+storeurl.ParamPrefix+"="+url.QueryEscape(prefix))
		if err != nil {
			unreachable(tb, "Redis", err)
			return nil
		}
		c := goredis.NewClient(&goredis.Options{Addr: addr})
		// the template's key name, found once written (copyTemplate runs
		// after writeTemplate), ends in the idempotency key.
		var tplKey string
		var tpl map[string]string
		return &growStore{store: s, close: func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			unlinkPrefix(ctx, c, prefix)
			_ = c.Close()
			_ = closeStore()
		}, copyTemplate: func(ctx context.Context, p string, from, to int, exp int64) error {
			if tplKey == "" {
				keys, err := scanAll(ctx, c, prefix+"*template")
				if err != nil {
					return err
				}
				if len(keys) != 1 {
					return fmt.Errorf("redis: %d template keys %v", len(keys), keys)
				}
				tplKey = keys[0]
				if tpl, err = c.HGetAll(ctx, tplKey).Result(); err != nil {
					return err
				}
				if _, ok := tpl["expires"]; !ok {
					return fmt.Errorf("redis: template has no expires field: %v", tpl)
				}
			}
			base := redisBase(tplKey)
			fields := make(map[string]any, len(tpl))
			for k, v := range tpl {
				fields[k] = v
			}
			// The copies keep the template's expires field (its own
			// encoding, 24 h ahead); the key's TTL follows exp.
			ttl := time.Until(time.Unix(0, exp))
			for lo := from; lo < to; lo += 1000 {
				pipe := c.Pipeline()
				for i := lo; i < min(lo+1000, to); i++ {
					k := redisKey(base, p+strconv.Itoa(i))
					pipe.HSet(ctx, k, fields)
					if ttl > 0 {
						pipe.PExpire(ctx, k, ttl)
					} else {
						pipe.PExpire(ctx, k, time.Millisecond)
					}
				}
				if _, err := pipe.Exec(ctx); err != nil {
					return err
				}
			}
			return nil
		}, size: func(ctx context.Context, records int) (int64, error) {
			var sum int64
			const sample = 200
			for i := range sample {
				n, err := c.MemoryUsage(ctx, redisKey(redisBase(tplKey), "g"+strconv.Itoa(rand.IntN(records-1)))).Result()
				if err != nil {
					return 0, fmt.Errorf("redis MEMORY USAGE (sample %d): %w", i, err)
				}
				sum += n
			}
			return sum * int64(records) / sample, nil
		}}
	}
	tb.Fatalf("-growth-stores: unknown store %q", name)
	return nil
}

func scanAll(ctx context.Context, c *goredis.Client, match string) ([]string, error) {
	var out []string
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, match, 5000).Result()
		if err != nil {
			return nil, err
		}
		out = append(out, keys...)
		if cursor = next; cursor == 0 {
			return out, nil
		}
	}
}

// redisBase is the part of a record's key name before its slot tag (the
// Redis store's layout, store/redis recordKey: prefix, scope hash, ":",
// "{" 8 hex digits of FNV-1a(scope NUL key) "}", key).
func redisBase(tplKey string) string {
	return strings.TrimSuffix(tplKey, "template")[:len(tplKey)-len("template")-10]
}

// redisKey is the key name of growScope's record key under base.
func redisKey(base, key string) string {
	h := fnv.New32a()
	h.Write([]byte(growScope))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return base + "{" + hex.EncodeToString(h.Sum(nil)) + "}" + key
}
