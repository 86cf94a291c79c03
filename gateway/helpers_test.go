package gateway_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/gateway"
	"github.com/retrysafe/retrysafe/internal/scopehash"
	"github.com/retrysafe/retrysafe/internal/testenv"
	"github.com/retrysafe/retrysafe/store/memory"
	"github.com/retrysafe/retrysafe/store/mysql"
	"github.com/retrysafe/retrysafe/store/postgres"
	"github.com/retrysafe/retrysafe/store/redis"
	"github.com/retrysafe/retrysafe/store/sqlite"
)

// storeKind opens a fresh, isolated store of one backend for a test. For a
// shared backend (SQLite file, PostgreSQL schema, Redis prefix), open with
// the same name returns another Store on the same records, as a second
// gateway instance would have.
type storeKind struct {
	name string
	// shared returns an opener of stores that share one set of records.
	shared func(t *testing.T) func(t *testing.T) retrysafe.Store
}

func (k storeKind) open(t *testing.T) retrysafe.Store { return k.shared(t)(t) }

func storeKinds() []storeKind {
	return []storeKind{
		{name: "memory", shared: func(t *testing.T) func(t *testing.T) retrysafe.Store {
			s := memory.New(memory.Config{})
			t.Cleanup(func() { s.Close() })
			return func(*testing.T) retrysafe.Store { return s }
		}},
		{name: "sqlite", shared: func(t *testing.T) func(t *testing.T) retrysafe.Store {
			path := filepath.Join(t.TempDir(), "retrysafe.db")
			return func(t *testing.T) retrysafe.Store {
				s, err := sqlite.Open(context.Background(), path, sqlite.Config{})
				if err != nil {
					t.Fatalf("sqlite.Open: %v", err)
				}
				t.Cleanup(func() { s.Close() })
				return s
			}
		}},
		{name: "postgres", shared: func(t *testing.T) func(t *testing.T) retrysafe.Store {
			dsn := postgresURL(t)
			schema := "gw_" + randomHex(6)
			t.Cleanup(func() { dropSchema(dsn, schema) })
			return func(t *testing.T) retrysafe.Store {
				s, err := postgres.Open(context.Background(), dsn, postgres.Config{Schema: schema})
				if err != nil {
					t.Fatalf("postgres.Open: %v", err)
				}
				t.Cleanup(func() { _ = s.Close() })
				return s
			}
		}},
		// The same store through PgBouncer in transaction mode
		// (docs/postgres.md): Subscribe polls, the schema is made and
		// dropped on PostgreSQL directly.
		{name: "postgres+pgbouncer", shared: func(t *testing.T) func(t *testing.T) retrysafe.Store {
			direct := postgresURL(t)
			dsn := pgbouncerURL(t)
			schema := "gw_" + randomHex(6)
			t.Cleanup(func() { dropSchema(direct, schema) })
			return func(t *testing.T) retrysafe.Store {
				s, err := postgres.Open(context.Background(), dsn, postgres.Config{Schema: schema, PoolMode: postgres.PoolModeTransaction})
				if err != nil {
					t.Fatalf("postgres.Open through PgBouncer: %v", err)
				}
				t.Cleanup(func() { _ = s.Close() })
				return s
			}
		}},
		{name: "mysql", shared: func(t *testing.T) func(t *testing.T) retrysafe.Store {
			dsn := mysqlURL(t)
			table := "gw_" + randomHex(6)
			t.Cleanup(func() { dropMySQLTable(dsn, table) })
			return func(t *testing.T) retrysafe.Store {
				s, err := mysql.Open(context.Background(), dsn, mysql.Config{Table: table})
				if err != nil {
					t.Fatalf("mysql.Open: %v", err)
				}
				t.Cleanup(func() { _ = s.Close() })
				return s
			}
		}},
		{name: "redis", shared: func(t *testing.T) func(t *testing.T) retrysafe.Store {
			addr := redisAddr(t)
			prefix := "retrysafe-gwtest:" + randomHex(6) + ":"
			return func(t *testing.T) retrysafe.Store {
				s, err := redis.Open(context.Background(), "redis://"+addr+"/0", redis.Config{Prefix: prefix})
				if err != nil {
					t.Fatalf("redis.Open: %v", err)
				}
				t.Cleanup(func() { s.Close() })
				return s
			}
		}},
		dynamoDBKind,
	}
}

func postgresURL(t *testing.T) string {
	t.Helper()
	dsn := os.Getenv("RETRYSAFE_POSTGRES_URL")
	if dsn == "" {
		dsn = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		testenv.Unreachable(t, "PostgreSQL", err)
	}
	conn.Close(ctx)
	return dsn
}

// pgbouncerURL returns testenv.PgBouncerURL after checking that PgBouncer
// answers (skip, or fail under CI=true).
func pgbouncerURL(t *testing.T) string {
	t.Helper()
	dsn := testenv.PgBouncerURL()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		testenv.Unreachable(t, "PgBouncer", err)
	}
	conn.Close(ctx)
	return dsn
}

