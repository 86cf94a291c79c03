package memory

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/storetest"
)

func newStore(t *testing.T) retrysafe.Store {
	s := New(Config{})
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, newStore)
}

func TestUnavailable(t *testing.T) {
	t.Parallel()
	storetest.RunUnavailable(t, func(t *testing.T) retrysafe.Store {
		s := New(Config{})
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestShared runs the shared-backend checks with both sides on one store:
// the memory store cannot be shared between processes, but the checks
// still exercise concurrent claims and fencing.
func TestShared(t *testing.T) {
	t.Parallel()
	storetest.RunShared(t, func(t *testing.T) (a, b retrysafe.Store) {
		s := newStore(t)
		return s, s
	})
}

var base = storetest.Base

func claim(t *testing.T, s *Store, key string, now time.Time) (*retrysafe.ClaimParams, error) {
	t.Helper()
	p := &retrysafe.ClaimParams{Scope: "s", Key: key, Fingerprint: "fp", Token: retrysafe.NewToken(), Now: now, Lease: time.Minute}
	res, err := s.Claim(t.Context(), p)
	if err == nil && !res.Claimed {
		t.Fatalf("Claim(%q) did not win", key)
	}
	return p, err
}

func TestMaxRecords(t *testing.T) {
	t.Parallel()
	s := New(Config{MaxRecords: 3, JanitorInterval: -1})
	t.Cleanup(func() { s.Close() })
	ctx := t.Context()

	// Two completed records (expire at base+1h) and one processing.
	for i := range 2 {
		p, err := claim(t, s, fmt.Sprint("done-", i), base)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Complete(ctx, &retrysafe.CompleteParams{Scope: "s", Key: p.Key, Token: p.Token, Now: base, TTL: time.Hour, Response: &retrysafe.Response{Status: 200}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := claim(t, s, "processing", base); err != nil {
		t.Fatal(err)
	}

	// Full, nothing expired: a new key is refused, with a reason.
	_, err := claim(t, s, "new-1", base.Add(time.Minute))
	if !errors.Is(err, retrysafe.ErrStoreUnavailable) || !errors.Is(err, ErrFull) {
		t.Fatalf("Claim into a full store: %v, want ErrStoreUnavailable and ErrFull", err)
	}
	// Existing keys still answer: a duplicate gets the stored record.
	res, err := s.Claim(ctx, &retrysafe.ClaimParams{Scope: "s", Key: "done-0", Fingerprint: "fp", Token: retrysafe.NewToken(), Now: base.Add(time.Minute), Lease: time.Minute})
	if err != nil || res.Claimed || res.Record.State != retrysafe.StateCompleted {
		t.Fatalf("duplicate claim on a full store: %+v, %v", res, err)
	}

	// Once the completed records expire, they make room; the processing
	// record, lease long gone, is never evicted.
	later := base.Add(time.Hour)
	if _, err := claim(t, s, "new-2", later); err != nil {
		t.Fatalf("Claim after records expired: %v", err)
	}
	if _, err := claim(t, s, "new-3", later); err != nil {
		t.Fatalf("second Claim after records expired: %v", err)
	}
	if got := s.Len(); got != 3 {
		t.Fatalf("Len = %d, want 3", got)
	}
	if _, err := s.Get(ctx, &retrysafe.GetParams{Scope: "s", Key: "processing", Now: later}); err != nil {
		t.Fatalf("processing record was evicted: %v", err)
	}
	if _, err := claim(t, s, "new-4", later); !errors.Is(err, ErrFull) {
		t.Fatalf("Claim into a store full of live records: %v, want ErrFull", err)
	}
}

func TestJanitor(t *testing.T) {
	t.Parallel()
	clock := make(chan time.Time, 1)
	clock <- base.Add(2 * time.Hour)
	now := func() time.Time {
		tm := <-clock
		clock <- tm
		return tm
	}
	s := New(Config{JanitorInterval: time.Millisecond, Now: now})
	ctx := t.Context()
	p, err := claim(t, s, "done", base)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, &retrysafe.CompleteParams{Scope: "s", Key: "done", Token: p.Token, Now: base, TTL: time.Hour, Response: &retrysafe.Response{Status: 200}}); err != nil {
		t.Fatal(err)
	}
	if _, err := claim(t, s, "processing", base); err != nil {
		t.Fatal(err)
	}

	// Wait (bounded) for the janitor to delete the expired record.
	deadline := time.Now().Add(10 * time.Second)
	for s.Len() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("janitor did not delete the expired record: Len = %d", s.Len())
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := s.Get(ctx, &retrysafe.GetParams{Scope: "s", Key: "processing", Now: base}); err != nil {
		t.Fatalf("janitor deleted a processing record: %v", err)
	}

	// Close returns only after the janitor goroutine has returned.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.janitorDone:
	default:
		t.Fatal("Close returned before the janitor goroutine exited")
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestJanitorDisabled(t *testing.T) {
	t.Parallel()
	s := New(Config{JanitorInterval: -1})
	select {
	case <-s.janitorDone:
	default:
		t.Fatal("a disabled janitor left a goroutine")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestSubscriptionsCleanedUp(t *testing.T) {
	t.Parallel()
	s := New(Config{JanitorInterval: -1})
	t.Cleanup(func() { s.Close() })

	for i := range 100 {
		_, unsubscribe, err := s.Subscribe(t.Context(), "s", fmt.Sprint("k", i%7))
		if err != nil {
			t.Fatal(err)
		}
		unsubscribe()
		unsubscribe()
	}
	if n := s.subscriptions(); n != 0 {
		t.Fatalf("%d subscriptions left after unsubscribing", n)
	}
	if len(s.subs) != 0 {
		t.Fatalf("%d keys left in the subscription map", len(s.subs))
	}

	// A subscription also ends when its context is done.
	ctx, cancel := context.WithCancel(t.Context())
	if _, _, err := s.Subscribe(ctx, "s", "k"); err != nil {
		t.Fatal(err)
	}
	cancel()
	deadline := time.Now().Add(10 * time.Second)
	for s.subscriptions() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("subscription not ended by its context")
		}
		time.Sleep(time.Millisecond)
	}

	// Close closes the channels of live subscriptions.
	ch, _, err := s.Subscribe(t.Context(), "s", "k")
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, ok := <-ch; ok {
		t.Fatal("subscription channel delivered a value on Close, want it closed")
	}
}
