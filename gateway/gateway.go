package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"path"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/internal/httpmethod"
	"github.com/retrysafe/retrysafe/webhook"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Defaults of [Config] fields.
const (
	// DefaultUpstreamTimeout bounds a protected request's whole upstream
	// exchange; it must be shorter than every route's lease.
	DefaultUpstreamTimeout = 20 * time.Second
	// DefaultDialTimeout bounds connecting (and the TLS handshake) to the
	// upstream.
	DefaultDialTimeout = 5 * time.Second
)

// Config configures a [Gateway]. Zero values mean the documented defaults.
type Config struct {
	// Upstream is the service behind the gateway (http or https URL).
	// Required. A path in it is prefixed to every request's path.
	Upstream *url.URL
	// Store holds the idempotency records. Required.
	Store retrysafe.Store

	// Defaults is the policy of requests that match no route.
	Defaults Policy
	// Routes are per-route policies, matched like http.ServeMux patterns
	// ("POST /payments", "POST /orders/{id}/refunds"). See [ParseConfig].
	Routes []Route

	// UpstreamTimeout bounds the upstream exchange of a protected request
	// (connect, send, response headers and body) and the wait for response
	// headers of any request. Default [DefaultUpstreamTimeout]. It must be
	// shorter than every lease: a request that times out has an unknown
	// outcome, and its key stays locked until the lease runs out.
	UpstreamTimeout time.Duration
	// DialTimeout bounds connecting to the upstream. Default
	// [DefaultDialTimeout].
	DialTimeout time.Duration
	// Transport reaches the upstream; nil means an http.Transport built
	// from the timeouts above.
	Transport http.RoundTripper

	// ReadTimeout bounds reading one whole request (line, headers and
	// body) on the listener of [Gateway.NewServer]. Default
	// [DefaultReadTimeout]; negative is an error.
	ReadTimeout time.Duration
	// WriteTimeout bounds writing one answer, from when its status line
	// starts to be written; waiting for the upstream is not counted.
	// Default [DefaultWriteTimeout]; negative is an error.
	WriteTimeout time.Duration

	// StoreTimeout bounds every store call (default 5s).
	StoreTimeout time.Duration
	// FailOpen forwards requests unprotected while the store is
	// unavailable. The default answers 503 and forwards nothing.
	FailOpen bool
	// ReadyWithoutStore keeps /readyz at 200 while the store does not
	// answer, for a gateway that runs as a sidecar: the pod stays in
	// service for its unprotected requests, and protected requests get
	// 503 on their own (fail closed; FailOpen still decides). The default
	// answers 503, which takes every route out of service.
	ReadyWithoutStore bool
	// ProcessingRetention is how long [Gateway.RunSweeper] keeps a
	// processing record after its lease ran out (a request whose outcome
	// is unknown) before it retires it: admin.SweepParams's field of
	// the same name. Zero means admin.DefaultProcessingRetention (7
	// days); negative is an error. It should exceed every lease by far.
	ProcessingRetention time.Duration

	// Logger receives one line per protected request and the gateway's
	// warnings. Nil means slog.Default().
	Logger *slog.Logger
	// Registry receives the gateway's metrics. Nil means a new registry
	// from [NewRegistry]; the admin handler serves it.
	Registry *prometheus.Registry
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// ProblemBase is the base URI of problem "type" members; "" means
	// retrysafe.DefaultProblemBase.
	ProblemBase string

	// TracerProvider, when set, traces every request with OpenTelemetry
	// (see docs/gateway.md, Tracing): a server span per request that
	// continues the client's traceparent and carries the retrysafe
	// attributes (outcome, replayed, attempt, store, a hash of the key),
	// a child span per store call, and a client span per upstream call,
	// whose context the upstream receives in traceparent. Nil (the
	// default) traces nothing and costs nothing; an incoming traceparent
	// is then forwarded upstream as it came.
	TracerProvider trace.TracerProvider
	// Propagator reads the incoming trace context and writes the
	// upstream's; nil means W3C Trace Context and Baggage.
	Propagator propagation.TextMapPropagator
	// StoreName names the store in traces (retrysafe.store): "sqlite",
	// "postgres", "redis", "memory"; "" leaves it out.
	StoreName string

	// AdminTokens, when not empty, are required by the operator page that
	// [Gateway.AdminHandler] serves at /ui/ (see [UIConfig.Tokens]).
	// With UI set to UIOn, serve the admin handler beyond loopback only
	// with tokens.
	AdminTokens []AdminToken
	// AdminHosts are the Host names the operator page answers to besides
	// loopback names and addresses (see [UIConfig.Hosts]).
	AdminHosts []string
	// UI says to whom the admin handler serves the operator page; ""
	// means [UILoopback]. The probes and /metrics are served to all.
	UI UIMode
}

