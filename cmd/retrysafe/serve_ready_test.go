package main

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/testenv"
)

// TestServeReadyWithoutStore: serve --ready-without-store keeps /readyz at
// 200 while its Redis is cut off, and a protected request still gets 503
// with nothing forwarded.
func TestServeReadyWithoutStore(t *testing.T) {
	t.Parallel()
	redisAddr := testenv.RedisAddr()
	if c, err := net.DialTimeout("tcp", redisAddr, 2*time.Second); err != nil {
		testenv.Unreachable(t, "Redis", err)
	} else {
		c.Close()
	}
	proxy := newCutProxy(t, redisAddr)
	bin := buildBinary(t)
	up := newChargeUpstream(t, nil)
	gw := startServe(t, bin, "--upstream", up.URL, "--ready-without-store",
		"--store", "redis://"+proxy.addr()+"/0?retrysafe_prefix="+testenv.Name("rs-ready")+":")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	proxy.cut()
	res, err := testenv.HTTPClient.Get(gw.admin + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Errorf("/readyz with the store cut off = %d, want 200 (--ready-without-store)", res.StatusCode)
	}
	a, err := post(ctx, gw.url+"/payments", "k-down", `{"amount":1}`)
	if err != nil || a.status != http.StatusServiceUnavailable || !strings.Contains(a.body, retrysafe.ProblemStoreUnavailable) {
		t.Fatalf("POST with the store cut off: %v %+v, want 503 %s", err, a, retrysafe.ProblemStoreUnavailable)
	}
	if n := up.calls.Load(); n != 0 {
		t.Errorf("upstream calls = %d, want 0 (nothing forwarded while the store is down)", n)
	}
}
