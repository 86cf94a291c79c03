package gateway_test

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/gateway"
)

// dashboardPath is the Grafana dashboard shipped for the gateway.
var dashboardPath = filepath.Join("..", "deploy", "grafana", "retrysafe-dashboard.json")

// TestDashboardMetricsExist: every metric that a query of the Grafana
// dashboard names is exported by a running gateway's /metrics (for a
// histogram, the _bucket, _sum and _count series).
func TestDashboardMetricsExist(t *testing.T) {
	t.Parallel()
	queries := dashboardQueries(t, dashboardPath)
	if len(queries) < 10 {
		t.Fatalf("found %d queries in %s; the dashboard or this test's reading of it is broken", len(queries), dashboardPath)
	}

	// A gateway that has run a request and replayed it: every family of
	// ours has a series (histograms get theirs with their first
	// observation; counters of errors are preset to zero). Its store is
	// SQLite, which batches, so the group commit's counters exist too.
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
	exported := exportedSeries(string(res.Body))

	names := 0
	for _, q := range queries {
		for _, name := range q.metrics {
			names++
			if runtime.GOOS != "linux" && strings.HasPrefix(name, "process_") {
				continue // the process collector is complete on Linux only
			}
			if !exported[name] && comingMetrics[name] != "" {
				t.Logf("panel %q names %s, which comes with %s and is not exported yet", q.panel, name, comingMetrics[name])
				continue
			}
			if !exported[name] {
				t.Errorf("panel %q: query %q names %s, which /metrics does not export", q.panel, q.expr, name)
			}
		}
	}
	if names < len(queries) {
		t.Errorf("%d metric names in %d queries: every query should name a metric", names, len(queries))
	}
}

// TestDashboardShowsUnknownOutcomes: the dashboard has the on-call's
// panels: the unknown outcomes by route, and the takeovers after them by
// route and cause.
func TestDashboardShowsUnknownOutcomes(t *testing.T) {
	t.Parallel()
	want := map[string][]string{
		"retrysafe_unknown_outcomes":        {"route"},
		"retrysafe_unknown_takeovers_total": {"route", "cause"},
	}
	for _, q := range dashboardQueries(t, dashboardPath) {
		for _, name := range q.metrics {
			labels, ok := want[name]
			if !ok {
				continue
			}
			for _, l := range labels {
				if !strings.Contains(q.expr, "by ("+l) && !strings.Contains(q.expr, ", "+l+")") {
					t.Errorf("panel %q: %s is not shown by %s: %s", q.panel, name, l, q.expr)
				}
			}
			delete(want, name)
		}
	}
	for name := range want {
		t.Errorf("no panel of %s shows %s", dashboardPath, name)
	}
}

// TestDashboardCheckFindsUnknownMetrics: the check above fails for a query
// that names a metric the gateway does not export, whatever its shape.
func TestDashboardCheckFindsUnknownMetrics(t *testing.T) {
	t.Parallel()
	exported := exportedSeries(`# TYPE retrysafe_requests_total counter
retrysafe_requests_total{outcome="new"} 1
# TYPE retrysafe_request_duration_seconds histogram
retrysafe_request_duration_seconds_bucket{outcome="new",le="+Inf"} 1
retrysafe_request_duration_seconds_sum{outcome="new"} 0.1
retrysafe_request_duration_seconds_count{outcome="new"} 1
`)
	tests := map[string]struct {
		expr    string
		unknown []string
	}{
		"known counter":           {`sum by (outcome) (rate(retrysafe_requests_total{job=~"$job"}[$__rate_interval]))`, nil},
		"known histogram":         {`histogram_quantile(0.99, sum by (le) (rate(retrysafe_request_duration_seconds_bucket[5m])))`, nil},
		"sum over count":          {`sum(rate(retrysafe_request_duration_seconds_sum[1m])) / sum(rate(retrysafe_request_duration_seconds_count[1m]))`, nil},
		"typo":                    {`sum(rate(retrysafe_request_totl[5m]))`, []string{"retrysafe_request_totl"}},
		"bare histogram name":     {`rate(retrysafe_request_duration_seconds[5m])`, []string{"retrysafe_request_duration_seconds"}},
		"foreign metric":          {`sum(rate(http_requests_total{code="500"}[5m])) / 2`, []string{"http_requests_total"}},
		"second operand":          {`retrysafe_requests_total / ignoring(outcome) group_left retrysafe_in_flight`, []string{"retrysafe_in_flight"}},
		"unknown under aggregate": {`topk(5, sum without (instance) (retrysafe_store_errors_total offset 5m))`, []string{"retrysafe_store_errors_total"}},
		"label_values":            {`label_values(retrysafe_nope{job="x"}, instance)`, []string{"retrysafe_nope"}},
		"label_values, no metric": {`label_values(instance)`, nil},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var unknown []string
			for _, m := range queryMetrics(tc.expr) {
				if !exported[m] {
					unknown = append(unknown, m)
				}
			}
			if !slices.Equal(unknown, tc.unknown) {
				t.Fatalf("unknown metrics %q, want %q (names found: %q)", unknown, tc.unknown, queryMetrics(tc.expr))
			}
		})
	}
}

