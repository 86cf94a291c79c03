package retrysafe

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// stallingStore is a Store whose Claim waits for its context to end, as a
// backend that stopped answering; nonBlocking is what it claims about itself.
type stallingStore struct {
	Store       // nil: only Claim is called
	nonBlocking bool
	deadline    chan bool // receives whether Claim's context had a deadline
}

func (s *stallingStore) NonBlocking() bool { return s.nonBlocking }

func (s *stallingStore) Claim(ctx context.Context, _ *ClaimParams) (*ClaimResult, error) {
	_, ok := ctx.Deadline()
	s.deadline <- ok
	if s.nonBlocking {
		return nil, errors.New("not claimed")
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

func newTestEngine(t *testing.T, s Store) *engine {
	t.Helper()
	cfg, err := Config{Store: s, StoreTimeout: 20 * time.Millisecond}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	return newEngine(&cfg)
}

// TestCallStoreTimeout: a store call that outlives StoreTimeout fails with
// a storeError matching ErrStoreUnavailable, while one cut short by the
// caller's own (earlier) deadline fails with the context's error; a store
// that never blocks gets no StoreTimeout deadline of its own.
func TestCallStoreTimeout(t *testing.T) {
	t.Parallel()
	t.Run("store timeout", func(t *testing.T) {
		t.Parallel()
		s := &stallingStore{deadline: make(chan bool, 1)}
		_, err := newTestEngine(t, s).claim(context.Background(), "", "k", "fp", "")
		var se *storeError
		if !errors.As(err, &se) || !errors.Is(err, ErrStoreUnavailable) || !<-s.deadline {
			t.Fatalf("err = %v, want a storeError matching ErrStoreUnavailable", err)
		}
	})
	t.Run("caller's earlier deadline", func(t *testing.T) {
		t.Parallel()
		s := &stallingStore{deadline: make(chan bool, 1)}
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		defer cancel()
		_, err := newTestEngine(t, s).claim(ctx, "", "k", "fp", "")
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrStoreUnavailable) || !<-s.deadline {
			t.Fatalf("err = %v, want the caller's context.DeadlineExceeded", err)
		}
	})
	t.Run("non-blocking store", func(t *testing.T) {
		t.Parallel()
		s := &stallingStore{nonBlocking: true, deadline: make(chan bool, 1)}
		_, err := newTestEngine(t, s).claim(context.Background(), "", "k", "fp", "")
		if err == nil || <-s.deadline {
			t.Fatalf("err = %v; a NonBlocking store's call must run without a StoreTimeout deadline", err)
		}
	})
}

// countingExtends is a Store that counts lease renewals per key.
type countingExtends struct {
	Store // nil: only Extend is called
	mu    sync.Mutex
	n     map[string]int
}

func (s *countingExtends) Extend(_ context.Context, p *ExtendParams) error {
	s.mu.Lock()
	s.n[p.Key]++
	s.mu.Unlock()
	return nil
}

func (s *countingExtends) count(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[key]
}

// TestHeartbeatRenewsUntilStopped: each running operation's lease is
// renewed again and again, a stopped one never again (stop waits for a
// renewal in flight), and stopping one leaves the others running.
func TestHeartbeatRenewsUntilStopped(t *testing.T) {
	t.Parallel()
	s := &countingExtends{n: map[string]int{}}
	cfg, err := Config{Store: s, Lease: 30 * time.Millisecond}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	e := newEngine(&cfg)
	stops := map[string]func(){}
	for _, key := range []string{"k0", "k1", "k2", "k3"} {
		h := new(heartbeat)
		e.startHeartbeat(h, context.Background(), &Record{Key: key, Token: "t-" + key}, func(error) {})
		stops[key] = h.stop
	}
	stops["k0"]() // before its first renewal
	for deadline := time.Now().Add(30 * time.Second); s.count("k1") < 3 || s.count("k2") < 3 || s.count("k3") < 3; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 30s: renewals k1 %d, k2 %d, k3 %d; want each renewed at least 3 times", s.count("k1"), s.count("k2"), s.count("k3"))
		}
	}
	stops["k2"]()
	after := s.count("k2")
	for n := s.count("k1"); s.count("k1") < n+3; time.Sleep(5 * time.Millisecond) {
	}
	if n := s.count("k0"); n != 0 {
		t.Errorf("k0 renewed %d times after it stopped", n)
	}
	if n := s.count("k2"); n != after {
		t.Errorf("k2 renewed %d times after it stopped", n-after)
	}
	stops["k1"]()
	stops["k3"]()
}

// keepingStore is a Store that keeps the params of its calls.
type keepingStore struct {
	Store     // nil: only Claim and Complete are called
	claims    []*ClaimParams
	completes []*CompleteParams
}

func (s *keepingStore) Claim(_ context.Context, p *ClaimParams) (*ClaimResult, error) {
	s.claims = append(s.claims, p)
	return &ClaimResult{Claimed: true, Record: p.ProcessingRecord(1, p.Now, p.Now, p.Now.Add(p.Lease))}, nil
}

func (s *keepingStore) Complete(_ context.Context, p *CompleteParams) error {
	s.completes = append(s.completes, p)
	return nil
}

// TestParamsNotReused: a store may keep the params of every call and
// finds them as it was given them.
func TestParamsNotReused(t *testing.T) {
	t.Parallel()
	s := &keepingStore{}
	e := newTestEngine(t, s)
	for _, key := range []string{"a", "b", "c"} {
		res, err := e.claim(context.Background(), "s", key, "fp-"+key, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := e.complete(context.Background(), res.Record, &Response{Status: 201}); err != nil {
			t.Fatal(err)
		}
	}
	for i, key := range []string{"a", "b", "c"} {
		if c := s.claims[i]; c.Key != key || c.Fingerprint != "fp-"+key || c.Token == "" {
			t.Errorf("claim %d's params changed after the call: %+v", i, c)
		}
		if c := s.completes[i]; c.Key != key || c.Response == nil || c.Response.Status != 201 {
			t.Errorf("complete %d's params changed after the call: %+v", i, c)
		}
	}
}
