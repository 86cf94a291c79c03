package gateway_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/gateway"
)

// rawClient sends exactly the Accept-Encoding a test sets (none when it
// sets none) and never decodes the answer.
var rawClient = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableCompression: true}}

func sendAE(t *testing.T, url, key, ae string) *result {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"amount":5}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(retrysafe.HeaderKey, key)
	req.Header.Set("Authorization", "Bearer test-caller")
	if ae != "-" {
		req.Header["Accept-Encoding"] = []string{ae}
	}
	resp, err := rawClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return &result{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// TestReplayContentCodingThroughGateway: an upstream that gzips when asked
// to; the gateway offers it only codings it can decode, stores its gzip
// answer, and replays it decoded to retries that do not accept gzip.
func TestReplayContentCodingThroughGateway(t *testing.T) {
	t.Parallel()
	plain := []byte(strings.Repeat(`{"charge":"ch_1","amount":5}`, 100))
	var (
		mu      sync.Mutex
		offered []string
		calls   atomic.Int64
	)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		ae := r.Header.Get("Accept-Encoding")
		mu.Lock()
		offered = append(offered, ae)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Vary", "Accept-Encoding")
		w.Header().Set("ETag", `"v1"`)
		if !strings.Contains(ae, "gzip") {
			w.WriteHeader(http.StatusCreated)
			w.Write(plain)
			return
		}
		w.Header().Set("Content-Encoding", "gzip")
		w.WriteHeader(http.StatusCreated)
		zw := gzip.NewWriter(w)
		zw.Write(plain)
		zw.Close()
	}))
	t.Cleanup(up.Close)
	gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: storeKinds()[0].open(t)})
	url := gw.URL + "/payments"
	key := newKey()

	first := sendAE(t, url, key, "gzip, deflate, br, zstd")
	if first.Status != http.StatusCreated || first.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("first = %d Content-Encoding %q, want the upstream's gzip answer", first.Status, first.Header.Get("Content-Encoding"))
	}
	if offered[0] != "gzip, deflate" {
		t.Errorf("upstream was offered Accept-Encoding %q, want gzip, deflate", offered[0])
	}
	stored := first.Body

	for _, ae := range []string{"identity", "gzip;q=0", "*;q=0, identity"} {
		r := sendAE(t, url, key, ae)
		if r.Status != http.StatusCreated || r.Header.Get(retrysafe.HeaderReplayed) != "true" ||
			r.Header.Get("Content-Encoding") != "" || !bytes.Equal(r.Body, plain) ||
			r.Header.Get("Content-Length") != strconv.Itoa(len(plain)) || r.Header.Get("ETag") != `W/"v1"` ||
			r.Header.Get("Vary") != "Accept-Encoding" {
			t.Errorf("Accept-Encoding %q: %d %v %.40q, want the decoded body as a replay", ae, r.Status, r.Header, r.Body)
		}
	}
	// No Accept-Encoding: any coding is acceptable (RFC 9110 §12.5.3).
	for _, ae := range []string{"-", "gzip"} {
		r := sendAE(t, url, key, ae)
		if r.Status != http.StatusCreated || r.Header.Get("Content-Encoding") != "gzip" || !bytes.Equal(r.Body, stored) {
			t.Errorf("Accept-Encoding %q: %d %q, want the stored gzip bytes", ae, r.Status, r.Header.Get("Content-Encoding"))
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("upstream calls = %d, want 1", n)
	}
}

// TestConflictAfterUnknownUpstreamOutcome: after the gateway answered
// 502/504 upstream-outcome-unknown, the record is marked abandoned, so a
// retry gets 409 outcome-unknown at once with Retry-After = the lease
// left, and after the lease the operation runs again.
func TestConflictAfterUnknownUpstreamOutcome(t *testing.T) {
	t.Parallel()
	for _, k := range storeKinds() {
		for _, path := range []string{"/hangup", "/sleep/2000"} {
			t.Run(k.name+path, func(t *testing.T) {
				t.Parallel()
				t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
				var mu sync.Mutex
				now := t0
				clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
				set := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = t0.Add(d) }
				up := newUpstream(t)
				gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: k.open(t), Now: clock,
					UpstreamTimeout: 300 * time.Millisecond, Defaults: gateway.Policy{Lease: 30 * time.Second}})
				key := newKey()
				res := send(t, gw.URL, "POST", path, key, `{"amount":1}`)
				if res.Status != 502 && res.Status != 504 || problemType(t, res) != gateway.ProblemOutcomeUnknown || res.Header.Get("Retry-After") != "30" {
					t.Fatalf("first = %s Retry-After %q, want 502/504 upstream-outcome-unknown, 30", res, res.Header.Get("Retry-After"))
				}

				set(5 * time.Second)
				res = send(t, gw.URL, "POST", path, key, `{"amount":1}`)
				if res.Status != 409 || problemType(t, res) != retrysafe.ProblemOutcomeUnknown || res.Header.Get("Retry-After") != "25" {
					t.Fatalf("retry 5s later = %s Retry-After %q, want 409 outcome-unknown, 25 (the record is marked abandoned)", res, res.Header.Get("Retry-After"))
				}

				set(20 * time.Second)
				res = send(t, gw.URL, "POST", path, key, `{"amount":1}`)
				if res.Status != 409 || problemType(t, res) != retrysafe.ProblemOutcomeUnknown || res.Header.Get("Retry-After") != "10" {
					t.Fatalf("retry 20s later = %s Retry-After %q, want 409 outcome-unknown, 10", res, res.Header.Get("Retry-After"))
				}
				var p retrysafe.Problem
				if err := json.Unmarshal(res.Body, &p); err != nil || !strings.Contains(p.Detail, "2026-01-01T00:00:30Z") {
					t.Errorf("detail %q (%v) does not name the lease end", p.Detail, err)
				}
				if n := up.calls.Load(); n != 1 && path == "/hangup" {
					t.Fatalf("upstream calls = %d, want 1", n)
				}

				set(30 * time.Second)
				res = send(t, gw.URL, "POST", path, key, `{"amount":1}`)
				if res.Status == 409 {
					t.Fatalf("retry after the lease = %s, want it to run again", res)
				}
			})
		}
	}
}
