package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
)

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestTransportRetriesWithTheSameKey(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		fail      func(t *testing.T, w http.ResponseWriter) // answer to the failing attempts
		failures  int
		body      func() io.Reader // nil: a strings.Reader (GetBody set)
		wantDelay time.Duration    // exact wait expected, 0: any backoff
	}{
		"connection dropped twice": {fail: hangUp, failures: 2},
		"503 then 201":             {fail: failWith(status(503)), failures: 1},
		"502":                      {fail: failWith(status(502)), failures: 1},
		"504":                      {fail: failWith(status(504)), failures: 1},
		"429 with Retry-After":     {fail: failWith(retryAfterStatus(429, "2")), failures: 1, wantDelay: 2 * time.Second},
		"409 with Retry-After 1":   {fail: failWith(retryAfterStatus(409, "1")), failures: 1, wantDelay: time.Second},
		"408":                      {fail: failWith(status(408)), failures: 1},
		"500 with hint true": {fail: failWith(func(w http.ResponseWriter) {
			w.Header().Set(HeaderShouldRetry, "true")
			w.WriteHeader(500)
		}), failures: 1},
		"400 with Stripe hint true": {fail: failWith(func(w http.ResponseWriter) {
			w.Header().Set(HeaderStripeShouldRetry, "true")
			w.WriteHeader(400)
		}), failures: 1},
		"buffered body without GetBody": {
			fail: hangUp, failures: 2,
			body: func() io.Reader { return io.NopCloser(strings.NewReader(`{"amount":100}`)) },
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
				if n <= tc.failures {
					tc.fail(t, w)
					return
				}
				w.WriteHeader(http.StatusCreated)
				fmt.Fprint(w, "created")
			})
			var sleeps []time.Duration
			var infos []AttemptInfo
			tr := srv.transport(&sleeps)
			tr.OnAttempt = func(i AttemptInfo) { infos = append(infos, i) }

			var body io.Reader = strings.NewReader(`{"amount":100}`)
			if tc.body != nil {
				body = tc.body()
			}
			req, err := http.NewRequest(http.MethodPost, srv.URL+"/charges", body)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatalf("RoundTrip: %v", err)
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated || string(got) != "created" {
				t.Fatalf("got %d %q, want 201 created", resp.StatusCode, got)
			}

			keys, bodies := srv.seen()
			if len(keys) < tc.failures+1 {
				t.Fatalf("server saw %d requests, want at least %d", len(keys), tc.failures+1)
			}
			if !uuidV4.MatchString(keys[0]) {
				t.Errorf("key %q is not a UUIDv4", keys[0])
			}
			for i := range keys {
				if keys[i] != keys[0] {
					t.Errorf("attempt %d sent key %q, first sent %q", i+1, keys[i], keys[0])
				}
				if bodies[i] != `{"amount":100}` {
					t.Errorf("attempt %d sent body %q", i+1, bodies[i])
				}
			}
			if k := KeyFromResponse(resp); k != keys[0] {
				t.Errorf("KeyFromResponse = %q, want %q", k, keys[0])
			}
			if req.Header.Get(HeaderKey) != "" {
				t.Errorf("caller's request was given a key header")
			}
			if len(infos) != tc.failures+1 {
				t.Fatalf("OnAttempt called %d times, want %d", len(infos), tc.failures+1)
			}
			for i, info := range infos {
				last := i == len(infos)-1
				if info.Attempt != i+1 || info.Key != keys[0] || info.Retry == last {
					t.Errorf("attempt info %d = %+v", i, info)
				}
			}
			if len(sleeps) != tc.failures {
				t.Fatalf("waited %d times, want %d", len(sleeps), tc.failures)
			}
			for i, d := range sleeps {
				if d != infos[i].Delay {
					t.Errorf("wait %d = %s, AttemptInfo.Delay = %s", i, d, infos[i].Delay)
				}
				if tc.wantDelay != 0 && d != tc.wantDelay {
					t.Errorf("wait %d = %s, want Retry-After %s", i, d, tc.wantDelay)
				}
			}
		})
	}
}

