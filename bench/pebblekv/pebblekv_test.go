package pebblekv

import (
	"testing"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/storetest"
)

// TestConformance runs the store conformance suite on the prototype, to
// record how far it is from a product store (docs/performance.md).
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) retrysafe.Store {
		s, err := Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}
