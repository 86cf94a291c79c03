package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
)

// ReadyTimeout bounds the store check of /readyz.
const ReadyTimeout = 2 * time.Second

// SweepTimeout is the least time one background sweep may take (a longer
// sweep interval allows as much).
const SweepTimeout = 30 * time.Second

// AdminHandler serves the admin endpoints:
//
//	GET /healthz  200 while the process runs
//	GET /readyz   200 when the store answers within ReadyTimeout, else 503
//	              (at once when it refuses connections; see Gateway.Ready),
//	              or 200 all the same with Config.ReadyWithoutStore;
//	              why is logged, not answered (it can name the store's host)
//	GET /metrics  the Prometheus registry (every name starts with retrysafe_)
//	/ui/          the operator page ([UI]), when the store implements
//	              admin.Admin, to the peers Config.UI allows; it
//	              requires Config.AdminTokens when set
//
// The probes and /metrics answer any Host: the kubelet and Prometheus
// address them by pod IP or service name, and they show no record. The
// operator page answers only loopback names and addresses and
// Config.AdminHosts (421 otherwise), against DNS rebinding.
func (g *Gateway) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if err := g.Ready(r.Context()); err != nil {
			g.readyFailing.Store(true)
			if g.cfg.ReadyWithoutStore {
				// A sidecar stays in service: unprotected requests pass,
				// protected ones get 503 from the engine (fail closed).
				g.readyLog.warn(r.Context(), g.logger, g.cfg.Now(), "the store does not answer: ready anyway (ReadyWithoutStore); protected requests get 503", "err", err)
				_, _ = fmt.Fprintln(w, "ready; the store does not answer, so protected requests get 503 (the gateway's log says why)")
				return
			}
			g.readyLog.warn(r.Context(), g.logger, g.cfg.Now(), "readiness check failed: the store does not answer", "err", err)
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = fmt.Fprintln(w, "not ready: the store does not answer (the gateway's log says why)")
			return
		}
		if g.readyFailing.Swap(false) {
			g.logger.InfoContext(r.Context(), "readiness check passes again: the store answers")
		}
		_, _ = fmt.Fprintln(w, "ready")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(g.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, UIPath, http.StatusMovedPermanently)
	})
	if g.ui != nil {
		mux.Handle(UIPath, g.uiGate(g.ui))
	} else {
		mux.HandleFunc(UIPath, func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "the operator page needs a store that implements admin.Admin", http.StatusNotFound)
		})
	}
	return mux
}

// uiGate serves the operator page to the peers Config.UI allows.
func (g *Gateway) uiGate(ui http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch g.cfg.UI {
		case UIOff:
			adminProblem(w, http.StatusNotFound, ProblemUIOff, "Operator page off",
				"The operator page is off (--ui off); /healthz, /readyz and /metrics are served.", 0)
			return
		case UIOn:
		default:
			if !loopbackPeer(r) {
				adminProblem(w, http.StatusForbidden, ProblemUILoopbackOnly, "Operator page for loopback peers only",
					"The operator page is served to this machine only (--ui loopback): reach it through an SSH tunnel or kubectl port-forward, or start the gateway with --ui on and --admin-token-file.", 0)
				return
			}
		}
		ui.ServeHTTP(w, r)
	})
}

// Ready checks that the store answers within [ReadyTimeout]: with
// CheckReady when it (or a store it wraps) implements
// [admin.ReadyChecker], which fails at once on a backend that refuses
// connections instead of waiting out the client's retries (the Redis
// store); else with Ping when it implements [admin.Pinger]; otherwise
// with a Get in a scope no client has (real scopes are hex digests).
func (g *Gateway) Ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, ReadyTimeout)
	defer cancel()
	var err error
	if rc, ok := retrysafe.As[admin.ReadyChecker](g.cfg.Store); ok {
		err = rc.CheckReady(ctx)
	} else if p, ok := retrysafe.As[admin.Pinger](g.cfg.Store); ok {
		err = p.Ping(ctx)
	} else {
		_, err = g.cfg.Store.Get(ctx, &retrysafe.GetParams{Scope: "retrysafe:readyz", Key: "readyz", Now: g.cfg.Now()})
		if errors.Is(err, retrysafe.ErrNotFound) {
			err = nil
		}
	}
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return nil
}

// RunSweeper deletes expired records, and retires processing records whose
// lease ran out more than Config.ProcessingRetention ago, every interval
// until ctx is done, when the store implements [admin.Sweeper] (stores
// with native expiry, such as Redis, do not). Sweeping only reclaims
// space: expiry is enforced on read regardless. In the same loop it runs
// the completer for the routes with a resolve URL (when the store
// implements admin.Admin): their stranded records (processing, lease
// run out) are put to the resolve URL, and its decision is written fenced
// by each record's token, so they reach a terminal state without waiting
// for a retry. It returns at once when there is neither to do, or when
// interval <= 0.
func (g *Gateway) RunSweeper(ctx context.Context, interval time.Duration) {
	sw, canSweep := retrysafe.As[admin.Sweeper](g.cfg.Store)
	adm, canList := retrysafe.As[admin.Admin](g.cfg.Store)
	completing := canList && len(g.completers()) > 0
	if interval <= 0 || (!canSweep && !completing) {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if canSweep && !g.sweepOnce(ctx, sw, interval) {
			return
		}
		if completing {
			g.completeStranded(ctx, adm)
		}
	}
}

// sweepOnce runs one sweep; false when ctx ended.
func (g *Gateway) sweepOnce(ctx context.Context, sw admin.Sweeper, interval time.Duration) bool {
	sctx, cancel := context.WithTimeout(ctx, max(interval, SweepTimeout))
	n, err := sw.Sweep(sctx, &admin.SweepParams{Now: g.cfg.Now(), ProcessingRetention: g.cfg.ProcessingRetention})
	cancel()
	g.metrics.sweepDeleted.Add(float64(n)) // a failed sweep may have deleted some
	switch {
	case err != nil && ctx.Err() != nil:
		return false
	case err != nil:
		g.metrics.sweepErrors.Inc()
		g.logger.WarnContext(ctx, "sweep failed", "err", err, "deleted", n)
	case n > 0:
		g.logger.DebugContext(ctx, "swept expired records", "deleted", n)
	}
	return true
}