func failWith(f func(http.ResponseWriter)) func(*testing.T, http.ResponseWriter) {
	return func(_ *testing.T, w http.ResponseWriter) { f(w) }
}

func retryAfterStatus(code int, after string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.Header().Set("Retry-After", after)
		w.WriteHeader(code)
	}
}

func TestTransportDoesNotRetryFinalAnswers(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		answer func(http.ResponseWriter)
		want   int
	}{
		"400": {answer: status(400), want: 400},
		"401": {answer: status(401), want: 401},
		"403": {answer: status(403), want: 403},
		"404": {answer: status(404), want: 404},
		"422": {answer: status(422), want: 422},
		"500": {answer: status(500), want: 500},
		"201": {answer: status(201), want: 201},
		"replayed 503": {answer: func(w http.ResponseWriter) {
			w.Header().Set(HeaderReplayed, "true")
			w.WriteHeader(503)
		}, want: 503},
		"503 with hint false": {answer: func(w http.ResponseWriter) {
			w.Header().Set(HeaderShouldRetry, "false")
			w.WriteHeader(503)
		}, want: 503},
		"409 with Stripe hint false": {answer: func(w http.ResponseWriter) {
			w.Header().Set(HeaderStripeShouldRetry, "false")
			w.WriteHeader(409)
		}, want: 409},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) { tc.answer(w) })
			var sleeps []time.Duration
			var infos []AttemptInfo
			tr := srv.transport(&sleeps)
			tr.OnAttempt = func(i AttemptInfo) { infos = append(infos, i) }
			req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("x"))
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			keys, _ := srv.seen()
			if resp.StatusCode != tc.want || len(keys) != 1 || len(sleeps) != 0 {
				t.Fatalf("got %d after %d requests and %d waits, want %d after 1 request", resp.StatusCode, len(keys), len(sleeps), tc.want)
			}
			if len(infos) != 1 || infos[0].Retry || infos[0].Reason != "" || infos[0].StatusCode != tc.want {
				t.Errorf("attempt infos = %+v", infos)
			}
			if Replayed(resp) != infos[0].Replayed {
				t.Errorf("Replayed(resp) = %v, AttemptInfo.Replayed = %v", Replayed(resp), infos[0].Replayed)
			}
		})
	}
}

func TestTransportKeySources(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		header  string // Idempotency-Key set by the caller
		ctxKey  string // key given with WithKey
		wire    string // header value the server must see; "": a new UUIDv4
		wantKey string // KeyFromResponse; "": wire
	}{
		"header":                        {header: "order-42", wire: "order-42"},
		"quoted header kept as is":      {header: `"order-42"`, wire: `"order-42"`, wantKey: "order-42"},
		"context":                       {ctxKey: "from-ctx", wire: "from-ctx"},
		"context key with space quoted": {ctxKey: `order "42", v2`, wire: `"order \"42\", v2"`, wantKey: `order "42", v2`},
		"header wins over context":      {header: "from-header", ctxKey: "from-ctx", wire: "from-header"},
		"empty context key ignored":     {ctxKey: ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
				if n == 1 {
					w.WriteHeader(503)
					return
				}
				w.WriteHeader(201)
			})
			var sleeps []time.Duration
			tr := srv.transport(&sleeps)
			ctx := context.Background()
			if tc.ctxKey != "" {
				ctx = WithKey(ctx, tc.ctxKey)
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader("x"))
			if tc.header != "" {
				req.Header.Set(HeaderKey, tc.header)
			}
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			keys, _ := srv.seen()
			wire := tc.wire
			if wire == "" {
				wire = keys[0]
				if !uuidV4.MatchString(wire) {
					t.Errorf("generated key %q is not a UUIDv4", wire)
				}
			}
			if len(keys) != 2 || keys[0] != wire || keys[1] != wire {
				t.Errorf("server saw keys %q, want %q twice", keys, wire)
			}
			wantKey := tc.wantKey
			if wantKey == "" {
				wantKey = wire
			}
			if got := KeyFromResponse(resp); got != wantKey {
				t.Errorf("KeyFromResponse = %q, want %q", got, wantKey)
			}
			if parsed, err := retrysafe.ParseKey(keys[0]); err != nil || parsed != wantKey {
				t.Errorf("retrysafe.ParseKey(%q) = %q, %v; want %q", keys[0], parsed, err, wantKey)
			}
			if req.Header.Get(HeaderKey) != tc.header {
				t.Errorf("caller's header changed to %q", req.Header.Get(HeaderKey))
			}
		})
	}
}

