package retrysafe_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/memory"
)

// requestOutcomes is a RequestObserver that records each request's outcome
// under the value the test put in its context.
type requestOutcomes struct {
	mu       sync.Mutex
	outcomes map[string]retrysafe.Outcome // by the request's tag
	plain    int                          // calls of Outcome (without the request)
}

type tagKey struct{}

func (o *requestOutcomes) RequestOutcome(r *http.Request, oc retrysafe.Outcome, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	tag, _ := r.Context().Value(tagKey{}).(string)
	o.outcomes[tag] = oc
}
func (o *requestOutcomes) Outcome(retrysafe.Outcome, time.Duration) {
	o.mu.Lock()
	o.plain++
	o.mu.Unlock()
}
func (o *requestOutcomes) StoreCall(string, time.Duration, error) {}
func (o *requestOutcomes) InFlight(int)                           {}

// TestRequestObserver checks that a RequestObserver gets each protected
// request's outcome with the request itself, and that a scope failure (401)
// is reported as unauthorized, not as an invalid key.
func TestRequestObserver(t *testing.T) {
	t.Parallel()
	store := memory.New(memory.Config{})
	t.Cleanup(func() { _ = store.Close() })
	obs := &requestOutcomes{outcomes: map[string]retrysafe.Outcome{}}
	mw, err := retrysafe.NewMiddleware(retrysafe.Config{
		Store:    store,
		Observer: obs,
		Scope: func(r *http.Request) (string, error) {
			if r.Header.Get("Authorization") == "" {
				return "", errors.New("no credentials")
			}
			return r.Header.Get("Authorization"), nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) }))
	serve := func(tag, key, auth string) int {
		req := httptest.NewRequest("POST", "/x", strings.NewReader(`{}`))
		req = req.WithContext(context.WithValue(req.Context(), tagKey{}, tag))
		if key != "" {
			req.Header.Set(retrysafe.HeaderKey, key)
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	if got := serve("unauthorized", "k1", ""); got != http.StatusUnauthorized {
		t.Fatalf("without credentials: status %d, want 401", got)
	}
	serve("new", "k2", "a")
	serve("replayed", "k2", "a")
	serve("invalid", "\x01", "a")

	obs.mu.Lock()
	defer obs.mu.Unlock()
	want := map[string]retrysafe.Outcome{
		"unauthorized": retrysafe.OutcomeUnauthorized,
		"new":          retrysafe.OutcomeNew,
		"replayed":     retrysafe.OutcomeReplayed,
		"invalid":      retrysafe.OutcomeInvalidKey,
	}
	for tag, o := range want {
		if obs.outcomes[tag] != o {
			t.Errorf("request %q: outcome %q, want %q", tag, obs.outcomes[tag], o)
		}
	}
	if len(obs.outcomes) != len(want) || obs.plain != 0 {
		t.Errorf("outcomes %v and %d calls of Outcome; want exactly %d RequestOutcome calls", obs.outcomes, obs.plain, len(want))
	}
}
