package gateway_test

import (
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/gateway"
	"github.com/retrysafe/retrysafe/internal/testenv"
)

// TestUIIdentityEncrypted: with encryption at rest the records are kept
// under the HMAC of their scope, and the operator page's identity filter
// finds a caller's records all the same.
func TestUIIdentityEncrypted(t *testing.T) {
	t.Parallel()
	st := encrypted(t, testenv.Memory(t))
	gw := startGateway(t, gateway.Config{Upstream: mustURL(t, newUpstream(t).URL), Store: st})
	for _, who := range []string{"bob", "eve"} {
		if res := send(t, gw.URL, "POST", "/payments", "order-"+who, `{"amount":1}`, "Authorization", "Bearer "+who); res.Status != 201 {
			t.Fatalf("POST as %s: %s", who, res)
		}
	}
	jar, _ := cookiejar.New(nil)
	e := &uiEnv{gw: gw, c: &http.Client{Jar: jar, Timeout: 10 * time.Second}}
	code, page := e.post(t, "/ui/records", url.Values{"identity": {"Bearer bob"}})
	if code != http.StatusOK {
		t.Fatalf("identity filter: %d\n%s", code, page)
	}
	if got := rows(page); len(got) != 1 || got[0] != "order-bob" {
		t.Fatalf("identity Bearer bob over an encrypted store: %v, want order-bob", got)
	}
}
