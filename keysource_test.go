package retrysafe_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/retrysafe/retrysafe"
)

func TestKeyFromJSON(t *testing.T) {
	t.Parallel()
	f, err := retrysafe.KeyFromJSON("/data/a~1b")
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	for name, tc := range map[string]struct {
		body    string
		key     string
		ok, err bool
	}{
		"string":     {body: `{"data":{"a/b":"evt_1"}}`, key: "evt_1", ok: true},
		"integer":    {body: `{"data":{"a/b":12345678901234}}`, key: "12345678901234", ok: true},
		"absent":     {body: `{"data":{}}`},
		"null":       {body: `{"data":{"a/b":null}}`},
		"empty body": {body: ``},
		"not JSON":   {body: `id=1`, err: true},
		"object":     {body: `{"data":{"a/b":{}}}`, err: true},
		"float":      {body: `{"data":{"a/b":1.5}}`, err: true},
		"spaces ok":  {body: `{"data":{"a/b":"a b"}}`, key: "a b", ok: true},
	} {
		key, ok, err := f(r, []byte(tc.body))
		if key != tc.key || ok != tc.ok || (err != nil) != tc.err {
			t.Errorf("%s: = %q, %v, %v; want %q, %v, error %v", name, key, ok, err, tc.key, tc.ok, tc.err)
		}
		if err != nil && !errors.Is(err, retrysafe.ErrInvalidKey) {
			t.Errorf("%s: error %v does not match ErrInvalidKey", name, err)
		}
	}
	for _, p := range []string{"", "id", "/a~2"} {
		if _, err := retrysafe.KeyFromJSON(p); err == nil {
			t.Errorf("KeyFromJSON(%q) accepted", p)
		}
	}
}

func TestKeyFromHeaderFallsBack(t *testing.T) {
	t.Parallel()
	f := retrysafe.KeyFromHeader("X-Event-Id", "x-webhook-id")
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	if _, ok, err := f(r, nil); ok || err != nil {
		t.Fatalf("no header: ok %v, err %v", ok, err)
	}
	r.Header.Set("X-Webhook-Id", `"w 1"`) // a Structured-Field string, as ParseKey reads it
	if key, ok, err := f(r, nil); key != "w 1" || !ok || err != nil {
		t.Fatalf("fallback: %q %v %v", key, ok, err)
	}
	r.Header.Set("X-Event-Id", "e1")
	if key, _, _ := f(r, nil); key != "e1" {
		t.Fatalf("first header: %q, want e1", key)
	}
	r.Header.Add("X-Event-Id", "e2")
	if _, _, err := f(r, nil); !errors.Is(err, retrysafe.ErrInvalidKey) {
		t.Fatalf("two values: err %v, want ErrInvalidKey", err)
	}
}

// A key from the body is claimed like a header key: one run per key, the
// same rules (length, printable ASCII), 400 when it is missing and
// required, and Idempotency-Key is then ignored.
func TestConfigKeyFromBody(t *testing.T) {
	t.Parallel()
	key, err := retrysafe.KeyFromJSON("/id")
	if err != nil {
		t.Fatal(err)
	}
	h := &counter{}
	srv := newServer(t, retrysafe.Config{Key: key, RequireKey: true}, h)
	first := send(t, srv.URL, http.MethodPost, "", `{"id":"evt_1","n":1}`, "Authorization", "a")
	again := send(t, srv.URL, http.MethodPost, "other-header-key", `{"n":1,"id":"evt_1"}`, "Authorization", "a")
	if first.status != http.StatusCreated || again.header.Get(retrysafe.HeaderReplayed) != "true" || string(again.body) != string(first.body) {
		t.Fatalf("first %d, again %d %q (replayed %q)", first.status, again.status, again.body, again.header.Get(retrysafe.HeaderReplayed))
	}
	wantProblem(t, send(t, srv.URL, http.MethodPost, "", `{"id":"evt_1","n":2}`, "Authorization", "a"), http.StatusUnprocessableEntity, retrysafe.ProblemMismatch)
	wantProblem(t, send(t, srv.URL, http.MethodPost, "k", `{"n":1}`, "Authorization", "a"), http.StatusBadRequest, retrysafe.ProblemMissingKey)
	long := make([]byte, retrysafe.MaxKeyLength+1)
	for i := range long {
		long[i] = 'a'
	}
	wantProblem(t, send(t, srv.URL, http.MethodPost, "", `{"id":"`+string(long)+`"}`, "Authorization", "a"), http.StatusBadRequest, retrysafe.ProblemInvalidKey)
	wantProblem(t, send(t, srv.URL, http.MethodPost, "", `{"id":"\u00e9"}`, "Authorization", "a"), http.StatusBadRequest, retrysafe.ProblemInvalidKey)
	wantProblem(t, send(t, srv.URL, http.MethodPost, "", `{"id":[1]}`, "Authorization", "a"), http.StatusBadRequest, retrysafe.ProblemInvalidKey)
	if n := h.runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
	// Not required: a body without the member passes through, body intact.
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := make([]byte, 64)
		n, _ := r.Body.Read(b)
		_, _ = w.Write(b[:n])
	})
	srv2 := newServer(t, retrysafe.Config{Key: key}, echo)
	if r := send(t, srv2.URL, http.MethodPost, "", `{"n":3}`); r.status != http.StatusOK || string(r.body) != `{"n":3}` {
		t.Fatalf("pass-through: %d %q", r.status, r.body)
	}
}
