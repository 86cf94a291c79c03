package sealed_test

import (
	"testing"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/internal/testenv"
	"github.com/retrysafe/retrysafe/store/sealed"
	"github.com/retrysafe/retrysafe/store/storetest"
)

// TestConformance runs the store suite on the wrapper over the memory
// store: sealing must not change what a store keeps or how it behaves.
// internal/e2e runs it over every store. With a ring the suite's Admin
// scenarios are left out (see withoutAdmin); TestAdmin covers Admin.
func TestConformance(t *testing.T) {
	t.Parallel()
	ring := testRing(t, "k1", "k2")
	storetest.Run(t, func(t *testing.T) retrysafe.Store {
		return withoutAdmin(t, wrap(t, testenv.Memory(t), ring, sealed.Config{}))
	})
}

// TestConformanceNoRing runs the suite on the wrapper without a key ring
// (how `retrysafe serve` runs without keys): it writes in the clear, and
// its Admin shows what Claim takes.
func TestConformanceNoRing(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) retrysafe.Store {
		return wrap(t, testenv.Memory(t), nil, sealed.Config{})
	})
}

// withoutAdmin returns s with its Pinger, Sweeper and Notifier but not its
// Admin. With a ring, the wrapper's Admin shows and takes the stored
// scopes (the HMAC of KeyRing.Scope) and lists in their order, by design,
// while the suite's Admin scenarios expect the scopes Claim takes.
func withoutAdmin(t *testing.T, s retrysafe.Store) retrysafe.Store {
	t.Helper()
	p, ok1 := retrysafe.As[admin.Pinger](s)
	sw, ok2 := retrysafe.As[admin.Sweeper](s)
	n, ok3 := retrysafe.As[retrysafe.Notifier](s)
	if !ok1 || !ok2 || !ok3 {
		t.Fatal("the wrapped store lacks an ability the suite should test")
	}
	return struct {
		retrysafe.Store
		admin.Pinger
		admin.Sweeper
		retrysafe.Notifier
	}{s, p, sw, n}
}
