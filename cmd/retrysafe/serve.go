package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/gateway"
	"github.com/retrysafe/retrysafe/internal/canonicaljson"
	"github.com/retrysafe/retrysafe/internal/storeurl"
	"github.com/retrysafe/retrysafe/store/sealed"
)

const serveDescription = `
Runs a reverse proxy in front of --upstream that makes its POST and PATCH
requests safe to retry. A request with an Idempotency-Key runs once; its
response is stored and replayed byte for byte (with Idempotent-Replayed: true)
to every retry with the same key. A duplicate that arrives while the first is
running gets 409 (or waits, with --in-flight wait); the same key with another
body gets 422; a store outage answers 503 and forwards nothing.

If the upstream cannot be reached (connection refused, DNS failure), nothing
ran: the gateway answers 502 and releases the key, so a retry runs. If the
upstream may have received the request (timeout, connection reset) the
outcome is unknown: the gateway answers 502/504 and keeps the key locked
until its --lease runs out, so the operation never runs twice at once; after
that --on-unknown decides (takeover runs it again, block waits for an
operator's retrysafe keys resolve), or --resolve-url asks the upstream.

Per-route policies come from --config (YAML); flags give the defaults. The
admin listener serves /healthz, /readyz, /metrics (Prometheus) and the
operator page at /ui/ (docs/operator-page.md). SIGINT or
SIGTERM stops accepting connections, lets in-flight requests finish and store
their results, then exits 0. See docs/gateway.md.

OpenTelemetry tracing is configured by the standard environment variables
and is off when none is set: OTEL_EXPORTER_OTLP_ENDPOINT (or
OTEL_TRACES_EXPORTER=otlp|console), OTEL_EXPORTER_OTLP_PROTOCOL
(http/protobuf or grpc), OTEL_SERVICE_NAME, OTEL_BSP_*; see docs/gateway.md,
Tracing.`

const serveExamples = `  # In front of a service on port 3000, records in ./retrysafe.db:
  retrysafe serve --upstream http://127.0.0.1:3000

  # Keys required, duplicates wait for the original, shared PostgreSQL:
  retrysafe serve --upstream http://127.0.0.1:3000 --require-key --in-flight wait \
      --store postgres://retrysafe@db:5432/retrysafe

  # Stored responses encrypted at rest (keys: one ID:BASE64 per line):
  retrysafe serve --upstream http://127.0.0.1:3000 --encryption-keys-file /run/secrets/retrysafe-keys

  # Per-route policies, JSON logs on stderr:
  retrysafe serve --upstream http://127.0.0.1:3000 --config retrysafe.yaml --log-format json

  # retrysafe.yaml:
  routes:
    - match: "POST /payments"
      require_key: true
      ignore_fields: ["/meta/requestedAt"]
    - match: "POST /orders/{id}/refunds"
      in_flight: wait
      store_statuses: ["2xx", "4xx"]`

// serveOptions are the parsed flags of serve.
type serveOptions struct {
	listen, adminListen, upstream, store, config string
	ttl, lease, waitTimeout                      time.Duration
	requireKey, failOpen                         bool
	inFlight, scopeHeader                        string
	maxBody, maxResponseBody                     int64
	methods, storeStatuses, ignoreFields         string
	upstreamTimeout, dialTimeout, storeTimeout   time.Duration
	sweepInterval, shutdownTimeout               time.Duration
	processingRetention                          time.Duration
	logFormat, logLevel                          string
	encryptionKeysFile                           string
	encryptionAcceptPlaintext                    bool
	readTimeout, writeTimeout                    time.Duration
	scopeLimits                                  scopeLimitFlags
	scopeCookie, errorDialect                    string
	allowEmptyScope, allowEmptyConfig            bool
	readyWithoutStore                            bool
	acceptWeakDurability                         string
	admin                                        adminFlags
	ui                                           string
	onUnknown, resolveURL                        string
	resolveTimeout                               time.Duration
}

