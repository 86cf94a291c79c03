// Package batchtest holds what the group-commit tests of the SQL stores
// (store/mysql, store/postgres) share that does not depend on SQL:
// sending operations so that they queue, in order, for one next batch.
package batchtest

import (
	"sync"
	"testing"
	"time"
)

// Queuer is a store that reports how many operations wait for its next
// batch (each store's QueuedOps, exported for its tests).
type Queuer interface {
	QueuedOps() int
}

// WaitQueued waits until n operations are queued for s's next batch.
func WaitQueued(t testing.TB, s Queuer, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for s.QueuedOps() != n {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %d queued operations (have %d)", n, s.QueuedOps())
		}
		time.Sleep(time.Millisecond)
	}
}

// SendInOrder starts each call on its own goroutine, one after another,
// each queued on s before the next is sent (so they queue in this order),
// and returns a function that waits for their errors.
func SendInOrder(t testing.TB, s Queuer, calls []func() error) (wait func() []error) {
	t.Helper()
	errs := make([]error, len(calls))
	var wg sync.WaitGroup
	for i, call := range calls {
		wg.Go(func() { errs[i] = call() })
		WaitQueued(t, s, i+1)
	}
	return func() []error { wg.Wait(); return errs }
}