// Gateway is a reverse proxy that makes the upstream's non-idempotent
// requests safe to retry. It is an http.Handler; [Gateway.AdminHandler]
// serves health, readiness and metrics.
type Gateway struct {
	cfg         Config
	logger      *slog.Logger
	registry    *prometheus.Registry
	metrics     *Metrics
	tracing     *tracing // nil: no tracing
	proxy       *httputil.ReverseProxy
	problemBase string

	ui       *UI             // the operator page; nil when the store has no Admin
	mux      *http.ServeMux  // routes; nil when there are none
	def      *routeHandler   // requests that match no route
	handlers []*routeHandler // def and every route's, in order

	resolveClient *http.Client // calls the routes' resolve URLs

	scopeLimited    *prometheus.CounterVec // new keys refused by a scope limit
	webhookFailures *prometheus.CounterVec // deliveries refused by a webhook route's verification
	readyFailing    atomic.Bool            // the last /readyz failed
	readyLog        warnLimiter            // one warning a minute while it fails
}

// routeHandler serves the requests of one route (or the defaults).
type routeHandler struct {
	pattern string // "" for the defaults
	policy  Policy
	lease   time.Duration // the effective lease; zero when bypassed
	ttl     time.Duration // the effective TTL; zero when bypassed
	h       http.Handler  // the middleware around the proxy
	limiter *scopeLimiter // nil: no scope limits

	resolver  *resolver           // nil: no resolve URL
	completer *retrysafe.Executor // resolves stranded records; nil without a resolve URL
}

func (rh *routeHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) { rh.h.ServeHTTP(w, r) }

