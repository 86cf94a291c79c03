package retrysafefiber_test

import (
	"testing"

	"github.com/gofiber/fiber/v3"
	"github.com/valyala/fasthttp"

	"github.com/retrysafe/retrysafe"
	retrysafefiber "github.com/retrysafe/retrysafe/fiber"
	"github.com/retrysafe/retrysafe/internal/addedcost"
	"github.com/retrysafe/retrysafe/store/memory"
)

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
		return c.Status(fiber.StatusCreated).Send(addedcost.ResponseBody)
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
	c.ctx.Request.SetBody(addedcost.RequestBody)
	c.h(&c.ctx)
	return c.ctx.Response.StatusCode()
}

// BenchmarkFiber measures the subjects (bare, retrysafe, fiber) in each
// scenario of internal/addedcost. TestFiberAddedCost runs it in
// interleaved rounds.
func BenchmarkFiber(b *testing.B) {
	addedcost.Bench(b, []string{"bare", "retrysafe", "fiber"}, func(b *testing.B, subject string) func() addedcost.Client {
		h := benchApp(b, subject).Handler()
		return func() addedcost.Client { return (&fasthttpClient{h: h}).do }
	})
}

// TestFiberAddedCost prints what New and Fiber's idempotency middleware
// add to the bare Fiber handler, on the same fasthttp handler path, in
// interleaved rounds (see internal/addedcost). It measures; it asserts only
// that every request succeeded.
//
//	go test -run TestFiberAddedCost -rounds 6 -benchtime 200000x .
func TestFiberAddedCost(t *testing.T) {
	addedcost.Measure(t, addedcost.Plan{
		Bench:    "BenchmarkFiber",
		Subjects: []string{"bare", "retrysafe", "fiber"},
		Baseline: map[string]string{"retrysafe": "bare", "fiber": "bare"},
		Ratio:    [2]string{"retrysafe", "fiber"},
	})
}
