package memory

import (
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
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

// shardFor returns the shard of i.
func (s *Store) shardFor(i id) *shard {
	return &s.shards[maphash.Comparable(s.seed, i)%numShards]
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

// quietStore returns a store without a janitor, closed when t ends.
func quietStore(t *testing.T) *Store {
	s := New(Config{JanitorInterval: -1})
	t.Cleanup(func() { s.Close() })
	return s
}

// completeKey claims key in scope "s" at base and completes it with resp,
// failing t on an error.
func completeKey(t *testing.T, s *Store, key string, resp *retrysafe.Response) {
	t.Helper()
	p, err := claim(t, s, key, base)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(t.Context(), &retrysafe.CompleteParams{Scope: "s", Key: key, Token: p.Token, Now: base, TTL: time.Hour, Response: resp}); err != nil {
		t.Fatal(err)
	}
}

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

	// Full, nothing expired: a new key is refused, with a reason. A full
	// store is no outage: the error does not match ErrStoreUnavailable
	// (which may fail open).
	_, err := claim(t, s, "new-1", base.Add(time.Minute))
	if !errors.Is(err, retrysafe.ErrStoreFull) || !errors.Is(err, ErrFull) || errors.Is(err, retrysafe.ErrStoreUnavailable) {
		t.Fatalf("Claim into a full store: %v, want ErrStoreFull and ErrFull, not ErrStoreUnavailable", err)
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

// TestMaxRecordsAbandoned: keys whose outcome is unknown (processing, lease
// run out, never completed) fill the store and every new key is refused
// with ErrFull (the gateway's 503) until ProcessingRetention has passed
// since their leases ran out; then a claim evicts them, and they no longer
// count toward MaxRecords.
func TestMaxRecordsAbandoned(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		retention time.Duration // Config.ProcessingRetention
		want      time.Duration // the retention in effect
	}{
		{"configured", 2 * time.Hour, 2 * time.Hour},
		{"default", 0, admin.DefaultProcessingRetention},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := New(Config{MaxRecords: 2, JanitorInterval: -1, ProcessingRetention: tc.retention})
			t.Cleanup(func() { s.Close() })
			for _, key := range []string{"unknown-1", "unknown-2"} {
				if _, err := claim(t, s, key, base); err != nil {
					t.Fatal(err)
				}
			}
			leaseEnd := base.Add(time.Minute)
			// Lease over, retention not yet: still full.
			_, err := claim(t, s, "new-1", leaseEnd.Add(tc.want-time.Second))
			if !errors.Is(err, retrysafe.ErrStoreFull) || !errors.Is(err, ErrFull) {
				t.Fatalf("Claim 1s before the abandoned records are due: %v, want ErrFull", err)
			}
			// Retention passed: the abandoned records make room.
			if _, err := claim(t, s, "new-1", leaseEnd.Add(tc.want)); err != nil {
				t.Fatalf("Claim once the abandoned records are due: %v", err)
			}
			if _, err := claim(t, s, "new-2", leaseEnd.Add(tc.want)); err != nil {
				t.Fatalf("second Claim once the abandoned records are due: %v", err)
			}
			if n := s.Len(); n != 2 {
				t.Fatalf("Len = %d, want 2 (the abandoned records counted out)", n)
			}
		})
	}
}

// TestSweepRetiresAbandoned: Sweep (the gateway's background sweeper)
// retires abandoned records with the retention in its params, and Len no
// longer counts them.
func TestSweepRetiresAbandoned(t *testing.T) {
	t.Parallel()
	s := New(Config{MaxRecords: 2, JanitorInterval: -1})
	t.Cleanup(func() { s.Close() })
	for _, key := range []string{"unknown-1", "unknown-2"} {
		if _, err := claim(t, s, key, base); err != nil {
			t.Fatal(err)
		}
	}
	n, err := s.Sweep(t.Context(), &admin.SweepParams{Now: base.Add(time.Minute + time.Hour), ProcessingRetention: time.Hour})
	if err != nil || n != 2 {
		t.Fatalf("Sweep: %d, %v; want 2", n, err)
	}
	if got := s.Len(); got != 0 {
		t.Fatalf("Len after the sweep = %d, want 0", got)
	}
	if _, err := claim(t, s, "new", base.Add(2*time.Hour)); err != nil {
		t.Fatalf("Claim after the sweep: %v", err)
	}
}

