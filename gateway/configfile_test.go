package gateway_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/gateway"
)

const exampleConfig = `
routes:
  - match: "POST /payments"
    require_key: true
    ttl: 48h
    lease: 1m
    in_flight: wait
    wait_timeout: 15s
    max_body: 64KiB
    max_response_body: 1MiB
    ignore_fields: ["/meta/requestedAt"]
    store_statuses: ["2xx", "4xx", 500]
    scope_header: X-Api-Key
    on_unknown: block
    resolve_url: http://svc:3000/idempotency/resolve
    resolve_timeout: 2s
  - match: "/orders/{id}/refunds"
    methods: [post, put]
  - match: "POST /webhooks/"
    protect: false
`

func TestParseConfig(t *testing.T) {
	t.Parallel()
	defaults := gateway.DefaultPolicy()
	routes, err := gateway.ParseConfig([]byte(exampleConfig), defaults)
	if err != nil {
		t.Fatal(err)
	}
	statuses, _ := gateway.ParseStatusSet([]string{"2xx", "4xx", "500"})
	want := []gateway.Route{
		{Pattern: "POST /payments", Policy: gateway.Policy{
			Methods: []string{"POST"}, RequireKey: true, TTL: 48 * time.Hour, Lease: time.Minute,
			InFlight: retrysafe.InFlightWait, WaitTimeout: 15 * time.Second, MaxBody: 64 << 10, MaxResponseBody: 1 << 20,
			IgnoreFields: []string{"/meta/requestedAt"}, StoreStatuses: statuses, ScopeHeaders: []string{"X-Api-Key"},
			OnUnknown: retrysafe.OnUnknownBlock, ResolveURL: mustURL(t, "http://svc:3000/idempotency/resolve"), ResolveTimeout: 2 * time.Second,
		}},
		{Pattern: "/orders/{id}/refunds", Policy: func() gateway.Policy {
			p := defaults
			p.Methods = []string{"POST", "PUT"}
			p.IgnoreFields = []string{}
			return p
		}()},
		{Pattern: "POST /webhooks/", Policy: func() gateway.Policy {
			p := defaults
			p.Methods = []string{"POST"}
			p.IgnoreFields = []string{}
			p.Bypass = true
			return p
		}()},
	}
	for i := range want {
		if i >= len(routes) {
			t.Fatalf("got %d routes, want %d", len(routes), len(want))
		}
		if len(routes[i].Policy.IgnoreFields) == 0 {
			routes[i].Policy.IgnoreFields = []string{}
		}
		if !reflect.DeepEqual(routes[i], want[i]) {
			t.Errorf("route %d:\n got %+v\nwant %+v", i, routes[i], want[i])
		}
	}
}

