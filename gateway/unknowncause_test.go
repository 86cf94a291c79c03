package gateway_test

import (
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/gateway"
	"github.com/retrysafe/retrysafe/webhook"
)

// causeUpstream answers POST /timeout slowly (past the gateway's upstream
// timeout) on its first call and at once after; hangs up on every POST
// /hangup after reading it; answers POST /ok at once. It keeps the
// Idempotency-Attempt of each call, by path.
type causeUpstream struct {
	*httptest.Server
	mu       sync.Mutex
	attempts map[string][]string
}

func newCauseUpstream(t *testing.T) *causeUpstream {
	u := &causeUpstream{attempts: map[string][]string{}}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.attempts[r.URL.Path] = append(u.attempts[r.URL.Path], r.Header.Get(gateway.HeaderAttempt))
		n := len(u.attempts[r.URL.Path])
		u.mu.Unlock()
		switch {
		case r.URL.Path == "/timeout" && n == 1:
			time.Sleep(time.Second)
		case r.URL.Path == "/hangup":
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				conn.Close()
			}
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"call":%d}`, n)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *causeUpstream) seen(path string) string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return fmt.Sprint(u.attempts[path])
}

// unknownRow returns the overview's rows (the record's and its lookup
// line) of the unknown outcome key, "" when it is not listed.
func unknownRow(page, key string) string {
	start, end := strings.Index(page, `id="unknown"`), strings.Index(page, `id="rates"`)
	if start < 0 || end < start {
		return ""
	}
	for _, row := range strings.Split(page[start:end], `<tr class="state-unknown">`)[1:] {
		if strings.Contains(row, ">"+html.EscapeString(key)+"</a>") {
			return row
		}
	}
	return ""
}

// TestUnknownOutcomesSayWhy: the gateway records why each attempt it
// abandons is unknown (a timeout, a connection cut after the request was
// sent), the operator page lists every unknown outcome with its route,
// attempt, age, cause and the header fields to look it up at the upstream
// by, also the ones the gateway did not record (a handler panic, a lease
// that ran out, a cause left by an earlier attempt), and each takeover
// after an unknown outcome is counted by route and cause.
func TestUnknownOutcomesSayWhy(t *testing.T) {
	t.Parallel()
	for _, kind := range storeKinds()[:2] { // memory, sqlite
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			testUnknownOutcomesSayWhy(t, kind.open(t))
		})
	}
}

func testUnknownOutcomesSayWhy(t *testing.T, store retrysafe.Store) {
	up := newCauseUpstream(t)
	secrets := filepath.Join(t.TempDir(), "github")
	writeSecrets(t, secrets, "It's a Secret to Everybody")
	const lease = time.Second
	gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: store,
		UpstreamTimeout: 300 * time.Millisecond, Defaults: gateway.Policy{Lease: lease},
		Routes: []gateway.Route{
			{Pattern: "POST /hangup", Policy: gateway.Policy{Lease: lease}},
			{Pattern: "POST /hooks/github", Policy: gateway.Policy{Webhook: &gateway.WebhookPolicy{Scheme: webhook.GitHub, SecretsFile: secrets}}},
		}})
	ctx := t.Context()
	now := time.Now()
	body := `{"amount":1}`

	kTimeout, kHangup := newKey(), newKey()
	start := time.Now()
	if res := send(t, gw.URL, "POST", "/timeout", kTimeout, body); res.Status != http.StatusGatewayTimeout {
		t.Fatalf("POST /timeout = %s, want 504", res)
	}
	if res := send(t, gw.URL, "POST", "/hangup", kHangup, body); res.Status != http.StatusBadGateway {
		t.Fatalf("POST /hangup = %s, want 502", res)
	}
	// The cause is written with the abandon, which leaves the lease as the
	// last renewal set it (a renewal then would hold the key a lease longer).
	got, err := store.Get(ctx, &retrysafe.GetParams{Scope: testScope, Key: kTimeout, Now: time.Now()})
	if err != nil || !got.Abandoned || got.Checkpoint == nil || !got.LeaseUntil.Before(got.Checkpoint.At.Add(lease)) {
		t.Fatalf("record after the timeout: %+v, %v; want abandoned, its cause noted, its lease not renewed by the note", got, err)
	}
	// Records the gateway did not end: one whose owner stopped (its lease
	// ran out an hour ago, on /ok, so that a retry takes it over), one
	// abandoned without a cause (the middleware's handler panic), one
	// whose cause belongs to the attempt before it, one of a webhook route.
	kLease, kPanic, kStale, kHook := newKey(), newKey(), newKey(), "d-"+randomHex(6)
	claim := func(key, fp, route string, at time.Time) *retrysafe.Record {
		t.Helper()
		res, err := store.Claim(ctx, &retrysafe.ClaimParams{Scope: testScope, Key: key, Fingerprint: fp,
			Token: retrysafe.NewToken(), Now: at, Lease: time.Minute, Route: route})
		if err != nil || !res.Claimed {
			t.Fatalf("claim %s: %+v, %v", key, res, err)
		}
		return res.Record
	}
	claim(kLease, retrysafe.Fingerprint("POST", "/ok", "", []byte(body), nil), "", now.Add(-time.Hour-time.Minute))
	rec := claim(kPanic, "fp", "", now.Add(-10*time.Second))
	if err := store.Extend(ctx, &retrysafe.ExtendParams{Scope: testScope, Key: kPanic, Token: rec.Token, Now: now.Add(-5 * time.Second), Abandon: true}); err != nil {
		t.Fatal(err)
	}
	rec = claim(kStale, "fp", "", now.Add(-3*time.Hour))
	if err := store.Extend(ctx, &retrysafe.ExtendParams{Scope: testScope, Key: kStale, Token: rec.Token, Now: now.Add(-3 * time.Hour), Lease: time.Minute,
		Checkpoint: &retrysafe.Checkpoint{Name: "gateway-unknown attempt=1 cause=timeout"}}); err != nil {
		t.Fatal(err)
	}
	if rec := claim(kStale, "fp", "", now.Add(-2*time.Hour)); rec.Attempt != 2 {
		t.Fatalf("takeover of %s: attempt %d, want 2", kStale, rec.Attempt)
	}
	claim(kHook, "fp", "POST /hooks/github", now.Add(-time.Hour))

	code, page := newUIEnvClient(&uiEnv{gw: gw}).get(t, "/ui/")
	if code != http.StatusOK {
		t.Fatalf("overview: %d", code)
	}
	for _, tc := range []struct {
		key  string
		want []string
	}{
		{kTimeout, []string{`default</span></td>`, `<td class="attempt">1<`, "upstream timeout", "cause-timeout",
			`<code>Idempotency-Key: ` + kTimeout + `</code> with <code>Idempotency-Attempt: 1</code>`, "s ago"}},
		{kHangup, []string{`<td class="route">POST /hangup<`, `<td class="attempt">1<`, "cut after send", "cause-cut_after_send",
			`<code>Idempotency-Key: ` + kHangup + `</code> with <code>Idempotency-Attempt: 1</code>`}},
		{kLease, []string{`<td class="attempt">1<`, "lease ran out", "1h0m", `<code>Idempotency-Attempt: 1</code>`}},
		{kPanic, []string{"abandoned by a handler panic", `title="` + now.Add(-5*time.Second).UTC().Format("2006-01-02 15:04:05Z")}},
		{kStale, []string{`<td class="attempt">2<`, "lease ran out", `<code>Idempotency-Attempt: 2</code>`}},
		{kHook, []string{`<td class="route">POST /hooks/github<`, `<code>X-GitHub-Delivery: ` + kHook + `</code> with <code>Idempotency-Attempt: 1</code>`}},
	} {
		row := unknownRow(page, tc.key)
		if row == "" {
			t.Errorf("the overview does not list %s as an unknown outcome", tc.key)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(row, w) {
				t.Errorf("the overview's row of %s lacks %q:\n%s", tc.key, w, row)
			}
		}
	}
	if row := unknownRow(page, kStale); strings.Contains(row, "upstream timeout") {
		t.Errorf("attempt 2 of %s shows attempt 1's cause:\n%s", kStale, row)
	}
	// The record page says the same.
	_, rp := newUIEnvClient(&uiEnv{gw: gw}).get(t, "/ui/record?scope="+testScope+"&key="+kTimeout)
	if !strings.Contains(rp, `id="rec-cause"`) || !strings.Contains(rp, "upstream timeout") || !strings.Contains(rp, "Idempotency-Attempt: 1") {
		t.Errorf("the record page of %s lacks the cause or the lookup", kTimeout)
	}

	// After the lease, the retries take the records over: each is counted
	// by its route and by how the attempt before it ended.
	time.Sleep(time.Until(start.Add(lease)))
	var res *result
	eventually(t, 10*time.Second, "the takeover", func() bool {
		res = send(t, gw.URL, "POST", "/timeout", kTimeout, body)
		return res.Status != http.StatusConflict
	})
	if res.Status != http.StatusCreated || up.seen("/timeout") != "[1 2]" {
		t.Fatalf("retry of /timeout = %s, attempts %s; want 201 from attempt 2", res, up.seen("/timeout"))
	}
	eventually(t, 10*time.Second, "the takeover", func() bool {
		res = send(t, gw.URL, "POST", "/hangup", kHangup, body)
		return res.Status != http.StatusConflict
	})
	if res.Status != http.StatusBadGateway || up.seen("/hangup") != "[1 2]" {
		t.Fatalf("retry of /hangup = %s, attempts %s; want 502 from attempt 2", res, up.seen("/hangup"))
	}
	if res := send(t, gw.URL, "POST", "/ok", kLease, body); res.Status != http.StatusCreated || up.seen("/ok") != "[2]" {
		t.Fatalf("retry of /ok = %s, attempts %s; want 201 from attempt 2", res, up.seen("/ok"))
	}
	text := string(send(t, gw.AdminURL, "GET", "/metrics", "", "").Body)
	for series, want := range map[string]float64{
		`retrysafe_unknown_takeovers_total{cause="timeout",route="default"}`:                  1,
		`retrysafe_unknown_takeovers_total{cause="lease_expired",route="default"}`:            1,
		`retrysafe_unknown_takeovers_total{cause="cut_after_send",route="default"}`:           0,
		`retrysafe_unknown_takeovers_total{cause="cut_after_send",route="POST /hangup"}`:      1,
		`retrysafe_unknown_takeovers_total{cause="timeout",route="POST /hangup"}`:             0,
		`retrysafe_unknown_takeovers_total{cause="lease_expired",route="POST /hooks/github"}`: 0,
	} {
		if got := metricValue(t, text, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	// The second cut is attempt 2's own cause.
	_, page = newUIEnvClient(&uiEnv{gw: gw}).get(t, "/ui/")
	if row := unknownRow(page, kHangup); !strings.Contains(row, `<td class="attempt">2<`) || !strings.Contains(row, "cut after send") ||
		!strings.Contains(row, "Idempotency-Attempt: 2") {
		t.Errorf("after the second cut, the row of %s:\n%s", kHangup, row)
	}
	if unknownRow(page, kTimeout) != "" || unknownRow(page, kLease) != "" {
		t.Error("records completed by their takeover are still listed as unknown")
	}
}
