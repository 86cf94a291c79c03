package gateway_test

import (
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe/gateway"
)

// TestReadyWithoutStore: while the store is down, /readyz answers 503 by
// default, and 200 with ReadyWithoutStore, when an unprotected request
// still reaches the upstream and a protected one gets 503 with nothing
// forwarded. Once the store is back, both modes are ready and serve.
func TestReadyWithoutStore(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		readyWithoutStore bool
		readyWhileDown    int
	}{
		"default": {false, 503},
		"sidecar": {true, 200},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t)
			flaky := &flakyStore{Store: storeKinds()[0].open(t)}
			gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: flaky, ReadyWithoutStore: tc.readyWithoutStore})

			flaky.down.Store(true)
			ready := send(t, gw.AdminURL, "GET", "/readyz", "", "")
			if ready.Status != tc.readyWhileDown {
				t.Fatalf("/readyz while the store is down = %s, want %d", ready, tc.readyWhileDown)
			}
			if tc.readyWithoutStore && !strings.Contains(string(ready.Body), "protected requests get 503") {
				t.Errorf("/readyz body %q does not say what store loss means", ready.Body)
			}
			if res := send(t, gw.URL, "GET", "/items", "", ""); res.Status != 200 {
				t.Errorf("unprotected GET while the store is down = %s, want 200", res)
			}
			before := up.calls.Load()
			res := send(t, gw.URL, "POST", "/payments", newKey(), `{"amount":1}`)
			if res.Status != 503 || problemType(t, res) != "store-unavailable" {
				t.Errorf("protected POST while the store is down = %s, want 503 store-unavailable", res)
			}
			if n := up.calls.Load() - before; n != 0 {
				t.Errorf("the upstream got %d protected requests while the store was down", n)
			}

			flaky.down.Store(false)
			if ready := send(t, gw.AdminURL, "GET", "/readyz", "", ""); ready.Status != 200 || strings.TrimSpace(string(ready.Body)) != "ready" {
				t.Errorf("/readyz with the store back = %s, want 200 ready", ready)
			}
			if res := send(t, gw.URL, "POST", "/payments", newKey(), `{"amount":1}`); res.Status != 201 {
				t.Errorf("protected POST with the store back = %s, want 201", res)
			}
		})
	}
}
