package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/postgres"
)

// Benchmarks. Reproduce (see docs/performance-postgres.md):
//
//	go test -run '^$' -bench . -benchtime 3s -count 3 ./store/postgres
//
// BenchmarkRoundTrips counts, per operation, the statements the store sends
// (a pgx QueryTracer: roundtrips/op) and the request/response turns seen on
// the socket (wire-turns/op), one caller at a time. BenchmarkParallel32
// measures throughput with 32 concurrent callers, the store beside raw pgx
// statements on an identical table.

// counters counts statements (tracer) and wire turns (dialer) of a pool.
type counters struct {
	statements atomic.Int64
	turns      atomic.Int64
}

func (c *counters) reset() { c.statements.Store(0); c.turns.Store(0) }

// TraceQueryStart implements pgx.QueryTracer: one call per statement sent.
func (c *counters) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.statements.Add(1)
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer.
func (c *counters) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// turnConn counts a turn each time the client writes after it has read: a
// request/response round trip, however many messages it carries.
type turnConn struct {
	net.Conn
	c        *counters
	readLast atomic.Bool
}

func (t *turnConn) Write(b []byte) (int, error) {
	if t.readLast.Swap(false) {
		t.c.turns.Add(1)
	}
	return t.Conn.Write(b)
}

func (t *turnConn) Read(b []byte) (int, error) {
	n, err := t.Conn.Read(b)
	if n > 0 {
		t.readLast.Store(true)
	}
	return n, err
}

// benchPool returns a pool of maxConns connections that counts its
// statements and round trips.
func benchPool(b testing.TB, maxConns int32) (*pgxpool.Pool, *counters) {
	b.Helper()
	sharedPool(b)
	cfg, err := pgxpool.ParseConfig(testURL())
	if err != nil {
		b.Fatal(err)
	}
	c := &counters{}
	cfg.MaxConns, cfg.MinConns = maxConns, maxConns
	cfg.ConnConfig.Tracer = c
	// pgxpool pings a connection idle for over a second before handing it
	// out; that extra round trip is the pool's, not the store's.
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	var d net.Dialer
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		tc := &turnConn{Conn: conn, c: c}
		tc.readLast.Store(true) // the first write starts a turn
		return tc, nil
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	if err := pool.Ping(context.Background()); err != nil { // open the MinConns
		b.Fatal(err)
	}
	return pool, c
}

func benchResponse() *retrysafe.Response {
	return &retrysafe.Response{
		Status: 201,
		Header: http.Header{"Content-Type": {"application/json"}, "Location": {"/payments/pay_123"}},
		Body:   []byte(`{"id":"pay_123","amount":1000,"currency":"eur","status":"succeeded"}` + "\n"),
	}
}

func randomPrefix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// newRequest claims a fresh key and completes it: what the engine does for
// a request it has not seen.
func newRequest(ctx context.Context, s *postgres.Store, key string, now time.Time, resp *retrysafe.Response) error {
	p := &retrysafe.ClaimParams{Scope: scope, Key: key, Fingerprint: fpA, Token: retrysafe.NewToken(), Now: now, Lease: lease}
	res, err := s.Claim(ctx, p)
	if err != nil {
		return err
	}
	if !res.Claimed {
		return fmt.Errorf("claim of fresh key %q lost", key)
	}
	return s.Complete(ctx, &retrysafe.CompleteParams{Scope: scope, Key: key, Token: p.Token, Now: now, TTL: ttl, Response: resp})
}

// replay claims a completed key: what the engine does for a retry.
func replay(ctx context.Context, s *postgres.Store, key string, now time.Time) error {
	res, err := s.Claim(ctx, &retrysafe.ClaimParams{Scope: scope, Key: key, Fingerprint: fpA, Token: retrysafe.NewToken(), Now: now, Lease: lease})
	if err != nil {
		return err
	}
	if res.Claimed || res.Record.Response == nil {
		return fmt.Errorf("replay of %q was not a replay", key)
	}
	return nil
}

// BenchmarkRoundTrips reports round trips per new request (claim +
// complete; the floor is 2) and per replay (the floor is 1).
func BenchmarkRoundTrips(b *testing.B) {
	pool, c := benchPool(b, 1)
	s := newStoreOn(b, pool, newSchema(b))
	ctx := context.Background()
	resp := benchResponse()
	now := time.Now()
	prefix := randomPrefix()
	// Warm up: the connection prepares each statement once.
	if err := newRequest(ctx, s, prefix+"-warm", now, resp); err != nil {
		b.Fatal(err)
	}
	if err := replay(ctx, s, prefix+"-warm", now); err != nil {
		b.Fatal(err)
	}
	report := func(b *testing.B) {
		b.ReportMetric(float64(c.statements.Load())/float64(b.N), "roundtrips/op")
		b.ReportMetric(float64(c.turns.Load())/float64(b.N), "wire-turns/op")
	}

	b.Run("new-request", func(b *testing.B) {
		c.reset()
		for b.Loop() {
			if err := newRequest(ctx, s, fmt.Sprintf("%s-new-%d", prefix, keySeq.Add(1)), now, resp); err != nil {
				b.Fatal(err)
			}
		}
		report(b)
	})
	b.Run("replay", func(b *testing.B) {
		c.reset()
		for b.Loop() {
			if err := replay(ctx, s, prefix+"-warm", now); err != nil {
				b.Fatal(err)
			}
		}
		report(b)
	})
}

