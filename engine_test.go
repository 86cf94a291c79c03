package retrysafe

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
// a StoreError matching ErrStoreUnavailable, while one cut short by the
// caller's own (earlier) deadline fails with the context's error; a store
// that never blocks gets no StoreTimeout deadline of its own.
func TestCallStoreTimeout(t *testing.T) {
	t.Parallel()
	t.Run("store timeout", func(t *testing.T) {
		t.Parallel()
		s := &stallingStore{deadline: make(chan bool, 1)}
		_, err := newTestEngine(t, s).claim(context.Background(), "", "k", "fp")
		var se *StoreError
		if !errors.As(err, &se) || !errors.Is(err, ErrStoreUnavailable) || !<-s.deadline {
			t.Fatalf("err = %v, want a StoreError matching ErrStoreUnavailable", err)
		}
	})
	t.Run("caller's earlier deadline", func(t *testing.T) {
		t.Parallel()
		s := &stallingStore{deadline: make(chan bool, 1)}
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		defer cancel()
		_, err := newTestEngine(t, s).claim(ctx, "", "k", "fp")
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrStoreUnavailable) || !<-s.deadline {
			t.Fatalf("err = %v, want the caller's context.DeadlineExceeded", err)
		}
	})
	t.Run("non-blocking store", func(t *testing.T) {
		t.Parallel()
		s := &stallingStore{nonBlocking: true, deadline: make(chan bool, 1)}
		_, err := newTestEngine(t, s).claim(context.Background(), "", "k", "fp")
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

// TestHeartbeatsShareOneQueue: the heartbeat queue renews every
// running operation again and again, however the ones around it in the
// queue were stopped (head, middle, tail), never renews a stopped one,
// is empty once all are stopped, and its loop goroutine then exits.
func TestHeartbeatsShareOneQueue(t *testing.T) {
	t.Parallel()
	s := &countingExtends{n: map[string]int{}}
	// A lease no other test uses: engines with the same one share a queue.
	cfg, err := Config{Store: s, Lease: 57*time.Millisecond + 123}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	e := newEngine(&cfg)
	// DoWith makes an engine per call: engines with the same Lease share
	// the queue (and its one goroutine), others do not.
	if other := newEngine(&cfg); other.beats != e.beats {
		t.Fatal("two engines with the same Lease have heartbeat queues of their own")
	}
	cfg2 := cfg
	cfg2.Lease = 2 * cfg.Lease
	if newEngine(&cfg2).beats == e.beats {
		t.Fatal("engines with different leases share a heartbeat queue")
	}
	stops := map[string]func(){}
	for _, key := range []string{"k0", "k1", "k2", "k3", "k4", "k5"} {
		stops[key] = e.heartbeat(context.Background(), &Record{Key: key, Token: "t-" + key}, func(error) {})
	}
	for _, key := range []string{"k0", "k2", "k5"} { // the head, one in the middle, the tail
		stops[key]()
	}
	running := []string{"k1", "k3", "k4"}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		renewed := 0
		for _, key := range running {
			if s.count(key) >= 3 {
				renewed++
			}
		}
		if renewed == len(running) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s: renewals k1 %d, k3 %d, k4 %d; want each renewed at least 3 times", s.count("k1"), s.count("k3"), s.count("k4"))
		}
	}
	for _, key := range []string{"k0", "k2", "k5"} {
		if n := s.count(key); n != 0 {
			t.Errorf("%s renewed %d times after stop", key, n)
		}
	}
	for _, key := range running {
		stops[key]()
	}
	e.beats.mu.Lock()
	head, tail := e.beats.head, e.beats.tail
	e.beats.mu.Unlock()
	if head != nil || tail != nil {
		t.Fatalf("every heartbeat stopped, but the queue still holds %q ... %q", head.rec.Key, tail.rec.Key)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		e.beats.mu.Lock()
		running := e.beats.running
		e.beats.mu.Unlock()
		if !running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the heartbeat loop still runs 30s after the last heartbeat stopped")
		}
	}
}

// keepingStore is a blocking Store that keeps the params of its calls.
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

// TestParamsNotReusedForBlockingStores: only a NonBlocking store, which
// promises not to keep them, gets recycled params; any other store may
// keep the params of every call and finds them as it was given them.
func TestParamsNotReusedForBlockingStores(t *testing.T) {
	t.Parallel()
	s := &keepingStore{}
	e := newTestEngine(t, s)
	for _, key := range []string{"a", "b", "c"} {
		res, err := e.claim(context.Background(), "s", key, "fp-"+key)
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

// TestHeartbeatQueueUnlink: a queue stays a well-formed list, in the
// order heartbeats were queued, whichever of them is taken off (head,
// middle, tail), and is empty once all are.
func TestHeartbeatQueueUnlink(t *testing.T) {
	t.Parallel()
	q := &heartbeats{period: time.Hour, running: true} // running: no loop is started
	hs := make([]*heartbeat, 5)
	for n := range hs {
		hs[n] = &heartbeat{rec: &Record{Key: fmt.Sprint("k", n)}}
		q.scheduleLocked(hs[n])
	}
	check := func(want ...int) {
		t.Helper()
		var got []int
		var prev *heartbeat
		for h := q.head; h != nil; h = h.next {
			if h.prev != prev || !h.queued {
				t.Fatalf("%s: prev %v, queued %v", h.rec.Key, h.prev, h.queued)
			}
			for n, x := range hs {
				if x == h {
					got = append(got, n)
				}
			}
			prev = h
		}
		if q.tail != prev || !slices.Equal(got, want) {
			t.Fatalf("queue %v (tail %v), want %v", got, q.tail, want)
		}
	}
	check(0, 1, 2, 3, 4)
	q.removeLocked(hs[0]) // the head
	check(1, 2, 3, 4)
	q.removeLocked(hs[2]) // the middle
	check(1, 3, 4)
	q.removeLocked(hs[4]) // the tail
	check(1, 3)
	q.removeLocked(hs[1])
	q.removeLocked(hs[3])
	check()
	for _, h := range hs {
		if h.queued || h.prev != nil || h.next != nil {
			t.Fatalf("%s still linked after removal", h.rec.Key)
		}
	}
}
