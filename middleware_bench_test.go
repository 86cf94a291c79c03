package retrysafe_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"testing"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/memory"
)

// The request the in-process measurements of the middleware send (this
// file's benchmarks, TestMiddlewareAllocations): POST /orders with a
// 21-byte JSON body and an Idempotency-Key, which ordersHandler answers
// with 201.
var (
	ordersBody = []byte(`{"sku":"abc","qty":1}`)
	ordersURL  = &url.URL{Path: "/orders"}
)

var ordersHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	var buf [64]byte
	for {
		if _, err := r.Body.Read(buf[:]); err != nil {
			break
		}
	}
	w.Header()["Content-Type"] = []string{"application/json"}
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write([]byte(`{"id":"ord_1"}`))
})

// serveOrders sends the request with key through h to w (its header map
// reset, as a server's is per request) and fails tb unless h answers 201.
func serveOrders(tb testing.TB, h http.Handler, w *benchWriter, key string) {
	r := (&http.Request{
		Method: http.MethodPost, URL: ordersURL, Header: http.Header{"Idempotency-Key": {key}},
		Body: io.NopCloser(bytes.NewReader(ordersBody)), ContentLength: int64(len(ordersBody)),
	}).WithContext(context.Background())
	clear(w.header)
	h.ServeHTTP(w, r)
	if w.status != http.StatusCreated {
		tb.Fatalf("status %d", w.status)
	}
}

// BenchmarkMiddleware is the middleware on the memory store, in process:
// new keys (claim, run, capture, complete) and replays of 256 stored keys,
// with the bare handler for reference. bench/peers compares it with Fiber.
func BenchmarkMiddleware(b *testing.B) {
	setup := func(b *testing.B) http.Handler {
		store := memory.New(memory.Config{})
		b.Cleanup(func() { _ = store.Close() })
		mw, err := retrysafe.NewMiddleware(retrysafe.Config{Store: store})
		if err != nil {
			b.Fatal(err)
		}
		return mw(ordersHandler)
	}
	b.Run("bare", func(b *testing.B) {
		w := &benchWriter{header: make(http.Header)}
		b.ReportAllocs()
		for b.Loop() {
			serveOrders(b, ordersHandler, w, "k")
		}
	})
	b.Run("new", func(b *testing.B) {
		h := setup(b)
		w := &benchWriter{header: make(http.Header)}
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			serveOrders(b, h, w, fmt.Sprintf("key-%d", n))
			n++
		}
	})
	b.Run("replay", func(b *testing.B) {
		h := setup(b)
		w := &benchWriter{header: make(http.Header)}
		keys := make([]string, 256)
		for i := range keys {
			keys[i] = fmt.Sprintf("key-%d", i)
			serveOrders(b, h, w, keys[i])
		}
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			serveOrders(b, h, w, keys[n%len(keys)])
			n++
		}
	})
}

// benchWriter is a ResponseWriter whose header map is reset per request.
type benchWriter struct {
	header http.Header
	status int
}

func (w *benchWriter) Header() http.Header         { return w.header }
func (w *benchWriter) WriteHeader(code int)        { w.status = code }
func (w *benchWriter) Write(p []byte) (int, error) { return len(p), nil }