// flags defines serve's flags on fs. The first twelve are fixed by the
// design (scripts depend on them).
func (o *serveOptions) flags(fs *flag.FlagSet) {
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8080", "`address` the gateway listens on (port 0: any free port)")
	fs.StringVar(&o.adminListen, "admin-listen", envOr(adminListenEnv, "127.0.0.1:9090"), "`address` of /healthz, /readyz, /metrics and the operator page /ui/ (\"off\" disables; --ui says to whom the page is served); default from "+adminListenEnv+" when set, which 'retrysafe health' reads too")
	fs.StringVar(&o.upstream, "upstream", "", "`URL` of the service behind the gateway (required), e.g. http://127.0.0.1:3000")
	fs.StringVar(&o.store, "store", storeurl.Default, "idempotency store `URL`: "+storeurl.Accepted)
	fs.DurationVar(&o.ttl, "ttl", retrysafe.DefaultTTL, "how long a completed response is replayed")
	fs.DurationVar(&o.lease, "lease", retrysafe.DefaultLease, "how long a claim holds without a heartbeat; a request with an unknown outcome keeps its key this long")
	fs.BoolVar(&o.requireKey, "require-key", false, "answer 400 to a POST/PATCH without Idempotency-Key (default: pass it through unprotected)")
	fs.StringVar(&o.inFlight, "in-flight", string(retrysafe.InFlightConflict), "`mode` of a duplicate that arrives while the original runs: conflict (409 + Retry-After) or wait (then replay)")
	fs.DurationVar(&o.waitTimeout, "wait-timeout", retrysafe.DefaultWaitTimeout, "longest wait in --in-flight wait mode before answering 409")
	fs.Int64Var(&o.maxBody, "max-body", retrysafe.DefaultMaxBody, "largest request body in `bytes`; larger ones get 413 and nothing runs")
	fs.StringVar(&o.scopeHeader, "scope-header", "Authorization", "comma-separated `headers` whose values (hashed together, in order) identify the caller, so callers never share keys, e.g. Authorization,Stripe-Account")
	fs.StringVar(&o.config, "config", "", "YAML `file` of per-route policies (flags give the defaults); a file without routes is an error unless --allow-empty-config")
	fs.BoolVar(&o.allowEmptyConfig, "allow-empty-config", false, "accept a --config file that holds no routes (every request then gets the flags' policy)")
	fs.Int64Var(&o.maxResponseBody, "max-response-body", retrysafe.DefaultMaxResponseBody, "largest response body stored, in `bytes`; a larger response reaches the first caller, and the key replays a 502 problem, never a second run")
	fs.StringVar(&o.methods, "methods", "POST,PATCH", "comma-separated protected `methods`")
	fs.StringVar(&o.storeStatuses, "store-statuses", "", "comma-separated `statuses` stored and replayed (codes or classes: 2xx,4xx,409); other statuses release the key (default: every status)")
	fs.StringVar(&o.ignoreFields, "ignore-fields", "", "comma-separated JSON `pointers` left out of the body fingerprint, e.g. /meta/requestedAt")
	fs.DurationVar(&o.upstreamTimeout, "upstream-timeout", gateway.DefaultUpstreamTimeout, "bound on a protected request's upstream exchange; must be shorter than --lease. When only --lease is given, the default is two thirds of it, at most 20s (--lease 6s: 4s)")
	fs.DurationVar(&o.dialTimeout, "dial-timeout", gateway.DefaultDialTimeout, "bound on connecting to the upstream")
	fs.DurationVar(&o.storeTimeout, "store-timeout", retrysafe.DefaultStoreTimeout, "bound on each store call")
	fs.BoolVar(&o.failOpen, "fail-open", false, "forward requests unprotected while the store is down (default: 503, nothing forwarded)")
	fs.StringVar(&o.acceptWeakDurability, "accept-weak-durability", "", "comma-separated store `settings` whose weak durability is chosen on purpose, logged at info instead of warn and left out of retrysafe_store_durability_warning: "+strings.Join(durabilitySettings, ", ")+", or all")
	fs.BoolVar(&o.readyWithoutStore, "ready-without-store", false, "keep /readyz at 200 while the store is down, for a sidecar whose unprotected routes should stay in service (protected requests still get 503)")
	fs.DurationVar(&o.sweepInterval, "sweep-interval", time.Minute, "how often expired records are deleted (SQLite, PostgreSQL, memory); 0 disables")
	fs.DurationVar(&o.processingRetention, "processing-retention", admin.DefaultProcessingRetention, "how long a processing record whose lease ran out (a request with an unknown outcome) is kept before the sweeper retires it; must exceed every lease")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 30*time.Second, "on SIGINT/SIGTERM, how long in-flight requests may take to finish")
	fs.StringVar(&o.logFormat, "log-format", "json", "log `format` on stderr: json or text")
	fs.StringVar(&o.logLevel, "log-level", "info", "log `level`: debug, info, warn or error (keys and bodies are never logged at info)")
	fs.StringVar(&o.encryptionKeysFile, "encryption-keys-file", "", encryptionKeysUsage)
	fs.BoolVar(&o.encryptionAcceptPlaintext, "encryption-accept-plaintext", false, "with encryption on, also replay responses stored before it was turned on (for one TTL after turning it on)")
	fs.DurationVar(&o.readTimeout, "read-timeout", gateway.DefaultReadTimeout, "bound on reading a whole request, body included; a client that stalls mid-body is cut off and nothing runs")
	fs.StringVar(&o.scopeCookie, "scope-cookie", "", "`name` of a cookie whose value (hashed) identifies the caller too, e.g. a session cookie; other cookies do not count")
	fs.BoolVar(&o.allowEmptyScope, "allow-empty-scope", false, "let keyed requests without any scope header or cookie run, all in one shared key space (default: 400 empty-scope, nothing runs)")
	fs.StringVar(&o.errorDialect, "error-dialect", string(retrysafe.DialectProblem), "`dialect` of the gateway's own errors: problem (RFC 9457) or stripe (adds Stripe's \"error\" member, for Stripe's SDKs)")
	o.admin.define(fs)
	fs.StringVar(&o.ui, "ui", string(gateway.UILoopback), uiModeUsage)
	fs.DurationVar(&o.writeTimeout, "write-timeout", gateway.DefaultWriteTimeout, "bound on writing an answer, from its first byte (waiting for the upstream is not counted); a client that does not read is cut off")
	o.scopeLimits.define(fs)
	fs.StringVar(&o.onUnknown, "on-unknown", string(retrysafe.OnUnknownTakeover), "`policy` for a retry of a request whose outcome is unknown (upstream timeout, cut after sending): takeover (run it again once its lease ran out) or block (409 outcome-unknown until resolved: retrysafe keys resolve, the operator page)")
	fs.StringVar(&o.resolveURL, "resolve-url", "", "`URL` the gateway asks whether a request with an unknown outcome happened, before any takeover and from the sweeper: done (its answer is stored and replayed), not_done (it runs), anything else (stays blocked); see docs/gateway.md")
	fs.DurationVar(&o.resolveTimeout, "resolve-timeout", gateway.DefaultResolveTimeout, "bound on one --resolve-url call; no answer in time keeps the request blocked")
}

