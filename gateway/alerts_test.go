package gateway_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/gateway"
	"go.yaml.in/yaml/v3"
)

// The shipped Prometheus alerting rules and their promtool tests.
var (
	alertsPath      = filepath.Join("..", "deploy", "prometheus", "alerts.yaml")
	alertsTestsPath = filepath.Join("..", "deploy", "prometheus", "alerts_test.yaml")
)

// comingMetrics are metrics that the alerts and the dashboard name ahead of
// the work that exports them. The checks below skip such a name only while
// a running gateway does not export it: once it does, it is checked as any
// other.
var comingMetrics = map[string]string{}

// TestAlertRules runs promtool on the shipped rules: they load (promtool
// check rules) and each alert fires, and stays quiet, where its test in
// alerts_test.yaml says (promtool test rules). Without promtool the test
// is skipped, except under CI=true, where it fails.
func TestAlertRules(t *testing.T) {
	t.Parallel()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool is missing (CI=true): install Debian's prometheus package, which ships it")
		}
		t.Skip("promtool is missing: install Debian's prometheus package, which ships it")
	}
	for _, args := range [][]string{{"check", "rules", alertsPath}, {"test", "rules", alertsTestsPath}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestAlertMetricsExist: every metric that an alert's expression names,
// and every series its tests feed, is one a running gateway exports
// (comingMetrics aside, while they are not), and every alert has a test.
func TestAlertMetricsExist(t *testing.T) {
	t.Parallel()
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	readYAML(t, alertsPath, &rules)
	var tests struct {
		Tests []struct {
			InputSeries []struct {
				Series string `yaml:"series"`
			} `yaml:"input_series"`
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	readYAML(t, alertsTestsPath, &tests)

	exported := runningGatewaySeries(t)
	check := func(where, name string) {
		if exported[name] {
			return
		}
		if why, ok := comingMetrics[name]; ok {
			t.Logf("%s names %s, which comes with %s and is not exported yet", where, name, why)
			return
		}
		t.Errorf("%s names %s, which /metrics does not export", where, name)
	}
	alerts := map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts[r.Alert] = true
			names := promqlMetrics(r.Expr)
			if len(names) == 0 {
				t.Errorf("alert %s: expression %q names no metric", r.Alert, r.Expr)
			}
			for _, name := range names {
				check("alert "+r.Alert, name)
			}
		}
	}
	if len(alerts) < 5 {
		t.Fatalf("found %d alerts in %s; the file or this test's reading of it is broken", len(alerts), alertsPath)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, s := range tc.InputSeries {
			name, _, _ := strings.Cut(s.Series, "{")
			check("test series "+s.Series, strings.TrimSpace(name))
		}
		for _, a := range tc.AlertRuleTest {
			if !alerts[a.Alertname] {
				t.Errorf("%s tests alert %s, which %s does not define", alertsTestsPath, a.Alertname, alertsPath)
			}
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	for a := range alerts {
		if !fires[a] || !quiet[a] {
			t.Errorf("alert %s: the tests should show it firing (%v) and staying quiet (%v)", a, fires[a], quiet[a])
		}
	}
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// runningGatewaySeries returns the series names that the /metrics of a
// gateway on SQLite exports after a request and its replay: every family
// of ours then has a series.
func runningGatewaySeries(t *testing.T) map[string]bool {
	t.Helper()
	up := newUpstream(t)
	var store retrysafe.Store
	for _, k := range storeKinds() {
		if k.name == "sqlite" {
			store = k.open(t)
		}
	}
	gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: store})
	key := newKey()
	send(t, gw.URL, "POST", "/payments", key, `{"amount":1}`)
	send(t, gw.URL, "POST", "/payments", key, `{"amount":1}`)
	res := send(t, gw.AdminURL, "GET", "/metrics", "", "")
	if res.Status != 200 {
		t.Fatalf("/metrics = %s", res)
	}
	return exportedSeries(string(res.Body))
}

// TestReplaysByStatusClass: retrysafe_replays_total counts each replayed
// answer once, by its status class, which RetrysafeReplayed5xx reads.
func TestReplaysByStatusClass(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: storeKinds()[0].open(t)})
	failing, ok := newKey(), newKey()
	for range 3 {
		send(t, gw.URL, "POST", "/status/503", failing, `{}`)
	}
	send(t, gw.URL, "POST", "/payments", ok, `{"amount":1}`)
	send(t, gw.URL, "POST", "/payments", ok, `{"amount":1}`)
	text := string(send(t, gw.AdminURL, "GET", "/metrics", "", "").Body)
	for series, want := range map[string]float64{
		`retrysafe_replays_total{status_class="5xx"}`:  2,
		`retrysafe_replays_total{status_class="2xx"}`:  1,
		`retrysafe_replays_total{status_class="4xx"}`:  0,
		`retrysafe_requests_total{outcome="replayed"}`: 3,
	} {
		if got := metricValue(t, text, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
}