// TestJanitorRetires: the janitor retires abandoned processing records
// with Config.ProcessingRetention.
func TestJanitorRetires(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := New(Config{JanitorInterval: time.Minute, ProcessingRetention: 5 * time.Minute})
		defer s.Close()
		if _, err := claim(t, s, "unknown", time.Now()); err != nil { // lease 1m
			t.Fatal(err)
		}
		time.Sleep(5 * time.Minute) // lease ran out 4m ago
		synctest.Wait()
		if n := s.Len(); n != 1 {
			t.Fatalf("janitor retired a record before its retention: Len = %d", n)
		}
		time.Sleep(time.Minute) // 5m ago: due
		synctest.Wait()
		if n := s.Len(); n != 0 {
			t.Fatalf("janitor kept an abandoned record past its retention: Len = %d", n)
		}
	})
}

// TestJanitor runs in a synctest bubble: time is fake and advances only
// when every goroutine is blocked, so the janitor's ticks are
// deterministic, and the bubble fails if the janitor goroutine outlives
// Close.
func TestJanitor(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := New(Config{JanitorInterval: time.Minute}) // Now: time.Now, fake in the bubble
		ctx := t.Context()
		start := time.Now()
		p, err := claim(t, s, "done", start)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Complete(ctx, &retrysafe.CompleteParams{Scope: "s", Key: "done", Token: p.Token, Now: start, TTL: 90 * time.Second, Response: &retrysafe.Response{Status: 200}}); err != nil {
			t.Fatal(err)
		}
		if _, err := claim(t, s, "processing", start); err != nil {
			t.Fatal(err)
		}

		// First tick at start+1m: nothing has expired yet.
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := s.Len(); n != 2 {
			t.Fatalf("after the first janitor pass: Len = %d, want 2", n)
		}
		// Second tick at start+2m: the completed record (expired at
		// start+90s) is gone; the processing one, lease long over, stays.
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := s.Len(); n != 1 {
			t.Fatalf("after the second janitor pass: Len = %d, want 1", n)
		}
		if _, err := s.Get(ctx, &retrysafe.GetParams{Scope: "s", Key: "processing", Now: time.Now()}); err != nil {
			t.Fatalf("janitor deleted a processing record: %v", err)
		}

		// Close returns only after the janitor goroutine has returned (and
		// the bubble would fail on a goroutine left behind).
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
	})
}

// TestJanitorClock: the janitor reads Config.Now, not the wall clock.
func TestJanitorClock(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		clock := base
		now := func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			return clock
		}
		s := New(Config{JanitorInterval: time.Second, Now: now})
		defer s.Close()
		p, err := claim(t, s, "done", base)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Complete(t.Context(), &retrysafe.CompleteParams{Scope: "s", Key: "done", Token: p.Token, Now: base, TTL: time.Hour, Response: &retrysafe.Response{}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second) // ten ticks; Config.Now still says base
		synctest.Wait()
		if n := s.Len(); n != 1 {
			t.Fatalf("janitor deleted a record that is live by Config.Now: Len = %d", n)
		}
		mu.Lock()
		clock = base.Add(time.Hour)
		mu.Unlock()
		time.Sleep(time.Second)
		synctest.Wait()
		if n := s.Len(); n != 0 {
			t.Fatalf("janitor kept a record expired by Config.Now: Len = %d", n)
		}
	})
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
	if n := s.subs.Len(); n != 0 {
		t.Fatalf("%d subscriptions left after unsubscribing", n)
	}

	// Close wakes live subscribers a last time and ends their
	// subscriptions.
	ch, _, err := s.Subscribe(t.Context(), "s", "k")
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	select {
	case <-ch:
	default:
		t.Fatal("Close did not wake a live subscriber")
	}
	if n := s.subs.Len(); n != 0 {
		t.Fatalf("%d subscriptions left after Close", n)
	}
}

