// Package groupcommit runs the items that many goroutines submit in
// batches (group commit), with no SQL in it.
//
// A [Committer] has a leader goroutine, started when an item arrives and
// gone once the queue has been empty for [Config.Linger]. The leader takes
// every queued item (up to [Config.MaxBatch]), in the order they were
// submitted, and calls the batch function once for all of them: typically
// one transaction and one commit. Each caller of [Committer.Do] then gets
// exactly its own item's result. By default one batch runs at a time;
// [Config.MaxInFlight] lets up to that many leaders run batches at once
// (a new one starts only when an item arrives while all are busy).
//
// No batch waits for a timer: a lone item is run as soon as a leader
// takes it, so one caller pays one batch. Batches grow only from the items
// that queue while batches run.
//
// # Cancellation
//
// An item whose caller's context ends before the batch function starts it
// (see [Batch.Start]) is dropped, and Do returns the context's error. Once
// started, it runs to the end of its batch, and Do returns its real
// outcome even if the context has ended meanwhile: the item may have taken
// effect, and the caller must not be told otherwise. The batch's own
// context ([Batch.Context]) ends when every caller of the batch has given
// up, so that a batch nobody waits for can be abandoned.
//
// # Failures
//
// The batch function reports each item's own result with [Batch.Set], so a
// failing item never fails its neighbours. An error returned by the batch
// function (a failed commit, say) is the answer of every item of the batch
// that was not answered yet.
//
// # Shutdown
//
// [Committer.Close] fails the queued items with [ErrClosed], waits for a
// running batch to end, and makes later calls of Do return ErrClosed.
package groupcommit

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// ErrClosed is returned by [Committer.Do] for items submitted after, or
// still queued at, [Committer.Close].
var ErrClosed = errors.New("groupcommit: committer closed")

// errNoResult answers an item that the batch function started but left
// without a result: a bug in the batch function.
var errNoResult = errors.New("groupcommit: the batch function left a started item without a result")

// errNotRun answers an item that the batch function neither started nor
// saw given up although it returned success: a bug in the batch function.
var errNotRun = errors.New("groupcommit: the batch function did not run a live item")

// DefaultMaxBatch is the batch size cap used when Config.MaxBatch is zero.
const DefaultMaxBatch = 64

// Config configures a [Committer]. The zero value is valid.
type Config struct {
	// MaxBatch caps the items of one batch. Zero means DefaultMaxBatch.
	MaxBatch int
	// Linger is how long the idle leader goroutine waits for the next item
	// before it exits. Zero means it exits as soon as the queue is empty;
	// a longer linger saves starting a goroutine (and growing its stack)
	// for each batch of a steady load.
	Linger time.Duration
	// MaxInFlight is the number of batches that may run at once, each on
	// a leader goroutine of its own. Zero means 1: one batch at a time.
	// A new leader starts only when an item arrives while every leader
	// is busy, so batches still form only from items that queue while
	// batches run.
	MaxInFlight int
	// Idle, if set, is called by a leader each time it finds the queue
	// empty, before it waits (Linger) or exits; Exit, if set, is called
	// just before a leader exits (after which it may still find work and
	// go on). Both run on the leader goroutine; with MaxInFlight 1, state
	// that only batch functions touch may be cleaned up there without a
	// lock: no batch runs until they return.
	Idle, Exit func()
	// Gather makes a leader yield the processor once (runtime.Gosched)
	// before it takes a batch while another leader's batch is running, or
	// when its own last batch held more than one item (the committer is
	// under load), so that callers already runnable (those the last
	// finished batch just answered, about to submit their next item, and
	// others about to submit theirs) queue first and join this batch
	// instead of the next one. It is not a timer: a leader whose last
	// batch held one item and that has no batch running beside it never
	// yields, so a lone caller is not delayed, and the yield returns at
	// once when no other goroutine is runnable. Without it, the first of
	// those callers starts a batch of its own, often of one item.
	Gather bool
}

