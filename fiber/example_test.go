package retrysafefiber_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"strings"

	"github.com/gofiber/fiber/v3"

	"github.com/retrysafe/retrysafe"
	retrysafefiber "github.com/retrysafe/retrysafe/fiber"
	"github.com/retrysafe/retrysafe/store/memory"
)

// A Fiber route behind New: the retry with the same key gets the first
// answer, marked replayed; the same key with another body is refused.
func ExampleNew() {
	protect, err := retrysafefiber.New(retrysafefiber.Config{Config: retrysafe.Config{Store: memory.New(memory.Config{})}})
	if err != nil {
		log.Fatal(err)
	}
	app := fiber.New()
	charges := 0
	app.Post("/payments", protect, func(c fiber.Ctx) error {
		charges++
		return c.Status(fiber.StatusCreated).JSON(fiber.Map{"id": fmt.Sprintf("pay_%d", charges)})
	})
	for _, body := range []string{`{"amount":100}`, `{"amount":100}`, `{"amount":999}`} {
		req, _ := http.NewRequest(http.MethodPost, "http://example.com/payments", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer sk_test_1")
		req.Header.Set("Idempotency-Key", "order-42")
		resp, err := app.Test(req)
		if err != nil {
			log.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode >= 400 {
			b = []byte(resp.Header.Get("Content-Type"))
		}
		fmt.Printf("%d %s replayed=%v\n", resp.StatusCode, b, resp.Header.Get("Idempotent-Replayed") == "true")
	}
	fmt.Println("charges:", charges)
	// Output:
	// 201 {"id":"pay_1"} replayed=false
	// 201 {"id":"pay_1"} replayed=true
	// 422 application/problem+json replayed=false
	// charges: 1
}
