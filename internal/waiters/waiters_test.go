package waiters

import (
	"sync"
	"sync/atomic"
	"testing"
)

// pending reports whether ch holds a value, taking it.
func pending(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestRegistry(t *testing.T) {
	t.Parallel()
	var r Registry[string]
	a, first := r.Add("k")
	if !first {
		t.Error("first waiter of k: first = false")
	}
	b, first := r.Add("k")
	if first {
		t.Error("second waiter of k: first = true")
	}
	other, _ := r.Add("other")

	r.Notify("k")
	r.Notify("k") // one value pending at most; never blocks
	if !pending(a.C()) || !pending(b.C()) {
		t.Error("a waiter of k was not woken")
	}
	if pending(a.C()) {
		t.Error("two values pending after two wake-ups; want one")
	}
	if pending(other.C()) {
		t.Error("the waiter of another key was woken")
	}

	if r.Remove(a) {
		t.Error("Remove of one of two waiters: last = true")
	}
	if r.Remove(a) {
		t.Error("second Remove of a waiter: last = true")
	}
	r.Notify("k")
	if pending(a.C()) || !pending(b.C()) {
		t.Error("after removing a: a woken or b not")
	}
	if !r.Remove(b) {
		t.Error("Remove of the last waiter of k: last = false")
	}
	if _, first := r.Add("k"); !first {
		t.Error("waiter of k after all left: first = false")
	}

	r.NotifyAll()
	if !pending(other.C()) {
		t.Error("NotifyAll did not wake the waiter of other")
	}
	if n := r.Len(); n != 2 {
		t.Errorf("Len = %d, want 2", n)
	}
}

func TestSubscribe(t *testing.T) {
	t.Parallel()
	var r Registry[int]
	ch, cancel := r.Subscribe(1)
	r.Notify(1)
	if !pending(ch) {
		t.Error("not woken")
	}
	cancel()
	cancel()
	if n := r.Len(); n != 0 {
		t.Errorf("Len after cancel = %d, want 0", n)
	}
	r.Notify(1)
	if pending(ch) {
		t.Error("woken after cancel")
	}
}

func TestClose(t *testing.T) {
	t.Parallel()
	var r Registry[string]
	w, _ := r.Add("k")
	r.Close()
	r.Close()
	if !pending(w.C()) {
		t.Error("Close did not wake the waiter")
	}
	if r.Len() != 0 || r.Remove(w) {
		t.Error("subscriptions left after Close")
	}
	late, first := r.Add("k")
	r.Notify("k")
	if first || pending(late.C()) || r.Len() != 0 {
		t.Error("a waiter added after Close was registered")
	}
}

// TestConcurrent: adds, removes and wake-ups from many goroutines (run
// with -race).
func TestConcurrent(t *testing.T) {
	t.Parallel()
	var r Registry[int]
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				w, _ := r.Add(i % 3)
				r.Notify((i + g) % 3)
				r.Remove(w)
			}
		})
	}
	wg.Go(func() {
		for range 200 {
			r.NotifyAll()
		}
	})
	wg.Wait()
	if n := r.Len(); n != 0 {
		t.Errorf("Len = %d after every waiter left", n)
	}
}

// TestNotifyWithoutWaitersLosesNothing races a change and its Notify
// against a waiter that subscribes and then re-reads: Notify skips its
// lock when it counts no waiter, and the waiter must still either see the
// change on its re-read or be woken.
func TestNotifyWithoutWaitersLosesNothing(t *testing.T) {
	t.Parallel()
	for range 2000 {
		var r Registry[string]
		var changed atomic.Bool
		var wg sync.WaitGroup
		wg.Go(func() {
			changed.Store(true)
			r.Notify("k")
		})
		w, _ := r.Add("k")
		seen := changed.Load()
		wg.Wait()
		if !seen && !pending(w.C()) {
			t.Fatal("the waiter missed the change: not seen on its re-read and not woken")
		}
		r.Remove(w)
		if r.n.Load() != 0 {
			t.Fatalf("%d waiters counted after the last one left", r.n.Load())
		}
	}
}

// TestNotifyCounts: Notify wakes again once waiters are back, and Close
// leaves none counted.
func TestNotifyCounts(t *testing.T) {
	t.Parallel()
	var r Registry[string]
	r.Notify("k") // none: nothing to do
	a, _ := r.Add("k")
	b, _ := r.Add("k")
	r.Remove(a)
	r.Notify("k")
	if !pending(b.C()) {
		t.Fatal("the remaining waiter was not woken")
	}
	r.Close()
	if r.n.Load() != 0 {
		t.Fatalf("%d waiters counted after Close", r.n.Load())
	}
}