func TestTransportRejectsInvalidContextKey(t *testing.T) {
	t.Parallel()
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {})
	for name, key := range map[string]string{
		"control char": "a\nb",
		"non-ASCII":    "ключ",
		"too long":     strings.Repeat("k", 256),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var sleeps []time.Duration
			req, _ := http.NewRequestWithContext(WithKey(context.Background(), key), http.MethodPost, srv.URL, strings.NewReader("x"))
			_, err := srv.transport(&sleeps).RoundTrip(req)
			if err == nil || !strings.Contains(err.Error(), "idempotency key") {
				t.Fatalf("err = %v, want an invalid key error", err)
			}
		})
	}
	if keys, _ := srv.seen(); len(keys) != 0 {
		t.Errorf("server saw %d requests, want none", len(keys))
	}
}

func TestTransportPassesOtherMethodsThrough(t *testing.T) {
	t.Parallel()
	for _, method := range []string{http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete, ""} {
		t.Run("method "+method, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) { w.WriteHeader(503) })
			var sleeps []time.Duration
			tr := srv.transport(&sleeps)
			req, _ := http.NewRequestWithContext(WithKey(context.Background(), "ignored"), method, srv.URL, nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			srv.mu.Lock()
			defer srv.mu.Unlock()
			if resp.StatusCode != 503 || len(srv.keys) != 1 || srv.hasKey[0] || len(sleeps) != 0 {
				t.Errorf("got %d after %d requests (key header %v), want one 503 without key", resp.StatusCode, len(srv.keys), srv.hasKey)
			}
		})
	}
}

func TestTransportMethodsAndRetryOn(t *testing.T) {
	t.Parallel()
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			w.WriteHeader(500)
			return
		}
		w.WriteHeader(200)
	})
	var sleeps []time.Duration
	tr := srv.transport(&sleeps)
	tr.Methods = []string{http.MethodPut}
	tr.RetryOn = func(resp *http.Response, err error) bool {
		return DefaultRetryOn(resp, err) || resp != nil && resp.StatusCode == 500
	}
	req, _ := http.NewRequest(http.MethodPut, srv.URL, strings.NewReader("x"))
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	keys, _ := srv.seen()
	if resp.StatusCode != 200 || len(keys) != 2 || keys[0] == "" || keys[0] != keys[1] {
		t.Errorf("got %d, keys %q; want 200 after two attempts with one key", resp.StatusCode, keys)
	}
}

func TestTransportAttemptTimeout(t *testing.T) {
	t.Parallel()
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			select { // slow: answers only after the client gave up on it
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
			return
		}
		w.WriteHeader(201)
		fmt.Fprint(w, "done")
	})
	var sleeps []time.Duration
	var infos []AttemptInfo
	tr := srv.transport(&sleeps)
	tr.AttemptTimeout = 100 * time.Millisecond
	tr.OnAttempt = func(i AttemptInfo) { infos = append(infos, i) }
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("x"))
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body) // the attempt timeout no longer applies
	resp.Body.Close()
	if err != nil || resp.StatusCode != 201 || string(body) != "done" {
		t.Fatalf("got %d %q %v, want 201 done", resp.StatusCode, body, err)
	}
	keys, _ := srv.seen()
	if len(keys) != 2 || keys[0] != keys[1] {
		t.Errorf("server saw keys %q, want the same key twice", keys)
	}
	if len(infos) != 2 || !errors.Is(infos[0].Err, ErrAttemptTimeout) || !infos[0].Retry {
		t.Errorf("first attempt = %+v, want a retried ErrAttemptTimeout", infos[0])
	}
}

