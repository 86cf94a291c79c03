package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/client"
	"github.com/retrysafe/retrysafe/examples/payments/provider"
	"github.com/retrysafe/retrysafe/examples/payments/repo"
)

// Defaults for zero Config fields.
const (
	DefaultProviderTimeout        = 10 * time.Second
	DefaultProviderAttemptTimeout = 3 * time.Second
	DefaultProviderAttempts       = 3
	DefaultProviderBackoff        = 100 * time.Millisecond
	DefaultAcceptAfter            = 2 * time.Second
	DefaultSettleAfter            = time.Minute
)

// Config configures a [Service]. Zero values mean the documented defaults.
type Config struct {
	// DB holds the business tables and the idempotency records. Required.
	DB *repo.DB
	// ProviderURL is the payment provider's base URL. Required.
	ProviderURL string

	// ProviderTimeout bounds one charge, retries included (default 10s).
	// When it passes, the payment's outcome is unknown.
	ProviderTimeout time.Duration
	// ProviderAttemptTimeout bounds each attempt until the answer's
	// headers arrive (default 3s).
	ProviderAttemptTimeout time.Duration
	// ProviderAttempts is the number of attempts per charge, first one
	// included, all with the same key (default 3).
	ProviderAttempts int
	// ProviderBackoff is the wait before the first retry, doubled after
	// each (default 100ms).
	ProviderBackoff time.Duration

	// AcceptAfter is how long POST /payments waits for the provider before
	// answering 202 Accepted with the pending payment and a Location to
	// poll (default 2s). The charge goes on in the background.
	AcceptAfter time.Duration
	// SettleAfter is how old (since its last change) an unknown or pending
	// payment must be before reconciliation settles it (default 1m), so a
	// charge still on its way is not declared missing.
	SettleAfter time.Duration
	// ReconcileEvery runs reconciliation periodically; zero disables it.
	ReconcileEvery time.Duration

	// Lease is the idempotency middleware's lease (default
	// retrysafe.DefaultLease).
	Lease time.Duration
	// OnUnknown is the middleware's policy for an attempt whose outcome
	// is unknown (its process died, its lease ran out): takeover (the
	// default: the next retry takes it over and resumes from its
	// checkpoint) or block (409 outcome-unknown until someone resolves
	// it, such as an operator with retrysafe keys resolve).
	OnUnknown retrysafe.UnknownPolicy
	// ResolveWithProvider sets the middleware's Resolver: before a retry
	// takes such an attempt over, the service asks the provider whether
	// its charge happened, and completes the record with the answer when
	// it did (see the resolve method). It overrides OnUnknown. Each
	// reconciliation run then also completes stranded records, with no
	// retry waiting ([Service.CompleteStranded]).
	ResolveWithProvider bool
	// Crash, when set, is called at the kill points of POST /payments
	// (CrashAfterCharge, CrashAfterCheckpoint), with the operation: the
	// example's command kills its own process there when asked to
	// (--crash-at), so the chaos test can crash it between the charge and
	// the completion. nil: nothing happens.
	Crash func(point string, op *retrysafe.Operation)
	// SimulatedDrops lets a request with "X-Simulate-Drop: 1" be processed
	// in full and then lose its answer (the connection is closed): the
	// checkout page's "flaky network" switch. Off by default.
	SimulatedDrops bool

	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// Service is the payments API. Create it with [New], serve [Service.Handler],
// and [Service.Close] it.
type Service struct {
	cfg      Config
	db       *repo.DB
	provider *provider.Client
	handler  http.Handler
	// completer resolves stranded records (the middleware's Config and
	// Resolver); nil without ResolveWithProvider.
	completer *retrysafe.Executor
	log       *slog.Logger

	stop    context.Context // cancelled by Close: ends background work
	stopNow context.CancelFunc
	mu      sync.Mutex
	closed  bool
	bg      sync.WaitGroup // background charges and the reconciler
}

// New returns a Service; it starts the periodic reconciler when
// cfg.ReconcileEvery is set.
func New(cfg Config) (*Service, error) {
	if cfg.DB == nil {
		return nil, errors.New("service: Config.DB is required")
	}
	if cfg.ProviderURL == "" {
		return nil, errors.New("service: Config.ProviderURL is required")
	}
	setDefault(&cfg.ProviderTimeout, DefaultProviderTimeout)
	setDefault(&cfg.ProviderAttemptTimeout, DefaultProviderAttemptTimeout)
	setDefault(&cfg.ProviderBackoff, DefaultProviderBackoff)
	setDefault(&cfg.AcceptAfter, DefaultAcceptAfter)
	setDefault(&cfg.SettleAfter, DefaultSettleAfter)
	if cfg.ProviderAttempts <= 0 {
		cfg.ProviderAttempts = DefaultProviderAttempts
	}
	setDefault(&cfg.Lease, retrysafe.DefaultLease)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Service{cfg: cfg, db: cfg.DB, log: cfg.Logger}
	s.stop, s.stopNow = context.WithCancel(context.Background())
	// Every charge goes through the retrying transport with the key derived
	// from the incoming operation: a retry reaches the provider with the
	// same key and is answered from its record, never charged again.
	s.provider = &provider.Client{
		BaseURL: cfg.ProviderURL,
		HTTP: &http.Client{Transport: &client.Transport{
			MaxAttempts:    cfg.ProviderAttempts,
			InitialBackoff: cfg.ProviderBackoff,
			MaxBackoff:     8 * cfg.ProviderBackoff,
			MaxElapsed:     cfg.ProviderTimeout,
			AttemptTimeout: cfg.ProviderAttemptTimeout,
		}},
	}
	rcfg := retrysafe.Config{
		Store:      cfg.DB.Store(),
		RequireKey: true,
		Lease:      cfg.Lease,
		OnUnknown:  cfg.OnUnknown,
		Now:        cfg.Now,
		Logger:     cfg.Logger,
	}
	if cfg.ResolveWithProvider {
		rcfg.Resolver = s.resolve
	}
	mw, err := retrysafe.NewMiddleware(rcfg)
	if err != nil {
		return nil, err
	}
	if cfg.ResolveWithProvider {
		if s.completer, err = retrysafe.NewExecutor(rcfg); err != nil {
			return nil, err
		}
	}
	s.handler = s.routes(mw)
	if cfg.ReconcileEvery > 0 {
		s.spawn(func() { s.reconcileLoop(cfg.ReconcileEvery) })
	}
	return s, nil
}

func setDefault(d *time.Duration, def time.Duration) {
	if *d <= 0 {
		*d = def
	}
}

func (s *Service) routes(protect func(http.Handler) http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST /orders", protect(http.HandlerFunc(s.createOrder)))
	mux.HandleFunc("GET /orders/{id}", s.getOrder)
	mux.Handle("POST /payments", protect(http.HandlerFunc(s.createPayment)))
	mux.HandleFunc("GET /payments/{id}", s.getPayment)
	mux.Handle("POST /payments/{id}/refunds", protect(http.HandlerFunc(s.createRefund)))
	mux.HandleFunc("POST /admin/reconcile", s.postReconcile)
	mux.Handle("GET /{$}", checkoutPage())
	mux.Handle("GET /web/", webFiles())
	var h http.Handler = mux
	if s.cfg.SimulatedDrops {
		h = simulateDrops(h)
	}
	return h
}

// Handler returns the service's HTTP handler.
func (s *Service) Handler() http.Handler { return s.handler }

// Close stops background work: charges still waiting for the provider are
// cancelled (their payments become unknown, for reconciliation) and the
// periodic reconciler ends. It waits for them; it does not close the DB.
func (s *Service) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.stopNow()
	s.bg.Wait()
}

// spawn runs fn in a goroutine that Close waits for; once Close has begun
// it runs fn at once instead (its context is already cancelled, so it ends
// quickly).
func (s *Service) spawn(fn func()) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		fn()
		return
	}
	s.bg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.bg.Done()
		fn()
	}()
}

// operationKey identifies the idempotent operation in the business tables:
// a hash of its scope and key (the key itself is not stored there).
func operationKey(op *retrysafe.Operation) string {
	sum := sha256.Sum256([]byte(op.Scope() + "\n" + op.Key()))
	return hex.EncodeToString(sum[:])
}

// errProblem rolls a transaction back when the request ends in a problem.
var errProblem = errors.New("service: problem answer")
