package retrysafe

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
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

// TestTokenBatchSpare: a spare token given back to a batch is the next one
// taken, once; then the batch goes on with its own.
func TestTokenBatchSpare(t *testing.T) {
	var b tokenBatch
	first := b.take()
	b.spare = first
	if got := b.take(); got != first {
		t.Fatalf("take after giving back %q = %q", first, got)
	}
	if got := b.take(); got == first {
		t.Fatalf("the spare %q was taken twice", first)
	}
}

// claimSpy records the tokens of the claims it sees and wins only the
// first claim of each key (the rest replay).
type claimSpy struct {
	Store
	mu      sync.Mutex
	stored  map[string]int  // tokens of winning claims: their index in claims
	claims  []string        // every claim's token, in order
	winners map[string]bool // keys claimed
}

func (s *claimSpy) Claim(ctx context.Context, p *ClaimParams) (*ClaimResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.claims = append(s.claims, p.Token)
	if s.winners[p.Key] {
		return &ClaimResult{Record: &Record{Key: p.Key, State: StateCompleted, Response: &Response{Status: 200}}}, nil
	}
	s.winners[p.Key] = true
	s.stored[p.Token] = len(s.claims) - 1
	return &ClaimResult{Claimed: true, Record: p.ProcessingRecord(1, p.Now, p.Now, p.Now.Add(p.Lease))}, nil
}

func (s *claimSpy) NonBlocking() bool { return true }

// TestSpareTokens: claims that do not win give their token back for reuse
// (so the tokens of replays repeat, and one may end up stored by a later
// claim that wins), but a token a claim stored is never handed out again,
// whatever the interleaving of goroutines.
func TestSpareTokens(t *testing.T) {
	spy := &claimSpy{stored: map[string]int{}, winners: map[string]bool{}}
	cfg := &Config{Store: spy, Lease: time.Minute, Now: time.Now, Observer: nopObserver{}}
	e := newEngine(cfg)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for n := range 2000 {
				key := fmt.Sprintf("k-%d-%d", g, n%50) // each key won once, then replayed
				if _, err := e.claim(context.Background(), "s", key, "fp"); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	seen := map[string]int{}
	for i, tok := range spy.claims {
		seen[tok]++
		if at, ok := spy.stored[tok]; ok && i > at {
			t.Fatalf("token %q, stored by claim %d, handed out again to claim %d", tok, at, i)
		}
	}
	if len(seen) > len(spy.claims)/2 {
		t.Errorf("%d distinct tokens for %d claims (%d winners): the replays' tokens were not reused", len(seen), len(spy.claims), len(spy.stored))
	}
}
