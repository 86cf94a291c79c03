package main

import (
	"fmt"
	"log/slog"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/gateway"
)

// bodyLimiter is implemented by stores that keep response bodies only up
// to a size (store/dynamodb: DynamoDB's 400 KB items).
type bodyLimiter interface{ MaxResponseBody() int64 }

// fitResponseBody lowers the policies that keep the default
// --max-response-body to the store's limit, so that a larger answer
// reaches its caller and is never stored, and refuses a policy that asks
// for more than the store keeps.
func fitResponseBody(store retrysafe.Store, defaults *gateway.Policy, routes []gateway.Route, logger *slog.Logger) error {
	lim, ok := retrysafe.As[bodyLimiter](store)
	if !ok {
		return nil
	}
	limit := lim.MaxResponseBody()
	lowered := false
	fit := func(what string, p *gateway.Policy) error {
		switch {
		case p.MaxResponseBody <= limit:
		case p.MaxResponseBody == retrysafe.DefaultMaxResponseBody:
			p.MaxResponseBody, lowered = limit, true
		default:
			return usagef("%s: max response body %d is more than the store keeps (%d bytes)", what, p.MaxResponseBody, limit)
		}
		return nil
	}
	if err := fit("--max-response-body", defaults); err != nil {
		return err
	}
	for i := range routes {
		if err := fit(fmt.Sprintf("route %q", routes[i].Pattern), &routes[i].Policy); err != nil {
			return err
		}
	}
	if lowered {
		logger.Info("the store keeps response bodies of up to a limit; larger ones reach their caller and are not stored", "max_response_body", limit)
	}
	return nil
}
