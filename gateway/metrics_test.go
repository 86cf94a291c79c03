package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/gateway"
)

// metricValue returns the value of one series in Prometheus text format, or
// -1 when it is absent.
func metricValue(t *testing.T, text, series string) float64 {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		// The value follows the last space: a label value may hold one.
		if i := strings.LastIndexByte(line, ' '); i > 0 && line[:i] == series {
			value := line[i+1:]
			var v float64
			if err := json.Unmarshal([]byte(value), &v); err != nil {
				t.Fatalf("series %s: value %q", series, value)
			}
			return v
		}
	}
	return -1
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	flaky := &flakyStore{Store: storeKinds()[0].open(t)}
	gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: flaky})

	key := newKey()
	send(t, gw.URL, "POST", "/payments", key, `{"amount":1}`) // new
	send(t, gw.URL, "POST", "/payments", key, `{"amount":1}`) // replayed
	send(t, gw.URL, "POST", "/payments", key, `{"amount":2}`) // mismatch
	send(t, gw.URL, "POST", "/payments", "a,b", `{}`)         // invalid key
	flaky.down.Store(true)
	send(t, gw.URL, "POST", "/payments", newKey(), `{}`) // store error
	flaky.down.Store(false)

	res := send(t, gw.AdminURL, "GET", "/metrics", "", "")
	if res.Status != 200 {
		t.Fatalf("/metrics = %s", res)
	}
	text := string(res.Body)
	for _, tc := range []struct {
		series string
		want   float64
	}{
		{`retrysafe_requests_total{outcome="new"}`, 1},
		{`retrysafe_requests_total{outcome="replayed"}`, 1},
		{`retrysafe_requests_total{outcome="mismatch"}`, 1},
		{`retrysafe_requests_total{outcome="invalid_key"}`, 1},
		{`retrysafe_requests_total{outcome="store_error"}`, 1},
		{`retrysafe_requests_total{outcome="conflict"}`, 0},
		{`retrysafe_requests_total{outcome="missing_key"}`, 0},
		{`retrysafe_requests_total{outcome="too_large"}`, 0},
		{`retrysafe_store_errors_total{op="claim"}`, 1},
		{`retrysafe_in_flight`, 0},
		{`retrysafe_upstream_duration_seconds_count{result="response"}`, 1},
	} {
		if got := metricValue(t, text, tc.series); got != tc.want {
			t.Errorf("%s = %v, want %v", tc.series, got, tc.want)
		}
	}
	if got := metricValue(t, text, `retrysafe_store_operation_duration_seconds_count{op="claim"}`); got < 4 {
		t.Errorf("claim latency observations = %v, want at least 4", got)
	}
	// Every metric of ours carries the prefix; the Go runtime and process
	// collectors keep their standard names (go_*, process_*), which every
	// Go dashboard expects (DESIGN.md: fixed).
	names := 0
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			names++
			if !strings.HasPrefix(rest, gateway.MetricPrefix) && !strings.HasPrefix(rest, "go_") && !strings.HasPrefix(rest, "process_") {
				t.Errorf("metric neither ours (%s) nor the Go runtime's or process's: %s", gateway.MetricPrefix, rest)
			}
			if strings.HasPrefix(rest, gateway.MetricPrefix+"go_") || strings.HasPrefix(rest, gateway.MetricPrefix+"process_") {
				t.Errorf("runtime metric renamed with our prefix: %s", rest)
			}
		}
	}
	if names < 20 {
		t.Errorf("only %d metrics exposed", names)
	}
	for _, want := range []string{"\ngo_goroutines ", "\nprocess_cpu_seconds_total "} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) lines(t *testing.T) []map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, l := range bytes.Split(bytes.TrimSpace(b.buf.Bytes()), []byte("\n")) {
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// TestRequestLog checks the one line per protected request: outcome,
// status and latency, and never the key or the bodies.
func TestRequestLog(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	var buf syncBuffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil))
	gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: storeKinds()[0].open(t), Logger: logger})
	key := "secret-key-" + newKey()
	body := `{"card":"4242424242424242"}`
	send(t, gw.URL, "POST", "/payments", key, body)
	send(t, gw.URL, "POST", "/payments", key, body)
	send(t, gw.URL, "POST", "/payments", "", body)
	send(t, gw.URL, "GET", "/items", key, "") // unprotected: debug level, not logged

	lines := buf.lines(t)
	var outcomes []string
	for _, l := range lines {
		if l["msg"] != "request" {
			continue
		}
		outcomes = append(outcomes, l["outcome"].(string))
		for _, field := range []string{"method", "path", "status", "duration_ms"} {
			if _, ok := l[field]; !ok {
				t.Errorf("log line lacks %s: %v", field, l)
			}
		}
	}
	if got, want := strings.Join(outcomes, ","), "new,replayed,no_key"; got != want {
		t.Errorf("logged outcomes %s, want %s", got, want)
	}
	all := func() string { buf.mu.Lock(); defer buf.mu.Unlock(); return buf.buf.String() }()
	for _, secret := range []string{key, "4242424242424242", "session=secret"} {
		if strings.Contains(all, secret) {
			t.Errorf("log contains %q:\n%s", secret, all)
		}
	}
}

