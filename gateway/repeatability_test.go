package gateway_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/gateway"
)

// The gateway speaks OASIS Repeatable Requests as the middleware does:
// Repeatability-Request-ID is the key, a stale Repeatability-First-Sent
// gets 412 first-sent-expired with nothing forwarded, and answers say
// Repeatability-Result.
func TestGatewayRepeatableRequests(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	p := gateway.DefaultPolicy()
	p.TTL = time.Hour
	gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: storeKinds()[0].open(t), Defaults: p})
	sent := time.Now().Add(-time.Minute).UTC().Format(http.TimeFormat)
	first := send(t, gw.URL, "POST", "/payments", "", `{"amount":1}`, "Repeatability-Request-ID", "op-1", "Repeatability-First-Sent", sent)
	again := send(t, gw.URL, "POST", "/payments", "", `{"amount":1}`, "Repeatability-Request-ID", "op-1", "Repeatability-First-Sent", sent)
	if first.Status != http.StatusCreated || first.Header.Get("Repeatability-Result") != "accepted" ||
		again.Header.Get(retrysafe.HeaderReplayed) != "true" || again.Header.Get("Repeatability-Result") != "accepted" {
		t.Fatalf("first %s (%q), again %s (%q)", first, first.Header.Get("Repeatability-Result"), again, again.Header.Get("Repeatability-Result"))
	}
	if seen := up.lastSeen(); seen == nil || seen.Header.Get("Repeatability-Request-ID") != "op-1" {
		t.Fatal("the upstream did not get Repeatability-Request-ID")
	}
	late := send(t, gw.URL, "POST", "/payments", "", `{"amount":1}`, "Repeatability-Request-ID", "op-2",
		"Repeatability-First-Sent", time.Now().Add(-2*time.Hour).UTC().Format(http.TimeFormat))
	if late.Status != http.StatusPreconditionFailed || problemType(t, late) != retrysafe.ProblemFirstSentExpired || late.Header.Get("Repeatability-Result") != "rejected" {
		t.Fatalf("late: %s (%q)", late, late.Header.Get("Repeatability-Result"))
	}
	moved := send(t, gw.URL, "POST", "/payments", "", `{"amount":1}`, "Repeatability-Request-ID", "op-1",
		"Repeatability-First-Sent", time.Now().UTC().Format(http.TimeFormat))
	if moved.Status != http.StatusUnprocessableEntity || moved.Header.Get("Repeatability-Result") != "rejected" {
		t.Fatalf("another first-sent: %s", moved)
	}
	if n := up.calls.Load(); n != 1 {
		t.Fatalf("upstream ran %d times, want 1", n)
	}
}