// Stats counts a Committer's work since it was made.
type Stats struct {
	// Batches is the number of batches the batch function ran (with at
	// least one started item).
	Batches int64
	// Items is the number of items those batches started.
	Items int64
	// Single is the number of those batches that started one item.
	Single int64
}

// Item states.
const (
	stateQueued    int32 = iota // in the queue; the caller may give up
	stateTaken                  // in a batch, not started; the caller may give up
	stateStarted                // being run; its outcome is the answer
	stateDone                   // answered
	stateCancelled              // given up by its caller
)

// item is one call of Do.
type item[T, R any] struct {
	ctx   context.Context
	in    T
	state atomic.Int32

	// The result Batch.Set recorded (leader only).
	set    bool
	setRes R
	setErr error

	res  R // the answer, written before done is closed
	err  error
	done chan struct{}
}

// settle answers it with (res, err) if it is still to be answered from
// one of the states in from, and reports whether it did.
func (it *item[T, R]) settle(res R, err error, from ...int32) bool {
	for _, s := range from {
		if it.state.CompareAndSwap(s, stateDone) {
			it.res, it.err = res, err
			close(it.done)
			return true
		}
	}
	return false
}

// Committer runs the items submitted with [Committer.Do] in batches, one
// batch at a time, through its batch function. It is safe for concurrent
// use.
type Committer[T, R any] struct {
	run func(*Batch[T, R]) error
	cfg Config

	mu      sync.Mutex
	queue   []*item[T, R]
	leaders int           // leader goroutines
	idle    int           // leaders lingering for work
	wake    chan struct{} // signals a lingering leader
	closed  bool
	closing chan struct{} // closed by Close: lingering leaders exit
	exited  chan struct{} // closed by the last leader to exit after Close

	batches, items, single atomic.Int64
}

// New returns a Committer that runs batches through run.
//
// run is called on a leader goroutine, for one batch at a time per leader
// (see Config.MaxInFlight), with the
// items in submission order. For each item it means to run it calls
// [Batch.Start] (which reports false for an item whose caller gave up),
// and it reports the item's result with [Batch.Set]. It returns nil when
// the batch took effect (the results set are then delivered) or an error
// that ends the batch as a whole (delivered to every item not answered
// yet).
func New[T, R any](cfg Config, run func(*Batch[T, R]) error) *Committer[T, R] {
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = DefaultMaxBatch
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 1
	}
	return &Committer[T, R]{run: run, cfg: cfg, wake: make(chan struct{}, cfg.MaxInFlight), closing: make(chan struct{})}
}

// Stats returns how many batches the committer has run and how many items
// they held.
func (c *Committer[T, R]) Stats() Stats {
	return Stats{Batches: c.batches.Load(), Items: c.items.Load(), Single: c.single.Load()}
}

// Do submits in and waits for its result. See the package documentation
// for how cancellation works.
func (c *Committer[T, R]) Do(ctx context.Context, in T) (R, error) {
	var zero R
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	it := &item[T, R]{ctx: ctx, in: in, done: make(chan struct{})}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return zero, ErrClosed
	}
	c.queue = append(c.queue, it)
	spawn := c.idle == 0 && c.leaders < c.cfg.MaxInFlight
	if spawn {
		c.leaders++
	}
	c.mu.Unlock()
	if spawn {
		go c.lead()
	} else {
		select {
		case c.wake <- struct{}{}:
		default: // enough leaders signalled, or all are busy
		}
	}
	select {
	case <-it.done:
		return it.res, it.err
	case <-ctx.Done():
	}
	c.mu.Lock()
	if it.state.CompareAndSwap(stateQueued, stateCancelled) {
		c.remove(it)
		c.mu.Unlock()
		return zero, ctx.Err()
	}
	c.mu.Unlock()
	if it.state.CompareAndSwap(stateTaken, stateCancelled) {
		return zero, ctx.Err()
	}
	<-it.done // started (or answered meanwhile): its outcome is the answer
	return it.res, it.err
}

// remove deletes it from the queue; c.mu is held.
func (c *Committer[T, R]) remove(it *item[T, R]) {
	for i, q := range c.queue {
		if q == it {
			copy(c.queue[i:], c.queue[i+1:])
			c.queue[len(c.queue)-1] = nil
			c.queue = c.queue[:len(c.queue)-1]
			return
		}
	}
}

// Queued returns the number of items waiting to be taken into a batch.
func (c *Committer[T, R]) Queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue)
}

// Close fails every queued item with [ErrClosed], waits for a running
// batch to end (its items get their outcomes) and for the leader to exit.
// Later calls of Do return ErrClosed. Close may be called more than once.
func (c *Committer[T, R]) Close() {
	var zero R
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		for _, it := range c.queue {
			it.settle(zero, ErrClosed, stateQueued)
		}
		clear(c.queue)
		c.queue = nil
		if c.leaders > 0 {
			c.exited = make(chan struct{})
		}
		close(c.closing)
	}
	exited := c.exited
	c.mu.Unlock()
	if exited != nil {
		<-exited
	}
}

// lead is a leader goroutine: it runs batches until the queue has been
// empty for the linger time, or the committer is closed.
func (c *Committer[T, R]) lead() {
	var idle *time.Timer
	yielded := false
	last := 0 // the size of this leader's last batch
	for {
		c.mu.Lock()
		n := min(len(c.queue), c.cfg.MaxBatch)
		if n > 0 && n < c.cfg.MaxBatch && c.cfg.Gather && !yielded && (c.leaders-c.idle > 1 || last > 1) {
			// Another batch is running, or this leader's last one held
			// several items: let runnable callers queue first.
			c.mu.Unlock()
			yielded = true
			runtime.Gosched()
			continue
		}
		yielded = false
		if n > 0 {
			b := &Batch[T, R]{items: make([]*item[T, R], n)}
			copy(b.items, c.queue)
			for _, it := range b.items {
				it.state.Store(stateTaken) // from queued, under c.mu
			}
			clear(c.queue[:n])
			c.queue = c.queue[n:]
			c.mu.Unlock()
			last = n
			c.runBatch(b)
			continue
		}
		closed := c.closed
		c.mu.Unlock()
		if c.cfg.Idle != nil {
			c.cfg.Idle()
		}
		if !closed && c.cfg.Linger > 0 {
			if idle == nil {
				idle = time.NewTimer(c.cfg.Linger)
				defer idle.Stop()
			} else {
				idle.Reset(c.cfg.Linger)
			}
			c.mu.Lock()
			c.idle++
			c.mu.Unlock()
			woken := false
			select {
			case <-c.wake:
				woken = true
			case <-idle.C:
			case <-c.closing:
			}
			c.mu.Lock()
			c.idle--
			pending := len(c.queue) > 0
			c.mu.Unlock()
			if woken || pending {
				continue
			}
		}
		if c.cfg.Exit != nil {
			c.cfg.Exit()
		}
		c.mu.Lock()
		if len(c.queue) > 0 {
			c.mu.Unlock()
			continue
		}
		c.leaders--
		if c.leaders == 0 && c.exited != nil {
			close(c.exited)
		}
		c.mu.Unlock()
		return
	}
}

// runBatch runs one batch and answers its items.
func (c *Committer[T, R]) runBatch(b *Batch[T, R]) {
	var zero R
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.ctx = ctx
	// The batch's context ends once every caller has given up.
	var waiting atomic.Int64
	waiting.Store(int64(len(b.items)))
	gaveUp := func() {
		if waiting.Add(-1) == 0 {
			cancel()
		}
	}
	stops := make([]func() bool, len(b.items))
	for i, it := range b.items {
		stops[i] = context.AfterFunc(it.ctx, gaveUp)
	}
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()

	err := c.runSafely(b)
	if b.started > 0 {
		c.batches.Add(1)
		c.items.Add(int64(b.started))
		if b.started == 1 {
			c.single.Add(1)
		}
	}
	for _, it := range b.items {
		switch {
		case err != nil:
			it.settle(zero, err, stateStarted, stateTaken)
		case it.set:
			it.settle(it.setRes, it.setErr, stateStarted)
		case it.ctx.Err() != nil:
			it.settle(zero, it.ctx.Err(), stateTaken)
		default:
			if !it.settle(zero, errNoResult, stateStarted) {
				it.settle(zero, errNotRun, stateTaken)
			}
		}
	}
}

// runSafely calls the batch function; if it panics, the batch's items are
// answered with an error before the panic goes on.
func (c *Committer[T, R]) runSafely(b *Batch[T, R]) (err error) {
	defer func() {
		if p := recover(); p != nil {
			var zero R
			perr := fmt.Errorf("groupcommit: batch function panicked: %v", p)
			for _, it := range b.items {
				it.settle(zero, perr, stateStarted, stateTaken)
			}
			panic(p)
		}
	}()
	return c.run(b)
}

// Batch is the set of items one call of the batch function runs.
type Batch[T, R any] struct {
	ctx     context.Context
	items   []*item[T, R]
	started int // items started (leader only)
}

// Context returns a context that ends when every caller of the batch's
// items has given up (their contexts ended): nobody waits for the batch
// any more. It carries no caller's values or deadline.
func (b *Batch[T, R]) Context() context.Context { return b.ctx }

// Len returns the number of items in the batch, started or not.
func (b *Batch[T, R]) Len() int { return len(b.items) }

// Input returns item i's input.
func (b *Batch[T, R]) Input(i int) T { return b.items[i].in }

// Start marks item i as running, unless its caller has given up, and
// reports whether the batch function is to run it. An item whose
// caller's context has ended is not started (Do returns the context's
// error). Start reports true again for an item already started and not
// answered, so a batch function may run its items again after a retry of
// the whole batch.
func (b *Batch[T, R]) Start(i int) bool {
	it := b.items[i]
	switch it.state.Load() {
	case stateStarted:
		return true
	case stateTaken:
		if err := it.ctx.Err(); err != nil {
			var zero R
			it.settle(zero, err, stateTaken)
			return false
		}
		if it.state.CompareAndSwap(stateTaken, stateStarted) {
			b.started++
			return true
		}
	}
	return false
}

// Distinct starts b's items (see Batch.Start) and returns, in batch order,
// those that are the first of their key: key(Input(i)) tells an item's
// key. Every later item of a key is Set to alone: it runs alone once the
// batch has answered, as if after it. later holds the keys that have such
// items (nil when none has); a first item of one of them that the batch leaves to run alone
// must run before the batch answers, so that its key's later items run
// after it.
func Distinct[T, R any, K comparable](b *Batch[T, R], key func(T) K, alone R) (first []int, later map[K]bool) {
	seen := make(map[K]struct{}, b.Len())
	for i := range b.Len() {
		if !b.Start(i) {
			continue
		}
		k := key(b.Input(i))
		if _, dup := seen[k]; dup {
			if later == nil {
				later = make(map[K]bool)
			}
			later[k] = true
			b.Set(i, alone, nil)
			continue
		}
		seen[k] = struct{}{}
		first = append(first, i)
	}
	return first, later
}

// Set records item i's result, delivered when the batch function returns
// nil. A later Set replaces an earlier one (after a retry of the batch).
func (b *Batch[T, R]) Set(i int, res R, err error) {
	it := b.items[i]
	it.setRes, it.setErr, it.set = res, err, true
}

// Answer answers started item i now with (res, err), whatever the batch
// function returns later; the item leaves the batch (Start reports false
// for it from then on). A batch function uses it for an item that failed
// and that it will not run again.
func (b *Batch[T, R]) Answer(i int, res R, err error) {
	b.items[i].settle(res, err, stateStarted)
}
