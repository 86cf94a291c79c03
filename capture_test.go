package retrysafe_test

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe"
)

// TestClientHeaderIsNotTheStoredOne: what the middleware writes to the
// client's header never shares memory with the stored response, so code
// outside it (a server, an outer middleware) that edits header values in
// place cannot change what later replays answer.
func TestClientHeaderIsNotTheStoredOne(t *testing.T) {
	t.Parallel()
	mw, err := retrysafe.NewMiddleware(retrysafe.Config{Store: newMemory(t)})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["X-Multi"] = []string{"a", "b"}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{}`))
	}))
	post := func() *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{}`))
		r.Header.Set(retrysafe.HeaderKey, "k")
		h.ServeHTTP(rec, r)
		return rec
	}
	for i, rec := range []*httptest.ResponseRecorder{post(), post()} {
		got := rec.Result().Header
		if !slices.Equal(got["X-Multi"], []string{"a", "b"}) || got.Get("Content-Type") != "application/json" {
			t.Fatalf("answer %d: header %v", i, got)
		}
		// Edit the client's header in place, as code outside might.
		hdr := rec.Header()
		hdr["X-Multi"][0] = "mutated"
		hdr["Content-Type"][0] = "text/mutated"
		_ = append(hdr["X-Multi"][:1], "appended")
	}
	got := post().Result().Header
	if !slices.Equal(got["X-Multi"], []string{"a", "b"}) || got.Get("Content-Type") != "application/json" {
		t.Fatalf("replay after the client's header was edited: %v", got)
	}
}