func TestTransportBackoffBounds(t *testing.T) {
	t.Parallel()
	const initial, ceiling = 100 * time.Millisecond, 400 * time.Millisecond
	bases := []time.Duration{100, 200, 400, 400, 400, 400, 400} // ms, per retry
	tests := map[string]func() float64{
		"no jitter":   func() float64 { return 0 },
		"full jitter": func() float64 { return 0.999999 },
		"half jitter": func() float64 { return 0.5 },
		"random":      nil, // the real source
	}
	for name, jitter := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) { w.WriteHeader(503) })
			var sleeps []time.Duration
			tr := srv.transport(&sleeps)
			tr.MaxAttempts = len(bases) + 1
			tr.InitialBackoff, tr.MaxBackoff = initial, ceiling
			tr.jitter = jitter
			req, _ := http.NewRequest(http.MethodPost, srv.URL, nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 503 || len(sleeps) != len(bases) {
				t.Fatalf("got %d after %d waits, want 503 after %d", resp.StatusCode, len(sleeps), len(bases))
			}
			for i, d := range sleeps {
				base := bases[i] * time.Millisecond
				if d < base/2 || d > base || d > ceiling {
					t.Errorf("wait %d = %s, want within [%s, %s]", i+1, d, base/2, base)
				}
				if jitter != nil {
					if want := base/2 + time.Duration(jitter()*float64(base/2)); d != want {
						t.Errorf("wait %d = %s, want %s", i+1, d, want)
					}
				}
			}
			if keys, _ := srv.seen(); len(keys) != tr.MaxAttempts {
				t.Errorf("server saw %d requests, want MaxAttempts = %d", len(keys), tr.MaxAttempts)
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		initial, ceiling time.Duration
		n                int
		jitter           float64
		want             time.Duration
	}{
		"first retry, no jitter":    {500 * time.Millisecond, 5 * time.Second, 1, 0, 250 * time.Millisecond},
		"first retry, full jitter":  {500 * time.Millisecond, 5 * time.Second, 1, 1, 500 * time.Millisecond},
		"fourth retry":              {500 * time.Millisecond, 5 * time.Second, 4, 1, 4 * time.Second},
		"capped":                    {500 * time.Millisecond, 5 * time.Second, 5, 1, 5 * time.Second},
		"far beyond the cap":        {500 * time.Millisecond, 5 * time.Second, 1000, 0, 2500 * time.Millisecond},
		"initial above the ceiling": {10 * time.Second, 5 * time.Second, 1, 1, 5 * time.Second},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := backoff(tc.initial, tc.ceiling, tc.n, tc.jitter); got != tc.want {
				t.Errorf("backoff = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)
	tests := map[string]struct {
		value  string
		want   time.Duration
		wantOK bool
	}{
		"seconds":     {"1", time.Second, true},
		"zero":        {"0", 0, true},
		"spaces":      {" 7 ", 7 * time.Second, true},
		"future date": {now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		"past date":   {now.Add(-time.Hour).Format(http.TimeFormat), 0, true},
		"absent":      {"", 0, false},
		"negative":    {"-1", 0, false},
		"fraction":    {"1.5", 0, false},
		"garbage":     {"soon", 0, false},
		"huge":        {"99999999999999999999", 0, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			if tc.value != "" {
				h.Set("Retry-After", tc.value)
			}
			got, ok := retryAfter(h, now)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("retryAfter(%q) = %s, %v; want %s, %v", tc.value, got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestTransportMaxElapsed(t *testing.T) {
	t.Parallel()
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) { w.WriteHeader(503) })
	var infos []AttemptInfo
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tr := &Transport{
		Base:           srv.Client().Transport,
		MaxAttempts:    100,
		InitialBackoff: time.Second,
		MaxBackoff:     time.Second,
		MaxElapsed:     3500 * time.Millisecond,
		OnAttempt:      func(i AttemptInfo) { infos = append(infos, i) },
		jitter:         func() float64 { return 1 },
		now:            func() time.Time { return clock },
		sleep: func(ctx context.Context, d time.Duration) error {
			clock = clock.Add(d)
			return nil
		},
	}
	req, _ := http.NewRequest(http.MethodPost, srv.URL, nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// Attempts start at 0s, 1s, 2s and 3s; a fifth would start at 4s > 3.5s.
	if resp.StatusCode != 503 || len(infos) != 4 {
		t.Fatalf("got %d after %d attempts, want 503 after 4", resp.StatusCode, len(infos))
	}
	last := infos[len(infos)-1]
	if last.Retry || !strings.Contains(last.Reason, "MaxElapsed") {
		t.Errorf("last attempt = %+v, want a stop because of MaxElapsed", last)
	}
}

func TestTransportMaxElapsedBoundsRetryAfter(t *testing.T) {
	t.Parallel()
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Retry-After", "60")
		w.WriteHeader(429)
	})
	var sleeps []time.Duration
	var infos []AttemptInfo
	tr := srv.transport(&sleeps)
	tr.OnAttempt = func(i AttemptInfo) { infos = append(infos, i) }
	req, _ := http.NewRequest(http.MethodPost, srv.URL, nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 429 || len(sleeps) != 0 || len(infos) != 1 || !strings.Contains(infos[0].Reason, "MaxElapsed") {
		t.Errorf("got %d after %d waits, infos %+v; want the 429 at once, stopped by MaxElapsed", resp.StatusCode, len(sleeps), infos)
	}
}

func TestTransportRetriesRefusedConnections(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	var infos []AttemptInfo
	tr := &Transport{
		OnAttempt: func(i AttemptInfo) { infos = append(infos, i) },
		sleep:     func(ctx context.Context, d time.Duration) error { return nil },
	}
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr, strings.NewReader("x"))
	resp, err := tr.RoundTrip(req)
	if err == nil {
		resp.Body.Close()
		t.Fatal("RoundTrip succeeded with nothing listening")
	}
	var opErr *net.OpError
	if !errors.As(err, &opErr) || len(infos) != 3 {
		t.Errorf("err = %v after %d attempts, want a dial error after 3", err, len(infos))
	}
}

func TestTransportStopsWhenGetBodyFails(t *testing.T) {
	t.Parallel()
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) { w.WriteHeader(503) })
	var sleeps []time.Duration
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("x"))
	req.GetBody = func() (io.ReadCloser, error) { return nil, errors.New("gone") }
	resp, err := srv.transport(&sleeps).RoundTrip(req)
	if err == nil {
		resp.Body.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "gone") || len(sleeps) != 1 {
		t.Errorf("err = %v after %d waits, want the GetBody error after 1", err, len(sleeps))
	}
	if keys, _ := srv.seen(); len(keys) != 1 {
		t.Errorf("server saw %d requests, want 1", len(keys))
	}
}

func TestTransportGivesUpOnErrors(t *testing.T) {
	t.Parallel()
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) { hangUp(t, w) })
	var sleeps []time.Duration
	var infos []AttemptInfo
	tr := srv.transport(&sleeps)
	tr.OnAttempt = func(i AttemptInfo) { infos = append(infos, i) }
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("x"))
	resp, err := tr.RoundTrip(req)
	if err == nil {
		resp.Body.Close()
		t.Fatal("RoundTrip succeeded against a server that always hangs up")
	}
	if len(infos) != 3 {
		t.Fatalf("%d attempts reported, want 3", len(infos))
	}
	for i, info := range infos {
		if info.Err == nil || info.StatusCode != 0 || info.Request == nil || info.Request.Header.Get(HeaderKey) != info.Key {
			t.Errorf("attempt %d = %+v, want the error and the request sent with the key", i+1, info)
		}
	}
	if last := infos[2]; last.Retry || !strings.Contains(last.Reason, "MaxAttempts") {
		t.Errorf("last attempt = %+v, want a stop because of MaxAttempts", last)
	}
	if !strings.Contains(err.Error(), "3 attempts made") {
		t.Errorf("err = %v, want it to say the attempts were used up", err)
	}
	if keys, _ := srv.seen(); len(keys) < 3 {
		t.Errorf("server saw %d requests, want at least 3", len(keys))
	}
}

