package webhook_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/memory"
	"github.com/retrysafe/retrysafe/webhook"
)

// Verification comes before the claim: a forged delivery gets 401
// webhook-signature, runs nothing and stores nothing, so the event's id
// stays free for the genuine delivery, which then runs once.
func TestMiddlewareVerifiesBeforeTheClaim(t *testing.T) {
	t.Parallel()
	now := time.Now()
	store := memory.New(memory.Config{})
	t.Cleanup(func() { _ = store.Close() })
	v := newVerifier(t, webhook.Stripe, now, "whsec_real")
	mw, err := retrysafe.NewMiddleware(retrysafe.Config{Store: store, Key: v.Key(), RequireKey: true, RequireScope: true,
		Scope: func(*http.Request) (string, error) { return "stripe", nil }})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	var failures []webhook.Reason
	h := v.Middleware(webhook.MiddlewareConfig{MaxBody: 1024, OnFailure: func(_ *http.Request, e *webhook.Error) { failures = append(failures, e.Reason) }})(
		mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			b, _ := io.ReadAll(r.Body)
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write(b)
		})))
	body := `{"id":"evt_1","type":"charge.succeeded"}`
	deliver := func(h2 http.Header, body string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/webhooks/stripe", strings.NewReader(body))
		for k, v := range h2 {
			r.Header[k] = v
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	forged := deliver(signStripe("whsec_guess", now, "", []byte(body)), body)
	wantProblemRecorder(t, forged, http.StatusUnauthorized, webhook.ProblemWebhookSignature)
	if _, err := store.Get(context.Background(), &retrysafe.GetParams{Scope: "stripe", Key: "evt_1", Now: time.Now()}); !errors.Is(err, retrysafe.ErrNotFound) {
		t.Fatalf("a forged delivery left a record: %v", err)
	}
	if runs.Load() != 0 {
		t.Fatal("a forged delivery ran")
	}
	genuine := signStripe("whsec_real", now, "", []byte(body))
	for range 3 {
		if w := deliver(genuine, body); w.Code != http.StatusOK || w.Body.String() != body {
			t.Fatalf("genuine delivery: %d %q", w.Code, w.Body)
		}
	}
	if runs.Load() != 1 {
		t.Fatalf("the event ran %d times, want 1", runs.Load())
	}
	big := `{"id":"evt_2","pad":"` + strings.Repeat("x", 1100) + `"}`
	wantProblemRecorder(t, deliver(signStripe("whsec_real", now, "", []byte(big)), big), http.StatusRequestEntityTooLarge, retrysafe.ProblemBodyTooLarge)
	wantProblemRecorder(t, deliver(http.Header{}, body), http.StatusUnauthorized, webhook.ProblemWebhookSignature)
	if want := []webhook.Reason{webhook.ReasonBadSignature, webhook.ReasonMissingHeader}; len(failures) != 2 || failures[0] != want[0] || failures[1] != want[1] {
		t.Fatalf("failures reported %v, want %v", failures, want)
	}
	if runs.Load() != 1 {
		t.Fatalf("runs = %d after refused deliveries, want 1", runs.Load())
	}
}

func wantProblemRecorder(t *testing.T, w *httptest.ResponseRecorder, status int, slug string) {
	t.Helper()
	if w.Code != status || w.Header().Get("Content-Type") != retrysafe.ContentTypeProblem {
		t.Fatalf("answer %d %s %q, want %d problem+json", w.Code, w.Header().Get("Content-Type"), w.Body, status)
	}
	var p retrysafe.Problem
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || !strings.HasSuffix(p.Type, "/"+slug) || p.Detail == "" {
		t.Fatalf("problem %+v (%v), want type .../%s with a detail", p, err, slug)
	}
}

func ExampleVerifier_Middleware() {
	store := memory.New(memory.Config{})
	defer store.Close()
	v, err := webhook.New(webhook.Config{Scheme: webhook.Stripe, Secrets: []string{"whsec_…"}})
	if err != nil {
		panic(err)
	}
	protect, err := retrysafe.NewMiddleware(retrysafe.Config{
		Store:       store,
		Key:         v.Key(), // the event's id
		RequireKey:  true,
		Scope:       func(*http.Request) (string, error) { return "stripe", nil },
		StoreStatus: func(status int) bool { return status < 500 }, // 5xx: let Stripe retry
	})
	if err != nil {
		panic(err)
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	verify := v.Middleware(webhook.MiddlewareConfig{})
	mux := http.NewServeMux()
	mux.Handle("POST /webhooks/stripe", verify(protect(handler)))

	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/webhooks/stripe", strings.NewReader(`{"id":"evt_1"}`)))
	fmt.Println(w.Code)
	// Output: 401
}
