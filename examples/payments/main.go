// Command payments runs the reference payments service of retrysafe: a mock
// payment provider on its own listener and the payments API with its
// checkout page, on SQLite (a file in a temporary directory by default) or
// PostgreSQL.
//
//	go run ./examples/payments
//	go run ./examples/payments --postgres 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
//
// See README.md for what each layer does.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/examples/payments/provider"
	"github.com/retrysafe/retrysafe/examples/payments/repo"
	"github.com/retrysafe/retrysafe/examples/payments/service"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "payments:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		listen         = flag.String("listen", "127.0.0.1:8080", "address of the payments API and checkout page")
		providerListen = flag.String("provider-listen", "127.0.0.1:8081", "address of the mock payment provider")
		dbPath         = flag.String("db", "", "SQLite database file (default: payments.db in a new temporary directory)")
		pgURL          = flag.String("postgres", os.Getenv("PAYMENTS_POSTGRES_URL"), "PostgreSQL URL; when set, used instead of SQLite (env PAYMENTS_POSTGRES_URL)")
		pgSchema       = flag.String("schema", "payments", "PostgreSQL schema for the tables")
		acceptAfter    = flag.Duration("accept-after", service.DefaultAcceptAfter, "answer 202 when the provider is slower than this")
		reconcileEvery = flag.Duration("reconcile-every", 30*time.Second, "run reconciliation this often (0: only POST /admin/reconcile)")
		settleAfter    = flag.Duration("settle-after", 15*time.Second, "reconciliation settles unknown or pending payments older than this")
		simulatedDrops = flag.Bool("simulated-drops", true, "honour X-Simulate-Drop (the checkout page's flaky-network switch)")
		providerURL    = flag.String("provider-url", "", "use the payment provider at this URL instead of starting the mock one")
		lease          = flag.Duration("lease", retrysafe.DefaultLease, "idempotency lease: how long a crashed attempt holds its key before a retry may resume it")
		onUnknown      = flag.String("on-unknown", "takeover", "an attempt whose outcome is unknown: takeover (a retry resumes it after the lease) or block (409 until resolved)")
		resolver       = flag.Bool("resolver", true, "before a takeover, ask the provider whether the charge happened (overrides --on-unknown)")
		crashAt        = flag.String("crash-at", "", "kill this process at kill points of POST /payments, for chaos tests: POINT=FRACTION[,…], POINT after-charge or after-checkpoint")
	)
	flag.Parse()
	crash, err := crashHook(*crashAt)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	db, where, cleanup, err := openDB(ctx, *pgURL, *pgSchema, *dbPath)
	if err != nil {
		return err
	}
	defer cleanup() // after db.Close: deferred calls run last in, first out
	defer db.Close()

	pspURL := *providerURL
	if pspURL == "" {
		psp := provider.New(provider.Config{})
		if pspURL, err = psp.Start(*providerListen); err != nil {
			return err
		}
		defer psp.Close()
	}

	svc, err := service.New(service.Config{
		DB: db, ProviderURL: pspURL, AcceptAfter: *acceptAfter,
		ReconcileEvery: *reconcileEvery, SettleAfter: *settleAfter, SimulatedDrops: *simulatedDrops,
		Lease: *lease, OnUnknown: retrysafe.UnknownPolicy(*onUnknown), ResolveWithProvider: *resolver,
		Crash: crash,
	})
	if err != nil {
		return err
	}
	defer svc.Close()

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: svc.Handler(), ReadHeaderTimeout: 10 * time.Second}
	fmt.Printf("payments: checkout page and API  http://%s/\n", ln.Addr())
	fmt.Printf("payments: mock provider          %s  (faults: POST %s/admin/faults)\n", pspURL, pspURL)
	fmt.Printf("payments: database               %s\n", where)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	slog.Info("payments: shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// openDB opens PostgreSQL, or SQLite at path, or SQLite in a new temporary
// directory when path is empty. cleanup removes that directory (call it
// after closing the database); it does nothing otherwise: a database given
// with --db or --postgres is kept.
func openDB(ctx context.Context, pgURL, schema, path string) (db *repo.DB, where string, cleanup func(), err error) {
	cleanup = func() {}
	if pgURL != "" {
		db, err := repo.OpenPostgres(ctx, pgURL, schema)
		return db, "PostgreSQL, schema " + schema, cleanup, err
	}
	if path == "" {
		dir, err := os.MkdirTemp("", "retrysafe-payments-")
		if err != nil {
			return nil, "", cleanup, err
		}
		cleanup = func() { _ = os.RemoveAll(dir) }
		path = filepath.Join(dir, "payments.db")
	}
	db, err = repo.OpenSQLite(ctx, path, repo.SQLiteOptions{})
	if err != nil {
		cleanup()
		return nil, "", func() {}, err
	}
	return db, "SQLite " + path, cleanup, nil
}