func dropSchema(dsn, schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	_, _ = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
}

// mysqlURL returns RETRYSAFE_MYSQL_URL or the local default, after
// checking that the server answers.
func mysqlURL(t *testing.T) string {
	t.Helper()
	dsn := os.Getenv("RETRYSAFE_MYSQL_URL")
	if dsn == "" {
		dsn = testenv.DefaultMySQLURL
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := withMySQL(ctx, dsn, func(db *sql.DB) error { return db.PingContext(ctx) }); err != nil {
		testenv.Unreachable(t, "MySQL/MariaDB", err)
	}
	return dsn
}

// dropMySQLTable drops a MySQL store's table, its migrations table and its
// claim procedure.
func dropMySQLTable(dsn, table string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = withMySQL(ctx, dsn, func(db *sql.DB) error {
		for _, stmt := range testenv.MySQLDropStatements(table) {
			if _, err := db.ExecContext(ctx, stmt); err != nil {
				return err
			}
		}
		return nil
	})
}

// withMySQL runs fn on a *sql.DB of the server that dsn (a mysql:// URL)
// names.
func withMySQL(ctx context.Context, dsn string, fn func(*sql.DB) error) error {
	dc, _, err := mysql.ParseURL(dsn)
	if err != nil {
		return err
	}
	connector, err := mysqldriver.NewConnector(dc)
	if err != nil {
		return err
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	return fn(db)
}

func redisAddr(t *testing.T) string {
	t.Helper()
	addr := os.Getenv("RETRYSAFE_REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		testenv.Unreachable(t, "Redis", err)
	}
	c.Close()
	return addr
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func newKey() string { return "key-" + randomHex(12) }

// upstream is a payments-like test service behind the gateway.
type upstream struct {
	*httptest.Server
	calls    atomic.Int64 // requests that reached a POST/PATCH handler
	anyCalls atomic.Int64 // requests to /any, whatever the method

	mu   sync.Mutex
	seen []*http.Request // copies of received protected requests (headers only)
	// gate, when set, makes /slow wait for it to be closed.
	gate chan struct{}
	// entered receives a value each time /slow starts.
	entered chan struct{}
}

func newUpstream(t *testing.T) *upstream { return newUpstreamOn(t, nil) }

// newUpstreamOn starts the upstream on ln (nil: a new local port).
func newUpstreamOn(t *testing.T, ln net.Listener) *upstream {
	u := &upstream{entered: make(chan struct{}, 1000), gate: make(chan struct{})}
	mux := http.NewServeMux()
	charge := func(w http.ResponseWriter, r *http.Request) {
		n := u.calls.Add(1)
		body, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.seen = append(u.seen, &http.Request{Method: r.Method, URL: r.URL, Header: r.Header.Clone(), Host: r.Host})
		u.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", fmt.Sprintf("/payments/%d", n))
		w.Header().Set("X-Charge", fmt.Sprint(n))
		w.Header().Set("Set-Cookie", "session=secret")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":%d,"request":%s,"at":%q}`, n, jsonOr(body), time.Now().Format(time.RFC3339Nano))
	}
	mux.HandleFunc("POST /payments", charge)
	mux.HandleFunc("PATCH /payments/{id}", charge)
	mux.HandleFunc("POST /orders/{id}/refunds", charge)
	mux.HandleFunc("POST /other", charge)
	mux.HandleFunc("POST /slow", func(w http.ResponseWriter, r *http.Request) {
		u.entered <- struct{}{}
		<-u.gate
		charge(w, r)
	})
	mux.HandleFunc("POST /sleep/{ms}", func(w http.ResponseWriter, r *http.Request) {
		var ms int
		fmt.Sscan(r.PathValue("ms"), &ms)
		u.entered <- struct{}{}
		time.Sleep(time.Duration(ms) * time.Millisecond)
		charge(w, r)
	})
	mux.HandleFunc("POST /hangup", func(w http.ResponseWriter, r *http.Request) {
		u.calls.Add(1)
		_, _ = io.ReadAll(r.Body)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	})
	mux.HandleFunc("POST /big/{n}", func(w http.ResponseWriter, r *http.Request) {
		u.calls.Add(1)
		var n int
		fmt.Sscan(r.PathValue("n"), &n)
		w.Header().Set("Content-Type", "application/octet-stream")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(bytes.Repeat([]byte("x"), n))
	})
	mux.HandleFunc("POST /status/{code}", func(w http.ResponseWriter, r *http.Request) {
		u.calls.Add(1)
		var code int
		fmt.Sscan(r.PathValue("code"), &code)
		w.WriteHeader(code)
		fmt.Fprintf(w, "status %d\n", code)
	})
	mux.HandleFunc("GET /items", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "items")
	})
	mux.HandleFunc("/any", func(w http.ResponseWriter, r *http.Request) {
		n := u.anyCalls.Add(1)
		w.Header().Set("X-Call", fmt.Sprint(n))
		w.WriteHeader(http.StatusOK)
	})
	u.Server = httptest.NewUnstartedServer(mux)
	if ln != nil {
		u.Listener.Close()
		u.Listener = ln
	}
	u.Start()
	t.Cleanup(func() {
		u.open()
		u.Close()
	})
	return u
}

// open releases every /slow request (once).
func (u *upstream) open() {
	u.mu.Lock()
	defer u.mu.Unlock()
	select {
	case <-u.gate:
	default:
		close(u.gate)
	}
}

func (u *upstream) waitEntered(t *testing.T) {
	t.Helper()
	select {
	case <-u.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("upstream was not reached")
	}
}

func (u *upstream) lastSeen() *http.Request {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.seen) == 0 {
		return nil
	}
	return u.seen[len(u.seen)-1]
}

