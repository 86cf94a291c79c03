package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/testenv"
)

// TestServeScopeLimits runs the real binary with --scope-rate and a
// route's scope_max_live: a caller past its limit gets 429 scope-limit
// with Retry-After and nothing reaches the upstream, while another caller
// is served; a replay of the limited caller's completed key is never
// refused; the refusals are counted in /metrics.
func TestServeScopeLimits(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	up := newChargeUpstream(t, nil)
	config := filepath.Join(t.TempDir(), "retrysafe.yaml")
	if err := os.WriteFile(config, []byte(`
routes:
  - match: "POST /orders"
    scope_rate: "off"
    scope_max_live: 1
`), 0o600); err != nil {
		t.Fatal(err)
	}
	gw := startServe(t, bin, "--upstream", up.URL, "--store", "memory:", "--config", config,
		"--scope-rate", "1/m", "--scope-burst", "2")
	prefix := fmt.Sprint(time.Now().UnixNano())
	send := func(path, caller, key string) *answer {
		t.Helper()
		req, err := http.NewRequest("POST", gw.url+path, strings.NewReader(`{"amount":10}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+caller)
		req.Header.Set(retrysafe.HeaderKey, prefix+"-"+key)
		resp, err := testenv.HTTPClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return &answer{status: resp.StatusCode, header: resp.Header, body: string(b)}
	}
	refused := func(a *answer, what string) {
		t.Helper()
		var p struct{ Type string }
		_ = json.Unmarshal([]byte(a.body), &p)
		retry, _ := strconv.Atoi(a.header.Get("Retry-After"))
		if a.status != 429 || !strings.HasSuffix(p.Type, "/scope-limit") || a.header.Get("Content-Type") != retrysafe.ContentTypeProblem || retry < 1 {
			t.Fatalf("%s = %d %s (Retry-After %q), want 429 problem scope-limit with Retry-After", what, a.status, a.body, a.header.Get("Retry-After"))
		}
	}

	// The rate (defaults): alice's burst of two, then 429; bob unaffected.
	for _, key := range []string{"a1", "a2"} {
		if a := send("/payments", "alice", key); a.status != 201 {
			t.Fatalf("alice's %s = %d %s, want 201", key, a.status, a.body)
		}
	}
	refused(send("/payments", "alice", "a3"), "alice's third new key within a minute")
	if a := send("/payments", "bob", "b1"); a.status != 201 {
		t.Fatalf("bob's first key while alice is limited = %d %s, want 201", a.status, a.body)
	}
	for range 3 {
		if a := send("/payments", "alice", "a1"); a.status != 201 || a.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("alice's replay of a1 while limited = %d %s (replayed %q), want the stored 201", a.status, a.body, a.header.Get("Idempotent-Replayed"))
		}
	}

	// The route's bound of live keys: one order per caller.
	if a := send("/orders", "alice", "o1"); a.status != 201 {
		t.Fatalf("alice's first order = %d %s, want 201", a.status, a.body)
	}
	refused(send("/orders", "alice", "o2"), "alice's second live order")
	if a := send("/orders", "bob", "o1"); a.status != 201 {
		t.Fatalf("bob's first order = %d %s, want 201", a.status, a.body)
	}
	if a := send("/orders", "alice", "o1"); a.status != 201 || a.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("alice's replay of her order = %d %s, want the stored 201", a.status, a.body)
	}

	if n := up.calls.Load(); n != 5 {
		t.Fatalf("the upstream ran %d times, want 5 (a1, a2, b1, alice's and bob's orders)", n)
	}
	res, err := testenv.HTTPClient.Get(gw.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	metrics, _ := io.ReadAll(res.Body)
	for _, want := range []string{
		`retrysafe_scope_limited_total{limit="rate",route="default"} 1`,
		`retrysafe_scope_limited_total{limit="live",route="POST /orders"} 1`,
	} {
		if !strings.Contains(string(metrics), "\n"+want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestServeScopeLimitFlagErrors: bad limits are usage errors that name
// the flag and say what to write.
func TestServeScopeLimitFlagErrors(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"rate without unit": {[]string{"--scope-rate", "10"}, "--scope-rate: \"10\" is not a rate: write a count per unit, like 10/s"},
		"burst alone":       {[]string{"--scope-burst", "5"}, "--scope-burst needs --scope-rate"},
		"negative live":     {[]string{"--scope-max-live", "-1"}, "--scope-max-live must not be negative"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr strings.Builder
			args := append([]string{"serve", "--upstream", "http://127.0.0.1:1", "--store", "memory:"}, tc.args...)
			if code := run(t.Context(), args, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("exit %d, stderr:\n%s\nwant 2 and %q", code, stderr.String(), tc.want)
			}
		})
	}
}
