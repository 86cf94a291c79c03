package sealed_test

import (
	"testing"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/testenv"
	"github.com/retrysafe/retrysafe/store/sealed"
	"github.com/retrysafe/retrysafe/store/storetest"
)

// TestConformance runs the store suite on the wrapper over the memory
// store: sealing must not change what a store keeps or how it behaves.
// internal/e2e runs it over every store.
func TestConformance(t *testing.T) {
	t.Parallel()
	ring := testRing(t, "k1", "k2")
	storetest.Run(t, func(t *testing.T) retrysafe.Store {
		return wrap(t, testenv.Memory(t), ring, sealed.Config{})
	})
}

// TestConformanceNoRing runs the suite on the wrapper without a key ring
// (how `retrysafe serve` runs without keys): it writes in the clear.
func TestConformanceNoRing(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) retrysafe.Store {
		return wrap(t, testenv.Memory(t), nil, sealed.Config{})
	})
}