// TestPromQLMetricNames: what the extraction takes for a metric name, and
// what it leaves (functions, aggregations, keywords, labels, strings,
// durations, numbers, Grafana variables).
func TestPromQLMetricNames(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		expr string
		want []string
	}{
		"selector":      {`up`, []string{"up"}},
		"labels":        {`a_total{job="x", le=~"1|2", name!="b_total"}`, []string{"a_total"}},
		"aggregation":   {`sum by (le, op) (rate(h_bucket{op="claim"}[5m]))`, []string{"h_bucket"}},
		"without":       {`max without (instance) (g)`, []string{"g"}},
		"binary":        {`a / on(job) group_right(instance) b and c or d unless e`, []string{"a", "b", "c", "d", "e"}},
		"bool and nums": {`a > bool 1e-9 + 0x1f - Inf * NaN`, []string{"a"}},
		"offset":        {`rate(a[5m] offset 1h) - rate(a[5m:1m])`, []string{"a", "a"}},
		"strings":       {`label_replace(a, "dst", "$1", "src", "(.*)")`, []string{"a"}},
		"variables":     {`rate(a{instance=~"$instance"}[$__rate_interval]) * ${factor}`, []string{"a"}},
		"colon names":   {`job:a_total:rate5m`, []string{"job:a_total:rate5m"}},
		"escapes":       {`a{x="q\"}{"} + b{y='z\'['}`, []string{"a", "b"}},
		"quantile":      {`quantile(0.9, a) + count_values("v", b) + topk(3, c)`, []string{"a", "b", "c"}},
		"time fns":      {`time() - vector(1) - scalar(a)`, []string{"a"}},
		"comment":       {"a # not_a_metric\n+ b", []string{"a", "b"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := promqlMetrics(tc.expr); !slices.Equal(got, tc.want) {
				t.Fatalf("promqlMetrics(%q) = %q, want %q", tc.expr, got, tc.want)
			}
		})
	}
}

// dashboardQuery is one PromQL query of the dashboard.
type dashboardQuery struct {
	panel, expr string
	metrics     []string
}