func TestTransportStopsWhenContextEnds(t *testing.T) {
	t.Parallel()
	t.Run("during a wait", func(t *testing.T) {
		t.Parallel()
		srv := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
			w.Header().Set("Retry-After", "20")
			w.WriteHeader(409)
		})
		ctx, cancel := context.WithCancel(context.Background())
		tr := &Transport{
			Base:      srv.Client().Transport,
			OnAttempt: func(i AttemptInfo) { time.AfterFunc(50*time.Millisecond, cancel) },
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, nil)
		checkCancelled(t, tr, req)
		if keys, _ := srv.seen(); len(keys) != 1 {
			t.Errorf("server saw %d requests, want 1", len(keys))
		}
	})
	t.Run("during an attempt", func(t *testing.T) {
		t.Parallel()
		arrived := make(chan struct{})
		srv := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
			close(arrived)
			<-r.Context().Done()
		})
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			<-arrived
			cancel()
		}()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader("x"))
		checkCancelled(t, &Transport{Base: srv.Client().Transport}, req)
	})
	t.Run("already ended", func(t *testing.T) {
		t.Parallel()
		srv := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader("x"))
		checkCancelled(t, &Transport{Base: srv.Client().Transport}, req)
	})
}

func checkCancelled(t *testing.T, tr *Transport, req *http.Request) {
	t.Helper()
	type result struct {
		resp *http.Response
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := tr.RoundTrip(req)
		done <- result{resp, err}
	}()
	select {
	case r := <-done:
		if !errors.Is(r.err, context.Canceled) || r.resp != nil {
			t.Errorf("RoundTrip = %v, %v; want context.Canceled", r.resp, r.err)
		}
	case <-time.After(10 * time.Second): // a hang guard, not a speed check
		t.Fatal("RoundTrip did not return after the context was cancelled")
	}
}

