package gateway_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/gateway"
)

// attemptUpstream counts calls and records the Idempotency-Attempt each
// one carried; while slow is set it sleeps past the gateway's upstream
// timeout (after its effect: the call is counted first).
type attemptUpstream struct {
	*httptest.Server
	mu       sync.Mutex
	attempts []string
	slow     bool
}

func newAttemptUpstream(t *testing.T) *attemptUpstream {
	u := &attemptUpstream{slow: true}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.attempts = append(u.attempts, r.Header.Get(gateway.HeaderAttempt))
		n, slow := len(u.attempts), u.slow
		u.mu.Unlock()
		if slow && r.Method == http.MethodPost {
			time.Sleep(time.Second)
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"call":%d}`, n)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *attemptUpstream) seen() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.attempts...)
}

func TestGatewayForwardsAttempt(t *testing.T) {
	t.Parallel()
	for _, kind := range storeKinds()[:2] { // memory, sqlite
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			up := newAttemptUpstream(t)
			lease := time.Second
			gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: kind.open(t),
				UpstreamTimeout: 300 * time.Millisecond, Defaults: gateway.Policy{Lease: lease}})
			key := newKey()
			start := time.Now()
			// The client's own value is not forwarded: the gateway says.
			if res := send(t, gw.URL, "POST", "/pay", key, `{"amount":1}`, gateway.HeaderAttempt, "7"); res.Status != http.StatusGatewayTimeout {
				t.Fatalf("first = %s, want 504 (upstream timeout)", res)
			}
			up.mu.Lock()
			up.slow = false
			up.mu.Unlock()
			time.Sleep(time.Until(start.Add(lease)))
			var res *result
			eventually(t, 10*time.Second, "the takeover", func() bool {
				res = send(t, gw.URL, "POST", "/pay", key, `{"amount":1}`)
				return res.Status != http.StatusConflict
			})
			if res.Status != http.StatusCreated || res.Header.Get(retrysafe.HeaderReplayed) != "" {
				t.Fatalf("retry after the lease = %s, want the takeover's 201", res)
			}
			if got := fmt.Sprint(up.seen()); got != "[1 2]" {
				t.Fatalf("Idempotency-Attempt the upstream saw = %s, want [1 2] (first run, then the takeover)", got)
			}
			// A request the gateway does not protect carries no attempt,
			// whatever the client put in it.
			if res := send(t, gw.URL, "GET", "/items", "", "", gateway.HeaderAttempt, "3"); res.Status != http.StatusCreated {
				t.Fatalf("GET = %s", res)
			}
			if got := up.seen(); got[len(got)-1] != "" {
				t.Fatalf("unprotected request carried Idempotency-Attempt %q, want none", got[len(got)-1])
			}
		})
	}
}

// TestUnknownOutcomeDetailNamesThePolicy: the 502/504 of an unknown
// outcome tells the client what its retry will meet after the lease.
func TestUnknownOutcomeDetailNamesThePolicy(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	for name, tc := range map[string]struct {
		policy gateway.Policy
		want   string
	}{
		"takeover": {gateway.Policy{}, "the operation runs again"},
		"block":    {gateway.Policy{OnUnknown: retrysafe.OnUnknownBlock}, "never runs again on its own"},
		"resolve":  {gateway.Policy{ResolveURL: mustURL(t, up.URL+"/resolve")}, "first asks the service whether the operation happened"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: storeKinds()[0].open(t), Defaults: tc.policy})
			res := send(t, gw.URL, "POST", "/hangup", newKey(), `{"amount":1}`)
			if res.Status != http.StatusBadGateway || !strings.Contains(string(res.Body), tc.want) {
				t.Fatalf("answer = %s, want its detail to say %q", res, tc.want)
			}
		})
	}
}
