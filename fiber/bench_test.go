package retrysafefiber_test

import (
	"flag"
	"os"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/gofiber/fiber/v3"
	"github.com/valyala/fasthttp"

	"github.com/retrysafe/retrysafe"
	retrysafefiber "github.com/retrysafe/retrysafe/fiber"
	"github.com/retrysafe/retrysafe/internal/addedcost"
	"github.com/retrysafe/retrysafe/store/memory"
)

// The request of every benchmark: POST /orders with a 21-byte JSON body,
// an Authorization header (retrysafe's scope) and a key shaped like a UUID
// (Fiber's default validator wants 36 characters).
var (
	benchBody = []byte(`{"sku":"abc","qty":1}`)
	benchResp = []byte(`{"id":"ord_1"}`)
)

func benchKey(n uint64) string {
	b := []byte("00000000-0000-4000-8000-000000000000")
	s := strconv.AppendUint(nil, n, 16)
	copy(b[36-len(s):], s)
	return string(b)
}

// benchApp is the Fiber app of a subject: the bare handler, behind New
// (memory store, defaults), or behind Fiber's idempotency middleware (its
// defaults: in-memory storage and lock).
func benchApp(b *testing.B, subject string) *fiber.App {
	app := fiber.New()
	switch subject {
	case "retrysafe":
		st := memory.New(memory.Config{})
		b.Cleanup(func() { _ = st.Close() })
		mw, err := retrysafefiber.New(retrysafefiber.Config{Config: retrysafe.Config{Store: st}})
		if err != nil {
			b.Fatal(err)
		}
		app.Use(mw)
	case "fiber":
		app.Use(fiberIdempotency())
	}
	app.Post("/orders", func(c fiber.Ctx) error {
		_ = c.Body()
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
		return c.Status(fiber.StatusCreated).Send(benchResp)
	})
	return app
}

// fasthttpClient sends requests straight to the app's fasthttp handler,
// reusing one RequestCtx as fasthttp's server does per connection.
type fasthttpClient struct {
	h   fasthttp.RequestHandler
	ctx fasthttp.RequestCtx
}

func (c *fasthttpClient) do(key string) int {
	c.ctx.Request.Reset()
	c.ctx.Response.Reset()
	c.ctx.Request.Header.SetMethod(fasthttp.MethodPost)
	c.ctx.Request.SetRequestURI("/orders")
	c.ctx.Request.Header.SetContentType("application/json")
	c.ctx.Request.Header.Set("Authorization", "Bearer sk_test_1")
	c.ctx.Request.Header.Set(retrysafe.HeaderKey, key)
	c.ctx.Request.SetBody(benchBody)
	c.h(&c.ctx)
	return c.ctx.Response.StatusCode()
}

// benchStoredKeys is how many keys the replay scenarios cycle through.
const benchStoredKeys = 256

// BenchmarkFiber measures the subjects (bare, retrysafe, fiber) in each
// scenario: new keys or replays, serial or parallel. TestFiberAddedCost
// runs it in interleaved rounds.
func BenchmarkFiber(b *testing.B) {
	for _, sc := range []string{"new", "replay", "new-parallel", "replay-parallel"} {
		b.Run(sc, func(b *testing.B) {
			for _, s := range []string{"bare", "retrysafe", "fiber"} {
				b.Run(s, func(b *testing.B) {
					h := benchApp(b, s).Handler()
					replay := sc == "replay" || sc == "replay-parallel"
					var next atomic.Uint64
					key := func() string {
						n := next.Add(1)
						if replay {
							n %= benchStoredKeys
						}
						return benchKey(n)
					}
					if replay {
						c := &fasthttpClient{h: h}
						for n := range uint64(benchStoredKeys) {
							if st := c.do(benchKey(n)); st != 201 {
								b.Fatalf("storing: %d", st)
							}
						}
					}
					b.ReportAllocs()
					defer addedcost.ReportCPU(b, addedcost.Start())
					b.ResetTimer()
					if sc == "new" || sc == "replay" {
						c := &fasthttpClient{h: h}
						for b.Loop() {
							if st := c.do(key()); st != 201 {
								b.Fatalf("status %d", st)
							}
						}
						return
					}
					b.RunParallel(func(pb *testing.PB) {
						c := &fasthttpClient{h: h}
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

var rounds = flag.Int("rounds", 0, "TestFiberAddedCost: interleaved rounds (0 skips it)")

// TestFiberAddedCost prints what New and Fiber's idempotency middleware
// add to the bare Fiber handler, on the same fasthttp handler path, in
// interleaved rounds (see internal/addedcost). It measures; it asserts only
// that every request succeeded.
//
//	go test -run TestFiberAddedCost -rounds 6 -benchtime 50000x .
func TestFiberAddedCost(t *testing.T) {
	if *rounds <= 0 {
		t.Skip("pass -rounds N to measure")
	}
	addedcost.Run(t, os.Stdout, *rounds, addedcost.Plan{
		Bench:     "BenchmarkFiber",
		Scenarios: []string{"new", "replay", "new-parallel", "replay-parallel"},
		Subjects:  []string{"bare", "retrysafe", "fiber"},
		Baseline:  map[string]string{"retrysafe": "bare", "fiber": "bare"},
		Ratio:     [2]string{"retrysafe", "fiber"},
	})
}