func TestTransportDoesNotRetryUnreplayableBodies(t *testing.T) {
	t.Parallel()
	const limit = 1024
	big := bytes.Repeat([]byte("0123456789abcdef"), 2*limit/16) // 2 KiB
	tests := map[string]struct {
		body     func() (io.ReadCloser, int64) // body and ContentLength
		max      int64
		hangUp   bool // the server hangs up: the error says why there was no retry
		whyNotIn string
	}{
		"pipe over the limit, 503": {
			body: func() (io.ReadCloser, int64) { return pipe(big), 0 },
			max:  limit, whyNotIn: "larger than MaxBufferedBody (1024 bytes)",
		},
		"pipe over the limit, connection dropped": {
			body: func() (io.ReadCloser, int64) { return pipe(big), 0 },
			max:  limit, hangUp: true, whyNotIn: "larger than MaxBufferedBody (1024 bytes)",
		},
		"known length over the limit": {
			body: func() (io.ReadCloser, int64) { return io.NopCloser(bytes.NewReader(big)), int64(len(big)) },
			max:  limit, whyNotIn: "length 2048 exceeds MaxBufferedBody (1024 bytes)",
		},
		"buffering disabled": {
			body: func() (io.ReadCloser, int64) { return io.NopCloser(bytes.NewReader(big)), 0 },
			max:  -1, whyNotIn: "buffering is disabled",
		},
		"unreadable": {
			body: func() (io.ReadCloser, int64) {
				return io.NopCloser(io.MultiReader(bytes.NewReader(big[:100]), errReader{errors.New("disk on fire")})), 0
			},
			max: limit, hangUp: true, whyNotIn: "reading it failed: disk on fire",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
				if tc.hangUp {
					hangUp(t, w)
					return
				}
				w.WriteHeader(503)
			})
			var sleeps []time.Duration
			var infos []AttemptInfo
			tr := srv.transport(&sleeps)
			tr.MaxBufferedBody = tc.max
			tr.OnAttempt = func(i AttemptInfo) { infos = append(infos, i) }
			body, n := tc.body()
			req, _ := http.NewRequest(http.MethodPost, srv.URL, body)
			req.ContentLength = n
			resp, err := tr.RoundTrip(req)
			switch {
			case tc.hangUp:
				if !errors.Is(err, ErrBodyNotReplayable) || !strings.Contains(err.Error(), tc.whyNotIn) {
					t.Errorf("err = %v, want ErrBodyNotReplayable saying %q", err, tc.whyNotIn)
				}
			case err != nil:
				t.Fatal(err)
			default:
				resp.Body.Close()
				if resp.StatusCode != 503 {
					t.Errorf("status = %d, want the 503", resp.StatusCode)
				}
				if keys, bodies := srv.seen(); len(keys) != 1 || bodies[0] != string(big) {
					t.Errorf("server saw %d requests, first body %d bytes; want 1 with the whole body", len(keys), len(bodies[0]))
				}
			}
			if keys, _ := srv.seen(); len(keys) > 1 {
				t.Errorf("server saw %d requests, want at most 1", len(keys))
			}
			if len(sleeps) != 0 || len(infos) != 1 || infos[0].Retry || !strings.Contains(infos[0].Reason, tc.whyNotIn) {
				t.Errorf("waits %v, attempts %+v; want one attempt whose Reason says %q", sleeps, infos, tc.whyNotIn)
			}
		})
	}
}

