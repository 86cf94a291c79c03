package cputime

import (
	"crypto/sha256"
	"testing"
)

// TestProcessGrows: burning CPU makes the reading grow.
func TestProcessGrows(t *testing.T) {
	before := Process()
	if before <= 0 {
		t.Fatalf("Process() = %v, want > 0 in a running test", before)
	}
	sum := sha256.Sum256(nil)
	for Process() == before {
		sum = sha256.Sum256(sum[:])
	}
	if after := Process(); after < before {
		t.Fatalf("Process() went back from %v to %v", before, after)
	}
}
