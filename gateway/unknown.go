package gateway

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/store/sealed"
)

// Unknown outcomes in the gateway: the route's resolve URL as the
// engine's Resolver, the completer that the sweeper loop drives, and the
// retrysafe_unknown_outcomes gauge.

// resolveFor returns the engine's Resolver for rh: it asks rh's resolve
// URL, with the headers of the retry that found the record when there is
// one (the request path), without when the completer asks.
//
// The engine asks about no record the completer resolved not done
// (retrysafe.Record.ResolvedNotDone): the completer's not_done for
// attempt N marks the record instead of releasing it, and the next retry
// takes it over as attempt N+1, which the upstream's fence admits.
func (g *Gateway) resolveFor(rh *routeHandler) retrysafe.Resolver {
	return func(ctx context.Context, rec *retrysafe.Record) (retrysafe.Resolution, error) {
		var r *http.Request
		source := "completer"
		if info := infoFrom(ctx); info != nil && info.req != nil {
			r, source = info.req, "request"
		}
		a := rh.resolver.ask(ctx, rec, r, rh.pattern)
		g.metrics.resolveCalls.WithLabelValues(source, a.outcome).Inc()
		switch a.outcome {
		case resolveDone:
			return retrysafe.Resolution{Action: retrysafe.ResolveComplete, Response: a.resp}, nil
		case resolveNotDone:
			return retrysafe.Resolution{Action: retrysafe.ResolveRerun}, nil
		}
		g.logger.WarnContext(ctx, "resolve URL gave no decision; the request stays blocked (409 outcome-unknown)",
			"route", routeLabel(rh.pattern), "source", source, "attempt", rec.Attempt, "why", a.why)
		return retrysafe.Resolution{}, nil
	}
}

// storedScopes returns the store that writes back records listed with
// s's Admin: they carry their scopes as stored, which an encrypting
// wrapper (store/sealed, which keeps the HMAC of each scope) would map a
// second time and miss. The completer and the operator page's Resolve
// write through it.
func storedScopes(s retrysafe.Store) retrysafe.Store {
	if st, ok := sealed.StoredScopes(s); ok {
		return st
	}
	return s
}

// completerPage is how many stranded records one List call of the
// completer reads; completerMax bounds one pass.
const (
	completerPage = 100
	completerMax  = 1000
)

// completers returns the route handlers that have a resolve URL.
func (g *Gateway) completers() []*routeHandler {
	var out []*routeHandler
	for _, rh := range g.handlers {
		if rh.completer != nil {
			out = append(out, rh)
		}
	}
	return out
}

// completeStranded is one completer pass: for each route with a resolve
// URL, it lists the processing records of that route whose lease ran out
// (up to completerMax) and lets the engine ask the resolver about each and
// write its decision, fenced by the record's token: done completes it,
// not_done marks it resolved not done for its retry (never a release: the
// retry would start again at attempt 1, which the upstream's fence
// refuses), anything else leaves it.
func (g *Gateway) completeStranded(ctx context.Context, adm admin.Admin) {
	for _, rh := range g.completers() {
		recs, err := g.stranded(ctx, adm, rh.pattern)
		if err != nil {
			if ctx.Err() == nil {
				g.logger.WarnContext(ctx, "completer: listing stranded records failed", "route", routeLabel(rh.pattern), "err", err)
			}
			continue
		}
		if len(recs) == 0 {
			continue
		}
		n, err := rh.completer.ResolveStranded(ctx, recs)
		g.metrics.completed(n)
		lvl := slog.LevelDebug
		switch {
		case err != nil:
			lvl = slog.LevelWarn
		case n.Completed+n.AwaitingRetry > 0:
			lvl = slog.LevelInfo
		}
		g.logger.Log(ctx, lvl, "completer: stranded records resolved", "route", routeLabel(rh.pattern),
			"completed", n.Completed, "awaiting_retry", n.AwaitingRetry, "blocked", n.Blocked, "skipped", n.Skipped, "err", err)
	}
}