// New validates cfg and returns a Gateway.
func New(cfg Config) (*Gateway, error) {
	if cfg.Upstream == nil {
		return nil, errors.New("gateway: Config.Upstream is required")
	}
	if cfg.Upstream.Scheme != "http" && cfg.Upstream.Scheme != "https" || cfg.Upstream.Host == "" {
		return nil, fmt.Errorf("gateway: upstream %q is not an http:// or https:// URL with a host", cfg.Upstream.Redacted())
	}
	if cfg.Store == nil {
		return nil, errors.New("gateway: Config.Store is required")
	}
	if cfg.UpstreamTimeout < 0 || cfg.DialTimeout < 0 || cfg.ReadTimeout < 0 || cfg.WriteTimeout < 0 {
		return nil, errors.New("gateway: negative timeout")
	}
	if cfg.ProcessingRetention < 0 {
		return nil, fmt.Errorf("gateway: negative ProcessingRetention %s", cfg.ProcessingRetention)
	}
	if cfg.ReadTimeout == 0 {
		cfg.ReadTimeout = DefaultReadTimeout
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.UpstreamTimeout == 0 {
		cfg.UpstreamTimeout = DefaultUpstreamTimeout
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.UI != "" {
		if _, err := ParseUIMode(string(cfg.UI)); err != nil {
			return nil, fmt.Errorf("gateway: UI %w", err)
		}
	}
	g := &Gateway{cfg: cfg, logger: cfg.Logger, registry: cfg.Registry, problemBase: cfg.ProblemBase,
		readyLog: warnLimiter{every: time.Minute}}
	if g.problemBase == "" {
		g.problemBase = retrysafe.DefaultProblemBase
	}
	if g.registry == nil {
		g.registry = NewRegistry()
	}
	var err error
	if g.metrics, err = NewMetrics(g.registry); err != nil {
		return nil, fmt.Errorf("gateway: metrics: %w", err)
	}
	if g.webhookFailures, err = newWebhookMetric(g.registry); err != nil {
		return nil, fmt.Errorf("gateway: metrics: %w", err)
	}
	if g.scopeLimited, err = newScopeLimitMetric(g.registry); err != nil {
		return nil, fmt.Errorf("gateway: metrics: %w", err)
	}
	if b, ok := retrysafe.As[admin.Batcher](cfg.Store); ok {
		if err := registerBatchMetrics(g.registry, b); err != nil {
			return nil, fmt.Errorf("gateway: metrics: %w", err)
		}
	}
	g.tracing = newTracing(&cfg, g.metrics)
	transport := cfg.Transport
	if transport == nil {
		transport = newTransport(cfg.DialTimeout, cfg.UpstreamTimeout)
	}
	g.proxy = g.newProxy(cfg.Upstream, transport)
	g.resolveClient = &http.Client{
		Transport: newTransport(cfg.DialTimeout, 0), // each call is bounded by its route's resolve timeout
		// A redirect is not the protocol's answer: it keeps the record
		// blocked, like any status but 200.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}

	if g.def, err = g.newRouteHandler("", cfg.Defaults); err != nil {
		return nil, fmt.Errorf("gateway: defaults: %w", err)
	}
	if err := g.checkLease("the default lease", g.def); err != nil {
		return nil, err
	}
	g.handlers = append(g.handlers, g.def)
	if adm, ok := retrysafe.As[admin.Admin](cfg.Store); ok {
		if err := g.registry.Register(newUnknownCollector(g, adm)); err != nil {
			return nil, fmt.Errorf("gateway: metrics: %w", err)
		}
		var patterns []string
		for _, rt := range cfg.Routes {
			if !rt.Policy.Bypass {
				patterns = append(patterns, rt.Pattern)
			}
		}
		g.ui, err = NewUI(UIConfig{
			Store: cfg.Store, Tokens: cfg.AdminTokens, Hosts: cfg.AdminHosts, Logger: cfg.Logger, Now: cfg.Now, Routes: patterns,
			Title: "gateway → " + cfg.Upstream.Redacted(), rates: &g.metrics.rates,
		})
		if err != nil {
			return nil, err
		}
	}
	g.warnEmptyScopes()
	if len(cfg.Routes) > 0 {
		g.mux = http.NewServeMux()
		for i, rt := range cfg.Routes {
			name := fmt.Sprintf("route %q", rt.Pattern)
			rh, err := g.newRouteHandler(rt.Pattern, rt.Policy)
			if err == nil {
				if err := g.checkLease(name+": lease", rh); err != nil {
					return nil, err
				}
				err = registerPattern(g.mux, muxPattern(rt.Pattern), rh)
				g.handlers = append(g.handlers, rh)
			}
			if err != nil {
				return nil, fmt.Errorf("gateway: routes[%d] (%q): %w", i, rt.Pattern, err)
			}
		}
	}
	for _, rh := range g.handlers {
		if !rh.policy.Bypass {
			for _, c := range takeoverCauses {
				g.metrics.unknownTakeovers.WithLabelValues(routeLabel(rh.pattern), c)
			}
		}
	}
	if g.ui != nil {
		g.ui.cfg.ttls = map[string]time.Duration{}
		g.ui.cfg.webhooks = map[string]webhook.Scheme{}
		for _, rh := range g.handlers {
			if !rh.policy.Bypass {
				g.ui.cfg.ttls[rh.pattern] = rh.ttl
			}
			if rh.policy.Webhook != nil {
				g.ui.cfg.webhooks[rh.pattern] = rh.policy.Webhook.Scheme
			}
		}
	}
	return g, nil
}

// warnEmptyScopes logs one warning when the defaults or a route let keyed
// requests without a scope run: their callers share one key space.
func (g *Gateway) warnEmptyScopes() {
	var where []string
	if p := g.cfg.Defaults; !p.Bypass && p.AllowEmptyScope {
		where = append(where, "defaults")
	}
	for _, rt := range g.cfg.Routes {
		if !rt.Policy.Bypass && rt.Policy.AllowEmptyScope {
			where = append(where, rt.Pattern)
		}
	}
	if len(where) > 0 {
		g.logger.Warn("empty scopes allowed: keyed requests without a scope header or cookie run, and all such callers share one key space (one caller can get another's stored answer)",
			"where", strings.Join(where, ", "))
	}
}

// checkLease enforces UpstreamTimeout < lease: an upstream call must end
// (or be given up) while its claim still holds.
func (g *Gateway) checkLease(what string, rh *routeHandler) error {
	if rh.policy.Bypass {
		return nil
	}
	if lease := rh.lease; g.cfg.UpstreamTimeout >= lease {
		return fmt.Errorf("gateway: %s (%s) must be longer than the upstream timeout (%s): lengthen the lease or shorten the upstream timeout",
			what, lease, g.cfg.UpstreamTimeout)
	}
	return nil
}

func (g *Gateway) newRouteHandler(pattern string, p Policy) (*routeHandler, error) {
	rh := &routeHandler{pattern: pattern, policy: p}
	forward := http.HandlerFunc(g.forward)
	if p.Bypass {
		rh.h = forward
		return rh, nil
	}
	mc := p.middlewareConfig(g)
	mc.RouteName = pattern // stored with each record, for the operator page
	if p.ResolveURL != nil {
		mc.Resolver = g.resolveFor(rh)
	}
	cfg, err := mc.WithDefaults()
	if err != nil {
		return nil, err
	}
	rh.lease, rh.ttl = cfg.Lease, cfg.TTL
	if p.ResolveURL != nil {
		rh.resolver = &resolver{url: p.ResolveURL, client: g.resolveClient, timeout: cfg.ResolveTimeout, maxBody: cfg.MaxResponseBody}
		cc := cfg
		cc.Store = storedScopes(cfg.Store)
		if rh.completer, err = retrysafe.NewExecutor(cc); err != nil {
			return nil, err
		}
	}
	if err := p.ScopeLimits.validate(); err != nil {
		return nil, err
	}
	if p.ScopeLimits.enabled() {
		rh.limiter = newScopeLimiter(p.ScopeLimits, cfg.TTL)
	}
	wr, err := g.webhookFor(pattern, &p, &cfg) // nil unless a webhook route (webhook.go)
	if err != nil {
		return nil, err
	}
	mw, err := retrysafe.NewMiddleware(cfg)
	if err != nil {
		return nil, err
	}
	rh.h = mw(forward)
	if wr != nil {
		rh.h = wr.wrap(rh.h, cfg.MaxBody)
	}
	return rh, nil
}

// ServeHTTP proxies r to the upstream under the policy of the route it
// matches, and logs one line for it. It sets the connection's write
// deadline to Config.WriteTimeout when the answer starts to be written (see
// [Gateway.NewServer]).
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w = g.withDeadlines(w)
	rh := g.route(r)
	info := &requestInfo{route: rh, req: r}
	sw := &statusWriter{ResponseWriter: w}
	start := time.Now()
	ctx := r.Context()
	if g.tracing != nil {
		var span trace.Span
		ctx, span = g.tracing.startServer(r, rh)
		r = r.WithContext(ctx) // for the log line's trace_id
		defer func() { endServer(span, info, sw.status) }()
	}
	defer func() {
		if info.outcome == retrysafe.OutcomeReplayed {
			g.metrics.replayed(sw.status)
		}
		g.logRequest(r, rh, info, sw, time.Since(start))
	}()
	rh.ServeHTTP(sw, r.WithContext(context.WithValue(ctx, infoKey{}, info)))
}

// route returns the handler of the route r matches, or the defaults. The
// path is cleaned for matching (as ServeMux would) so that "//payments" or
// "/x/../payments" cannot slip past a route's policy, and the method is
// matched in its canonical form so that "patch" cannot either; the request
// itself is forwarded unchanged.
func (g *Gateway) route(r *http.Request) *routeHandler {
	if g.mux == nil {
		return g.def
	}
	mr := r
	method := httpmethod.Canonical(r.Method)
	if p := cleanPath(r.URL.Path); p != r.URL.Path || r.URL.RawPath != "" || method != r.Method {
		u := *r.URL
		u.Path, u.RawPath = p, ""
		mr = new(http.Request)
		*mr = *r
		mr.URL = &u
		mr.Method = method
	}
	if h, _ := g.mux.Handler(mr); h != nil {
		if rh, ok := h.(*routeHandler); ok {
			return rh
		}
	}
	return g.def
}

// cleanPath is path.Clean that keeps a trailing slash, as ServeMux does.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if strings.HasSuffix(p, "/") && np != "/" {
		np += "/"
	}
	return np
}

// forward sends a request to the upstream. For a protected request it runs
// behind the middleware, with a context that a client hang-up does not
// cancel, bounded by the upstream timeout.
func (g *Gateway) forward(w http.ResponseWriter, r *http.Request) {
	op := retrysafe.OperationFromContext(r.Context())
	ctx := r.Context()
	info := infoFrom(ctx)
	if info != nil {
		ok, done := g.limitScope(w, info.route, op)
		if !ok {
			return
		}
		defer done()
	}
	if info != nil {
		info.forwarded = true
		info.op = op
		if op != nil && op.Attempt() > 1 && info.route != nil {
			g.takeover(info.route, op)
		}
		// A request is written only on a connection the Transport got:
		// without GotConn, nothing reached the upstream.
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
			GotConn: func(httptrace.GotConnInfo) { info.gotConn.Store(true) },
		})
	}
	if op != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, g.cfg.UpstreamTimeout)
		defer cancel()
	}
	g.proxy.ServeHTTP(w, r.WithContext(ctx))
}

// Metrics returns the gateway's metrics (the Observer given to the
// middleware).
func (g *Gateway) Metrics() *Metrics { return g.metrics }

// Registry returns the registry that holds the gateway's metrics.
func (g *Gateway) Registry() *prometheus.Registry { return g.registry }
