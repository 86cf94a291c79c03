package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
)

func TestParseResolveReply(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		raw     string
		outcome string
		status  int
		body    string
		why     string // a substring of the reason, for unknown
	}{
		"done":              {raw: `{"outcome":"done","status":201,"headers":{"Content-Type":["application/json"]},"body":"eyJpZCI6MX0="}`, outcome: resolveDone, status: 201, body: `{"id":1}`},
		"done without body": {raw: `{"outcome":"done","status":204}`, outcome: resolveDone, status: 204},
		"not done":          {raw: `{"outcome":"not_done"}`, outcome: resolveNotDone},
		"unknown":           {raw: `{"outcome":"unknown"}`, outcome: resolveUnknown, why: "says unknown"},
		"other outcome":     {raw: `{"outcome":"maybe"}`, outcome: resolveUnknown, why: `"maybe"`},
		"no outcome":        {raw: `{}`, outcome: resolveUnknown, why: `outcome ""`},
		"not json":          {raw: `<html>ok</html>`, outcome: resolveUnknown, why: "not the JSON object"},
		"two values":        {raw: `{"outcome":"not_done"} {"outcome":"done"}`, outcome: resolveUnknown, why: "more than one"},
		"bad status":        {raw: `{"outcome":"done","status":42}`, outcome: resolveUnknown, why: "status 42"},
		"no status":         {raw: `{"outcome":"done"}`, outcome: resolveUnknown, why: "status 0"},
		"bad base64":        {raw: `{"outcome":"done","status":200,"body":"%%%"}`, outcome: resolveUnknown, why: "not base64"},
		"body too large":    {raw: `{"outcome":"done","status":200,"body":"AAAAAAAAAAAA"}`, outcome: resolveUnknown, why: "over the route's max_response_body"},
		"bad header name":   {raw: `{"outcome":"done","status":200,"headers":{"X Y":["1"]}}`, outcome: resolveUnknown, why: "header name"},
		"header with CRLF":  {raw: `{"outcome":"done","status":200,"headers":{"X-Y":["a\r\nSet-Cookie: x"]}}`, outcome: resolveUnknown, why: "control character"},
		"wrong types":       {raw: `{"outcome":"done","status":"201"}`, outcome: resolveUnknown, why: "not the JSON object"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			a := parseResolveReply([]byte(tc.raw), 8)
			if a.outcome != tc.outcome {
				t.Fatalf("outcome = %q (%s), want %q", a.outcome, a.why, tc.outcome)
			}
			if tc.outcome == resolveUnknown && !strings.Contains(a.why, tc.why) {
				t.Fatalf("why = %q, want it to contain %q", a.why, tc.why)
			}
			if tc.outcome == resolveDone && (a.resp.Status != tc.status || string(a.resp.Body) != tc.body) {
				t.Fatalf("response = %d %q, want %d %q", a.resp.Status, a.resp.Body, tc.status, tc.body)
			}
		})
	}
}

// TestParseResolveReplyDropsUnstoredHeaders: a resolver's Set-Cookie or
// hop-by-hop header is not stored for replay, like an upstream's.
func TestParseResolveReplyDropsUnstoredHeaders(t *testing.T) {
	t.Parallel()
	a := parseResolveReply([]byte(`{"outcome":"done","status":201,"headers":{"set-cookie":["s=1"],"Connection":["close"],"location":["/p/1"]}}`), 1<<20)
	if a.outcome != resolveDone {
		t.Fatalf("outcome = %q (%s)", a.outcome, a.why)
	}
	if got := a.resp.Header; len(got) != 1 || got.Get("Location") != "/p/1" {
		t.Fatalf("stored headers = %v, want only Location", got)
	}
}

