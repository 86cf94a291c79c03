package retrysafe_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/testenv"
	"github.com/retrysafe/retrysafe/store/memory"
)

// counter is a handler that counts executions and answers 201 with a body
// that names the execution, so a replay is told apart from a re-run.
type counter struct {
	runs  atomic.Int64
	delay time.Duration
	gate  chan struct{} // when set, each run waits for a receive
}

func (c *counter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := c.runs.Add(1)
	if c.gate != nil {
		<-c.gate
	}
	if c.delay > 0 {
		time.Sleep(c.delay)
	}
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Add("X-Multi", "a")
	w.Header().Add("X-Multi", "b")
	http.SetCookie(w, &http.Cookie{Name: "session", Value: "secret"})
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, `{"run":`)
	_, _ = io.WriteString(w, strings.Repeat(" ", int(n%3)))
	_, _ = w.Write([]byte(`1,"echo":` + string(bytes.TrimSpace(body)) + `}`))
	_, _ = w.Write([]byte{0, 1, 2})
}

func newServer(t *testing.T, cfg retrysafe.Config, h http.Handler) *httptest.Server {
	t.Helper()
	if cfg.Store == nil {
		s := memory.New(memory.Config{})
		t.Cleanup(func() { _ = s.Close() })
		cfg.Store = s
	}
	mw, err := retrysafe.NewMiddleware(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw(h))
	t.Cleanup(srv.Close)
	return srv
}

type result struct {
	status int
	header http.Header
	body   []byte
}

func send(t *testing.T, url, method, key, body string, hdr ...string) result {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
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
	return result{resp.StatusCode, resp.Header, b}
}

func wantProblem(t *testing.T, r result, status int, slug string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status = %d, want %d; body %s", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != retrysafe.ContentTypeProblem {
		t.Fatalf("Content-Type = %q, want %q", ct, retrysafe.ContentTypeProblem)
	}
	var p retrysafe.Problem
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("problem body %q: %v", r.body, err)
	}
	if p.Status != status || !strings.HasSuffix(p.Type, "/"+slug) || p.Title == "" || p.Detail == "" {
		t.Fatalf("problem = %+v, want status %d type .../%s with title and detail", p, status, slug)
	}
}

func TestPassThrough(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, method, key string
		require           bool
	}{
		{"GET with key", http.MethodGet, "k1", true},
		{"PUT with key", http.MethodPut, "k1", true},
		{"DELETE without key", http.MethodDelete, "", true},
		{"POST without key, key optional", http.MethodPost, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := &counter{}
			srv := newServer(t, retrysafe.Config{RequireKey: tc.require}, h)
			for range 2 {
				r := send(t, srv.URL+"/x", tc.method, tc.key, `{}`)
				if r.status != http.StatusCreated || r.header.Get(retrysafe.HeaderReplayed) != "" {
					t.Fatalf("status %d replayed %q", r.status, r.header.Get(retrysafe.HeaderReplayed))
				}
			}
			if got := h.runs.Load(); got != 2 {
				t.Fatalf("runs = %d, want 2 (unprotected)", got)
			}
		})
	}
}

func TestRejectedRequestsRunNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		keys    []string
		body    string
		status  int
		slug    string
		require bool
	}{
		{"missing key when required", nil, `{}`, 400, retrysafe.ProblemMissingKey, true},
		{"empty key", []string{""}, `{}`, 400, retrysafe.ProblemInvalidKey, false},
		{"empty quoted key", []string{`""`}, `{}`, 400, retrysafe.ProblemInvalidKey, false},
		{"key of 256 characters", []string{strings.Repeat("a", 256)}, `{}`, 400, retrysafe.ProblemInvalidKey, false},
		{"non-ASCII key", []string{"ключ"}, `{}`, 400, retrysafe.ProblemInvalidKey, false},
		{"unterminated sf-string", []string{`"abc`}, `{}`, 400, retrysafe.ProblemInvalidKey, false},
		{"bad escape", []string{`"a\nb"`}, `{}`, 400, retrysafe.ProblemInvalidKey, false},
		{"two key headers", []string{"a", "b"}, `{}`, 400, retrysafe.ProblemInvalidKey, false},
		{"body over the limit", []string{"k"}, strings.Repeat("x", 1025), 413, retrysafe.ProblemBodyTooLarge, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := &counter{}
			srv := newServer(t, retrysafe.Config{RequireKey: tc.require, MaxBody: 1024}, h)
			req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(tc.body))
			for _, k := range tc.keys {
				req.Header.Add("Idempotency-Key", k)
			}
			resp, err := testenv.HTTPClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			wantProblem(t, result{resp.StatusCode, resp.Header, b}, tc.status, tc.slug)
			// The detail says what a key must be once, not once in the
			// reason and again in the advice.
			if n := strings.Count(string(b), "printable ASCII"); n > 1 {
				t.Errorf("the detail says \"printable ASCII\" %d times: %s", n, b)
			}
			if h.runs.Load() != 0 {
				t.Fatal("handler ran for a rejected request")
			}
		})
	}
}

