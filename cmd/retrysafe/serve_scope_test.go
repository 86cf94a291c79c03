package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/testenv"
)

// postAs sends a keyed POST with exactly the given header lines
// ("Name: value"): unlike post, no Authorization unless one is given.
func postAs(t *testing.T, url, key, body string, lines ...string) *answer {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), "POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(retrysafe.HeaderKey, key)
	for _, l := range lines {
		k, v, _ := strings.Cut(l, ": ")
		req.Header.Add(k, v)
	}
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

// TestServeScopes runs the binary: callers without Authorization are kept
// apart by a named cookie or a second header, and a keyed request with no
// scope at all is refused (400 empty-scope) and runs nothing, unless
// --allow-empty-scope, which the gateway warns about at start.
func TestServeScopes(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	body := `{"amount":10}`

	t.Run("cookie", func(t *testing.T) {
		t.Parallel()
		up := newChargeUpstream(t, nil)
		gw := startServe(t, bin, "--upstream", up.URL, "--store", "memory:", "--scope-cookie", "session")
		alice := postAs(t, gw.url+"/orders", "order-1", body, "Cookie: session=alice-s3cr3t; _ga=GA1.1.100")
		bob := postAs(t, gw.url+"/orders", "order-1", body, "Cookie: session=bob-s3cr3t; _ga=GA1.1.100")
		if alice.status != 201 || bob.status != 201 || alice.body == bob.body || bob.header.Get(retrysafe.HeaderReplayed) != "" {
			t.Fatalf("two sessions, same key and body: %d %s / %d %s (replayed %q); want two executions",
				alice.status, alice.body, bob.status, bob.body, bob.header.Get(retrysafe.HeaderReplayed))
		}
		// A refreshed analytics cookie, in another order: still alice.
		again := postAs(t, gw.url+"/orders", "order-1", body, "Cookie: _ga=GA1.1.999; theme=dark; session=alice-s3cr3t")
		if again.body != alice.body || again.header.Get(retrysafe.HeaderReplayed) != "true" {
			t.Errorf("alice with a changed analytics cookie: %d %s (replayed %q); want her replay %s",
				again.status, again.body, again.header.Get(retrysafe.HeaderReplayed), alice.body)
		}
		if n := up.calls.Load(); n != 2 {
			t.Errorf("upstream ran %d times, want 2 (one per session)", n)
		}
	})

	t.Run("second header", func(t *testing.T) {
		t.Parallel()
		up := newChargeUpstream(t, nil)
		gw := startServe(t, bin, "--upstream", up.URL, "--store", "memory:", "--scope-header", "Authorization,Stripe-Account")
		platform := "Authorization: Bearer sk_platform"
		a := postAs(t, gw.url+"/charges", "charge-1", body, platform, "Stripe-Account: acct_A")
		b := postAs(t, gw.url+"/charges", "charge-1", body, platform, "Stripe-Account: acct_B")
		if a.status != 201 || b.status != 201 || a.body == b.body {
			t.Errorf("one platform key, two accounts: %d %s / %d %s; want two executions", a.status, a.body, b.status, b.body)
		}
		if again := postAs(t, gw.url+"/charges", "charge-1", body, platform, "Stripe-Account: acct_A"); again.body != a.body || again.header.Get(retrysafe.HeaderReplayed) != "true" {
			t.Errorf("retry of acct_A: %d %s, want its replay", again.status, again.body)
		}
	})

	t.Run("empty scope refused", func(t *testing.T) {
		t.Parallel()
		up := newChargeUpstream(t, nil)
		gw := startServe(t, bin, "--upstream", up.URL, "--store", "memory:")
		for range 2 {
			a := postAs(t, gw.url+"/payments", "anon-1", body, "Cookie: session=alice")
			if a.status != 400 || !strings.Contains(a.body, retrysafe.ProblemEmptyScope) || !strings.Contains(a.body, "Authorization header") {
				t.Fatalf("keyed request without a scope: %d %s, want 400 empty-scope naming the Authorization header", a.status, a.body)
			}
		}
		if n := up.calls.Load(); n != 0 {
			t.Errorf("upstream ran %d times, want 0", n)
		}
		res, err := testenv.HTTPClient.Get(gw.admin + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		metrics, _ := io.ReadAll(res.Body)
		if !strings.Contains(string(metrics), `retrysafe_requests_total{outcome="empty_scope"} 2`) {
			t.Errorf("metrics lack retrysafe_requests_total{outcome=\"empty_scope\"} 2:\n%s", grepLines(string(metrics), "retrysafe_requests_total"))
		}
		if strings.Contains(gw.stderr.String(), "empty scopes allowed") {
			t.Error("a gateway that refuses empty scopes warns that it allows them")
		}
	})

	t.Run("allow empty scope", func(t *testing.T) {
		t.Parallel()
		up := newChargeUpstream(t, nil)
		gw := startServe(t, bin, "--upstream", up.URL, "--store", "memory:", "--allow-empty-scope")
		a := postAs(t, gw.url+"/payments", "anon-1", body)
		again := postAs(t, gw.url+"/payments", "anon-1", body)
		if a.status != 201 || again.header.Get(retrysafe.HeaderReplayed) != "true" || up.calls.Load() != 1 {
			t.Errorf("--allow-empty-scope: %d %s, retry replayed %q, %d runs; want 201, a replay, 1 run",
				a.status, a.body, again.header.Get(retrysafe.HeaderReplayed), up.calls.Load())
		}
		if n := strings.Count(gw.stderr.String(), "empty scopes allowed"); n != 1 {
			t.Errorf("%d empty-scope warnings at start, want 1:\n%s", n, gw.stderr)
		}
	})
}

func grepLines(text, substr string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return fmt.Sprint(strings.Join(out, "\n"))
}

func TestServeScopeFlagErrors(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"bad header":    {[]string{"--scope-header", "Authorization,X Y"}, `--scope-header: "X Y" is not a header name`},
		"no scope":      {[]string{"--scope-header", ""}, "--scope-header is empty and there is no --scope-cookie"},
		"bad cookie":    {[]string{"--scope-cookie", "a=b"}, `--scope-cookie: "a=b" is not a cookie name`},
		"bad dialect":   {[]string{"--error-dialect", "graphql"}, `--error-dialect: "graphql" is not "problem" or "stripe"`},
		"cookie enough": {[]string{"--scope-header", "", "--scope-cookie", "session", "--error-dialect", "nope"}, "--error-dialect"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr strings.Builder
			args := append([]string{"serve", "--upstream", "http://127.0.0.1:1", "--store", "memory:"}, tc.args...)
			if code := run(context.Background(), args, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, stderr.String(), tc.want)
			}
		})
	}
}
