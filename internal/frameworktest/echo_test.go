package frameworktest_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/adaptertest"
	"github.com/retrysafe/retrysafe/store/memory"
)

// Retrysafe is the Echo recipe of docs/frameworks.md, word for word: the
// net/http middleware as Echo middleware. Unlike echo.WrapMiddleware it
// renders a handler's returned error inside the middleware (c.Error), so
// that the answer stored is the one the client gets, and it gives the
// chain back Echo's own response afterwards.
func Retrysafe(mw func(http.Handler) http.Handler) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			req, res := c.Request(), c.Response()
			mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				c.SetRequest(r)
				c.SetResponse(echo.NewResponse(w, c.Echo()))
				if err := next(c); err != nil {
					c.Error(err)
				}
			})).ServeHTTP(res, req)
			c.SetRequest(req)
			c.SetResponse(res)
			return nil
		}
	}
}

type echoAdapter struct{}

func (echoAdapter) Start(t *testing.T, cfg retrysafe.Config, h adaptertest.Handler) adaptertest.Client {
	mw, err := retrysafe.NewMiddleware(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	e.Use(Retrysafe(mw))
	e.POST("/payments", func(c echo.Context) error {
		body, err := io.ReadAll(c.Request().Body)
		if err != nil {
			return err
		}
		a := h(c.Request().Context(), body)
		c.Response().Header().Set(adaptertest.MetaHeader, a.Meta)
		return c.Blob(http.StatusCreated, "application/octet-stream", a.Body)
	})
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return &adaptertest.HTTPClient{URL: srv.URL + "/payments", Client: srv.Client()}
}

func TestEchoSuite(t *testing.T) {
	t.Parallel()
	adaptertest.Run(t, echoAdapter{})
}

func newStore(t *testing.T) *memory.Store {
	s := memory.New(memory.Config{})
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func post(h http.Handler, key, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/r", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer t")
	req.Header.Set(retrysafe.HeaderKey, key)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// TestEchoReturnedError: a handler's returned error (Echo's way of
// answering 4xx) is stored and replayed with the recipe; with
// echo.WrapMiddleware the middleware has already stored an empty 200 by the
// time Echo renders the error, so the client gets a 200 and every retry
// the empty 200: the recipe exists for this.
func TestEchoReturnedError(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"recipe", "WrapMiddleware"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			mw, err := retrysafe.NewMiddleware(retrysafe.Config{Store: newStore(t)})
			if err != nil {
				t.Fatal(err)
			}
			e := echo.New()
			var status atomic.Int64
			e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
				return func(c echo.Context) error {
					err := next(c)
					status.Store(int64(c.Response().Status)) // what a logger in front would read
					return err
				}
			})
			if name == "recipe" {
				e.Use(Retrysafe(mw))
			} else {
				e.Use(echo.WrapMiddleware(mw))
			}
			var runs atomic.Int64
			e.POST("/r", func(c echo.Context) error {
				runs.Add(1)
				return echo.NewHTTPError(http.StatusPaymentRequired, "card declined")
			})
			first, again := post(e, "k", "{}"), post(e, "k", "{}")
			if name == "WrapMiddleware" {
				if first.Code != http.StatusOK || again.Code != http.StatusOK || again.Body.Len() != 0 {
					t.Errorf("WrapMiddleware: first %d %q, retry %d %q; the pitfall documented in docs/frameworks.md has changed", first.Code, first.Body, again.Code, again.Body)
				}
				return
			}
			if first.Code != 402 || again.Code != 402 || again.Body.String() != first.Body.String() ||
				again.Header().Get(retrysafe.HeaderReplayed) != "true" || runs.Load() != 1 {
				t.Errorf("first %d %q, retry %d %q %v, runs %d", first.Code, first.Body, again.Code, again.Body, again.Header(), runs.Load())
			}
			if status.Load() != 402 {
				t.Errorf("middleware in front read status %d, want 402", status.Load())
			}
		})
	}
}