// durabilitySettings are the settings the stores warn about
// (admin.DurabilityWarning.Setting): Redis, PostgreSQL, MySQL/MariaDB,
// DynamoDB.
var durabilitySettings = []string{"appendonly", "fsync", "synchronous_commit", "innodb_flush_log_at_trx_commit", "sync_binlog", "global_table_replicas"}

// adminListenEnv gives --admin-listen its default. "retrysafe health"
// reads it too, so a container's HEALTHCHECK asks the port serve listens on.
const adminListenEnv = "RETRYSAFE_ADMIN_LISTEN"

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// deriveUpstreamTimeout gives --upstream-timeout a default that fits
// --lease when only --lease was set: two thirds of the lease, at most
// gateway.DefaultUpstreamTimeout (which is two thirds of the default
// lease). The third left over covers storing the result before the lease
// runs out. When both flags are set, nothing is derived: a contradictory
// pair is reported by runServe.
func (o *serveOptions) deriveUpstreamTimeout(fs *flag.FlagSet) {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["lease"] && !set["upstream-timeout"] && o.lease > 0 {
		o.upstreamTimeout = min(gateway.DefaultUpstreamTimeout, o.lease*2/3)
	}
}

// policy returns the default policy the flags describe, or a usage error
// naming the flag at fault.
func (o *serveOptions) policy() (gateway.Policy, error) {
	p := gateway.DefaultPolicy()
	p.RequireKey = o.requireKey
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"ttl", o.ttl}, {"lease", o.lease}, {"wait-timeout", o.waitTimeout}} {
		if d.v <= 0 {
			return p, usagef("--%s must be positive (got %s)", d.name, d.v)
		}
	}
	p.TTL, p.Lease, p.WaitTimeout = o.ttl, o.lease, o.waitTimeout
	switch m := retrysafe.InFlightMode(o.inFlight); m {
	case retrysafe.InFlightConflict, retrysafe.InFlightWait:
		p.InFlight = m
	default:
		return p, usagef("--in-flight %q: want conflict or wait", o.inFlight)
	}
	if o.maxBody <= 0 {
		return p, usagef("--max-body must be positive (got %d)", o.maxBody)
	}
	if o.maxResponseBody <= 0 {
		return p, usagef("--max-response-body must be positive (got %d)", o.maxResponseBody)
	}
	p.MaxBody, p.MaxResponseBody = o.maxBody, o.maxResponseBody
	p.Methods = nil
	for _, m := range splitList(o.methods) {
		p.Methods = append(p.Methods, strings.ToUpper(m))
	}
	if len(p.Methods) == 0 {
		return p, usagef("--methods is empty")
	}
	if s := splitList(o.storeStatuses); len(s) > 0 {
		set, err := gateway.ParseStatusSet(s)
		if err != nil {
			return p, usagef("--store-statuses: %v", err)
		}
		p.StoreStatuses = set
	}
	for _, ptr := range splitList(o.ignoreFields) {
		if err := canonicaljson.ValidatePointer(ptr); err != nil {
			return p, usagef("--ignore-fields: %q: %v", ptr, err)
		}
		p.IgnoreFields = append(p.IgnoreFields, ptr)
	}
	var err error
	if p.ScopeHeaders, err = gateway.ParseScopeHeaders(splitList(o.scopeHeader)); err != nil {
		return p, usagef("--scope-header: %v", err)
	}
	if p.ScopeCookie, err = gateway.ParseScopeCookie(o.scopeCookie); err != nil {
		return p, usagef("--scope-cookie: %v", err)
	}
	if len(p.ScopeHeaders) == 0 && p.ScopeCookie == "" {
		return p, usagef("--scope-header is empty and there is no --scope-cookie: name what identifies a caller (--allow-empty-scope lets requests without it share one key space)")
	}
	p.AllowEmptyScope = o.allowEmptyScope
	if p.ErrorDialect, err = gateway.ParseErrorDialect(o.errorDialect); err != nil {
		return p, usagef("--error-dialect: %v", err)
	}
	if err := o.scopeLimits.apply(&p); err != nil {
		return p, err
	}
	if p.OnUnknown, err = gateway.ParseOnUnknown(o.onUnknown); err != nil {
		return p, usagef("--on-unknown: %v", err)
	}
	if p.ResolveURL, err = gateway.ParseResolveURL(o.resolveURL); err != nil {
		return p, usagef("--resolve-url: %v", err)
	}
	if o.resolveTimeout <= 0 {
		return p, usagef("--resolve-timeout must be positive (got %s)", o.resolveTimeout)
	}
	p.ResolveTimeout = o.resolveTimeout
	return p, nil
}

