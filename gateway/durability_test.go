package gateway_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/gateway"
	"github.com/retrysafe/retrysafe/store/sealed"
)

// TestCheckDurability runs the start-up check on the local Redis, which
// has no persistence (as CI runs it), behind the encryption wrapper as
// serve runs it: one WARN line naming the setting and the gauge at 1; with
// the setting accepted, one INFO line and no gauge. A store without the
// ability (memory) is left alone.
func TestCheckDurability(t *testing.T) {
	t.Parallel()
	var redisStore retrysafe.Store
	for _, k := range storeKinds() {
		if k.name == "redis" {
			redisStore = k.open(t)
		}
	}
	wrapped, err := sealed.New(redisStore, nil, sealed.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		store  retrysafe.Store
		accept []string
		level  string // of the line about appendonly; "" for none
		gauge  bool
	}{
		"redis, not accepted":      {wrapped, nil, "WARN", true},
		"redis, accepted":          {wrapped, []string{"appendonly"}, "INFO", false},
		"redis, all accepted":      {wrapped, []string{gateway.AcceptAllDurability}, "INFO", false},
		"redis, another accepted":  {wrapped, []string{"fsync"}, "WARN", true},
		"memory, nothing to check": {storeKinds()[0].open(t), nil, "", false},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var log syncBuffer
			up := newUpstream(t)
			gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: tc.store,
				Logger: slog.New(slog.NewTextHandler(&log, nil))})
			warnings := gw.CheckDurability(context.Background(), tc.accept)
			logged := log.String()
			if tc.level == "" {
				if len(warnings) != 0 || strings.Contains(logged, "durability") {
					t.Errorf("warnings %+v, log:\n%s", warnings, logged)
				}
			} else {
				if len(warnings) != 1 || warnings[0].Setting != "appendonly" {
					t.Fatalf("warnings %+v, want one about appendonly", warnings)
				}
				var lines []string
				for _, l := range strings.Split(logged, "\n") {
					if strings.Contains(l, "store durability") {
						lines = append(lines, l)
					}
				}
				if len(lines) != 1 || !strings.Contains(lines[0], "level="+tc.level) || !strings.Contains(lines[0], "setting=appendonly") {
					t.Errorf("want one %s line about appendonly, got:\n%s", tc.level, logged)
				}
				if tc.level == "WARN" && !strings.Contains(lines[0], "restart loses every one") {
					t.Errorf("the warning does not say what it risks: %s", lines[0])
				}
			}
			metrics := string(send(t, gw.AdminURL, "GET", "/metrics", "", "").Body)
			if got := strings.Contains(metrics, `retrysafe_store_durability_warning{setting="appendonly"} 1`); got != tc.gauge {
				t.Errorf("gauge for appendonly exported: %v, want %v", got, tc.gauge)
			}
		})
	}
}
