package retrysafefiber_test

import (
	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/fiber/v3/middleware/idempotency"

	"github.com/retrysafe/retrysafe"
)

// fiberIdempotency is Fiber's own idempotency middleware with its defaults
// (in-memory storage and lock, 30 minutes, keys of 36 characters), reading
// the key from Idempotency-Key as retrysafe does, for comparison.
func fiberIdempotency() fiber.Handler {
	return idempotency.New(idempotency.Config{KeyHeader: retrysafe.HeaderKey})
}
