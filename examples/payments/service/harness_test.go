package service_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/retrysafe/retrysafe/examples/payments/provider"
	"github.com/retrysafe/retrysafe/examples/payments/repo"
	"github.com/retrysafe/retrysafe/examples/payments/service"
	"github.com/retrysafe/retrysafe/internal/testenv"
)

const defaultPostgresURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// postgresURL returns the test database URL, skipping the test when it is
// unreachable (a failure under CI=true).
func postgresURL(t testing.TB) string {
	t.Helper()
	url := os.Getenv("RETRYSAFE_POSTGRES_URL")
	if url == "" {
		url = defaultPostgresURL
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		testenv.Unreachable(t, "PostgreSQL at "+url+" (set RETRYSAFE_POSTGRES_URL)", err)
	}
	_ = conn.Close(ctx)
	return url
}

// backend opens a database of one kind for a test, isolated: its own SQLite
// file, or its own PostgreSQL schema (dropped at the end).
type backend struct {
	name string
	open func(t testing.TB) func(ctx context.Context) (*repo.DB, error)
}

var backends = []backend{
	{"sqlite", func(t testing.TB) func(ctx context.Context) (*repo.DB, error) {
		path := filepath.Join(t.TempDir(), "payments.db")
		// synchronous=NORMAL: the tests restart the service, never the
		// machine, and an fsync per commit costs milliseconds here.
		opts := repo.SQLiteOptions{ProcessCrashSafeOnly: true}
		return func(ctx context.Context) (*repo.DB, error) { return repo.OpenSQLite(ctx, path, opts) }
	}},
	{"postgres", func(t testing.TB) func(ctx context.Context) (*repo.DB, error) {
		url := postgresURL(t)
		schema := "payments_test_" + randomHex(6)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if conn, err := pgx.Connect(ctx, url); err == nil {
				_, _ = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
				_ = conn.Close(ctx)
			}
		})
		return func(ctx context.Context) (*repo.DB, error) { return repo.OpenPostgres(ctx, url, schema) }
	}},
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// env is a running provider and service on one database.
type env struct {
	t        testing.TB
	psp      *provider.Server
	open     func(ctx context.Context) (*repo.DB, error)
	cfg      service.Config
	addr     string
	url      string
	http     *http.Client
	mu       sync.Mutex
	db       *repo.DB
	svc      *service.Service
	srv      *http.Server
	serveErr chan error
}

// newEnv starts a provider and a service. tune adjusts the service config.
func newEnv(t testing.TB, b backend, pcfg provider.Config, tune func(*service.Config)) *env {
	t.Helper()
	e := &env{t: t, open: b.open(t), psp: provider.New(pcfg)}
	pspURL, err := e.psp.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.psp.Close() })
	e.cfg = service.Config{
		ProviderURL:            pspURL,
		ProviderTimeout:        3 * time.Second,
		ProviderAttemptTimeout: time.Second,
		ProviderBackoff:        20 * time.Millisecond,
		AcceptAfter:            10 * time.Second,
		Logger:                 slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if tune != nil {
		tune(&e.cfg)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.addr = ln.Addr().String()
	e.url = "http://" + e.addr
	e.http = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 30 * time.Second}
	e.start(ln)
	t.Cleanup(e.stop)
	return e
}

// start opens the database and serves a new service on ln.
func (e *env) start(ln net.Listener) {
	e.t.Helper()
	db, err := e.open(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	cfg := e.cfg
	cfg.DB = db
	svc, err := service.New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	srv := &http.Server{Handler: svc.Handler()}
	e.mu.Lock()
	e.db, e.svc, e.srv = db, svc, srv
	e.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
}

// stop kills the HTTP server (connections cut, answers lost), lets the
// handlers already running finish, and closes the service and database.
func (e *env) stop() {
	e.mu.Lock()
	srv, svc, db := e.srv, e.svc, e.db
	e.srv = nil
	e.mu.Unlock()
	if srv == nil {
		return
	}
	_ = srv.Close()
	svc.Close()
	// http.Server.Close does not wait for handlers: Shutdown (on a closed
	// server) does.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = srv.Shutdown(ctx)
	db.Close()
}

// restart stops the service and opens a new one on the same database and
// address, as a process restart would.
func (e *env) restart() {
	e.t.Helper()
	e.stop()
	var ln net.Listener
	var err error
	for range 100 {
		if ln, err = net.Listen("tcp", e.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		e.t.Fatalf("restart: listen again on %s: %v", e.addr, err)
	}
	e.start(ln)
}

func (e *env) service() *service.Service {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.svc
}

func (e *env) database() *repo.DB {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.db
}

// answer is one HTTP answer.
type answer struct {
	Status   int
	Header   http.Header
	Body     []byte
	Replayed bool
}

func (a *answer) decode(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(a.Body, v); err != nil {
		t.Fatalf("decoding %d %s: %v", a.Status, a.Body, err)
	}
}

// post sends one POST with key (none when empty).
func (e *env) post(ctx context.Context, path, key string, body any) (*answer, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url+path, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	return e.do(req)
}

func (e *env) get(ctx context.Context, path string) (*answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.url+path, nil)
	if err != nil {
		return nil, err
	}
	return e.do(req)
}

func (e *env) do(req *http.Request) (*answer, error) {
	resp, err := e.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return &answer{Status: resp.StatusCode, Header: resp.Header, Body: body,
		Replayed: resp.Header.Get("Idempotent-Replayed") == "true"}, nil
}

// mustPost posts and fails the test on a transport error.
func (e *env) mustPost(path, key string, body any) *answer {
	e.t.Helper()
	a, err := e.post(context.Background(), path, key, body)
	if err != nil {
		e.t.Fatalf("POST %s: %v", path, err)
	}
	return a
}

func (e *env) mustGet(path string) *answer {
	e.t.Helper()
	a, err := e.get(context.Background(), path)
	if err != nil {
		e.t.Fatalf("GET %s: %v", path, err)
	}
	return a
}

type orderJSON struct {
	ID       string        `json:"id"`
	Amount   int64         `json:"amount"`
	Currency string        `json:"currency"`
	Status   string        `json:"status"`
	Payments []paymentJSON `json:"payments"`
}

type paymentJSON struct {
	ID       string `json:"id"`
	OrderID  string `json:"orderId"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	Status   string `json:"status"`
	ChargeID string `json:"chargeId"`
	Refunded int64  `json:"refunded"`
}

type problemJSON struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
}

// createOrder creates an order and returns its id.
func (e *env) createOrder(amount int64, currency string) string {
	e.t.Helper()
	a := e.mustPost("/orders", randomHex(16), map[string]any{"amount": amount, "currency": currency})
	if a.Status != http.StatusCreated {
		e.t.Fatalf("POST /orders: %d %s", a.Status, a.Body)
	}
	var o orderJSON
	a.decode(e.t, &o)
	return o.ID
}

// payBody is a POST /payments body.
func payBody(orderID string, amount int64, currency string) map[string]any {
	return map[string]any{"orderId": orderID, "amount": amount, "currency": currency}
}

// waitPayment polls GET /payments/{id} until the payment is in a final
// status, or fails the test after 20s.
func (e *env) waitPayment(id string) paymentJSON {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var p paymentJSON
		e.mustGet("/payments/"+id).decode(e.t, &p)
		if p.Status == "succeeded" || p.Status == "failed" || p.Status == "refunded" || time.Now().After(deadline) {
			return p
		}
		time.Sleep(10 * time.Millisecond)
	}
}
