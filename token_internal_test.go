package retrysafe

import (
	"sync"
	"testing"
)

// TestBatchedTokens: tokens cut from batches, taken from several
// goroutines at once, are 32 lower-case hex digits and all distinct, over
// many batches.
func TestBatchedTokens(t *testing.T) {
	const goroutines, each = 4, 5 * tokensPerBatch * 100
	tokens := make([][]string, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for range each {
				tokens[g] = append(tokens[g], newBatchedToken())
			}
		})
	}
	wg.Wait()
	seen := make(map[string]bool)
	for _, ts := range tokens {
		for _, tok := range ts {
			if len(tok) != 32 {
				t.Fatalf("token %q: %d characters, want 32", tok, len(tok))
			}
			for i := 0; i < len(tok); i++ {
				if c := tok[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
					t.Fatalf("token %q: not lower-case hex", tok)
				}
			}
			if seen[tok] {
				t.Fatalf("token %q handed out twice", tok)
			}
			seen[tok] = true
		}
	}
}