// TestParseConfigErrors checks that every invalid config fails with a
// message naming the route and the field.
func TestParseConfigErrors(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		yaml string
		want []string // substrings of the error
	}{
		"unknown route field": {
			yaml: "routes:\n  - match: \"POST /payments\"\n    tll: 1h\n",
			want: []string{"line 3", `routes[0] ("POST /payments")`, "unknown field tll", "known fields", "ttl"},
		},
		"unknown top-level field": {
			yaml: "route:\n  - match: \"POST /payments\"\n",
			want: []string{"line 1", "unknown top-level field route"},
		},
		"bad in_flight": {
			yaml: "routes:\n  - match: \"POST /a\"\n  - match: \"POST /payments\"\n    in_flight: queue\n",
			want: []string{"line 3", `routes[1] ("POST /payments")`, "in_flight", `"queue"`, "conflict", "wait"},
		},
		"bad pattern": {
			yaml: "routes:\n  - match: \"POST payments\"\n",
			want: []string{`routes[0] ("POST payments")`, "match"},
		},
		"conflicting patterns": {
			yaml: "routes:\n  - match: \"POST /payments/{id}\"\n  - match: \"POST /payments/{key}\"\n",
			want: []string{`routes[1] ("POST /payments/{key}")`, "match", "conflicts"},
		},
		"bad pointer": {
			yaml: "routes:\n  - match: \"POST /payments\"\n    ignore_fields: [\"/ok\", \"meta/at\"]\n",
			want: []string{`routes[0] ("POST /payments")`, "ignore_fields[1]", `"meta/at"`},
		},
		"bad duration": {
			yaml: "routes:\n  - match: \"POST /payments\"\n    ttl: 30\n",
			want: []string{`routes[0]`, "ttl", `"30"`, "unit"},
		},
		"negative duration": {
			yaml: "routes:\n  - match: \"POST /payments\"\n    lease: -5s\n",
			want: []string{"lease", `"-5s"`},
		},
		"bad size": {
			yaml: "routes:\n  - match: \"POST /payments\"\n    max_body: lots\n",
			want: []string{"max_body", `"lots"`},
		},
		"bad status": {
			yaml: "routes:\n  - match: \"POST /payments\"\n    store_statuses: [\"2xx\", \"6xx\"]\n",
			want: []string{"store_statuses", `"6xx"`},
		},
		"wrong type": {
			yaml: "routes:\n  - match: \"POST /payments\"\n    require_key: maybe\n",
			want: []string{"line 3", `routes[0] ("POST /payments")`, "require_key", "bool"},
		},
		"missing match": {
			yaml: "routes:\n  - require_key: true\n",
			want: []string{"routes[0]", "match: required"},
		},
		"bad scope header": {
			yaml: "routes:\n  - match: \"POST /payments\"\n    scope_header: \"X Api\"\n",
			want: []string{"scope_header", `"X Api"`},
		},
		"bad method": {
			yaml: "routes:\n  - match: \"/payments\"\n    methods: [\"PO ST\"]\n",
			want: []string{"methods", `"PO ST"`},
		},
		"bad on_unknown": {
			yaml: "routes:\n  - match: \"POST /payments\"\n    on_unknown: retry\n",
			want: []string{`routes[0] ("POST /payments")`, "on_unknown", `"retry"`, "takeover", "block"},
		},
		"bad resolve_url": {
			yaml: "routes:\n  - match: \"POST /payments\"\n    resolve_url: /resolve\n",
			want: []string{`routes[0] ("POST /payments")`, "resolve_url", `"/resolve"`, "http://"},
		},
		"bad resolve_timeout": {
			yaml: "routes:\n  - match: \"POST /payments\"\n    resolve_timeout: 0s\n",
			want: []string{"resolve_timeout", `"0s"`, "positive"},
		},
		"invalid yaml": {
			yaml: "routes: [\n",
			want: []string{"invalid YAML"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := gateway.ParseConfig([]byte(tc.yaml), gateway.DefaultPolicy())
			if err == nil {
				t.Fatal("ParseConfig succeeded, want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestLoadConfigFileNamesTheFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "retrysafe.yaml")
	if err := os.WriteFile(path, []byte("routes:\n  - match: \"POST /p\"\n    bogus: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := gateway.LoadConfigFile(path, gateway.DefaultPolicy())
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("LoadConfigFile = %v, want an error naming the file and the field", err)
	}
	if _, err := gateway.LoadConfigFile(filepath.Join(t.TempDir(), "missing.yaml"), gateway.DefaultPolicy()); err == nil {
		t.Fatal("a missing file loaded")
	}
}

func TestParseStatusSet(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		in      []string
		members []int
		others  []int
		err     bool
	}{
		"classes": {in: []string{"2xx", "4XX"}, members: []int{200, 201, 299, 400, 499}, others: []int{199, 300, 500}},
		"codes":   {in: []string{"201", " 409 "}, members: []int{201, 409}, others: []int{200, 410}},
		"bad":     {in: []string{"2x"}, err: true},
		"range":   {in: []string{"600"}, err: true},
		"class 6": {in: []string{"6xx"}, err: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			set, err := gateway.ParseStatusSet(tc.in)
			if (err != nil) != tc.err {
				t.Fatalf("err = %v, want error %v", err, tc.err)
			}
			for _, c := range tc.members {
				if !set.Contains(c) {
					t.Errorf("%v does not contain %d", set, c)
				}
			}
			for _, c := range tc.others {
				if set.Contains(c) {
					t.Errorf("%v contains %d", set, c)
				}
			}
		})
	}
}

func TestParseSize(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		in   string
		want int64
		err  bool
	}{
		"bytes": {in: "1048576", want: 1 << 20},
		"KiB":   {in: "64KiB", want: 64 << 10},
		"MB":    {in: "2 MB", want: 2e6},
		"zero":  {in: "0", err: true},
		"word":  {in: "big", err: true},
		"neg":   {in: "-1", err: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := gateway.ParseSize(tc.in)
			if (err != nil) != tc.err || got != tc.want {
				t.Fatalf("ParseSize(%q) = %d, %v; want %d (error %v)", tc.in, got, err, tc.want, tc.err)
			}
		})
	}
}

// TestRoutes checks that per-route policies apply to the requests that
// match them, and the defaults to the rest.
func TestRoutes(t *testing.T) {
	t.Parallel()
	routes, err := gateway.ParseConfig([]byte(`
routes:
  - match: "POST /payments"
    require_key: true
  - match: "POST /orders/{id}/refunds"
    require_key: true
    ignore_fields: ["/meta/requestedAt"]
  - match: "POST /other"
    protect: false
`), gateway.DefaultPolicy())
	if err != nil {
		t.Fatal(err)
	}
	up := newUpstream(t)
	gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: storeKinds()[0].open(t),
		Defaults: gateway.DefaultPolicy(), Routes: routes})

	// Key required on /payments, also through a path that cleans to it.
	for _, path := range []string{"/payments", "//payments", "/x/../payments"} {
		if res := send(t, gw.URL, "POST", path, "", `{}`); res.Status != 400 {
			t.Errorf("POST %s without key = %s, want 400", path, res)
		}
	}
	// Default policy elsewhere: the key is optional.
	if res := send(t, gw.URL, "PATCH", "/payments/1", "", `{}`); res.Status != 201 {
		t.Errorf("PATCH /payments/1 without key = %s, want pass-through", res)
	}
	// Wildcard route, with a field ignored in the fingerprint.
	key := newKey()
	first := send(t, gw.URL, "POST", "/orders/7/refunds", key, `{"amount":5,"meta":{"requestedAt":"10:00"}}`)
	again := send(t, gw.URL, "POST", "/orders/7/refunds", key, `{"amount":5,"meta":{"requestedAt":"10:01"}}`)
	if first.Status != 201 || again.Header.Get(retrysafe.HeaderReplayed) != "true" {
		t.Errorf("refund retry with another requestedAt = %s, want replay", again)
	}
	if res := send(t, gw.URL, "POST", "/orders/8/refunds", key, `{"amount":5}`); res.Status != 422 {
		t.Errorf("same key on another order = %s, want 422", res)
	}
	// Unprotected route: runs every time even with a key.
	k2 := newKey()
	before := up.calls.Load()
	send(t, gw.URL, "POST", "/other", k2, `{}`)
	send(t, gw.URL, "POST", "/other", k2, `{}`)
	if n := up.calls.Load() - before; n != 2 {
		t.Errorf("unprotected route ran %d times, want 2", n)
	}
}
