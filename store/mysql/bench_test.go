package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	driver "github.com/go-sql-driver/mysql"
	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/testenv"
	"github.com/retrysafe/retrysafe/store/mysql"
)

// Benchmarks. Reproduce (see docs/performance.md):
//
//	go test -run '^$' -bench . -benchtime 2000x -count 6 ./store/mysql
//
// BenchmarkRoundTrips counts the request/response turns seen on the socket
// per operation (wire-turns/op), one caller at a time. BenchmarkParallel32
// measures 32 concurrent callers, the store beside raw prepared statements
// on an identical table in the same run.

// turns counts a turn each time a client writes after it has read: one
// request/response round trip, however many packets it carries.
var turns atomic.Int64

type turnConn struct {
	net.Conn
	readLast atomic.Bool
}

func (t *turnConn) Write(b []byte) (int, error) {
	if t.readLast.Swap(false) {
		turns.Add(1)
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

var registerTurns sync.Once

// benchDB returns a *sql.DB with n connections, all kept idle, whose
// connections count their round trips.
func benchDB(b testing.TB, n int) *sql.DB {
	b.Helper()
	sharedDB(b)
	registerTurns.Do(func() {
		var d net.Dialer
		driver.RegisterDialContext("tcp+turns", func(ctx context.Context, addr string) (net.Conn, error) {
			conn, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			tc := &turnConn{Conn: conn}
			tc.readLast.Store(true)
			return tc, nil
		})
	})
	dc, _, err := mysql.ParseURL(testenv.MySQLURL())
	if err != nil {
		b.Fatal(err)
	}
	dc.Net = "tcp+turns"
	connector, err := driver.NewConnector(dc)
	if err != nil {
		b.Fatal(err)
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	b.Cleanup(func() { db.Close() })
	return db
}

func benchResponse() *retrysafe.Response {
	return &retrysafe.Response{
		Status: 201,
		Header: http.Header{"Content-Type": {"application/json"}, "Location": {"/payments/pay_123"}},
		Body:   []byte(`{"id":"pay_123","amount":1000,"currency":"eur","status":"succeeded"}` + "\n"),
	}
}

// newRequest claims a fresh key and completes it: what the engine does for
// a request it has not seen.
func newRequest(ctx context.Context, s *mysql.Store, key string, now time.Time, resp *retrysafe.Response) error {
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
func replay(ctx context.Context, s *mysql.Store, key string, now time.Time) error {
	res, err := s.Claim(ctx, &retrysafe.ClaimParams{Scope: scope, Key: key, Fingerprint: fpA, Token: retrysafe.NewToken(), Now: now, Lease: lease})
	if err != nil {
		return err
	}
	if res.Claimed || res.Record.Response == nil {
		return fmt.Errorf("replay of %q was not a replay", key)
	}
	return nil
}

// keySeq numbers fresh keys across every run of every benchmark.
var keySeq atomic.Int64

// BenchmarkRoundTrips reports round trips per new request (claim +
// complete; the floor is 2) and per replay (the floor is 1).
func BenchmarkRoundTrips(b *testing.B) {
	db := benchDB(b, 1)
	s := newStoreOn(b, db, newTable(b))
	ctx := context.Background()
	resp := benchResponse()
	now := time.Now()
	prefix := testenv.Name("")
	// Warm up: the connection prepares each statement once.
	if err := newRequest(ctx, s, prefix+"-warm", now, resp); err != nil {
		b.Fatal(err)
	}
	if err := replay(ctx, s, prefix+"-warm", now); err != nil {
		b.Fatal(err)
	}
	b.Run("new-request", func(b *testing.B) {
		turns.Store(0)
		for b.Loop() {
			if err := newRequest(ctx, s, fmt.Sprintf("%s-new-%d", prefix, keySeq.Add(1)), now, resp); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(turns.Load())/float64(b.N), "wire-turns/op")
	})
	b.Run("replay", func(b *testing.B) {
		turns.Store(0)
		for b.Loop() {
			if err := replay(ctx, s, prefix+"-warm", now); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(turns.Load())/float64(b.N), "wire-turns/op")
	})
}

// callers is the number of concurrent callers in BenchmarkParallel32.
const callers = 32

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
}

// BenchmarkParallel32 compares, in one run and with 32 concurrent callers
// on 32 connections, the store's new request (claim + complete) and replay
// (claim of a completed key) with raw prepared statements on an identical
// table: INSERT + UPDATE by primary key (the physical limit of a new
// request, two autocommit statements, two commits) and SELECT by primary
// key (the limit of a replay).
func BenchmarkParallel32(b *testing.B) {
	db := benchDB(b, callers)
	s := newStoreOn(b, db, newTable(b))
	rawTable := newTable(b)
	newStoreOn(b, db, rawTable) // the same migration makes the raw table
	rt := "`" + rawTable + "`"
	resp := benchResponse()
	now := time.Now()
	nowNs := now.UnixNano()
	ctx := context.Background()

	// Completed keys for the replay benchmarks, one set per caller.
	const perWorker = 64
	prefix := testenv.Name("")
	for w := 1; w <= callers; w++ {
		for i := range perWorker {
			if err := newRequest(ctx, s, fmt.Sprintf("%s-replay-%d-%d", prefix, w, i), now, resp); err != nil {
				b.Fatal(err)
			}
		}
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO "+rt+" SELECT * FROM `"+s.Config().Table+"`"); err != nil {
		b.Fatal(err)
	}
	prepare := func(q string) *sql.Stmt {
		st, err := db.PrepareContext(ctx, q)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { st.Close() })
		return st
	}
	insert := prepare("INSERT INTO " + rt + " (scope, idem_key, fingerprint, state, token, attempt, created_at_ns, updated_at_ns, lease_until_ns)" +
		" VALUES (?, ?, ?, 'processing', ?, 1, ?, ?, ?)")
	update := prepare("UPDATE " + rt + " SET state = 'completed', updated_at_ns = ?, expires_at_ns = ?, status = ?, header = ?, body = ?" +
		" WHERE scope = ? AND idem_key = ?")
	sel := prepare("SELECT scope, idem_key, fingerprint, state, token, attempt, created_at_ns, updated_at_ns, lease_until_ns," +
		" expires_at_ns, status, header, body FROM " + rt + " WHERE scope = ? AND idem_key = ?")
	header := []byte("\x01\x02\x0cContent-Type\x02\x10application/json\x08Location\x02\x11/payments/pay_123")

	b.Run("store/new-request", func(b *testing.B) {
		before := s.BatchStats()
		parallel32(b, func(ctx context.Context, w, i int) error {
			return newRequest(ctx, s, fmt.Sprintf("%s-new-%d", prefix, keySeq.Add(1)), now, resp)
		})
		after := s.BatchStats()
		if n := after.Batches - before.Batches; n > 0 {
			b.ReportMetric(float64(after.Items-before.Items)/float64(n), "ops/batch")
			b.ReportMetric(float64(after.Single-before.Single)/float64(n), "single/batch")
		}
	})
	b.Run("raw/insert+update", func(b *testing.B) {
		parallel32(b, func(ctx context.Context, w, i int) error {
			key := fmt.Sprintf("%s-raw-%d", prefix, keySeq.Add(1))
			if _, err := insert.ExecContext(ctx, scope, key, fpA, retrysafe.NewToken(), nowNs, nowNs, nowNs+int64(lease)); err != nil {
				return err
			}
			_, err := update.ExecContext(ctx, nowNs, nowNs+int64(ttl), 201, header, resp.Body, scope, key)
			return err
		})
	})
	b.Run("store/replay", func(b *testing.B) {
		parallel32(b, func(ctx context.Context, w, i int) error {
			return replay(ctx, s, fmt.Sprintf("%s-replay-%d-%d", prefix, w, i%perWorker), now)
		})
	})
	b.Run("raw/select", func(b *testing.B) {
		parallel32(b, func(ctx context.Context, w, i int) error {
			var (
				sc, k, fp, st, tok               []byte
				attempt                          int64
				created, updated, lease, expires sql.NullInt64
				status                           sql.NullInt64
				h, bd                            []byte
			)
			return sel.QueryRowContext(ctx, scope, fmt.Sprintf("%s-replay-%d-%d", prefix, w, i%perWorker)).
				Scan(&sc, &k, &fp, &st, &tok, &attempt, &created, &updated, &lease, &expires, &status, &h, &bd)
		})
	})
}