func jsonOr(b []byte) string {
	if json.Valid(b) && len(b) > 0 {
		return string(b)
	}
	return "null"
}

// testGateway is a gateway listening on a real socket, with its admin
// handler on another.
type testGateway struct {
	*gateway.Gateway
	URL, AdminURL string
}

func startGateway(t *testing.T, cfg gateway.Config) *testGateway {
	t.Helper()
	if cfg.Logger == nil {
		var w io.Writer = io.Discard
		if testing.Verbose() {
			w = &testWriter{t: t}
		}
		cfg.Logger = slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	g, err := gateway.New(cfg)
	if err != nil {
		t.Fatalf("gateway.New: %v", err)
	}
	srv := httptest.NewServer(g)
	admin := httptest.NewServer(g.AdminHandler())
	t.Cleanup(func() {
		srv.Close()
		admin.Close()
	})
	return &testGateway{Gateway: g, URL: srv.URL, AdminURL: admin.URL}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// result is a response read in full.
type result struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r *result) String() string { return fmt.Sprintf("%d %s", r.Status, r.Body) }

// client has a transport of its own: httptest.Server.Close closes the
// idle connections of http.DefaultTransport, and with parallel tests that
// broke another test's request that had just picked one ("http:
// CloseIdleConnections called").
var client = &http.Client{Timeout: 30 * time.Second, Transport: http.DefaultTransport.(*http.Transport).Clone()}

// testScope is the scope of send's default caller.
var testScope = scopehash.Sum("Bearer test-caller")

// send sends method path with key (none when "") and body, and reads the
// answer.
func send(t *testing.T, base, method, path, key, body string, hdr ...string) *result {
	t.Helper()
	res, err := trySend(context.Background(), base, method, path, key, body, hdr...)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return res
}

func trySend(ctx context.Context, base, method, path, key, body string, hdr ...string) (*result, error) {
	req, err := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set(retrysafe.HeaderKey, key)
	}
	// One caller unless the test says who: the gateway refuses keyed
	// requests without a scope (400 empty-scope).
	req.Header.Set("Authorization", "Bearer test-caller")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return &result{Status: resp.StatusCode, Header: resp.Header, Body: b}, nil
}

// problemType returns the slug of a problem+json answer's type.
func problemType(t *testing.T, r *result) string {
	t.Helper()
	if ct := r.Header.Get("Content-Type"); ct != retrysafe.ContentTypeProblem {
		t.Fatalf("Content-Type = %q, want %s; answer: %s", ct, retrysafe.ContentTypeProblem, r)
	}
	var p retrysafe.Problem
	if err := json.Unmarshal(r.Body, &p); err != nil {
		t.Fatalf("problem body: %v: %s", err, r.Body)
	}
	if p.Status != r.Status {
		t.Errorf("problem status %d, response status %d", p.Status, r.Status)
	}
	return p.Type[strings.LastIndex(p.Type, "/")+1:]
}

// flakyStore is a real store that can be switched off: while down, every
// call fails as an unreachable backend does (an error matching
// retrysafe.ErrStoreUnavailable). Store behaviour itself stays real.
type flakyStore struct {
	retrysafe.Store
	down atomic.Bool
}

var errDown = errors.New("connection refused (test outage)")

func (f *flakyStore) fail(op string) error {
	if f.down.Load() {
		return retrysafe.Unavailable(op, errDown)
	}
	return nil
}

func (f *flakyStore) Claim(ctx context.Context, p *retrysafe.ClaimParams) (*retrysafe.ClaimResult, error) {
	if err := f.fail("claim"); err != nil {
		return nil, err
	}
	return f.Store.Claim(ctx, p)
}

func (f *flakyStore) Get(ctx context.Context, p *retrysafe.GetParams) (*retrysafe.Record, error) {
	if err := f.fail("get"); err != nil {
		return nil, err
	}
	return f.Store.Get(ctx, p)
}

func (f *flakyStore) Ping(ctx context.Context) error {
	if err := f.fail("ping"); err != nil {
		return err
	}
	if p, ok := f.Store.(admin.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

// freeAddr returns a local address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// eventually polls cond until it holds or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// testWriter sends log lines to t.Log.
type testWriter struct{ t *testing.T }

func (w *testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
