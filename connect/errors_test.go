package retrysafeconnect_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	retrysafeconnect "github.com/retrysafe/retrysafe/connect"
)

// Every problem the middleware writes becomes the Connect error of its
// code, with the protocol's HTTP status; anything else passes untouched.
func TestErrorsMapsProblems(t *testing.T) {
	t.Parallel()
	for slug, want := range map[string]struct {
		code   string
		status int
	}{
		retrysafe.ProblemMissingKey:       {"invalid_argument", 400},
		retrysafe.ProblemInvalidKey:       {"invalid_argument", 400},
		retrysafe.ProblemEmptyScope:       {"unauthenticated", 401},
		retrysafe.ProblemMismatch:         {"failed_precondition", 400},
		retrysafe.ProblemInProgress:       {"aborted", 409},
		retrysafe.ProblemOutcomeUnknown:   {"aborted", 409},
		retrysafe.ProblemBodyTooLarge:     {"resource_exhausted", 429},
		retrysafe.ProblemStoreUnavailable: {"unavailable", 503},
		retrysafe.ProblemStoreFull:        {"resource_exhausted", 429},
		"something-new":                   {"unavailable", 503}, // by its HTTP status
	} {
		h := retrysafeconnect.Errors(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			retrysafe.WriteProblem(w, &retrysafe.Problem{Type: retrysafe.DefaultProblemBase + slug, Title: "t", Status: 503, Detail: "d"}, 2*time.Second)
		}))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/x", strings.NewReader("{}")))
		var got struct {
			Code    string                  `json:"code"`
			Message string                  `json:"message"`
			Details []struct{ Type string } `json:"details"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
			t.Fatalf("%s: %v: %q", slug, err, rec.Body)
		}
		if got.Code != want.code || rec.Code != want.status || got.Message != "d" || rec.Header().Get("Content-Type") != "application/json" {
			t.Errorf("%s: %d %+v, want %d %s", slug, rec.Code, got, want.status, want.code)
		}
		if len(got.Details) != 2 || got.Details[0].Type != "google.rpc.ErrorInfo" || got.Details[1].Type != "google.rpc.RetryInfo" {
			t.Errorf("%s: details %+v", slug, got.Details)
		}
	}
	// A handler's own answer passes, streamed.
	h := retrysafeconnect.Errors(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write([]byte(`{"code":"already_exists"}`))
		http.NewResponseController(w).Flush()
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/x", nil))
	if rec.Code != http.StatusConflict || rec.Body.String() != `{"code":"already_exists"}` || !rec.Flushed {
		t.Fatalf("pass-through: %d %q flushed %v", rec.Code, rec.Body, rec.Flushed)
	}
}