// dashboardQueries returns the queries of every panel (rows' panels
// included) and of the templating variables.
func dashboardQueries(t *testing.T, path string) []dashboardQuery {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string            `json:"title"`
		Targets []json.RawMessage `json:"targets"`
		Panels  []json.RawMessage `json:"panels"`
	}
	var d struct {
		Panels     []json.RawMessage `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []dashboardQuery
	var walk func([]json.RawMessage)
	walk = func(raw []json.RawMessage) {
		for _, r := range raw {
			var p panel
			if err := json.Unmarshal(r, &p); err != nil {
				t.Fatalf("%s: panel: %v", path, err)
			}
			for _, tr := range p.Targets {
				var target struct {
					Expr string `json:"expr"`
				}
				if err := json.Unmarshal(tr, &target); err != nil || target.Expr == "" {
					t.Fatalf("%s: panel %q: a target without expr: %s", path, p.Title, tr)
				}
				out = append(out, dashboardQuery{panel: p.Title, expr: target.Expr, metrics: queryMetrics(target.Expr)})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q string
		if json.Unmarshal(v.Query, &q) != nil {
			var obj struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(v.Query, &obj); err != nil {
				t.Fatalf("%s: variable %s: query %s", path, v.Name, v.Query)
			}
			q = obj.Query
		}
		out = append(out, dashboardQuery{panel: "variable " + v.Name, expr: q, metrics: queryMetrics(q)})
	}
	return out
}

// exportedSeries returns the names of the series in a Prometheus text
// exposition: a histogram h appears as h_bucket, h_sum and h_count, never
// as h.
func exportedSeries(text string) map[string]bool {
	names := make(map[string]bool)
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	return names
}

// queryMetrics returns the metric names a query of the dashboard reads:
// a PromQL expression, or one of Grafana's variable queries
// (label_values(SELECTOR, LABEL), label_values(LABEL), query_result(EXPR)).
func queryMetrics(q string) []string {
	q = strings.TrimSpace(q)
	if inner, ok := grafanaCall(q, "label_values"); ok {
		if i := strings.LastIndex(inner, ","); i >= 0 {
			return promqlMetrics(inner[:i])
		}
		return nil // label_values(LABEL): no metric
	}
	if inner, ok := grafanaCall(q, "query_result"); ok {
		return promqlMetrics(inner)
	}
	return promqlMetrics(q)
}

// grafanaCall returns the argument text of "name(…)".
func grafanaCall(q, name string) (string, bool) {
	rest, ok := strings.CutPrefix(q, name+"(")
	if !ok || !strings.HasSuffix(rest, ")") {
		return "", false
	}
	return strings.TrimSuffix(rest, ")"), true
}

// PromQL words that are not metric names: aggregation operators, the
// keywords of binary operators and modifiers, and number literals.
var promqlWords = map[string]bool{
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true,
	"stdvar": true, "count": true, "count_values": true, "bottomk": true, "topk": true,
	"quantile": true, "limitk": true, "limit_ratio": true,
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true,
	"group_right": true, "bool": true, "and": true, "or": true, "unless": true,
	"offset": true, "atan2": true, "inf": true, "nan": true,
}

// promqlMetrics returns the metric names in a PromQL expression, in order:
// the identifiers that are not functions (followed by "("), operators or
// keywords, outside label matchers ({…}), ranges ([…]), grouping label
// lists (by (…), on (…), …), strings and comments. Grafana variables
// ($name, ${name}, [[name]]) are skipped.
func promqlMetrics(expr string) []string {
	var out []string
	s := expr
	i := 0
	skipTo := func(open, close byte) { // i is at open; move past the matching close
		depth := 0
		for i < len(s) {
			switch c := s[i]; {
			case c == '"' || c == '\'' || c == '`':
				i = skipString(s, i)
				continue
			case c == open:
				depth++
			case c == close:
				depth--
				if depth == 0 {
					i++
					return
				}
			}
			i++
		}
	}
	nextNonSpace := func(j int) byte {
		for j < len(s) && (s[j] == ' ' || s[j] == '\t' || s[j] == '\n' || s[j] == '\r') {
			j++
		}
		if j < len(s) {
			return s[j]
		}
		return 0
	}
	for i < len(s) {
		c := s[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			i = skipString(s, i)
		case c == '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '{':
			skipTo('{', '}')
		case c == '[':
			skipTo('[', ']')
		case c == '$':
			i++
			if i < len(s) && s[i] == '{' {
				skipTo('{', '}')
				continue
			}
			for i < len(s) && isIdentChar(s[i]) {
				i++
			}
		case c >= '0' && c <= '9' || c == '.':
			for i < len(s) && (isIdentChar(s[i]) || s[i] == '.' ||
				(s[i] == '-' || s[i] == '+') && (s[i-1] == 'e' || s[i-1] == 'E') && !strings.HasPrefix(strings.ToLower(s[:i]), "0x")) {
				i++
			}
		case isIdentStart(c):
			start := i
			for i < len(s) && isIdentChar(s[i]) {
				i++
			}
			word := s[start:i]
			lower := strings.ToLower(word)
			next := nextNonSpace(i)
			switch {
			case lower == "by" || lower == "without" || lower == "on" || lower == "ignoring" ||
				lower == "group_left" || lower == "group_right":
				if next == '(' {
					for s[i] != '(' {
						i++
					}
					skipTo('(', ')')
				}
			case promqlWords[lower]:
			case next == '(':
				// a function call
			default:
				out = append(out, word)
			}
		default:
			i++
		}
	}
	return out
}

// skipString returns the index past the string literal that starts at i.
func skipString(s string, i int) int {
	quote := s[i]
	for i++; i < len(s); i++ {
		switch {
		case s[i] == '\\' && quote != '`':
			i++
		case s[i] == quote:
			return i + 1
		}
	}
	return i
}

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isIdentChar(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }
