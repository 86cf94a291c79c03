// Package batchtest holds what the group-commit tests of the SQL stores
// (store/mysql, store/postgres) share that does not depend on SQL:
// sending operations so that they queue, in order, for one next batch.
package batchtest

import (
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/admin"
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

// OneBatch checks, from a store's BatchStats before its plug was sent and
// after the test's calls returned, that two batches ran: the plug's, then
// one of all n calls.
func OneBatch(t testing.TB, before, after admin.BatchStats, n int) {
	t.Helper()
	if after.Batches-before.Batches != 2 || after.Items-before.Items != int64(n+1) {
		t.Errorf("%d operations in %d batches, want the plug, then the %d operations in one batch",
			after.Items-before.Items, after.Batches-before.Batches, n)
	}
}

// Alone checks that want of the calls between before and after ran alone;
// which ones says which, for the failure's message.
func Alone(t testing.TB, before, after admin.BatchStats, want int64, which string) {
	t.Helper()
	if n := after.Alone - before.Alone; n != want {
		t.Errorf("%d operations ran alone, want %d (%s)", n, want, which)
	}
}
