package retrysafegin_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/retrysafe/retrysafe"
	retrysafegin "github.com/retrysafe/retrysafe/gin"
	"github.com/retrysafe/retrysafe/internal/adaptertest"
	"github.com/retrysafe/retrysafe/internal/scopehash"
	"github.com/retrysafe/retrysafe/store/memory"
)

func init() { gin.SetMode(gin.TestMode) }

// adapter runs the shared suite's handler as a Gin route behind New.
type adapter struct{}

func (adapter) Start(t *testing.T, cfg retrysafe.Config, h adaptertest.Handler) adaptertest.Client {
	mw, err := retrysafegin.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := gin.New()
	r.Use(mw)
	r.POST("/payments", func(c *gin.Context) {
		body, err := c.GetRawData()
		if err != nil {
			c.AbortWithStatus(http.StatusBadRequest)
			return
		}
		a := h(c.Request.Context(), body)
		c.Header(adaptertest.MetaHeader, a.Meta)
		c.Data(http.StatusCreated, "application/octet-stream", a.Body)
	})
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return &adaptertest.HTTPClient{URL: srv.URL + "/payments", Client: srv.Client()}
}

func TestSuite(t *testing.T) {
	t.Parallel()
	adaptertest.Run(t, adapter{})
}

func newStore(t *testing.T) *memory.Store {
	s := memory.New(memory.Config{})
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// do sends a POST with key to h and returns the recorded answer.
func do(h http.Handler, key, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/r", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer t")
	if key != "" {
		req.Header.Set(retrysafe.HeaderKey, key)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// engine is a Gin engine with New in front of handlers on POST /r, and a
// count of the runs of the last handler.
func engine(t *testing.T, cfg retrysafe.Config, before []gin.HandlerFunc, handlers ...gin.HandlerFunc) (*gin.Engine, *atomic.Int64) {
	t.Helper()
	if cfg.Store == nil {
		cfg.Store = newStore(t)
	}
	mw, err := retrysafegin.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	last := handlers[len(handlers)-1]
	handlers[len(handlers)-1] = func(c *gin.Context) { runs.Add(1); last(c) }
	r := gin.New()
	r.Use(before...)
	r.Use(mw)
	r.POST("/r", handlers...)
	r.GET("/r", handlers...)
	return r, &runs
}

// sameTwice sends one key twice to r and checks that the retry is the
// first answer, byte for byte, status and content type included, marked
// replayed, and that the handler ran once.
func sameTwice(t *testing.T, r http.Handler, runs *atomic.Int64, status int, body string) {
	t.Helper()
	first := do(r, "k1", `{"a":1}`)
	again := do(r, "k1", `{"a":1}`)
	if first.Code != status || first.Body.String() != body {
		t.Errorf("first answer %d %q, want %d %q", first.Code, first.Body, status, body)
	}
	if again.Code != first.Code || !bytes.Equal(again.Body.Bytes(), first.Body.Bytes()) ||
		again.Header().Get("Content-Type") != first.Header().Get("Content-Type") {
		t.Errorf("replay %d %q %q, want %d %q %q", again.Code, again.Body, again.Header().Get("Content-Type"),
			first.Code, first.Body, first.Header().Get("Content-Type"))
	}
	if first.Header().Get(retrysafe.HeaderReplayed) != "" || again.Header().Get(retrysafe.HeaderReplayed) != "true" {
		t.Errorf("replay markers: first %q, retry %q", first.Header().Get(retrysafe.HeaderReplayed), again.Header().Get(retrysafe.HeaderReplayed))
	}
	if runs.Load() != 1 {
		t.Errorf("the handler ran %d times, want 1", runs.Load())
	}
}

// TestRenderers: what Gin's renderers and the writer's own methods write
// is what is stored and replayed.
func TestRenderers(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		h      gin.HandlerFunc
		status int
		body   string
	}{
		"JSON":   {func(c *gin.Context) { c.JSON(http.StatusCreated, gin.H{"id": "p1"}) }, 201, `{"id":"p1"}`},
		"String": {func(c *gin.Context) { c.String(http.StatusAccepted, "queued %d", 7) }, 202, "queued 7"},
		"WriteString": {func(c *gin.Context) {
			c.Status(http.StatusCreated)
			_, _ = c.Writer.WriteString("written")
			if c.Writer.Status() != http.StatusCreated || c.Writer.Size() != 7 || !c.Writer.Written() {
				t.Errorf("writer: status %d size %d written %v", c.Writer.Status(), c.Writer.Size(), c.Writer.Written())
			}
		}, 201, "written"},
		"Stream": {func(c *gin.Context) {
			n := 0
			c.Status(http.StatusCreated)
			c.Stream(func(w io.Writer) bool {
				n++
				fmt.Fprintf(w, "chunk%d;", n)
				return n < 3
			})
		}, 201, "chunk1;chunk2;chunk3;"},
		"status only": {func(c *gin.Context) {
			c.Status(http.StatusAccepted)
			if c.Writer.Written() || c.Writer.Size() != -1 {
				t.Errorf("a status alone was written: size %d", c.Writer.Size())
			}
		}, 202, ""},
		"status changed before the body": {func(c *gin.Context) {
			c.Status(http.StatusOK)
			c.Status(http.StatusCreated)
			c.Writer.WriteHeaderNow()
			c.Status(http.StatusTeapot) // ignored: the header is written
			_, _ = c.Writer.Write([]byte("x"))
		}, 201, "x"},
		"Data": {func(c *gin.Context) { c.Data(http.StatusCreated, "application/octet-stream", []byte{0, 0xff, '\n'}) }, 201, "\x00\xff\n"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r, runs := engine(t, retrysafe.Config{}, nil, tc.h)
			sameTwice(t, r, runs, tc.status, tc.body)
		})
	}
}

