package peers

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/idempotency"
	"github.com/valyala/fasthttp"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/addedcost"
	"github.com/retrysafe/retrysafe/store/memory"
)

// The request every scenario sends: POST /orders with a 21-byte JSON body.
var (
	reqBody   = []byte(`{"sku":"abc","qty":1}`) // 21 bytes
	respBody  = []byte(`{"id":"ord_1"}`)
	ordersURL = &url.URL{Path: "/orders"}
)

// storedKeys is how many keys the replay scenarios cycle through.
const storedKeys = 256

// keyAt returns the n-th key, shaped like a UUID (Fiber's default key
// validator wants 36 characters).
func keyAt(n uint64) string {
	var b [36]byte
	copy(b[:], "00000000-0000-4000-8000-000000000000")
	s := strconv.AppendUint(nil, n, 16)
	copy(b[36-len(s):], s)
	return string(b[:])
}

// keySource hands out keys: fresh ones (never seen), one of storedKeys,
// or (first) each of the keys stored beforehand in turn.
type keySource struct {
	next   atomic.Uint64
	replay bool
	first  bool
}

func (k *keySource) key() string {
	n := k.next.Add(1)
	if k.replay && !k.first {
		n %= storedKeys
	}
	return keyAt(n)
}

// stored returns how many keys a scenario stores before it is timed.
func (sc scenario) stored(n int) int {
	switch {
	case sc.first:
		return n + 1 // keyAt(1) … keyAt(n), and keyAt(0)
	case sc.replay:
		return storedKeys
	}
	return 0
}

// discardWriter is a reused http.ResponseWriter, as a server's is per
// connection; only its header map is reset between requests.
type discardWriter struct {
	header http.Header
	status int
}

func (w *discardWriter) Header() http.Header         { return w.header }
func (w *discardWriter) WriteHeader(code int)        { w.status = code }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }

// netHTTPHandler answers 201 after reading the body, like an API that
// creates something.
var netHTTPHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	var buf [64]byte
	for {
		if _, err := r.Body.Read(buf[:]); err != nil {
			break
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(respBody)
})

// netHTTPClient sends requests straight to h, as net/http's server would
// after parsing them.
type netHTTPClient struct {
	h http.Handler
	w discardWriter
}

func newNetHTTPClient(h http.Handler) *netHTTPClient {
	return &netHTTPClient{h: h, w: discardWriter{header: make(http.Header)}}
}

func (c *netHTTPClient) do(key string) int {
	r := &http.Request{
		Method: http.MethodPost, URL: ordersURL, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{
			"Content-Type":    {"application/json"},
			"Idempotency-Key": {key},
		},
		Body:          io.NopCloser(bytes.NewReader(reqBody)),
		ContentLength: int64(len(reqBody)),
		RequestURI:    "/orders",
	}
	r = r.WithContext(context.Background())
	clear(c.w.header)
	c.w.status = 0
	c.h.ServeHTTP(&c.w, r)
	return c.w.status
}

// fiberClient sends requests straight to a Fiber app's handler, reusing
// one fasthttp.RequestCtx as fasthttp's server does per connection.
type fiberClient struct {
	h   fasthttp.RequestHandler
	ctx fasthttp.RequestCtx
}

func (c *fiberClient) do(key string) int {
	c.ctx.Request.Reset()
	c.ctx.Response.Reset()
	c.ctx.Request.Header.SetMethod(fasthttp.MethodPost)
	c.ctx.Request.SetRequestURI("/orders")
	c.ctx.Request.Header.SetContentType("application/json")
	c.ctx.Request.Header.Set("Idempotency-Key", key)
	c.ctx.Request.SetBody(reqBody)
	c.h(&c.ctx)
	return c.ctx.Response.StatusCode()
}

func newFiberApp(withIdempotency bool) *fiber.App {
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	if withIdempotency {
		app.Use(idempotency.New(idempotency.Config{KeyHeader: "Idempotency-Key"}))
	}
	app.Post("/orders", func(c *fiber.Ctx) error {
		_ = c.Body()
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
		return c.Status(fiber.StatusCreated).Send(respBody)
	})
	return app
}

// subjects are what is measured, in this order in every round: the bare
// net/http handler, the same behind retrysafe (memory store, default
// config), the bare Fiber app, and the same behind Fiber's idempotency
// middleware (its default memory storage). Each benchmark run builds a
// fresh instance, so stored keys never carry over between runs.
var subjects = []string{"bare", "retrysafe", "fiber-bare", "fiber"}

// scenario is what the requests are: fresh keys (each request claims and
// stores a new key), replays of storedKeys keys stored beforehand, or
// (first) replays of b.N keys stored beforehand, each replayed once, as a
// retry after a timeout is; serial or b.RunParallel.
type scenario struct {
	name                    string
	replay, parallel, first bool
}

