package retrysafegin_test

import (
	"bytes"
	"flag"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/retrysafe/retrysafe"
	retrysafegin "github.com/retrysafe/retrysafe/gin"
	"github.com/retrysafe/retrysafe/internal/addedcost"
	"github.com/retrysafe/retrysafe/store/memory"
)

// The request of every benchmark: POST /orders with a 21-byte JSON body,
// an Authorization header (the scope) and a fresh or stored key.
var (
	benchBody = []byte(`{"sku":"abc","qty":1}`)
	benchResp = []byte(`{"id":"ord_1"}`)
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
			_, _ = w.Write(benchResp)
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
		c.Data(http.StatusCreated, "application/json", benchResp)
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
	c.body.Reset(benchBody)
	c.req.Body = readCloser{&c.body}
	c.req.ContentLength = int64(len(benchBody))
	c.h.ServeHTTP(&c.w, c.req)
	return c.w.status
}

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }

const benchStoredKeys = 256

// BenchmarkGin measures the subjects in each scenario: new keys or
// replays, serial or parallel. TestGinAddedCost runs it in interleaved
// rounds.
func BenchmarkGin(b *testing.B) {
	for _, sc := range []string{"new", "replay", "new-parallel", "replay-parallel"} {
		b.Run(sc, func(b *testing.B) {
			for _, s := range []string{"gin-bare", "gin-retrysafe", "nethttp-bare", "nethttp-retrysafe"} {
				b.Run(s, func(b *testing.B) {
					h := benchHandler(b, s)
					replay := sc == "replay" || sc == "replay-parallel"
					var next atomic.Uint64
					key := func() string {
						n := next.Add(1)
						if replay {
							n %= benchStoredKeys
						}
						return "key-" + strconv.FormatUint(n, 16)
					}
					if replay {
						c := newBenchClient(h)
						for n := range uint64(benchStoredKeys) {
							if st := c.do("key-" + strconv.FormatUint(n, 16)); st != 201 {
								b.Fatalf("storing: %d", st)
							}
						}
					}
					b.ReportAllocs()
					defer addedcost.ReportCPU(b, addedcost.Start())
					b.ResetTimer()
					if sc == "new" || sc == "replay" {
						c := newBenchClient(h)
						for b.Loop() {
							if st := c.do(key()); st != 201 {
								b.Fatalf("status %d", st)
							}
						}
						return
					}
					b.RunParallel(func(pb *testing.PB) {
						c := newBenchClient(h)
						for pb.Next() {
							if st := c.do(key()); st != 201 {
								b.Errorf("status %d", st)
								return
							}
						}
					})
				})
			}
		})
	}
}

var rounds = flag.Int("rounds", 0, "TestGinAddedCost: interleaved rounds (0 skips it)")

// TestGinAddedCost prints what New adds to a bare Gin route, and, for
// reference, what the net/http middleware it hosts adds to a bare net/http
// handler, in interleaved rounds (see internal/addedcost). It measures;
// it asserts only that every request succeeded.
//
//	go test -run TestGinAddedCost -rounds 6 -benchtime 50000x .
func TestGinAddedCost(t *testing.T) {
	if *rounds <= 0 {
		t.Skip("pass -rounds N to measure")
	}
	addedcost.Run(t, os.Stdout, *rounds, addedcost.Plan{
		Bench:     "BenchmarkGin",
		Scenarios: []string{"new", "replay", "new-parallel", "replay-parallel"},
		Subjects:  []string{"gin-bare", "gin-retrysafe", "nethttp-bare", "nethttp-retrysafe"},
		Baseline:  map[string]string{"gin-retrysafe": "gin-bare", "nethttp-retrysafe": "nethttp-bare"},
		Ratio:     [2]string{"gin-retrysafe", "nethttp-retrysafe"},
	})
}
