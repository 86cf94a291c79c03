package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/gateway"
)

// TestServeWaitModeNeverRunsTwice runs the binary with --in-flight wait
// in front of an upstream that reads the request and then cuts the
// connection: the first attempt's outcome is unknown (502). A retry sent
// at once waits on the record; when its lease runs out the retry gets 409
// outcome-unknown, and the upstream has executed the request once.
func TestServeWaitModeNeverRunsTwice(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	var executions atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		executions.Add(1) // the charge happened; its answer is lost
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	}))
	t.Cleanup(up.Close)
	gw := startServe(t, bin, "--upstream", up.URL, "--store", "memory:",
		"--in-flight", "wait", "--wait-timeout", "10s", "--lease", "2s")

	key := fmt.Sprint("wait-", time.Now().UnixNano())
	first, err := post(context.Background(), gw.url+"/payments", key, `{"amount":10}`)
	if err != nil {
		t.Fatal(err)
	}
	if first.status != http.StatusBadGateway || !strings.Contains(first.body, gateway.ProblemOutcomeUnknown) {
		t.Fatalf("first attempt = %d %s, want 502 %s", first.status, first.body, gateway.ProblemOutcomeUnknown)
	}
	retry, err := post(context.Background(), gw.url+"/payments", key, `{"amount":10}`)
	if err != nil {
		t.Fatal(err)
	}
	if retry.status != http.StatusConflict || !strings.Contains(retry.body, "/"+retrysafe.ProblemOutcomeUnknown+`"`) || retry.header.Get("Retry-After") == "" {
		t.Fatalf("retry = %d %s (Retry-After %q), want 409 %s with Retry-After\nstderr:\n%s",
			retry.status, retry.body, retry.header.Get("Retry-After"), retrysafe.ProblemOutcomeUnknown, gw.stderr)
	}
	if n := executions.Load(); n != 1 {
		t.Fatalf("the upstream executed the request %d times, want 1", n)
	}
}
