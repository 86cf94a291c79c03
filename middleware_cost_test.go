package retrysafe_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/memory"
)

// claimCounter is a memory store that counts claims.
type claimCounter struct {
	retrysafe.Store
	claims atomic.Int64
}

func (s *claimCounter) Claim(ctx context.Context, p *retrysafe.ClaimParams) (*retrysafe.ClaimResult, error) {
	s.claims.Add(1)
	return s.Store.Claim(ctx, p)
}

// endedContext is a context whose Err reports context.Canceled but whose
// Done channel never closes, as for a client that went away while its
// request was being fingerprinted: only work that checks Err notices.
type endedContext struct {
	context.Context
	done chan struct{}
}

func (c endedContext) Done() <-chan struct{} { return c.done }
func (c endedContext) Err() error            { return context.Canceled }

// TestClientGoneDuringFingerprintClaimsNothing: when the request's context
// ends while a large body is fingerprinted, the middleware stops there: no
// claim, no handler, no answer.
func TestClientGoneDuringFingerprintClaimsNothing(t *testing.T) {
	t.Parallel()
	mem := memory.New(memory.Config{})
	t.Cleanup(func() { _ = mem.Close() })
	store := &claimCounter{Store: mem}
	h := &counter{}
	mw, err := retrysafe.NewMiddleware(retrysafe.Config{Store: store, MaxBody: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	srv := mw(h)

	body := `{"note":"` + strings.Repeat("x", 2<<20) + `"}`
	ctx := endedContext{Context: context.Background(), done: make(chan struct{})}
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/payments", bytes.NewReader([]byte(body)))
	req.Header.Set(retrysafe.HeaderKey, "gone-1")
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	if n := store.claims.Load(); n != 0 {
		t.Fatalf("store claims = %d, want 0: the context ended before the claim", n)
	}
	if n := h.runs.Load(); n != 0 {
		t.Fatalf("handler ran %d times, want 0", n)
	}
	if rec.Body.Len() != 0 {
		t.Fatalf("answer %d %q; want none (the client is gone)", rec.Code, rec.Body)
	}

	// The same request with a live context runs.
	req = httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(body))
	req.Header.Set(retrysafe.HeaderKey, "gone-1")
	rec = httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	if rec.Code != http.StatusCreated || h.runs.Load() != 1 || store.claims.Load() != 1 {
		t.Fatalf("live request: status %d, runs %d, claims %d; want 201, 1, 1", rec.Code, h.runs.Load(), store.claims.Load())
	}
}
