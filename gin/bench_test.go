package retrysafegin_test

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/retrysafe/retrysafe"
	retrysafegin "github.com/retrysafe/retrysafe/gin"
	"github.com/retrysafe/retrysafe/internal/addedcost"
	"github.com/retrysafe/retrysafe/store/memory"
)

// benchHandler is the subject's http.Handler: a Gin engine with or
// without New in front of the route, or, for reference, a plain net/http
// handler with or without the net/http middleware it hosts.
func benchHandler(b *testing.B, subject string) http.Handler {
	var mw func(http.Handler) http.Handler
	var ginMW gin.HandlerFunc
	if subject == "gin-retrysafe" || subject == "nethttp-retrysafe" {
		st := memory.New(memory.Config{})
		b.Cleanup(func() { _ = st.Close() })
		var err error
		if subject == "gin-retrysafe" {
			ginMW, err = retrysafegin.New(retrysafe.Config{Store: st})
		} else {
			mw, err = retrysafe.NewMiddleware(retrysafe.Config{Store: st})
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	switch subject {
	case "nethttp-bare", "nethttp-retrysafe":
		var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var buf [64]byte
			_, _ = r.Body.Read(buf[:])
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write(addedcost.ResponseBody)
		})
		if mw != nil {
			h = mw(h)
		}
		return h
	}
	r := gin.New()
	if ginMW != nil {
		r.Use(ginMW)
	}
	r.POST("/orders", func(c *gin.Context) {
		_, _ = c.GetRawData()
		c.Data(http.StatusCreated, "application/json", addedcost.ResponseBody)
	})
	return r
}

// discardWriter is a reused ResponseWriter, as a server's is per
// connection; its header map is cleared between requests.
type discardWriter struct {
	header http.Header
	status int
}

func (w *discardWriter) Header() http.Header         { return w.header }
func (w *discardWriter) WriteHeader(code int)        { w.status = code }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }

type benchClient struct {
	h    http.Handler
	w    discardWriter
	req  *http.Request
	body bytes.Reader
	hdr  http.Header
}

func newBenchClient(h http.Handler) *benchClient {
	c := &benchClient{h: h, w: discardWriter{header: make(http.Header)}}
	c.req, _ = http.NewRequest(http.MethodPost, "/orders", nil)
	c.hdr = http.Header{"Content-Type": {"application/json"}, "Authorization": {"Bearer sk_test_1"}, retrysafe.HeaderKey: {""}}
	c.req.Header = c.hdr
	return c
}

func (c *benchClient) do(key string) int {
	clear(c.w.header)
	c.w.status = 0
	c.hdr[retrysafe.HeaderKey][0] = key
	c.body.Reset(addedcost.RequestBody)
	c.req.Body = readCloser{&c.body}
	c.req.ContentLength = int64(len(addedcost.RequestBody))
	c.h.ServeHTTP(&c.w, c.req)
	return c.w.status
}

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }

// BenchmarkGin measures the subjects in each scenario of
// internal/addedcost. TestGinAddedCost runs it in interleaved rounds.
func BenchmarkGin(b *testing.B) {
	addedcost.Bench(b, []string{"gin-bare", "gin-retrysafe", "nethttp-bare", "nethttp-retrysafe"}, func(b *testing.B, subject string) func() addedcost.Client {
		h := benchHandler(b, subject)
		return func() addedcost.Client { return newBenchClient(h).do }
	})
}

// TestGinAddedCost prints what New adds to a bare Gin route, and, for
// reference, what the net/http middleware it hosts adds to a bare net/http
// handler, in interleaved rounds (see internal/addedcost). It measures;
// it asserts only that every request succeeded.
//
//	go test -run TestGinAddedCost -rounds 6 -benchtime 50000x .
func TestGinAddedCost(t *testing.T) {
	addedcost.Measure(t, addedcost.Plan{
		Bench:    "BenchmarkGin",
		Subjects: []string{"gin-bare", "gin-retrysafe", "nethttp-bare", "nethttp-retrysafe"},
		Baseline: map[string]string{"gin-retrysafe": "gin-bare", "nethttp-retrysafe": "nethttp-bare"},
		Ratio:    [2]string{"gin-retrysafe", "nethttp-retrysafe"},
	})
}