// TestSweeper runs the background sweeper on SQLite: expired records are
// deleted and counted, and the sweeper stops with its context.
func TestSweeper(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	var sqliteKind storeKind
	for _, k := range storeKinds() {
		if k.name == "sqlite" {
			sqliteKind = k
		}
	}
	gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: sqliteKind.open(t),
		Defaults: gateway.Policy{TTL: 50 * time.Millisecond}})
	for range 3 {
		if res := send(t, gw.URL, "POST", "/payments", newKey(), `{}`); res.Status != 201 {
			t.Fatalf("POST = %s", res)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		gw.RunSweeper(ctx, 20*time.Millisecond)
		close(done)
	}()
	eventually(t, 10*time.Second, "the sweeper to delete 3 records", func() bool {
		text := string(send(t, gw.AdminURL, "GET", "/metrics", "", "").Body)
		return metricValue(t, text, "retrysafe_sweep_deleted_total") == 3
	})
	cancel()
	<-done
}

// TestClientGoneUnprotected checks that an unprotected request whose client
// hangs up is counted as canceled, not as an upstream failure.
func TestClientGoneUnprotected(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: storeKinds()[0].open(t)})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := trySend(ctx, gw.URL, "POST", "/slow", "", `{}`) // no key: passes through
		errc <- err
	}()
	up.waitEntered(t)
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("the request did not fail after the client hung up")
	}
	eventually(t, 10*time.Second, "the canceled upstream call to be counted", func() bool {
		text := string(send(t, gw.AdminURL, "GET", "/metrics", "", "").Body)
		return metricValue(t, text, `retrysafe_upstream_duration_seconds_count{result="canceled"}`) == 1 &&
			metricValue(t, text, `retrysafe_upstream_errors_total{kind="unknown"}`) == 0
	})
}

// lostLeaseStore is a real store whose Complete, for keys starting with
// "lost-", answers as a store does after another claimant took the lease
// over.
type lostLeaseStore struct{ retrysafe.Store }

func (s *lostLeaseStore) Complete(ctx context.Context, p *retrysafe.CompleteParams) error {
	if strings.HasPrefix(p.Key, "lost-") {
		return retrysafe.ErrLeaseLost
	}
	return s.Store.Complete(ctx, p)
}

// TestLogAgreesWithMetrics checks that the request log and the metrics
// give every protected request the same outcome: both read the
// middleware's account. A completion that hit a lost lease was once
// logged as new while counted as lease_lost.
func TestLogAgreesWithMetrics(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	var buf syncBuffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil))
	gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL),
		Store: &lostLeaseStore{storeKinds()[0].open(t)}, Logger: logger})

	key := newKey()
	send(t, gw.URL, "POST", "/payments", key, `{"amount":1}`)                  // new
	send(t, gw.URL, "POST", "/payments", key, `{"amount":1}`)                  // replayed
	send(t, gw.URL, "POST", "/payments", key, `{"amount":2}`)                  // mismatch
	send(t, gw.URL, "POST", "/payments", "a,b", `{}`)                          // invalid key
	send(t, gw.URL, "POST", "/payments", "lost-"+newKey(), `{"a":1}`)          // lease lost
	send(t, gw.URL, "POST", "/payments", "", `{}`)                             // no key: not counted
	send(t, gw.URL, "POST", "/payments", newKey(), strings.Repeat("x", 2<<20)) // too large

	logged := map[string]float64{}
	for _, l := range buf.lines(t) {
		if l["msg"] == "request" {
			logged[l["outcome"].(string)]++
		}
	}
	if logged["lease_lost"] != 1 {
		t.Errorf("logged outcomes %v, want one lease_lost", logged)
	}
	text := string(send(t, gw.AdminURL, "GET", "/metrics", "", "").Body)
	for _, o := range []retrysafe.Outcome{
		retrysafe.OutcomeNew, retrysafe.OutcomeReplayed, retrysafe.OutcomeConflict,
		retrysafe.OutcomeMismatch, retrysafe.OutcomeInvalidKey, retrysafe.OutcomeMissingKey,
		retrysafe.OutcomeUnauthorized, retrysafe.OutcomeTooLarge, retrysafe.OutcomeStoreError,
		retrysafe.OutcomeFailOpen, retrysafe.OutcomeReleased, retrysafe.OutcomeAbandoned,
		retrysafe.OutcomeLeaseLost,
	} {
		series := `retrysafe_requests_total{outcome="` + string(o) + `"}`
		if got := metricValue(t, text, series); got != logged[string(o)] {
			t.Errorf("%s = %v, but %v request(s) logged with outcome %s", series, got, logged[string(o)], o)
		}
	}
	if logged["no_key"] != 1 {
		t.Errorf("logged outcomes %v, want one no_key", logged)
	}
}
