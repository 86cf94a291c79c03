package torture

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/internal/storeurl"
)

// Mutations: deliberately broken behaviour the checker must catch. They
// change what the gateways do as seen from outside, without touching
// production code.
const (
	// MutationDropReplayHeader removes a stored header from every replay
	// on its way to the client: replays are no longer byte-identical.
	MutationDropReplayHeader = "drop-replay-header"
	// MutationStripKey removes the Idempotency-Key on the way to the
	// gateway, which then forwards requests unprotected.
	MutationStripKey = "strip-key"
	// MutationSharedScope starts the gateways with --scope-header naming a
	// header no client sends and --allow-empty-scope, so every tenant
	// shares the empty scope, and gives the same key of every tenant the
	// same body.
	MutationSharedScope = "shared-scope"
	// MutationDishonestResolver makes the upstream's resolve URL answer
	// not_done about every key, effect or not (resolve mode); its fence
	// stays: the takeovers it lets run (attempt N+1, after a retry's or
	// the completer's not_done) run operations that already ran.
	MutationDishonestResolver = "dishonest-resolver"
	// MutationSilentCut makes the upstream drop 3% of its answers after
	// acting, by closing the connection, with no fault injected: the
	// gateways report the unknown outcome, but no injected event explains
	// the repeats that follow.
	MutationSilentCut = "silent-cut"
)

// Config configures a run.
type Config struct {
	// Binary is the retrysafe command to run; required (see BuildBinary).
	Binary string
	// Store is the --store URL every gateway uses (before its store link
	// is put behind a proxy): sqlite:PATH, postgres://…, redis://…, each
	// isolated for the run (own file, schema or key prefix).
	Store string
	// Gateways is the number of gateway processes; default 3.
	Gateways int
	// Clients is the number of concurrent clients; default 12.
	Clients int
	// Tenants is the number of callers with their own Authorization;
	// default 3.
	Tenants int
	// Duration bounds the run; MaxOps, when not zero, ends it earlier
	// after that many requests.
	Duration time.Duration
	MaxOps   int64
	// Lease is the gateways' --lease; default 3s, so that takeovers happen
	// within a short run.
	Lease time.Duration
	// Faults turns on fault injection.
	Faults bool
	// Mutation breaks something on purpose (see the Mutation constants).
	Mutation string
	// Resolve runs the gateways with a resolve URL (--resolve-url) that
	// the upstream answers from its own effect log, and the completer
	// every second: no operation may run twice.
	Resolve bool
	// Dir receives the gateways' logs; required.
	Dir string
	// Logf reports progress; nil discards it.
	Logf func(format string, args ...any)
}

// upstreamTimeout is the gateways' --upstream-timeout; the upstream's slow
// answers take longer.
const upstreamTimeout = time.Second

// storeTimeout is the gateways' --store-timeout.
const storeTimeout = time.Second

// CheckOptionsFor returns the options that judge a run with params p:
// its lease, the gateways' timeouts and its mode.
func CheckOptionsFor(p Params) CheckOptions {
	return CheckOptions{Lease: p.Lease, UpstreamTimeout: p.UpstreamTimeout, StoreTimeout: p.StoreTimeout, Resolve: p.Resolve}
}

func (cfg *Config) lease() time.Duration {
	if cfg.Lease == 0 {
		return 3 * time.Second
	}
	return cfg.Lease
}

// Run runs the torture and returns its history.
func Run(ctx context.Context, cfg Config) (*History, error) {
	if cfg.Binary == "" || cfg.Dir == "" || cfg.Store == "" {
		return nil, errors.New("torture: Binary, Store and Dir are required")
	}
	if cfg.Gateways == 0 {
		cfg.Gateways = 3
	}
	if cfg.Clients == 0 {
		cfg.Clients = 12
	}
	if cfg.Tenants == 0 {
		cfg.Tenants = 3
	}
	if cfg.Duration == 0 {
		cfg.Duration = 30 * time.Second
	}
	logf := cfg.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	rec := &recorder{}
	rec.h.Params = Params{Store: storeKind(cfg.Store), Gateways: cfg.Gateways, Clients: cfg.Clients, Tenants: cfg.Tenants,
		Duration: cfg.Duration, MaxOps: cfg.MaxOps, Lease: cfg.lease(), Faults: cfg.Faults, Mutation: cfg.Mutation,
		Resolve: cfg.Resolve, UpstreamTimeout: upstreamTimeout, StoreTimeout: storeTimeout}
	if cfg.Resolve {
		rec.h.Params.SweepInterval = sweepInterval
	}

	ucfg := upstreamConfig{ErrorRate: 0.15, Delay: 150 * time.Millisecond, SlowRate: slowRate(cfg.Faults), Slow: upstreamTimeout + 500*time.Millisecond,
		Fence: cfg.Resolve, Dishonest: cfg.Mutation == MutationDishonestResolver}
	if cfg.Mutation == MutationSilentCut {
		ucfg.SilentCutRate = 0.03
	}
	up, err := startUpstream(ucfg, rec, cfg.Gateways)
	if err != nil {
		return nil, err
	}
	defer up.close()
	lk := newLinks()
	defer lk.close()

	f := &faulter{rec: rec, log: logf}
	var gws []*gatewayProc
	defer func() {
		for _, g := range gws {
			g.close()
		}
	}()
	var urls, modes []string
	for i := range cfg.Gateways {
		upProxy, err := lk.proxy(fmt.Sprintf("upstream-%d", i), up.addrs[i])
		if err != nil {
			return nil, err
		}
		storeURL, storeProxy, err := proxiedStore(lk, i, cfg.Store)
		if err != nil {
			return nil, err
		}
		mode := string(retrysafe.InFlightConflict)
		if i%2 == 1 {
			mode = string(retrysafe.InFlightWait)
		}
		flags := []string{
			"--upstream", "http://" + upProxy.Listen, "--store", storeURL,
			"--lease", cfg.lease().String(), "--in-flight", mode, "--wait-timeout", "2s", "--ttl", "1h",
			"--upstream-timeout", upstreamTimeout.String(), "--dial-timeout", "500ms", "--store-timeout", storeTimeout.String(),
			"--shutdown-timeout", "20s", "--log-level", "warn",
		}
		if cfg.Mutation == MutationSharedScope {
			flags = append(flags, "--scope-header", "X-Torture-Nobody", "--allow-empty-scope")
		}
		if cfg.Resolve {
			flags = append(flags, "--resolve-url", "http://"+upProxy.Listen+"/resolve", "--resolve-timeout", storeTimeout.String(),
				"--sweep-interval", sweepInterval.String())
		}
		g, err := newGateway(i, cfg.Binary, filepath.Join(cfg.Dir, fmt.Sprintf("gateway-%d.log", i)), flags)
		if err != nil {
			return nil, err
		}
		gws = append(gws, g)
		// One at a time: the first applies the store's migrations.
		if err := g.start(ctx); err != nil {
			return nil, err
		}
		clientProxy, err := lk.proxy(fmt.Sprintf("client-%d", i), g.listen)
		if err != nil {
			return nil, err
		}
		f.client = append(f.client, clientProxy)
		f.upstream = append(f.upstream, upProxy)
		f.store = append(f.store, storeProxy)
		urls = append(urls, "http://"+clientProxy.Listen)
		modes = append(modes, mode)
	}
	f.gateways = gws
	if cfg.MaxOps > 0 {
		logf("torture: %d gateways on %s up; running %d requests", cfg.Gateways, rec.h.Params.Store, cfg.MaxOps)
	} else {
		logf("torture: %d gateways on %s up; running %s", cfg.Gateways, rec.h.Params.Store, cfg.Duration)
	}

	start := time.Now()
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var clockStep time.Duration
	wg.Go(func() { clockStep = watchClock(runCtx) })
	if cfg.Faults {
		wg.Go(func() { f.linkFaults(runCtx) })
		wg.Go(func() { f.processFaults(runCtx) })
	}
	c := &clients{rec: rec, cfg: clientConfig{
		Clients: cfg.Clients, Tenants: cfg.Tenants, Gateways: urls, Modes: modes,
		Deadline: start.Add(cfg.Duration), MaxOps: cfg.MaxOps, SharedOps: cfg.Mutation == MutationSharedScope,
		Transport: mutationTransport(cfg.Mutation), TenantKeys: cfg.Resolve, RetryAfter: cfg.Mutation == MutationSilentCut || cfg.Mutation == MutationDishonestResolver,
	}}
	c.run(ctx)
	stop()
	wg.Wait()
	rec.h.Params.Duration = time.Since(start).Round(time.Millisecond)
	rec.h.Params.ClockStep = clockStep
	// Let answers the gateways still owe the upstream's effects settle.
	time.Sleep(upstreamTimeout + 500*time.Millisecond)
	if cfg.Resolve {
		// Every unknown outcome must end resolved: wait for the
		// completer to settle what no retry came back for.
		stranded, err := settleStranded(ctx, cfg.Store, cfg.lease()+4*sweepInterval+10*time.Second, logf)
		if err != nil {
			return nil, err
		}
		rec.h.Stranded, rec.h.Settled = stranded, true
	}
	up.settle()
	for _, g := range gws {
		events, err := readGatewayLog(g.log.Name(), g.index)
		if err != nil {
			return nil, err
		}
		for _, e := range events {
			rec.addFault(e)
		}
	}
	return rec.history(), ctx.Err()
}

// watchClock samples the clocks until ctx ends and returns the largest
// difference between the wall clock's and the monotonic clock's time
// elapsed since it started (zero on a clock nobody stepped).
func watchClock(ctx context.Context) time.Duration {
	start := time.Now()
	var most time.Duration
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		now := time.Now()
		d := now.Round(0).Sub(start.Round(0)) - now.Sub(start)
		most = max(most, d, -d)
		select {
		case <-ctx.Done():
			return most
		case <-t.C:
		}
	}
}

// sweepInterval is the gateways' --sweep-interval in the resolve mode:
// the completer's pass.
const sweepInterval = time.Second

// settleStranded waits, up to wait, until the store holds no processing
// record (every unknown outcome resolved, every lease over) but those
// resolved not done that await a retry (no client comes back once the
// run is over), and returns the processing records left.
func settleStranded(ctx context.Context, storeURL string, wait time.Duration, logf func(string, ...any)) ([]Stranded, error) {
	s, closeStore, err := storeurl.Open(ctx, storeURL)
	if err != nil {
		return nil, fmt.Errorf("torture: opening the store to settle: %w", err)
	}
	defer closeStore()
	adm, ok := retrysafe.As[admin.Admin](s)
	if !ok {
		return nil, fmt.Errorf("torture: the store %s cannot be listed", storeKind(storeURL))
	}
	deadline := time.Now().Add(wait)
	for {
		var left []Stranded
		waiting := 0 // records that may still change
		p := &admin.ListParams{State: retrysafe.StateProcessing, Limit: 500}
		for {
			lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			recs, err := adm.List(lctx, p)
			cancel()
			if err != nil {
				return nil, fmt.Errorf("torture: listing processing records: %w", err)
			}
			for _, r := range recs {
				st := Stranded{Scope: r.Scope, Key: r.Key, Attempt: r.Attempt, LeaseUntil: r.LeaseUntil, Abandoned: r.Abandoned,
					AwaitingRetry: r.ResolvedNotDone() && r.LeaseExpired(time.Now())}
				if !st.AwaitingRetry {
					waiting++
				}
				left = append(left, st)
			}
			if len(recs) < p.PageSize() {
				break
			}
			p.AfterScope, p.AfterKey = recs[len(recs)-1].Scope, recs[len(recs)-1].Key
		}
		if waiting == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return left, ctx.Err()
		}
		logf("torture: %d processing records left; waiting for the completer", waiting)
		sleep(ctx, sweepInterval)
	}
}

func slowRate(faults bool) float64 {
	if faults {
		return 0.02
	}
	return 0
}

// storeKind names the store of a --store URL.
func storeKind(u string) string {
	scheme, _, _ := strings.Cut(u, ":")
	return scheme
}

// proxiedStore returns the store URL gateway i uses and the proxy on its
// store link (nil for SQLite, a file).
func proxiedStore(lk *links, i int, store string) (string, *toxiproxy.Proxy, error) {
	if strings.HasPrefix(store, "sqlite") {
		return store, nil, nil
	}
	u, err := url.Parse(store)
	if err != nil {
		return "", nil, fmt.Errorf("torture: store URL: %w", err)
	}
	if u.Scheme == "dynamodb" {
		return proxiedDynamoDB(lk, i, u)
	}
	host := u.Host
	if _, _, err := net.SplitHostPort(host); err != nil {
		port := "5432"
		switch {
		case strings.HasPrefix(u.Scheme, "redis"):
			port = "6379"
		case u.Scheme == "mysql":
			port = "3306"
		}
		host = net.JoinHostPort(host, port)
	}
	p, err := lk.proxy(fmt.Sprintf("store-%d", i), host)
	if err != nil {
		return "", nil, err
	}
	u.Host = p.Listen
	return u.String(), p, nil
}

// proxiedDynamoDB is proxiedStore for a dynamodb:// URL, whose host is the
// table: the link is the endpoint parameter's.
func proxiedDynamoDB(lk *links, i int, u *url.URL) (string, *toxiproxy.Proxy, error) {
	q := u.Query()
	e, err := url.Parse(q.Get("endpoint"))
	if err != nil || e.Host == "" {
		return "", nil, fmt.Errorf("torture: a dynamodb:// store needs an endpoint parameter to put a link on: %q", q.Get("endpoint"))
	}
	host := e.Host
	if _, _, err := net.SplitHostPort(host); err != nil {
		host = net.JoinHostPort(host, map[string]string{"http": "80", "https": "443"}[e.Scheme])
	}
	p, err := lk.proxy(fmt.Sprintf("store-%d", i), host)
	if err != nil {
		return "", nil, err
	}
	e.Host = p.Listen
	q.Set("endpoint", e.String())
	u.RawQuery = q.Encode()
	return u.String(), p, nil
}

// mutationTransport breaks what clients see of the gateways, for the
// mutations that do so.
func mutationTransport(m string) func(http.RoundTripper) http.RoundTripper {
	switch m {
	case MutationStripKey:
		return func(rt http.RoundTripper) http.RoundTripper {
			return roundTripper(func(r *http.Request) (*http.Response, error) {
				r = r.Clone(r.Context())
				r.Header.Del(retrysafe.HeaderKey)
				return rt.RoundTrip(r)
			})
		}
	case MutationDropReplayHeader:
		return func(rt http.RoundTripper) http.RoundTripper {
			return roundTripper(func(r *http.Request) (*http.Response, error) {
				resp, err := rt.RoundTrip(r)
				if err == nil && resp.Header.Get(retrysafe.HeaderReplayed) == "true" {
					resp.Header.Del("X-Torture-Effect")
				}
				return resp, err
			})
		}
	}
	return nil
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// writeFile writes b to dir/name.
func writeFile(dir, name string, b []byte) error {
	return os.WriteFile(filepath.Join(dir, name), b, 0o644)
}