// TestAborts: an abort behind New is the stored answer; a refusal or a
// replay of New stops the chain.
func TestAborts(t *testing.T) {
	t.Parallel()
	t.Run("abort behind New is stored", func(t *testing.T) {
		t.Parallel()
		var after atomic.Int64
		deny := func(c *gin.Context) { c.AbortWithStatusJSON(http.StatusForbidden, gin.H{"error": "denied"}) }
		r, runs := engine(t, retrysafe.Config{}, nil, deny, func(c *gin.Context) { after.Add(1) })
		// runs counts the last handler, which never runs: count the abort.
		first, again := do(r, "k1", "{}"), do(r, "k1", "{}")
		if first.Code != 403 || again.Code != 403 || again.Body.String() != first.Body.String() || again.Header().Get(retrysafe.HeaderReplayed) != "true" {
			t.Errorf("abort: first %d %q, retry %d %q %v", first.Code, first.Body, again.Code, again.Body, again.Header())
		}
		if runs.Load() != 0 || after.Load() != 0 {
			t.Errorf("handlers after the abort ran %d, %d times", runs.Load(), after.Load())
		}
	})
	t.Run("AbortWithStatus", func(t *testing.T) {
		t.Parallel()
		r, runs := engine(t, retrysafe.Config{}, nil, func(c *gin.Context) { c.AbortWithStatus(http.StatusNoContent) })
		sameTwice(t, r, runs, 204, "")
	})
	t.Run("refusal stops the chain", func(t *testing.T) {
		t.Parallel()
		r, runs := engine(t, retrysafe.Config{RequireKey: true}, nil, func(c *gin.Context) { c.String(201, "ran") })
		if rec := do(r, "", "{}"); rec.Code != http.StatusBadRequest || rec.Header().Get("Content-Type") != retrysafe.ContentTypeProblem {
			t.Errorf("no key: %d %q", rec.Code, rec.Body)
		}
		if rec := do(r, "k", `{"a":1}`); rec.Code != 201 {
			t.Fatalf("first: %d", rec.Code)
		}
		if rec := do(r, "k", `{"a":2}`); rec.Code != http.StatusUnprocessableEntity {
			t.Errorf("mismatch: %d %q", rec.Code, rec.Body)
		}
		if runs.Load() != 1 {
			t.Errorf("the handler ran %d times, want 1", runs.Load())
		}
	})
	t.Run("abort before New", func(t *testing.T) {
		t.Parallel()
		store := newStore(t)
		deny := func(c *gin.Context) { c.AbortWithStatus(http.StatusUnauthorized) }
		r, runs := engine(t, retrysafe.Config{Store: store}, []gin.HandlerFunc{deny}, func(c *gin.Context) { c.String(201, "ran") })
		if rec := do(r, "k", "{}"); rec.Code != 401 || runs.Load() != 0 {
			t.Errorf("abort before New: %d, runs %d", rec.Code, runs.Load())
		}
		if _, err := store.Get(t.Context(), &retrysafe.GetParams{Scope: scopehash.Sum("Bearer t"), Key: "k", Now: time.Now()}); !errors.Is(err, retrysafe.ErrNotFound) {
			t.Errorf("a request aborted before New left a record (err %v)", err)
		}
	})
}

// TestLogger: gin's Logger reads Status() of the writer it sees, in front
// of New (Gin's writer, written by the middleware) and behind it (New's
// writer).
func TestLogger(t *testing.T) {
	t.Parallel()
	var outer, inner syncBuffer
	format := func(p gin.LogFormatterParams) string { return fmt.Sprintf("%d %d\n", p.StatusCode, p.BodySize) }
	store := newStore(t)
	mw, err := retrysafegin.New(retrysafe.Config{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	r := gin.New()
	r.Use(gin.LoggerWithConfig(gin.LoggerConfig{Output: &outer, Formatter: format}), mw,
		gin.LoggerWithConfig(gin.LoggerConfig{Output: &inner, Formatter: format}))
	r.POST("/r", func(c *gin.Context) { c.String(http.StatusCreated, "made") })
	do(r, "k", "{}")
	do(r, "k", "{}")
	do(r, "k", `{"other":1}`)
	if got, want := outer.String(), "201 4\n201 4\n422 "; !strings.HasPrefix(got, want) {
		t.Errorf("Logger in front of New logged %q, want %q...", got, want)
	}
	if got, want := inner.String(), "201 4\n"; got != want {
		t.Errorf("Logger behind New logged %q, want %q (it runs only when the handler does)", got, want)
	}
}

// TestRecovery: a panic behind New releases the key and reaches
// gin.Recovery in front of it (500; the retry runs again); a gin.Recovery
// behind New turns it into a 500 that is stored and replayed.
func TestRecovery(t *testing.T) {
	t.Parallel()
	t.Run("in front", func(t *testing.T) {
		t.Parallel()
		var fail atomic.Bool
		fail.Store(true)
		r, runs := engine(t, retrysafe.Config{}, []gin.HandlerFunc{gin.RecoveryWithWriter(io.Discard)}, func(c *gin.Context) {
			if fail.Swap(false) {
				panic("boom")
			}
			c.String(http.StatusCreated, "made")
		})
		if rec := do(r, "k", "{}"); rec.Code != http.StatusInternalServerError {
			t.Fatalf("panic: %d %q", rec.Code, rec.Body)
		}
		if rec := do(r, "k", "{}"); rec.Code != http.StatusCreated || rec.Header().Get(retrysafe.HeaderReplayed) != "" {
			t.Errorf("retry after the panic: %d %v, want a new run", rec.Code, rec.Header())
		}
		if runs.Load() != 2 {
			t.Errorf("runs %d, want 2", runs.Load())
		}
	})
	t.Run("behind", func(t *testing.T) {
		t.Parallel()
		store := newStore(t)
		mw, err := retrysafegin.New(retrysafe.Config{Store: store})
		if err != nil {
			t.Fatal(err)
		}
		var runs atomic.Int64
		r := gin.New()
		r.Use(mw, gin.RecoveryWithWriter(io.Discard))
		r.POST("/r", func(c *gin.Context) { runs.Add(1); panic("boom") })
		first, again := do(r, "k", "{}"), do(r, "k", "{}")
		if first.Code != 500 || again.Code != 500 || again.Header().Get(retrysafe.HeaderReplayed) != "true" || runs.Load() != 1 {
			t.Errorf("first %d, retry %d %v, runs %d; want 500 stored and replayed", first.Code, again.Code, again.Header(), runs.Load())
		}
	})
}

// TestWriterRefusals: Hijack is refused, CloseNotify never fires, Pusher is
// nil; a request New passes through gets Gin's own writer.
func TestWriterRefusals(t *testing.T) {
	t.Parallel()
	var hijackErr error
	var notified, pusher, own atomic.Bool
	r, _ := engine(t, retrysafe.Config{}, nil, func(c *gin.Context) {
		if c.Request.Method == http.MethodGet {
			own.Store(fmt.Sprintf("%T", c.Writer) == "*gin.responseWriter")
			c.String(200, "get")
			return
		}
		_, _, hijackErr = c.Writer.Hijack()
		select {
		case <-c.Writer.CloseNotify():
			notified.Store(true)
		default:
		}
		pusher.Store(c.Writer.Pusher() != nil)
		if retrysafe.OperationFromContext(c.Request.Context()) == nil {
			t.Error("no Operation in the handler's request context")
		}
		c.String(201, "ok")
	})
	if rec := do(r, "k", "{}"); rec.Code != 201 {
		t.Fatalf("%d", rec.Code)
	}
	if hijackErr == nil || notified.Load() || pusher.Load() {
		t.Errorf("hijack err %v, close notified %v, pusher %v", hijackErr, notified.Load(), pusher.Load())
	}
	req := httptest.NewRequest(http.MethodGet, "/r", nil)
	req.Header.Set(retrysafe.HeaderKey, "k")
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, req)
	if rec.Code != 200 || rec.Header().Get(retrysafe.HeaderReplayed) != "" || !own.Load() {
		t.Errorf("GET: %d %v, Gin's own writer %v", rec.Code, rec.Header(), own.Load())
	}
}

// TestConcurrentGin: duplicates that really overlap, through Gin's
// engine, make one effect.
func TestConcurrentGin(t *testing.T) {
	t.Parallel()
	r, runs := engine(t, retrysafe.Config{InFlight: retrysafe.InFlightWait}, nil, func(c *gin.Context) { c.JSON(201, gin.H{"ok": true}) })
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if rec := do(r, "k", "{}"); rec.Code != 201 {
				t.Errorf("%d %q", rec.Code, rec.Body)
			}
		})
	}
	wg.Wait()
	if runs.Load() != 1 {
		t.Errorf("runs %d", runs.Load())
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
