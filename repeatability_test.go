package retrysafe_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/memory"
)

// OASIS Repeatable Requests: Repeatability-Request-ID is a key,
// Repeatability-First-Sent is checked against the TTL (and a small skew
// ahead) and is part of the request, and every answer says accepted or
// rejected.
func TestRepeatableRequests(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	h := &counter{}
	srv := newServer(t, retrysafe.Config{TTL: time.Hour, Now: func() time.Time { return now }}, h)
	sent := now.Add(-10 * time.Minute).Format(http.TimeFormat)
	post := func(hdr ...string) result {
		return send(t, srv.URL, http.MethodPost, "", `{"a":1}`, append([]string{"Authorization", "a"}, hdr...)...)
	}
	result := func(r result, want string) {
		t.Helper()
		if got := r.header.Values(retrysafe.HeaderRepeatabilityResult); len(got) != 1 || got[0] != want {
			t.Fatalf("Repeatability-Result = %q, want %q (status %d, %s)", got, want, r.status, r.body)
		}
	}

	first := post("Repeatability-Request-ID", "req-1", "Repeatability-First-Sent", sent)
	if first.status != http.StatusCreated {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	result(first, "accepted")
	again := post("Repeatability-Request-ID", "req-1", "Repeatability-First-Sent", sent)
	if again.header.Get(retrysafe.HeaderReplayed) != "true" || string(again.body) != string(first.body) {
		t.Fatalf("retry not replayed: %d %q", again.status, again.body)
	}
	result(again, "accepted")
	// The same key in both headers is one key.
	both := post("Idempotency-Key", "req-1", "Repeatability-Request-ID", "req-1", "Repeatability-First-Sent", sent)
	result(both, "accepted")

	other := now.Add(-9 * time.Minute).Format(http.TimeFormat)
	for _, tc := range map[string]struct {
		hdr    []string
		status int
		slug   string
	}{
		"another first-sent": {[]string{"Repeatability-Request-ID", "req-1", "Repeatability-First-Sent", other}, http.StatusUnprocessableEntity, retrysafe.ProblemMismatch},
		"no first-sent":      {[]string{"Repeatability-Request-ID", "req-1"}, http.StatusUnprocessableEntity, retrysafe.ProblemMismatch},
		"older than the TTL": {[]string{"Repeatability-Request-ID", "req-2", "Repeatability-First-Sent", now.Add(-time.Hour - time.Second).Format(http.TimeFormat)}, http.StatusPreconditionFailed, retrysafe.ProblemFirstSentExpired},
		"in the future":      {[]string{"Repeatability-Request-ID", "req-3", "Repeatability-First-Sent", now.Add(retrysafe.FirstSentSkew + time.Second).Format(http.TimeFormat)}, http.StatusPreconditionFailed, retrysafe.ProblemFirstSentExpired},
		"not IMF-fixdate":    {[]string{"Repeatability-Request-ID", "req-4", "Repeatability-First-Sent", now.Format(time.RFC850)}, http.StatusBadRequest, retrysafe.ProblemFirstSentInvalid},
		"RFC 3339":           {[]string{"Repeatability-Request-ID", "req-4", "Repeatability-First-Sent", now.Format(time.RFC3339)}, http.StatusBadRequest, retrysafe.ProblemFirstSentInvalid},
		"two first-sent":     {[]string{"Repeatability-Request-ID", "req-4", "Repeatability-First-Sent", sent, "Repeatability-First-Sent", sent}, http.StatusBadRequest, retrysafe.ProblemFirstSentInvalid},
		"keys differ":        {[]string{"Idempotency-Key", "k", "Repeatability-Request-ID", "req-5"}, http.StatusBadRequest, retrysafe.ProblemInvalidKey},
		"two ids":            {[]string{"Repeatability-Request-ID", "req-6", "Repeatability-Request-ID", "req-7"}, http.StatusBadRequest, retrysafe.ProblemInvalidKey},
		"invalid id":         {[]string{"Repeatability-Request-ID", "a,b"}, http.StatusBadRequest, retrysafe.ProblemInvalidKey},
	} {
		r := post(tc.hdr...)
		wantProblem(t, r, tc.status, tc.slug)
		result(r, "rejected")
	}
	// Within the skew ahead, and just inside the TTL: accepted.
	result(post("Repeatability-Request-ID", "req-8", "Repeatability-First-Sent", now.Add(retrysafe.FirstSentSkew).Format(http.TimeFormat)), "accepted")
	result(post("Repeatability-Request-ID", "req-9", "Repeatability-First-Sent", now.Add(-time.Hour).Format(http.TimeFormat)), "accepted")
	if n := h.runs.Load(); n != 3 {
		t.Fatalf("handler ran %d times, want 3 (req-1, req-8, req-9)", n)
	}
	// Without the OASIS headers nothing changes: no Repeatability-Result.
	if r := send(t, srv.URL, http.MethodPost, "k2", `{}`, "Authorization", "a"); r.header.Get(retrysafe.HeaderRepeatabilityResult) != "" {
		t.Fatalf("Repeatability-Result on a plain request: %q", r.header.Get(retrysafe.HeaderRepeatabilityResult))
	}
}

// downStore fails every Claim as an unreachable store does.
type downStore struct{ retrysafe.Store }

func (downStore) Claim(context.Context, *retrysafe.ClaimParams) (*retrysafe.ClaimResult, error) {
	return nil, retrysafe.Unavailable("claim", errors.New("connection refused"))
}

// A request that runs unprotected under FailOpen was accepted, not
// rejected; a fail-closed 503 was rejected.
func TestRepeatabilityResultWhenTheStoreIsDown(t *testing.T) {
	t.Parallel()
	store := memory.New(memory.Config{})
	t.Cleanup(func() { _ = store.Close() })
	for _, failOpen := range []bool{true, false} {
		h := &counter{}
		srv := newServer(t, retrysafe.Config{Store: downStore{store}, FailOpen: failOpen}, h)
		r := send(t, srv.URL, http.MethodPost, "", `{}`, "Authorization", "a", "Repeatability-Request-ID", "r1")
		want := map[bool]string{true: "accepted", false: "rejected"}[failOpen]
		if got := r.header.Get(retrysafe.HeaderRepeatabilityResult); got != want || (h.runs.Load() == 1) != failOpen {
			t.Errorf("FailOpen %v: Repeatability-Result %q, want %q (status %d, runs %d)", failOpen, got, want, r.status, h.runs.Load())
		}
	}
}
