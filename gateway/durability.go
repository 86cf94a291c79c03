package gateway

import (
	"context"
	"errors"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
)

// AcceptAllDurability, in CheckDurability's accept list, accepts every
// durability warning.
const AcceptAllDurability = "all"

// CheckDurability asks the store whether its server's settings can lose
// acknowledged records, when it (or a store it wraps) implements
// [admin.DurabilityChecker]. Each warning gets one WARN line naming the
// setting and what it risks, and the gauge
// retrysafe_store_durability_warning{setting} at 1, unless its setting is
// in accept (or accept holds [AcceptAllDurability]): the operator chose it
// on purpose, and it gets one INFO line and no gauge. A store that could
// not be asked is logged, not fatal: the check only informs. It returns
// the warnings, accepted ones included.
func (g *Gateway) CheckDurability(ctx context.Context, accept []string) []admin.DurabilityWarning {
	dc, ok := retrysafe.As[admin.DurabilityChecker](g.cfg.Store)
	if !ok {
		return nil
	}
	warnings, err := dc.CheckDurability(ctx)
	if err != nil {
		g.logger.InfoContext(ctx, "could not read the store's durability settings", "err", err)
		return nil
	}
	gauge := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: MetricPrefix + "store_durability_warning",
		Help: "1 for each setting of the store's server under which it can lose records it acknowledged (logged at start; --accept-weak-durability accepts it).",
	}, []string{"setting"})
	if err := g.registry.Register(gauge); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			g.logger.WarnContext(ctx, "durability metric not registered", "err", err)
		} else if existing, ok := are.ExistingCollector.(*prometheus.GaugeVec); ok {
			gauge = existing
		}
	}
	for _, w := range warnings {
		attrs := []any{"setting", w.Setting, "value", w.Value, "risk", w.Risk}
		if slices.Contains(accept, w.Setting) || slices.Contains(accept, AcceptAllDurability) {
			g.logger.InfoContext(ctx, "store durability: "+w.Setting+"="+w.Value+" accepted (--accept-weak-durability)", attrs...)
			continue
		}
		g.logger.WarnContext(ctx, "store durability: "+w.Setting+"="+w.Value+": "+w.Risk+"; --accept-weak-durability "+w.Setting+" accepts it", attrs...)
		gauge.WithLabelValues(w.Setting).Set(1)
	}
	return warnings
}