var scenarios = []scenario{
	{"new", false, false, false},
	{"replay", true, false, false},
	{"new-parallel", false, true, false},
	{"replay-parallel", true, true, false},
	{"replay-first", true, false, true},
}

// run measures one subject in one scenario. Besides the wall time it
// reports the process's CPU time per request (cpu-ns/op, addedcost.ReportCPU),
// which other processes on a shared machine inflate far less.
func run(b *testing.B, subject string, sc scenario) {
	switch subject {
	case "bare", "retrysafe":
		runNetHTTP(b, subject == "retrysafe", sc)
	default:
		runFiber(b, subject == "fiber", sc)
	}
}

// BenchmarkPeers runs every scenario and subject. Use -count for
// interleaved rounds and benchstat to compare; TestAddedCost prints the
// added cost (middleware minus its bare handler) per round.
func BenchmarkPeers(b *testing.B) {
	for _, sc := range scenarios {
		b.Run(sc.name, func(b *testing.B) {
			for _, s := range subjects {
				b.Run(s, func(b *testing.B) { run(b, s, sc) })
			}
		})
	}
}

// TestAddedCost runs the subjects in interleaved rounds and prints, per
// scenario, each middleware's added cost (its process CPU time, wall time
// and allocations minus those of its bare handler in the same round): the
// median and range over the rounds. It measures; it asserts only that
// every request succeeded.
//
// Each measurement runs in a process of its own (internal/addedcost),
// because one process does not give each subject a heap of its own:
// Fiber's default storage starts a goroutine that is never stopped, so
// every instance of it, with every key it stored, stays live until the
// process exits, and each later collection marks it. Measured in one
// process, rounds that ran after Fiber's paid for its leftovers, in
// proportion to what they allocate: retrysafe's new keys in parallel cost
// 7.0–7.3 µs of CPU after Fiber's runs against 4.4–4.9 µs with only the
// bare handler before them (docs/performance.md, "Ninth round").
//
//	go test -run TestAddedCost -rounds 8 -benchtime 200000x
func TestAddedCost(t *testing.T) {
	var names []string
	for _, sc := range scenarios {
		names = append(names, sc.name)
	}
	// The machine's speed moves both middlewares' costs together between
	// rounds, so the ratio within a round is steadier than either cost.
	addedcost.Measure(t, addedcost.Plan{
		Bench:     "BenchmarkPeers",
		Scenarios: names,
		Subjects:  subjects,
		Baseline:  map[string]string{"retrysafe": "bare", "fiber": "fiber-bare"},
		Ratio:     [2]string{"retrysafe", "fiber"},
	})
}

func runNetHTTP(b *testing.B, protected bool, sc scenario) {
	var h http.Handler = netHTTPHandler
	if protected {
		st := memory.New(memory.Config{})
		defer st.Close()
		mw, err := retrysafe.NewMiddleware(retrysafe.Config{Store: st})
		if err != nil {
			b.Fatal(err)
		}
		h = mw(netHTTPHandler)
	}
	drive(b, sc, func() func(string) int { return newNetHTTPClient(h).do })
}

func runFiber(b *testing.B, protected bool, sc scenario) {
	h := newFiberApp(protected).Handler()
	drive(b, sc, func() func(string) int { return (&fiberClient{h: h}).do })
}

// drive stores the keys the scenario replays through a client that
// client makes, then times the scenario's requests, each through a client
// of its goroutine.
func drive(b *testing.B, sc scenario, client func() func(key string) int) {
	keys := &keySource{replay: sc.replay, first: sc.first}
	if n := sc.stored(b.N); n > 0 {
		do := client()
		for n := range uint64(n) {
			if st := do(keyAt(n)); st != http.StatusCreated {
				b.Fatalf("storing key %d: status %d", n, st)
			}
		}
	}
	b.ReportAllocs()
	defer addedcost.ReportCPU(b, addedcost.Start())
	b.ResetTimer()
	if !sc.parallel {
		do := client()
		next := b.Loop
		if sc.first {
			// b.N keys were stored for b.N requests: b.Loop would run
			// a count of its own.
			k := 0
			next = func() bool { k++; return k <= b.N }
		}
		for next() {
			if st := do(keys.key()); st != http.StatusCreated {
				b.Fatalf("status %d", st)
			}
		}
		return
	}
	b.RunParallel(func(pb *testing.PB) {
		do := client()
		for pb.Next() {
			if st := do(keys.key()); st != http.StatusCreated {
				b.Errorf("status %d", st)
				return
			}
		}
	})
}
