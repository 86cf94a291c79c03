package gateway

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/webhook"
)

// Why an attempt's outcome is unknown. The gateway records the cause of
// each attempt it abandons as the record's checkpoint, so that the
// operator page can say what happened and retrysafe_unknown_takeovers_total
// can say what a takeover followed; what it did not record is read from
// the record itself.
const (
	// causeTimeout: the upstream did not answer in time (504).
	causeTimeout = "timeout"
	// causeCutAfterSend: the connection failed after the request was
	// sent, before a complete answer came back (502).
	causeCutAfterSend = "cut_after_send"
	// causeHandlerPanic: the record was abandoned with no cause recorded:
	// the handler panicked after writing its status (the middleware
	// abandons the attempt then), or an application's code called
	// Operation.Abandon.
	causeHandlerPanic = "handler_panic"
	// causeLeaseExpired: the lease ran out with neither a result nor a
	// recorded cause: the process stopped, or lost the store, mid-request.
	causeLeaseExpired = "lease_expired"
)

// takeoverCauses are the causes a takeover can tell apart (a takeover
// clears Abandoned, so a handler panic counts as lease_expired there).
var takeoverCauses = []string{causeTimeout, causeCutAfterSend, causeLeaseExpired}

// causeText says what each cause means, for the operator page.
var causeText = map[string]string{
	causeTimeout:      "upstream timeout: the upstream did not answer in time",
	causeCutAfterSend: "cut after send: the connection failed after the request was sent",
	causeHandlerPanic: "abandoned by a handler panic after its status was written",
	causeLeaseExpired: "lease ran out: the gateway stopped, or lost the store, mid-request",
}

// causeCheckpointPrefix starts the name of the checkpoint that records a
// cause: "gateway-unknown attempt=N cause=C". Data holds the error text.
const causeCheckpointPrefix = "gateway-unknown "

// causeDetailMax bounds the error text kept with a cause.
const causeDetailMax = 256

// causeCheckpointName returns the checkpoint name that records cause for
// attempt.
func causeCheckpointName(attempt int, cause string) string {
	return causeCheckpointPrefix + "attempt=" + strconv.Itoa(attempt) + " cause=" + cause
}

// parseCause reads a checkpoint written by causeCheckpointName: the
// attempt and cause it records, ok false for any other checkpoint.
func parseCause(cp *retrysafe.Checkpoint) (attempt int, cause string, ok bool) {
	if cp == nil {
		return 0, "", false
	}
	rest, found := strings.CutPrefix(cp.Name, causeCheckpointPrefix+"attempt=")
	if !found {
		return 0, "", false
	}
	n, c, found := strings.Cut(rest, " cause=")
	attempt, err := strconv.Atoi(n)
	if !found || err != nil || attempt < 1 || causeText[c] == "" {
		return 0, "", false
	}
	return attempt, c, true
}

// abandon abandons op's attempt, whose outcome is unknown, with its cause
// (and err's text) as the record's checkpoint: one write, fenced by op's
// token, once the operation's code has returned (the engine's), which
// leaves the lease as it is.
func (g *Gateway) abandon(op *retrysafe.Operation, cause string, err error) {
	detail := err.Error()
	if len(detail) > causeDetailMax {
		detail = detail[:causeDetailMax]
	}
	if aerr := op.AbandonWith(causeCheckpointName(op.Attempt(), cause), []byte(detail)); aerr != nil {
		g.logger.Warn("recording why the outcome is unknown failed; the operator page shows less", "cause", cause, "err", aerr)
		op.Abandon()
	}
}

// takeover counts a request that took over an attempt whose outcome was
// unknown and now goes upstream again (op.Attempt() > 1), by route and by
// the cause its predecessor recorded.
func (g *Gateway) takeover(rh *routeHandler, op *retrysafe.Operation) {
	cause := causeLeaseExpired
	// Resumed reads through the completer's not-done mark, which keeps
	// the checkpoint that recorded the cause.
	if name, _, ok := op.Resumed(); ok {
		if attempt, c, ok := parseCause(&retrysafe.Checkpoint{Name: name}); ok && attempt == op.Attempt()-1 {
			cause = c
		}
	}
	g.metrics.unknownTakeovers.WithLabelValues(routeLabel(rh.pattern), cause).Inc()
}

// unknownCause returns why rec, a record whose outcome is unknown, is so,
// since when, and the error the gateway recorded ("" when none).
func unknownCause(rec *retrysafe.Record) (cause string, since time.Time, detail string) {
	if attempt, c, ok := parseCause(rec.Checkpoint); ok && attempt == rec.Attempt {
		return c, rec.Checkpoint.At, printable(rec.Checkpoint.Data)
	}
	if rec.Abandoned {
		return causeHandlerPanic, rec.UpdatedAt, ""
	}
	return causeLeaseExpired, rec.LeaseUntil, ""
}

// printable returns b as a string when it is printable ASCII, else ""
// (a sealed checkpoint's data, read without its key).
func printable(b []byte) string {
	for _, c := range b {
		if c < ' ' || c > '~' {
			return ""
		}
	}
	return string(b)
}

// upstreamLookup is how the operator finds an attempt at the upstream:
// the header fields the upstream received (Name: Value), and what they
// are.
type upstreamLookup struct {
	Headers []uiHeader
	Note    string
}

// lookupFor returns how rec's attempt reached the upstream: its key in
// the field the client (or the webhook's sender) put it in, with the
// Idempotency-Attempt the gateway added. scheme is the route's webhook
// scheme, "" for a route that is no webhook receiver.
func lookupFor(rec *retrysafe.Record, scheme webhook.Scheme) upstreamLookup {
	attempt := uiHeader{HeaderAttempt, strconv.Itoa(rec.Attempt)}
	switch scheme {
	case webhook.Standard:
		return upstreamLookup{[]uiHeader{{"webhook-id", rec.Key}, attempt}, "the delivery's id, as the sender sent it"}
	case webhook.GitHub:
		return upstreamLookup{[]uiHeader{{"X-GitHub-Delivery", rec.Key}, attempt}, "the delivery's id, as GitHub sent it"}
	case webhook.Shopify:
		return upstreamLookup{[]uiHeader{{"X-Shopify-Event-Id", rec.Key}, attempt}, "the event's id, as Shopify sent it"}
	case webhook.Stripe:
		return upstreamLookup{[]uiHeader{attempt}, fmt.Sprintf("the event whose body has \"id\": %q", rec.Key)}
	}
	return upstreamLookup{[]uiHeader{{retrysafe.HeaderKey, rec.Key}, attempt},
		"the key as the client sent it: bare, quoted, or in Repeatability-Request-ID"}
}