// TestResolverAsk checks the call on the wire: POST to the URL with the
// retry's headers (Authorization among them, not its body's), the key, the
// attempt, JSON; and the body of the protocol.
func TestResolverAsk(t *testing.T) {
	t.Parallel()
	var got *http.Request
	var gotBody []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r
		gotBody, _ = io.ReadAll(r.Body)
		_, _ = io.WriteString(w, `{"outcome":"not_done"}`)
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL + "/resolve?v=1")
	rv := &resolver{url: u, client: srv.Client(), timeout: time.Second, maxBody: 1 << 20}
	retry := httptestRequest("POST", "/payments?x=1", map[string]string{
		"Authorization": "Bearer c", "Content-Type": "text/plain", "Content-Length": "3",
		"Idempotency-Key": "spoofed", HeaderAttempt: "9", "X-Tenant": "t1",
	})
	rec := &retrysafe.Record{Key: "k-1", Attempt: 2}
	if a := rv.ask(t.Context(), rec, retry, "POST /payments"); a.outcome != resolveNotDone {
		t.Fatalf("outcome = %q (%s)", a.outcome, a.why)
	}
	if got.Method != "POST" || got.URL.RequestURI() != "/resolve?v=1" {
		t.Fatalf("request = %s %s", got.Method, got.URL.RequestURI())
	}
	for name, want := range map[string]string{"Authorization": "Bearer c", "X-Tenant": "t1", "Content-Type": "application/json",
		"Idempotency-Key": "k-1", HeaderAttempt: "2"} {
		if v := got.Header.Values(name); len(v) != 1 || v[0] != want {
			t.Errorf("header %s = %q, want %q", name, v, want)
		}
	}
	var body map[string]any
	if err := json.Unmarshal(gotBody, &body); err != nil {
		t.Fatalf("body %s: %v", gotBody, err)
	}
	want := map[string]any{"key": "k-1", "attempt": float64(2), "method": "POST", "path": "/payments", "query": "x=1"}
	if len(body) != len(want) {
		t.Fatalf("body = %s, want exactly %v", gotBody, want)
	}
	for k, v := range want {
		if body[k] != v {
			t.Errorf("body[%q] = %v, want %v", k, body[k], v)
		}
	}

	// The completer has no retry: the method and path are the route's.
	if a := rv.ask(t.Context(), rec, nil, "POST /orders/{id}/refunds"); a.outcome != resolveNotDone {
		t.Fatalf("completer outcome = %q (%s)", a.outcome, a.why)
	}
	if err := json.Unmarshal(gotBody, &body); err != nil || body["method"] != "POST" || body["path"] != "/orders/{id}/refunds" || body["query"] != "" {
		t.Fatalf("completer body = %s (%v)", gotBody, err)
	}
	if got.Header.Get("Authorization") != "" {
		t.Fatalf("completer sent Authorization %q", got.Header.Get("Authorization"))
	}
}

// TestResolverAskFailures: every way the call can fail keeps the record
// blocked (unknown), quickly for a resolver that hangs.
func TestResolverAskFailures(t *testing.T) {
	t.Parallel()
	hang := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hang":
			<-hang
		case "/500":
			w.WriteHeader(500)
			_, _ = io.WriteString(w, `{"outcome":"not_done"}`)
		case "/redirect":
			http.Redirect(w, r, "/ok", http.StatusFound)
		case "/huge":
			_, _ = io.WriteString(w, `{"outcome":"done","status":200,"body":"`+strings.Repeat("A", 200<<10)+`"}`)
		case "/ok":
			_, _ = io.WriteString(w, `{"outcome":"not_done"}`)
		}
	}))
	defer srv.Close()
	defer close(hang)
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for path, why := range map[string]string{"/hang": "no answer within", "/500": "status 500", "/redirect": "status 302", "/huge": "answer over"} {
		t.Run(path, func(t *testing.T) { // not parallel: the server closes when the test returns
			u, _ := url.Parse(srv.URL + path)
			rv := &resolver{url: u, client: client, timeout: 200 * time.Millisecond, maxBody: 1 << 10}
			start := time.Now()
			a := rv.ask(t.Context(), &retrysafe.Record{Key: "k", Attempt: 1}, nil, "POST /p")
			if a.outcome != resolveUnknown || !strings.Contains(a.why, why) {
				t.Fatalf("answer = %q (%s), want unknown because %s", a.outcome, a.why, why)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("took %s, want about the 200ms timeout", d)
			}
		})
	}
	u, _ := url.Parse("http://127.0.0.1:1/resolve") // nothing listens on port 1
	rv := &resolver{url: u, client: client, timeout: time.Second, maxBody: 1 << 10}
	if a := rv.ask(t.Context(), &retrysafe.Record{Key: "k", Attempt: 1}, nil, "POST /p"); a.outcome != resolveUnknown {
		t.Fatalf("unreachable resolver: %q", a.outcome)
	}
}

func httptestRequest(method, target string, header map[string]string) *http.Request {
	r := httptest.NewRequest(method, target, strings.NewReader("abc"))
	for k, v := range header {
		r.Header.Set(k, v)
	}
	return r
}