// keySeq numbers fresh keys across every run of every benchmark.
var keySeq atomic.Int64

// callers is the number of concurrent callers in BenchmarkParallel32.
const callers = 32

// benchInFlight sets Config.BatchesInFlight of the store BenchmarkParallel32
// measures (0: the default).
var benchInFlight = flag.Int("inflight", 0, "BenchmarkParallel32: the store's BatchesInFlight (0: default)")

// parallel32 runs body from exactly `callers` goroutines (SetParallelism
// multiplies by GOMAXPROCS, so GOMAXPROCS must divide 32) and reports
// throughput.
func parallel32(b *testing.B, body func(ctx context.Context, worker, i int) error) {
	procs := runtime.GOMAXPROCS(0)
	if callers%procs != 0 {
		b.Skipf("GOMAXPROCS=%d does not divide %d callers", procs, callers)
	}
	b.SetParallelism(callers / procs)
	var workers atomic.Int64
	ctx := context.Background()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		w := int(workers.Add(1))
		for i := 0; pb.Next(); i++ {
			if err := body(ctx, w, i); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
	if n := workers.Load(); n != callers {
		b.Fatalf("%d goroutines ran, want %d", n, callers)
	}
}

// BenchmarkParallel32 compares, in one run and with 32 concurrent callers
// on 32 connections, the store's new request (claim + complete) and replay
// (claim of a completed key) with raw pgx statements on an identical table:
// INSERT + UPDATE by primary key (the physical limit of a new request) and
// SELECT by primary key (the limit of a replay).
func BenchmarkParallel32(b *testing.B) {
	pool, _ := benchPool(b, callers)
	schema := newSchema(b)
	// The raw statements run on a table made by the same migration.
	s, err := postgres.New(pool, postgres.Config{Schema: schema, BatchesInFlight: *benchInFlight})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	rawStore, err := postgres.New(pool, postgres.Config{Schema: schema, Table: "raw_records"})
	if err != nil {
		b.Fatal(err)
	}
	if err := rawStore.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	rawTable := pgx.Identifier{schema, "raw_records"}.Sanitize()
	resp := benchResponse()
	now := time.Now()
	nowNs := now.UnixNano()

	// Completed keys for the replay benchmarks, one set per caller.
	const perWorker = 64
	prefix := randomPrefix()
	ctx := context.Background()
	for w := 1; w <= callers; w++ {
		for i := range perWorker {
			if err := newRequest(ctx, s, fmt.Sprintf("%s-replay-%d-%d", prefix, w, i), now, resp); err != nil {
				b.Fatal(err)
			}
		}
	}
	if _, err := pool.Exec(ctx, "INSERT INTO "+rawTable+" SELECT * FROM "+pgx.Identifier{schema, "retrysafe_records"}.Sanitize()); err != nil {
		b.Fatal(err)
	}
	header := []byte("\x01\x02\x0cContent-Type\x02\x10application/json\x08Location\x02\x11/payments/pay_123")

	b.Run("store/new-request", func(b *testing.B) {
		defer reportCPU(b, pool, readCPU(b, pool))
		defer reportBatches(b, s, s.BatchStats())
		parallel32(b, func(ctx context.Context, w, i int) error {
			return newRequest(ctx, s, fmt.Sprintf("%s-new-%d", prefix, keySeq.Add(1)), now, resp)
		})
	})
	b.Run("raw/insert+update", func(b *testing.B) {
		defer reportCPU(b, pool, readCPU(b, pool))
		parallel32(b, func(ctx context.Context, w, i int) error {
			key := fmt.Sprintf("%s-raw-%d", prefix, keySeq.Add(1))
			if _, err := pool.Exec(ctx, "INSERT INTO "+rawTable+
				" (scope, key, fingerprint, state, token, attempt, created_at_ns, updated_at_ns, lease_until_ns)"+
				" VALUES ($1, $2, $3, 'processing', $4, 1, $5, $5, $6)",
				scope, key, fpA, retrysafe.NewToken(), nowNs, nowNs+int64(lease)); err != nil {
				return err
			}
			_, err := pool.Exec(ctx, "UPDATE "+rawTable+" SET state = 'completed', updated_at_ns = $3, expires_at_ns = $4,"+
				" status = $5, header = $6, body = $7 WHERE scope = $1 AND key = $2",
				scope, key, nowNs, nowNs+int64(ttl), 201, header, resp.Body)
			return err
		})
	})
	// The same pair, with the UPDATE also sending a NOTIFY as a completion
	// would if every completion announced itself: PostgreSQL serialises the
	// commits of notifying transactions (a database-wide lock from
	// pre-commit through the WAL flush), which is why the store notifies
	// only records someone subscribed to.
	b.Run("raw/insert+update+notify", func(b *testing.B) {
		parallel32(b, func(ctx context.Context, w, i int) error {
			key := fmt.Sprintf("%s-rawn-%d", prefix, keySeq.Add(1))
			if _, err := pool.Exec(ctx, "INSERT INTO "+rawTable+
				" (scope, key, fingerprint, state, token, attempt, created_at_ns, updated_at_ns, lease_until_ns)"+
				" VALUES ($1, $2, $3, 'processing', $4, 1, $5, $5, $6)",
				scope, key, fpA, retrysafe.NewToken(), nowNs, nowNs+int64(lease)); err != nil {
				return err
			}
			_, err := pool.Exec(ctx, "WITH u AS (UPDATE "+rawTable+" SET state = 'completed', updated_at_ns = $3, expires_at_ns = $4,"+
				" status = $5, header = $6, body = $7 WHERE scope = $1 AND key = $2 RETURNING 1)"+
				" SELECT pg_notify('retrysafe_bench', $2) FROM u",
				scope, key, nowNs, nowNs+int64(ttl), 201, header, resp.Body)
			return err
		})
	})
	b.Run("store/replay", func(b *testing.B) {
		defer reportCPU(b, pool, readCPU(b, pool))
		defer reportBatches(b, s, s.BatchStats())
		parallel32(b, func(ctx context.Context, w, i int) error {
			return replay(ctx, s, fmt.Sprintf("%s-replay-%d-%d", prefix, w, i%perWorker), now)
		})
	})
	b.Run("raw/select", func(b *testing.B) {
		defer reportCPU(b, pool, readCPU(b, pool))
		// The same row and columns a replay returns, read by primary key.
		sql := "SELECT scope, key, fingerprint, state, token, attempt, created_at_ns, updated_at_ns," +
			" lease_until_ns, expires_at_ns, status, header, body FROM " + rawTable + " WHERE scope = $1 AND key = $2"
		parallel32(b, func(ctx context.Context, w, i int) error {
			var (
				sc, k, fp, st, tok    string
				attempt, status       int32
				created, updated      int64
				leaseUntil, expiresAt *int64
				h, bd                 []byte
			)
			return pool.QueryRow(ctx, sql, scope, fmt.Sprintf("%s-replay-%d-%d", prefix, w, i%perWorker)).
				Scan(&sc, &k, &fp, &st, &tok, &attempt, &created, &updated, &leaseUntil, &expiresAt, &status, &h, &bd)
		})
	})
}

// cpuTimes is the CPU time used so far by this process and by the
// PostgreSQL backends of a pool's connections.
type cpuTimes struct {
	self, backends time.Duration
	local          bool // the backends' times could be read: PostgreSQL runs on this machine
}

// readCPU reads the CPU time of this process (getrusage) and of the
// backends serving pool's idle connections (/proc/<pid>/schedstat, when
// PostgreSQL runs on this machine). BenchmarkParallel32's pool holds all
// its connections open (MinConns), so the same backends serve a whole run.
func readCPU(b *testing.B, pool *pgxpool.Pool) cpuTimes {
	var t cpuTimes
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		t.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	conns := pool.AcquireAllIdle(context.Background())
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	t.local = len(conns) > 0
	for _, c := range conns {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", c.Conn().PgConn().PID()))
		fields := strings.Fields(string(data))
		if err != nil || len(fields) == 0 {
			t.local = false
			break
		}
		ns, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			t.local = false
			break
		}
		t.backends += time.Duration(ns)
	}
	return t
}

// reportCPU reports the CPU time per operation since before: this
// process's (go-cpu-us/op: the store or pgx, and the benchmark itself)
// and, when PostgreSQL runs on this machine, its backends' (pg-cpu-us/op;
// the WAL writer, checkpointer and other background processes left out).
func reportCPU(b *testing.B, pool *pgxpool.Pool, before cpuTimes) {
	after := readCPU(b, pool)
	b.ReportMetric(float64(after.self-before.self)/float64(time.Microsecond)/float64(b.N), "go-cpu-us/op")
	if before.local && after.local {
		b.ReportMetric(float64(after.backends-before.backends)/float64(time.Microsecond)/float64(b.N), "pg-cpu-us/op")
	}
}

// reportBatches reports the mean number of operations per batch statement
// the store sent since before (ops/batch).
func reportBatches(b *testing.B, s *postgres.Store, before postgres.BatchStats) {
	after := s.BatchStats()
	if n := after.Batches - before.Batches; n > 0 {
		b.ReportMetric(float64(after.Items-before.Items)/float64(n), "ops/batch")
		b.ReportMetric(float64(after.Alone-before.Alone)/float64(b.N), "alone/op")
		b.ReportMetric(float64(after.Single-before.Single)/float64(n), "single/batch")
	}
}
