// Package waiters is the registry of change subscriptions behind every
// store's Subscribe ([retrysafe.Notifier]): waiters of a record, each with
// a channel that holds one pending signal, woken without blocking.
//
// A store adds a waiter in Subscribe, after or while it arranges for
// changes to reach it (a LISTEN, a SUBSCRIBE), and wakes the waiters of a
// record when it learns of a change. [Registry.Add] reports the first
// waiter of a key and [Registry.Remove] the last, so that a store can
// start and stop listening to one record.
package waiters

import (
	"sync"
	"sync/atomic"
)

// Registry holds the waiters of each key. The zero value is ready to use;
// a Registry must not be copied after first use.
type Registry[K comparable] struct {
	mu     sync.Mutex
	m      map[K]map[*Waiter[K]]struct{}
	closed bool
	// n counts the waiters in m, so that Notify skips the mutex when
	// there are none (most changes have no waiter). A waiter added after
	// Notify read n as zero re-reads its record after Add, and so sees the
	// change Notify was called for.
	n atomic.Int64
}

// Waiter is one subscription to a key.
type Waiter[K comparable] struct {
	key K
	ch  chan struct{}
}

// C is the waiter's channel: it receives a value after each wake-up, at
// most one pending. It is never closed.
func (w *Waiter[K]) C() <-chan struct{} { return w.ch }

// Add registers a new waiter of k. first reports whether it is the only
// waiter of k. After [Registry.Close], Add returns a waiter that is never
// woken, with first false.
func (r *Registry[K]) Add(k K) (w *Waiter[K], first bool) {
	w = &Waiter[K]{key: k, ch: make(chan struct{}, 1)}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return w, false
	}
	if r.m == nil {
		r.m = make(map[K]map[*Waiter[K]]struct{})
	}
	set := r.m[k]
	if set == nil {
		set = make(map[*Waiter[K]]struct{})
		r.m[k] = set
	}
	set[w] = struct{}{}
	r.n.Add(1)
	return w, len(set) == 1
}

// Remove ends w's subscription. last reports whether w was the last waiter
// of its key; removing a waiter again, or after Close, returns false.
func (r *Registry[K]) Remove(w *Waiter[K]) (last bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	set := r.m[w.key]
	if _, ok := set[w]; !ok {
		return false
	}
	delete(set, w)
	r.n.Add(-1)
	if len(set) > 0 {
		return false
	}
	delete(r.m, w.key)
	return true
}

// Subscribe adds a waiter of k and returns its channel and a function that
// removes it (safe to call more than once): what a store's Subscribe
// returns when nothing has to start or stop per key.
func (r *Registry[K]) Subscribe(k K) (<-chan struct{}, func()) {
	w, _ := r.Add(k)
	return w.C(), func() { r.Remove(w) }
}

// Notify wakes every waiter of k without blocking.
func (r *Registry[K]) Notify(k K) {
	if r.n.Load() == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	wake(r.m[k])
}

// NotifyAll wakes every waiter, as after an outage during which changes
// may have gone unannounced.
func (r *Registry[K]) NotifyAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, set := range r.m {
		wake(set)
	}
}

// Close wakes every waiter a last time and ends every subscription, so
// that waiters re-read and find the store closed. Channels stay open.
// Close is idempotent.
func (r *Registry[K]) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, set := range r.m {
		wake(set)
	}
	r.m, r.closed = nil, true
	r.n.Store(0)
}

// Len returns the number of waiters (for tests).
func (r *Registry[K]) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, set := range r.m {
		n += len(set)
	}
	return n
}

func wake[K comparable](set map[*Waiter[K]]struct{}) {
	for w := range set {
		select {
		case w.ch <- struct{}{}:
		default: // a value is already pending
		}
	}
}