func TestReplayIsByteForByte(t *testing.T) {
	t.Parallel()
	h := &counter{}
	srv := newServer(t, retrysafe.Config{}, h)
	first := send(t, srv.URL+"/payments?b=2&a=1", http.MethodPost, "pay-1", `{"amount": 100, "currency":"UAH"}`)
	if first.status != http.StatusCreated || first.header.Get(retrysafe.HeaderReplayed) != "" {
		t.Fatalf("first: %d %v", first.status, first.header)
	}
	// The same key as an sf-string, the body reordered and re-spaced, the
	// query reordered: the same operation.
	second := send(t, srv.URL+"/payments?a=1&b=2", http.MethodPost, `"pay-1"`, `{"currency":"UAH","amount":100}`)
	if second.status != http.StatusCreated {
		t.Fatalf("replay status %d, want 201", second.status)
	}
	if second.header.Get(retrysafe.HeaderReplayed) != "true" {
		t.Fatal("replay lacks Idempotent-Replayed: true")
	}
	if !bytes.Equal(first.body, second.body) {
		t.Fatalf("replayed body %q, want %q", second.body, first.body)
	}
	if got := second.header.Values("X-Multi"); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Fatalf("X-Multi = %q", got)
	}
	if second.header.Get("Content-Type") != "application/json" {
		t.Fatalf("Content-Type = %q", second.header.Get("Content-Type"))
	}
	if first.header.Get("Set-Cookie") == "" || second.header.Get("Set-Cookie") != "" {
		t.Fatalf("Set-Cookie first %q replay %q: must reach the first caller only", first.header.Get("Set-Cookie"), second.header.Get("Set-Cookie"))
	}
	if h.runs.Load() != 1 {
		t.Fatalf("runs = %d, want 1", h.runs.Load())
	}
}