func pipe(data []byte) io.ReadCloser {
	r, w := io.Pipe()
	go func() {
		for chunk := range slices.Chunk(data, 100) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
		w.Close()
	}()
	return r
}

func TestTransportReusesConnectionsOfRetriedAnswers(t *testing.T) {
	t.Parallel()
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			w.WriteHeader(503)
			fmt.Fprint(w, strings.Repeat("busy ", 100))
			return
		}
		w.WriteHeader(201)
	})
	var mu sync.Mutex
	var reused []bool
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) {
			mu.Lock()
			reused = append(reused, i.Reused)
			mu.Unlock()
		},
	})
	var sleeps []time.Duration
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader("x"))
	resp, err := srv.transport(&sleeps).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	mu.Lock()
	defer mu.Unlock()
	if len(reused) != 2 || !reused[1] {
		t.Errorf("connections reused: %v, want the retry on the first attempt's connection", reused)
	}
}

func TestNewKey(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 1000 {
		k := NewKey()
		if !uuidV4.MatchString(k) {
			t.Fatalf("NewKey() = %q, not a UUIDv4", k)
		}
		if parsed, err := retrysafe.ParseKey(k); err != nil || parsed != k || encodeKey(k) != k {
			t.Fatalf("NewKey() = %q is not sent bare: ParseKey = %q, %v", k, parsed, err)
		}
		if seen[k] {
			t.Fatalf("NewKey() repeated %q", k)
		}
		seen[k] = true
	}
}

func TestReplayed(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		value string
		want  bool
	}{
		"true":   {"true", true},
		"TRUE":   {"TRUE", true},
		"false":  {"false", false},
		"absent": {"", false},
		"other":  {"yes", false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			resp := &http.Response{Header: http.Header{}}
			if tc.value != "" {
				resp.Header.Set(HeaderReplayed, tc.value)
			}
			if got := Replayed(resp); got != tc.want {
				t.Errorf("Replayed = %v, want %v", got, tc.want)
			}
		})
	}
	if Replayed(nil) {
		t.Error("Replayed(nil) = true")
	}
}

type idleCloser struct {
	http.RoundTripper
	closed bool
}

func (c *idleCloser) CloseIdleConnections() { c.closed = true }

func TestTransportCloseIdleConnections(t *testing.T) {
	t.Parallel()
	base := &idleCloser{RoundTripper: http.DefaultTransport.(*http.Transport).Clone()}
	(&http.Client{Transport: &Transport{Base: base}}).CloseIdleConnections()
	if !base.closed {
		t.Error("http.Client.CloseIdleConnections did not reach Base")
	}
}

// A method spelled in lower case is the same method for the transport as for
// the middleware and the gateway (internal/httpmethod): it gets a key
// and is retried with it.
func TestTransportLowercaseMethodIsProtected(t *testing.T) {
	t.Parallel()
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			w.WriteHeader(503)
			return
		}
		w.WriteHeader(200)
	})
	var sleeps []time.Duration
	tr := srv.transport(&sleeps)
	req, _ := http.NewRequest("post", srv.URL, strings.NewReader("x"))
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	keys, _ := srv.seen()
	if resp.StatusCode != 200 || len(keys) != 2 || keys[0] == "" || keys[0] != keys[1] {
		t.Errorf("got %d, keys %q; want 200 after two attempts with one key", resp.StatusCode, keys)
	}
}