// TestMaxRecordsAcrossShards: MaxRecords bounds the whole store, not each
// shard, and a claim into a full store evicts expired records from every
// shard, not only its key's. Concurrent claims of distinct keys never
// take the store past MaxRecords.
func TestMaxRecordsAcrossShards(t *testing.T) {
	t.Parallel()
	const max = 40
	s := New(Config{MaxRecords: max, JanitorInterval: -1})
	t.Cleanup(func() { s.Close() })
	ctx := t.Context()
	target := s.shardFor(id{"s", "new"})
	// max records, none in the shard of "new": they all expire at base+1h.
	for n, stored := 0, 0; stored < max; n++ {
		key := fmt.Sprint("done-", n)
		if s.shardFor(id{"s", key}) == target {
			continue
		}
		completeKey(t, s, key, &retrysafe.Response{Status: 201})
		stored++
	}
	if _, err := claim(t, s, "new", base.Add(time.Minute)); !errors.Is(err, ErrFull) {
		t.Fatalf("Claim into a store full of live records: %v, want ErrFull", err)
	}
	if _, err := claim(t, s, "new", base.Add(time.Hour)); err != nil {
		t.Fatalf("Claim after the other shards' records expired: %v", err)
	}
	if got := s.Len(); got != 1 {
		t.Fatalf("Len = %d after the eviction, want 1", got)
	}

	// Many goroutines claim distinct keys at once: exactly max-1 more fit.
	var wg sync.WaitGroup
	var won, full atomic.Int64
	for g := range 8 {
		wg.Go(func() {
			for n := range 20 {
				p := &retrysafe.ClaimParams{Scope: "s", Key: fmt.Sprint("g", g, "-", n), Fingerprint: "fp", Token: retrysafe.NewToken(), Now: base.Add(time.Hour), Lease: time.Hour}
				_, err := s.Claim(ctx, p)
				switch {
				case err == nil:
					won.Add(1)
				case errors.Is(err, ErrFull):
					full.Add(1)
				default:
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if won.Load() != max-1 || full.Load() != 160-(max-1) || s.Len() != max {
		t.Fatalf("%d claims won, %d refused, Len %d; want %d, %d, %d", won.Load(), full.Load(), s.Len(), max-1, 160-(max-1), max)
	}
}

// TestFindNothing: a Find that matches nothing answers an empty list, not
// nil (an admin tool's JSON shows [] either way the store is asked).
func TestFindNothing(t *testing.T) {
	t.Parallel()
	s := quietStore(t)
	for _, p := range []*admin.FindParams{{Scope: "s", Key: "absent"}, {Key: "absent"}} {
		recs, err := s.Find(t.Context(), p)
		if err != nil || recs == nil || len(recs) != 0 {
			t.Fatalf("Find(%+v) = %#v, %v; want an empty list", p, recs, err)
		}
	}
}

// TestEvictionAfterRefusal: a refused claim leaves each shard a bound of
// when its records may next be evicted, and a later change that moves a
// record's due time earlier (a completion with a short TTL, an Extend
// that shortens a lease) lowers it, so the eviction still finds the
// record once it is due.
func TestEvictionAfterRefusal(t *testing.T) {
	t.Parallel()
	for _, short := range []string{"complete", "extend"} {
		t.Run(short, func(t *testing.T) {
			t.Parallel()
			s := New(Config{MaxRecords: 2, JanitorInterval: -1, ProcessingRetention: time.Hour})
			t.Cleanup(func() { s.Close() })
			ctx := t.Context()
			a, err := claim(t, s, "a", base) // lease 1m: due at base+1m+1h
			if err != nil {
				t.Fatal(err)
			}
			if _, err := claim(t, s, "b", base); err != nil {
				t.Fatal(err)
			}
			if _, err := claim(t, s, "new", base); !errors.Is(err, ErrFull) {
				t.Fatalf("Claim into a full store: %v, want ErrFull", err)
			}
			switch short {
			case "complete": // a's result expires at base+1s
				err = s.Complete(ctx, &retrysafe.CompleteParams{Scope: "s", Key: "a", Token: a.Token, Now: base, TTL: time.Second, Response: &retrysafe.Response{Status: 201}})
			case "extend": // a's lease now ends at base+1s: retired at base+1h+1s
				err = s.Extend(ctx, &retrysafe.ExtendParams{Scope: "s", Key: "a", Token: a.Token, Now: base, Lease: time.Second})
			}
			if err != nil {
				t.Fatal(err)
			}
			at := base.Add(time.Second)
			if short == "extend" {
				at = at.Add(time.Hour)
			}
			if _, err := claim(t, s, "new", at); err != nil {
				t.Fatalf("Claim once a is due: %v, want room made by evicting a", err)
			}
		})
	}
}