func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, usagef("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, usagef("--log-format %q: want json or text", format)
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	var o serveOptions
	fs := newFlagSet("serve", "--upstream URL [flags]", serveDescription, serveExamples, stdout, stderr)
	o.flags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	o.deriveUpstreamTimeout(fs)
	if o.upstream == "" {
		return usagef("--upstream is required (the URL of the service to protect, e.g. http://127.0.0.1:3000)")
	}
	upstream, err := url.Parse(o.upstream)
	if err != nil || (upstream.Scheme != "http" && upstream.Scheme != "https") || upstream.Host == "" {
		return usagef("--upstream %q: want an http:// or https:// URL with a host", o.upstream)
	}
	logger, err := newLogger(stderr, o.logFormat, o.logLevel)
	if err != nil {
		return err
	}
	// From here on, stderr carries the log: a failure (other than a wrong
	// flag, which gets the usual usage message) is one log record too.
	defer func() {
		var ue *usageError
		if err != nil && !errors.As(err, &ue) {
			logger.Error("serve failed", "err", err)
			err = &loggedError{err: err}
		}
	}()
	if stderr == os.Stderr {
		// The gateway logs on the process's stderr: what the standard log
		// package and the store drivers print goes through the same
		// handler, so that a JSON log holds nothing but JSON. (Tests that
		// run serve in-process with their own writer leave the process's
		// loggers alone.)
		slog.SetDefault(logger)
		storeurl.RouteDriverLogs(logger)
	}
	defaults, err := o.policy()
	if err != nil {
		return err
	}
	if o.upstreamTimeout <= 0 || o.dialTimeout <= 0 || o.storeTimeout <= 0 || o.shutdownTimeout <= 0 {
		return usagef("--upstream-timeout, --dial-timeout, --store-timeout and --shutdown-timeout must be positive")
	}
	if o.readTimeout <= 0 || o.writeTimeout <= 0 {
		return usagef("--read-timeout and --write-timeout must be positive (got %s and %s)", o.readTimeout, o.writeTimeout)
	}
	if o.upstreamTimeout >= o.lease {
		return usagef("--upstream-timeout (%s) must be shorter than --lease (%s): a request whose outcome is unknown keeps its key until the lease runs out, so the lease must outlast the upstream call", o.upstreamTimeout, o.lease)
	}
	if o.processingRetention <= o.lease {
		return usagef("--processing-retention (%s) must be longer than --lease (%s): it keeps a request whose outcome is unknown for an operator to investigate after its lease ran out (default %s)", o.processingRetention, o.lease, admin.DefaultProcessingRetention)
	}
	accepted := splitList(o.acceptWeakDurability)
	for _, a := range accepted {
		if a != gateway.AcceptAllDurability && !slices.Contains(durabilitySettings, a) {
			return usagef("--accept-weak-durability %q: want %s, or all", a, strings.Join(durabilitySettings, ", "))
		}
	}
	var routes []gateway.Route
	if o.config != "" {
		if routes, err = gateway.LoadConfigFile(o.config, defaults); err != nil {
			return err
		}
		// An empty file is more often a mount or a template gone wrong
		// than a wish for the flags' defaults: say so rather than run.
		if len(routes) == 0 && !o.allowEmptyConfig {
			return fmt.Errorf("config %s: no routes (the file is empty or its routes: list is): every request would get the flags' policy; add a route, drop --config, or pass --allow-empty-config if that is what you want", o.config)
		}
		for _, rt := range routes {
			if !rt.Policy.Bypass && o.upstreamTimeout >= rt.Policy.Lease {
				return fmt.Errorf("config %s: route %q: lease (%s) must be longer than --upstream-timeout (%s)", o.config, rt.Pattern, rt.Policy.Lease, o.upstreamTimeout)
			}
			if !rt.Policy.Bypass && o.processingRetention <= rt.Policy.Lease {
				return fmt.Errorf("config %s: route %q: lease (%s) must be shorter than --processing-retention (%s)", o.config, rt.Pattern, rt.Policy.Lease, o.processingRetention)
			}
		}
	}

	adminTokens, err := loadAdminTokens(o.admin.tokenFile)
	if err != nil {
		return err
	}
	uiMode, err := gateway.ParseUIMode(o.ui)
	if err != nil {
		return usagef("--ui %v", err)
	}
	ring, err := loadKeyRing(o.encryptionKeysFile, os.Getenv)
	if err != nil {
		return err
	}
	if ring == nil && o.encryptionAcceptPlaintext {
		return usagef("--encryption-accept-plaintext needs keys (--encryption-keys-file or %s)", encryptionKeysEnv)
	}

	tracer, stopTracing, err := startTracing(ctx, stdout, logger)
	if err != nil {
		return fmt.Errorf("tracing: %w", err)
	}
	defer stopTracing() // last: after the servers, so every span has ended

	openCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	store, closeStore, err := storeurl.OpenWith(openCtx, o.store, storeurl.Options{ProcessingRetention: o.processingRetention})
	cancel()
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	defer func() {
		if err := closeStore(); err != nil {
			logger.Warn("closing the store failed", "err", err)
		}
	}()

	// Without keys the wrapper writes in the clear and refuses to replay
	// a response that was stored encrypted, rather than replay ciphertext.
	if store, err = sealed.New(store, ring, sealed.Config{AcceptPlaintext: o.encryptionAcceptPlaintext}); err != nil {
		return err
	}
	if err := checkEncryption(ctx, store, logger); err != nil {
		return err
	}
	if err := fitResponseBody(store, &defaults, routes, logger); err != nil {
		return err
	}

	gwCfg := gateway.Config{
		Upstream:        upstream,
		Store:           store,
		Defaults:        defaults,
		Routes:          routes,
		UpstreamTimeout: o.upstreamTimeout,
		DialTimeout:     o.dialTimeout,
		StoreTimeout:    o.storeTimeout,
		FailOpen:        o.failOpen,
		Logger:          logger,

		ProcessingRetention: o.processingRetention,
		ReadTimeout:         o.readTimeout,
		WriteTimeout:        o.writeTimeout,
		AdminTokens:         adminTokens,
		AdminHosts:          o.admin.hosts,
		UI:                  uiMode,
		ReadyWithoutStore:   o.readyWithoutStore,
	}
	tracingDesc := "off"
	if tracer != nil {
		gwCfg.TracerProvider, gwCfg.Propagator, gwCfg.StoreName = tracer.Provider, tracer.Propagator, storeName(o.store)
		tracingDesc = strings.Join(tracer.Exporters, ", ")
	}
	gw, err := gateway.New(gwCfg)
	if err != nil {
		return err
	}

	// One line per setting of the store's server that can lose records.
	durCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	gw.CheckDurability(durCtx, accepted)
	cancel()

	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	errorLog := slog.NewLogLogger(logger.Handler(), slog.LevelWarn)
	servers := []*http.Server{gw.NewServer()}
	listeners := []net.Listener{ln}
	if o.adminListen != "off" && o.adminListen != "" {
		aln, err := net.Listen("tcp", o.adminListen)
		if err != nil {
			ln.Close()
			return fmt.Errorf("--admin-listen: %w", err)
		}
		// With --ui loopback (the default) or off, other machines reach
		// only the probes and /metrics: no token is needed.
		if err := requireTokenBeyondLoopback("--admin-listen", aln.Addr(), adminTokens); err != nil && uiMode == gateway.UIOn {
			ln.Close()
			aln.Close()
			return err
		}
		servers = append(servers, &http.Server{
			Handler:           gw.AdminHandler(),
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       o.readTimeout,
			WriteTimeout:      o.writeTimeout,
			MaxHeaderBytes:    gateway.MaxHeaderBytes,
			ErrorLog:          errorLog,
		})
		listeners = append(listeners, aln)
	}

	fmt.Fprintf(stdout, "retrysafe: listening on http://%s, forwarding to %s (store %s)\n",
		ln.Addr(), upstream.Redacted(), storeurl.Redact(o.store))
	if len(listeners) > 1 {
		fmt.Fprintf(stdout, "retrysafe: admin on http://%s (/healthz, /readyz, /metrics; %s)\n", listeners[1].Addr(), describeUI(uiMode, adminTokens))
	}
	logger.Info("gateway started", "listen", ln.Addr().String(), "upstream", upstream.Redacted(),
		"store", storeurl.Redact(o.store), "routes", len(routes), "encryption", describeKeyRing(ring),
		"tracing", tracingDesc, "lease", o.lease.String(), "upstream_timeout", o.upstreamTimeout.String())

	serveErr := make(chan error, len(servers))
	for i, srv := range servers {
		go func() {
			if err := srv.Serve(listeners[i]); !errors.Is(err, http.ErrServerClosed) {
				serveErr <- err
			}
		}()
	}
	sweepCtx, stopSweep := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { gw.RunSweeper(sweepCtx, o.sweepInterval) })
	defer func() { stopSweep(); wg.Wait() }()

	var runErr error
	select {
	case <-ctx.Done():
		logger.Info("shutting down: finishing in-flight requests", "timeout", o.shutdownTimeout.String())
	case runErr = <-serveErr:
		logger.Error("server failed; shutting down", "err", runErr)
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.shutdownTimeout)
	defer cancel()
	var shutdownWG sync.WaitGroup
	shutdownErrs := make([]error, len(servers))
	for i, srv := range servers {
		shutdownWG.Go(func() { shutdownErrs[i] = srv.Shutdown(shutdownCtx) })
	}
	shutdownWG.Wait()
	if err := errors.Join(shutdownErrs...); err != nil {
		for _, srv := range servers {
			srv.Close()
		}
		runErr = errors.Join(runErr, fmt.Errorf("shutdown: requests still running after --shutdown-timeout %s were cut off: %w", o.shutdownTimeout, err))
	}
	if runErr == nil {
		logger.Info("gateway stopped")
	}
	return runErr
}
