//go:build retrysafe_ablation

package retrysafe_test

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
)

// The measurement switches (ablation.go) turn off what they say, and only
// while set: each test runs the same requests with the switch off first,
// where the guarantee must hold. Run with:
//
//	go test -tags retrysafe_ablation -run '^TestAblation' .
//
// The tests change package state, so they do not run in parallel.

func TestAblationFingerprint(t *testing.T) {
	for _, ablate := range []bool{false, true} {
		restore := retrysafe.SetAblation(ablate, false, false)
		srv := newServer(t, retrysafe.Config{}, echoHandler())
		first := send(t, srv.URL, http.MethodPost, "k", `{"amount":1}`)
		if first.status != http.StatusCreated {
			t.Fatalf("ablate %t: first status %d", ablate, first.status)
		}
		other := send(t, srv.URL, http.MethodPost, "k", `{"amount":2}`)
		restore()
		if !ablate {
			wantProblem(t, other, http.StatusUnprocessableEntity, retrysafe.ProblemMismatch)
			continue
		}
		if other.status != first.status || string(other.body) != string(first.body) {
			t.Fatalf("fingerprint off: a reused key with another body got %d %q, want the first answer replayed", other.status, other.body)
		}
	}
}

func TestAblationHeartbeatAndCancel(t *testing.T) {
	const lease = 60 * time.Millisecond // renewed every 20 ms
	for _, tc := range []struct {
		name                     string
		heartbeat, cancel        bool
		wantExtends, wantDoneNil bool
	}{
		{"as shipped", false, false, true, false},
		{"heartbeat off", true, false, false, false},
		{"cancellation off", false, true, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			restore := retrysafe.SetAblation(false, tc.heartbeat, tc.cancel)
			defer restore()
			store := &countingExtends{Store: newMemory(t)} // lease_test.go
			var doneNil atomic.Bool
			srv := newServer(t, retrysafe.Config{Store: store, Lease: lease}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				doneNil.Store(r.Context().Done() == nil)
				time.Sleep(4 * lease) // long enough for several renewals
				w.WriteHeader(http.StatusCreated)
			}))
			if r := send(t, srv.URL, http.MethodPost, "k", `{}`); r.status != http.StatusCreated {
				t.Fatalf("status %d", r.status)
			}
			if got := store.extends.Load() > 0; got != tc.wantExtends {
				t.Errorf("lease renewed: %t (%d Extend calls), want %t", got, store.extends.Load(), tc.wantExtends)
			}
			if got := doneNil.Load(); got != tc.wantDoneNil {
				t.Errorf("handler context cannot be cancelled: %t, want %t", got, tc.wantDoneNil)
			}
		})
	}
}
