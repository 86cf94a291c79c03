package frameworktest_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/adaptertest"
)

// chi hosts the net/http middleware as it is: r.Use(mw), or r.With(mw) for
// some routes.
type chiAdapter struct{}

func (chiAdapter) Start(t *testing.T, cfg retrysafe.Config, h adaptertest.Handler) adaptertest.Client {
	mw, err := retrysafe.NewMiddleware(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	r.Use(middleware.Recoverer)
	r.Use(mw)
	r.Post("/payments", adaptertest.HTTPHandler(h).ServeHTTP)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return &adaptertest.HTTPClient{URL: srv.URL + "/payments", Client: srv.Client()}
}

func TestChiSuite(t *testing.T) {
	t.Parallel()
	adaptertest.Run(t, chiAdapter{})
}

// TestChiRouteParams: behind the middleware, chi's route parameters still
// resolve (the handler's request context is detached from cancellation,
// not from values), on a route protected with r.With, and another path is
// another request for the fingerprint.
func TestChiRouteParams(t *testing.T) {
	t.Parallel()
	mw, err := retrysafe.NewMiddleware(retrysafe.Config{Store: newStore(t)})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	r := chi.NewRouter()
	r.With(mw).Post("/orders/{id}/pay", func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		body, _ := io.ReadAll(r.Body)
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "paid "+chi.URLParam(r, "id")+" "+string(body))
	})
	send := func(path string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, path, nil)
		req.Header.Set("Authorization", "Bearer t")
		req.Header.Set(retrysafe.HeaderKey, "k")
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, req)
		return rec
	}
	first, again, other := send("/orders/o1/pay"), send("/orders/o1/pay"), send("/orders/o2/pay")
	if first.Code != 201 || first.Body.String() != "paid o1 " || again.Body.String() != "paid o1 " || again.Header().Get(retrysafe.HeaderReplayed) != "true" {
		t.Errorf("first %d %q, retry %d %q", first.Code, first.Body, again.Code, again.Body)
	}
	if other.Code != http.StatusUnprocessableEntity || runs.Load() != 1 {
		t.Errorf("same key on another order: %d %q, runs %d; want 422", other.Code, other.Body, runs.Load())
	}
}