func TestMismatch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, path, body string }{
		{"other amount", "/payments", `{"amount":200}`},
		{"other path", "/refunds", `{"amount":100}`},
		{"other query", "/payments?x=1", `{"amount":100}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := &counter{}
			srv := newServer(t, retrysafe.Config{}, h)
			send(t, srv.URL+"/payments", http.MethodPost, "k", `{"amount":100}`)
			wantProblem(t, send(t, srv.URL+tc.path, http.MethodPost, "k", tc.body), 422, retrysafe.ProblemMismatch)
			if h.runs.Load() != 1 {
				t.Fatalf("runs = %d, want 1", h.runs.Load())
			}
		})
	}
}

func TestMismatchCheckedBeforeInFlight(t *testing.T) {
	t.Parallel()
	h := &counter{gate: make(chan struct{})}
	srv := newServer(t, retrysafe.Config{}, h)
	done := make(chan result)
	go func() { done <- send(t, srv.URL, http.MethodPost, "k", `{"amount":100}`) }()
	waitFor(t, func() bool { return h.runs.Load() == 1 })
	wantProblem(t, send(t, srv.URL, http.MethodPost, "k", `{"amount":999}`), 422, retrysafe.ProblemMismatch)
	conflict := send(t, srv.URL, http.MethodPost, "k", `{"amount":100}`)
	wantProblem(t, conflict, 409, retrysafe.ProblemInProgress)
	if conflict.header.Get("Retry-After") == "" {
		t.Fatal("409 without Retry-After")
	}
	close(h.gate)
	if r := <-done; r.status != http.StatusCreated {
		t.Fatalf("original: %d", r.status)
	}
}

func TestWaitModeReplaysTheOriginal(t *testing.T) {
	t.Parallel()
	h := &counter{gate: make(chan struct{})}
	srv := newServer(t, retrysafe.Config{InFlight: retrysafe.InFlightWait, WaitTimeout: 10 * time.Second}, h)
	first := make(chan result)
	go func() { first <- send(t, srv.URL, http.MethodPost, "k", `{}`) }()
	waitFor(t, func() bool { return h.runs.Load() == 1 })
	second := make(chan result)
	go func() { second <- send(t, srv.URL, http.MethodPost, "k", `{}`) }()
	time.Sleep(50 * time.Millisecond) // let the duplicate start waiting
	close(h.gate)
	a, b := <-first, <-second
	if b.status != http.StatusCreated || b.header.Get(retrysafe.HeaderReplayed) != "true" || !bytes.Equal(a.body, b.body) {
		t.Fatalf("waiting duplicate got %d %q replayed=%q", b.status, b.body, b.header.Get(retrysafe.HeaderReplayed))
	}
	if h.runs.Load() != 1 {
		t.Fatalf("runs = %d", h.runs.Load())
	}
}

func TestWaitModeTimesOutWith409(t *testing.T) {
	t.Parallel()
	h := &counter{gate: make(chan struct{})}
	srv := newServer(t, retrysafe.Config{InFlight: retrysafe.InFlightWait, WaitTimeout: 100 * time.Millisecond}, h)
	first := make(chan result)
	go func() { first <- send(t, srv.URL, http.MethodPost, "k", `{}`) }()
	waitFor(t, func() bool { return h.runs.Load() == 1 })
	wantProblem(t, send(t, srv.URL, http.MethodPost, "k", `{}`), 409, retrysafe.ProblemInProgress)
	close(h.gate)
	<-first
}

func TestStoredStatuses(t *testing.T) {
	t.Parallel()
	fail := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "boom", http.StatusInternalServerError)
	})
	var runs atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { runs.Add(1); fail(w, r) })

	t.Run("500 stored by default", func(t *testing.T) {
		srv := newServer(t, retrysafe.Config{}, h)
		send(t, srv.URL, http.MethodPost, "k", "")
		r := send(t, srv.URL, http.MethodPost, "k", "")
		if r.status != 500 || r.header.Get(retrysafe.HeaderReplayed) != "true" || runs.Load() != 1 {
			t.Fatalf("status %d replayed %q runs %d", r.status, r.header.Get(retrysafe.HeaderReplayed), runs.Load())
		}
	})
	t.Run("5xx released when configured", func(t *testing.T) {
		runs.Store(0)
		srv := newServer(t, retrysafe.Config{StoreStatus: func(s int) bool { return s < 500 }}, h)
		send(t, srv.URL, http.MethodPost, "k", "")
		r := send(t, srv.URL, http.MethodPost, "k", "")
		if r.header.Get(retrysafe.HeaderReplayed) != "" || runs.Load() != 2 {
			t.Fatalf("released key: replayed %q runs %d, want a second run", r.header.Get(retrysafe.HeaderReplayed), runs.Load())
		}
	})
}

func TestStoreUnavailable(t *testing.T) {
	t.Parallel()
	down := memory.New(memory.Config{})
	_ = down.Close() // a closed memory store answers ErrStoreUnavailable
	t.Run("fail closed", func(t *testing.T) {
		t.Parallel()
		h := &counter{}
		srv := newServer(t, retrysafe.Config{Store: down}, h)
		r := send(t, srv.URL, http.MethodPost, "k", `{}`)
		wantProblem(t, r, 503, retrysafe.ProblemStoreUnavailable)
		if r.header.Get("Retry-After") == "" || h.runs.Load() != 0 {
			t.Fatalf("Retry-After %q runs %d", r.header.Get("Retry-After"), h.runs.Load())
		}
	})
	t.Run("fail open", func(t *testing.T) {
		t.Parallel()
		h := &counter{}
		srv := newServer(t, retrysafe.Config{Store: down, FailOpen: true}, h)
		r := send(t, srv.URL, http.MethodPost, "k", `{"a":1}`)
		if r.status != http.StatusCreated || h.runs.Load() != 1 || !bytes.Contains(r.body, []byte(`"echo":{"a":1}`)) {
			t.Fatalf("fail open: %d runs %d body %q", r.status, h.runs.Load(), r.body)
		}
	})
	t.Run("fail open only when unavailable", func(t *testing.T) {
		t.Parallel()
		// A store that answers, but with an error of its own (a stored
		// response it cannot decrypt, say): the record may be completed,
		// so running the handler could run the operation twice.
		h := &counter{}
		srv := newServer(t, retrysafe.Config{Store: claimErrStore{memory.New(memory.Config{})}, FailOpen: true}, h)
		r := send(t, srv.URL, http.MethodPost, "k", `{"a":1}`)
		wantProblem(t, r, 503, retrysafe.ProblemStoreUnavailable)
		if h.runs.Load() != 0 {
			t.Fatalf("runs %d, want 0", h.runs.Load())
		}
	})
}

// claimErrStore fails every Claim with an error that is not
// ErrStoreUnavailable.
type claimErrStore struct{ retrysafe.Store }

func (claimErrStore) Claim(context.Context, *retrysafe.ClaimParams) (*retrysafe.ClaimResult, error) {
	return nil, errors.New("stored response cannot be decrypted")
}

func TestClientDisconnectStillStoresResult(t *testing.T) {
	t.Parallel()
	h := &counter{gate: make(chan struct{})}
	handlerCtxErr := make(chan error, 1)
	wrapped := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		handlerCtxErr <- r.Context().Err()
	})
	srv := newServer(t, retrysafe.Config{}, wrapped)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(`{}`))
	req.Header.Set("Idempotency-Key", "k")
	errc := make(chan error)
	go func() {
		resp, err := testenv.HTTPClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	waitFor(t, func() bool { return h.runs.Load() == 1 })
	cancel() // the client gives up
	if err := <-errc; err == nil {
		t.Fatal("client request should have failed")
	}
	close(h.gate) // the operation finishes after the hang-up
	if err := <-handlerCtxErr; err != nil {
		t.Fatalf("handler context was cancelled by the hang-up: %v", err)
	}
	var r result
	waitFor(t, func() bool {
		r = send(t, srv.URL, http.MethodPost, "k", `{}`)
		return r.status != http.StatusConflict
	})
	if r.status != http.StatusCreated || r.header.Get(retrysafe.HeaderReplayed) != "true" || h.runs.Load() != 1 {
		t.Fatalf("retry after hang-up: %d replayed %q runs %d", r.status, r.header.Get(retrysafe.HeaderReplayed), h.runs.Load())
	}
}

func TestPanicReleasesTheKey(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			panic("handler bug")
		}
		w.WriteHeader(http.StatusCreated)
	})
	mwStore := memory.New(memory.Config{})
	t.Cleanup(func() { _ = mwStore.Close() })
	mw, err := retrysafe.NewMiddleware(retrysafe.Config{Store: mwStore})
	if err != nil {
		t.Fatal(err)
	}
	protected := mw(h)
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("panic did not propagate")
			}
		}()
		req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", "k")
		protected.ServeHTTP(httptest.NewRecorder(), req)
	}()
	req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("{}"))
	req.Header.Set("Idempotency-Key", "k")
	rec := httptest.NewRecorder()
	protected.ServeHTTP(rec, req)
	if rec.Code != http.StatusCreated || runs.Load() != 2 {
		t.Fatalf("retry after panic: %d, runs %d; the key must not stay wedged", rec.Code, runs.Load())
	}
}

func TestCaptureKeepsStatusDespiteFlushAndReadFrom(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusAccepted)
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("Flush: %v", err)
		}
		if rf, ok := w.(io.ReaderFrom); ok {
			_, _ = rf.ReadFrom(strings.NewReader("copied"))
		} else {
			_, _ = io.Copy(w, strings.NewReader("copied"))
		}
		if _, _, err := http.NewResponseController(w).Hijack(); err == nil {
			t.Error("Hijack succeeded on a protected response")
		}
	})
	srv := newServer(t, retrysafe.Config{}, h)
	a := send(t, srv.URL, http.MethodPost, "k", "")
	b := send(t, srv.URL, http.MethodPost, "k", "")
	for _, r := range []result{a, b} {
		if r.status != http.StatusAccepted || string(r.body) != "copied" {
			t.Fatalf("got %d %q, want 202 \"copied\"", r.status, r.body)
		}
	}
	if runs.Load() != 1 {
		t.Fatalf("runs = %d", runs.Load())
	}
}

func TestResponseOverLimitIsNotRunAgain(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	big := bytes.Repeat([]byte("z"), 5000)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(big)
	})
	srv := newServer(t, retrysafe.Config{MaxResponseBody: 1000}, h)
	first := send(t, srv.URL, http.MethodPost, "k", "")
	if first.status != http.StatusCreated || !bytes.Equal(first.body, big) {
		t.Fatalf("first caller: %d, %d bytes; want the full response", first.status, len(first.body))
	}
	second := send(t, srv.URL, http.MethodPost, "k", "")
	wantProblem(t, second, http.StatusBadGateway, retrysafe.ProblemResponseNotStored)
	if runs.Load() != 1 {
		t.Fatalf("runs = %d, want 1", runs.Load())
	}
}

func TestOperationInContext(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []string
	var runs atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		op := retrysafe.OperationFromContext(r.Context())
		if op == nil {
			t.Error("no operation in the handler's context")
			return
		}
		mu.Lock()
		seen = append(seen, op.Key())
		mu.Unlock()
		switch r.URL.Path {
		case "/release":
			op.Release()
		case "/abandon":
			op.Abandon()
		}
		w.WriteHeader(http.StatusOK)
	})
	srv := newServer(t, retrysafe.Config{Lease: 200 * time.Millisecond}, h)
	send(t, srv.URL+"/release", http.MethodPost, "r", "")
	if r := send(t, srv.URL+"/release", http.MethodPost, "r", ""); r.header.Get(retrysafe.HeaderReplayed) != "" {
		t.Fatal("released operation was replayed")
	}
	if runs.Load() != 2 {
		t.Fatalf("runs = %d after release, want 2", runs.Load())
	}
	send(t, srv.URL+"/abandon", http.MethodPost, "a", "")
	// Abandoned: the outcome is unknown at once, not "in progress".
	wantProblem(t, send(t, srv.URL+"/abandon", http.MethodPost, "a", ""), 409, retrysafe.ProblemOutcomeUnknown)
	// After the lease runs out, the abandoned operation is taken over.
	waitFor(t, func() bool { return send(t, srv.URL+"/abandon", http.MethodPost, "a", "").status == http.StatusOK })
	mu.Lock()
	defer mu.Unlock()
	if seen[0] != "r" || seen[len(seen)-1] != "a" {
		t.Fatalf("keys seen by handler: %q", seen)
	}
}

func TestScopesSeparateTenants(t *testing.T) {
	t.Parallel()
	h := &counter{}
	srv := newServer(t, retrysafe.Config{}, h)
	a := send(t, srv.URL, http.MethodPost, "same", `{}`, "Authorization", "Bearer alice")
	b := send(t, srv.URL, http.MethodPost, "same", `{}`, "Authorization", "Bearer bob")
	if a.header.Get(retrysafe.HeaderReplayed) != "" || b.header.Get(retrysafe.HeaderReplayed) != "" || h.runs.Load() != 2 {
		t.Fatalf("tenants shared a key: runs %d", h.runs.Load())
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	s := memory.New(memory.Config{})
	t.Cleanup(func() { _ = s.Close() })
	for _, tc := range []struct {
		name string
		cfg  retrysafe.Config
		want string
	}{
		{"no store", retrysafe.Config{}, "Store"},
		{"bad in-flight", retrysafe.Config{Store: s, InFlight: "queue"}, "InFlight"},
		{"negative TTL", retrysafe.Config{Store: s, TTL: -time.Second}, "TTL"},
		{"bad pointer", retrysafe.Config{Store: s, IgnoreFields: []string{"meta"}}, "IgnoreFields"},
		{"empty pointer", retrysafe.Config{Store: s, IgnoreFields: []string{""}}, "IgnoreFields"},
		{"negative body", retrysafe.Config{Store: s, MaxBody: -1}, "MaxBody"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := retrysafe.NewMiddleware(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one naming %s", err, tc.want)
			}
		})
	}
}

// waitFor polls cond for up to 10 seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