// stranded lists the processing records of route pattern whose lease ran
// out ("" is the records of no route, which List cannot select by
// route: they are picked from all), leaving out those already resolved
// not done at their attempt (they wait for their retry).
func (g *Gateway) stranded(ctx context.Context, adm admin.Admin, pattern string) ([]*retrysafe.Record, error) {
	now := g.cfg.Now()
	p := &admin.ListParams{LeaseExpiredBy: now, Route: pattern, Limit: completerPage}
	var out []*retrysafe.Record
	// Records of no route are picked from every route's: the pass reads
	// at most ten times what it may keep.
	for read := 0; len(out) < completerMax && read < 10*completerMax; {
		lctx, cancel := context.WithTimeout(ctx, uiStoreTimeout)
		recs, err := adm.List(lctx, p)
		cancel()
		if err != nil {
			return out, err
		}
		read += len(recs)
		for _, rec := range recs {
			if rec.Route == pattern && rec.LeaseExpired(now) && !rec.ResolvedNotDone() {
				out = append(out, rec)
			}
		}
		if len(recs) < p.PageSize() {
			break
		}
		last := recs[len(recs)-1]
		p.AfterScope, p.AfterKey = last.Scope, last.Key
	}
	return out, nil
}

// unknownCollector exports retrysafe_unknown_outcomes{route}: the
// processing records whose lease ran out or that their owner abandoned
// (except those resolved not done, which await their retry),
// by the route that claimed them, read from the store's Admin at a scrape
// (at most once per unknownRefresh, and at most unknownCountMax records).
type unknownCollector struct {
	g     *Gateway
	admin admin.Admin
	desc  *prometheus.Desc

	mu     sync.Mutex
	at     time.Time
	counts map[string]int
}

// unknownRefresh is how long a count of unknown outcomes is reused;
// unknownCountMax bounds how many records one count reads (the gauge
// stops there).
const (
	unknownRefresh  = 10 * time.Second
	unknownCountMax = 10000
)

func newUnknownCollector(g *Gateway, adm admin.Admin) *unknownCollector {
	return &unknownCollector{g: g, admin: adm, desc: prometheus.NewDesc(MetricPrefix+"unknown_outcomes",
		"Attempts whose outcome is unknown (processing records whose lease ran out or that their owner abandoned), by route; counted from the store at most every 10s, up to 10000.",
		[]string{"route"}, nil)}
}

func (c *unknownCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *unknownCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := time.Now(); c.counts == nil || now.Sub(c.at) >= unknownRefresh {
		counts, err := c.count()
		if err == nil || c.counts == nil {
			c.counts, c.at = counts, now
		}
		if err != nil {
			c.g.logger.Debug("counting unknown outcomes for /metrics failed", "err", err)
		}
	}
	for route, n := range c.counts {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), route)
	}
}

// count reads the unknown outcomes from the store; every protected route
// is in the result, with 0 when it has none.
func (c *unknownCollector) count() (map[string]int, error) {
	counts := map[string]int{}
	for _, rh := range c.g.handlers {
		if !rh.policy.Bypass {
			counts[routeLabel(rh.pattern)] = 0
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), ReadyTimeout)
	defer cancel()
	p := &admin.ListParams{LeaseExpiredBy: c.g.cfg.Now(), Limit: 1000}
	for seen := 0; seen < unknownCountMax; {
		recs, err := c.admin.List(ctx, p)
		if err != nil {
			return counts, err
		}
		for _, rec := range recs {
			if !rec.ResolvedNotDone() { // decided: awaiting its retry
				counts[routeLabel(rec.Route)]++
			}
		}
		seen += len(recs)
		if len(recs) < p.PageSize() {
			break
		}
		last := recs[len(recs)-1]
		p.AfterScope, p.AfterKey = last.Scope, last.Key
	}
	return counts, nil
}
