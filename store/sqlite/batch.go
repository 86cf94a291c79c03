package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"

	"github.com/retrysafe/retrysafe"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// maxBatch caps the writes committed by one transaction, so that one
// batch (and the wait of its first caller) stays short.
const maxBatch = 64

// States of a writeOp. A queued op may be cancelled by its caller; a
// started one is answered with its outcome; a failed one has been answered
// with its statement's error and left its batch.
const (
	opQueued int32 = iota
	opStarted
	opCancelled
	opFailed
)

// writeOp is one caller's write waiting for, or running in, a batch.
type writeOp struct {
	ctx   context.Context // the caller's; only checked while queued
	name  string          // the store operation, for errors
	fn    func(b *batchTx) error
	state atomic.Int32

	result error         // fn's outcome in the current attempt
	err    error         // the answer, set before done is closed
	done   chan struct{} // closed once, by the writer
}

// live reports whether op is still wanted: not given up by its caller.
// An op whose context ended while queued is answered with the context's
// error here.
func (op *writeOp) live(s *Store) bool {
	switch op.state.Load() {
	case opStarted:
		return true // again, after a busy retry of the whole batch
	case opCancelled, opFailed:
		return false
	}
	if err := op.ctx.Err(); err != nil {
		if op.state.CompareAndSwap(opQueued, opCancelled) {
			op.answer(s.translate(op.ctx, op.name, err))
		}
		return false
	}
	return true
}

// start marks op as started, just before its statement runs, unless its
// caller gave up first. It reports whether op is to run.
func (op *writeOp) start(s *Store) bool {
	return op.live(s) && (op.state.Load() == opStarted || op.state.CompareAndSwap(opQueued, opStarted))
}

func (op *writeOp) answer(err error) {
	op.err = err
	close(op.done)
}

// errRerun ends an attempt at a batch that is to run again at once,
// without a write that failed.
var errRerun = errors.New("sqlite: batch to run again without a failed write")

// writer is a Store's group-commit state: the queue of writes and whether a
// writer goroutine is draining it.
type writer struct {
	mu      sync.Mutex
	queue   []*writeOp
	running bool          // a writer goroutine exists
	busy    bool          // it has taken a batch (tests wait on this)
	wake    chan struct{} // signals a running, idle writer; buffered 1

	closed bool          // Store.Close was called: the idle writer exits at once
	linger time.Duration // writerLinger, or a test's value

	// wc is the connection the writer goroutine commits on, kept from
	// batch to batch while it runs (used by the writer goroutine only;
	// handed over, as nil, under mu when a writer exits).
	wc *writerConn

	// Committed batches and the writes they held (tests check that
	// batches form).
	batches, ops atomic.Int64
}

// batchTx is the transaction of one batch: the statements it may run,
// prepared on the writer's connection.
type batchTx struct {
	stmts map[string]*sql.Stmt
}

// stmt returns query prepared on the batch's connection.
func (b *batchTx) stmt(query string) *sql.Stmt { return b.stmts[query] }

// Transaction control statements, prepared on the writer's connection with
// the others (modernc.org/sqlite parses BEGIN and COMMIT anew on every
// BeginTx and Commit). BEGIN IMMEDIATE takes the write lock at once, on any
// *sql.DB.
const (
	qBegin    = "BEGIN IMMEDIATE"
	qCommit   = "COMMIT"
	qRollback = "ROLLBACK"
)

// writerConn is a connection the writer goroutine holds while it has work,
// with every statement of a batch prepared on it once. Keeping one
// connection also keeps its page cache valid from batch to batch (only
// the writer changes the pages it caches).
type writerConn struct {
	conn  *sql.Conn
	stmts map[string]*sql.Stmt
}

// writerConn returns the writer's connection, taking one from the pool and
// preparing the batches' statements on it if it has none.
func (s *Store) writerConn(ctx context.Context) (*writerConn, error) {
	w := &s.writer
	if w.wc != nil {
		return w.wc, nil
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	wc := &writerConn{conn: conn, stmts: make(map[string]*sql.Stmt)}
	for _, q := range append(s.writeQueries(), qBegin, qCommit, qRollback) {
		st, err := conn.PrepareContext(ctx, q)
		if err != nil {
			wc.close(false)
			return nil, err
		}
		wc.stmts[q] = st
	}
	w.wc = wc
	return wc, nil
}

// releaseWriterConn gives the writer's connection back to the pool (or,
// if bad, has the pool discard it).
func (s *Store) releaseWriterConn(bad bool) {
	if wc := s.writer.wc; wc != nil {
		s.writer.wc = nil
		wc.close(bad)
	}
}

func (wc *writerConn) close(bad bool) {
	for _, st := range wc.stmts {
		_ = st.Close()
	}
	if bad {
		_ = wc.conn.Raw(func(any) error { return driver.ErrBadConn })
	}
	_ = wc.conn.Close()
}

// holdWhileIdle reports whether the writer keeps its connection while it
// waits for more writes: not on a pool of fewer than four connections,
// where other users of the *sql.DB would wait for it.
func (s *Store) holdWhileIdle() bool {
	n := s.db.Stats().MaxOpenConnections
	return n == 0 || n >= 4
}

// write queues fn as one of this Store's writes and waits for its answer.
//
// Group commit: a writer goroutine (started on demand, gone once no write
// has come for writerLinger) takes every queued write, up to maxBatch, and
// runs them in one transaction on one connection. A write whose statement
// fails (an SQL error, not a fenced statement that matched no row) is
// answered with its error, and the batch is rolled back and run again
// without it: the others never see its partial effects. Every caller is
// answered only after the COMMIT that holds its write; if that COMMIT
// fails, every write of the batch fails with an error matching
// retrysafe.ErrStoreUnavailable. There is no delay to gather writes: the
// writer takes what queued while the previous batch committed, and a lone
// write commits at once.
//
// fn runs on the writer's goroutine, must do its work through b only, and
// may run more than once (the whole batch is run again on SQLITE_BUSY, or
// without a write that failed), so it must set its results afresh on each
// run. fn must change nothing when it returns an error other than through
// a failed statement (a fenced write that matched no row returns
// retrysafe.ErrLeaseLost having changed nothing).
//
// Context: a write whose ctx ends while it is queued is dropped and the
// call returns the context's error. Once its statement has started it
// runs to the end of the batch, and the call returns its outcome (nil or
// the statement's error) even if ctx has ended meanwhile: the write may
// have committed, and the caller must not be told otherwise.
func (s *Store) write(ctx context.Context, name string, fn func(b *batchTx) error) error {
	if err := ctx.Err(); err != nil {
		return s.translate(ctx, name, err)
	}
	op := &writeOp{ctx: ctx, name: name, fn: fn, done: make(chan struct{})}
	w := &s.writer
	w.mu.Lock()
	w.queue = append(w.queue, op)
	spawn := !w.running
	w.running = true
	if w.wake == nil {
		w.wake = make(chan struct{}, 1)
	}
	wake := w.wake
	w.mu.Unlock()
	if spawn {
		go s.drain()
	} else {
		select {
		case wake <- struct{}{}:
		default: // already signalled
		}
	}
	select {
	case <-op.done:
		return op.err
	case <-ctx.Done():
		if op.state.CompareAndSwap(opQueued, opCancelled) {
			return s.translate(ctx, name, ctx.Err())
		}
		<-op.done // started: its outcome is the answer
		return op.err
	}
}

// writerLinger is how long an idle writer goroutine waits for the next
// write before it exits. Keeping it alive between batches under load saves
// starting a goroutine, and growing its stack to the SQLite engine's depth,
// for every batch.
const writerLinger = time.Second

// drain is the writer goroutine: it commits batches until no write has
// been queued for writerLinger.
func (s *Store) drain() {
	w := &s.writer
	linger := writerLinger
	w.mu.Lock()
	if w.linger > 0 {
		linger = w.linger
	}
	w.mu.Unlock()
	idle := time.NewTimer(linger)
	defer idle.Stop()
	for {
		w.mu.Lock()
		n := min(len(w.queue), maxBatch)
		w.busy = n > 0
		if n == 0 {
			wake, closed := w.wake, w.closed
			w.mu.Unlock()
			if closed || !s.holdWhileIdle() {
				s.releaseWriterConn(false)
			}
			wait := linger
			if closed {
				wait = 0 // exit now, unless a write is already waiting
			}
			idle.Reset(wait)
			select {
			case <-wake:
				continue
			case <-idle.C:
			}
			w.mu.Lock()
			if len(w.queue) > 0 {
				w.mu.Unlock()
				continue
			}
			// Give the connection up under the lock: once running is
			// false, a new writer goroutine may start and take one.
			wc := w.wc
			w.wc = nil
			w.running = false
			w.queue = nil
			w.mu.Unlock()
			if wc != nil {
				wc.close(false)
			}
			return
		}
		batch := make([]*writeOp, n)
		copy(batch, w.queue)
		clear(w.queue[:n])
		w.queue = w.queue[n:]
		w.mu.Unlock()
		s.runBatch(batch)
	}
}

// runBatch commits ops in one transaction and answers each of them,
// retrying the whole transaction on SQLITE_BUSY/SQLITE_LOCKED for up to
// BusyTimeout (during that wait, callers whose write has not started may
// still give up).
func (s *Store) runBatch(ops []*writeOp) {
	deadline := time.Now().Add(s.cfg.BusyTimeout)
	backoff := time.Millisecond
	for {
		err := s.commitBatch(ops)
		if err == nil {
			return
		}
		if errors.Is(err, errRerun) {
			continue // without the write that failed, already answered
		}
		if !isBusy(err) || time.Now().After(deadline) {
			s.failBatch(ops, err)
			return
		}
		// Full jitter, as in retry.
		time.Sleep(time.Duration(rand.Int64N(int64(backoff))) + time.Millisecond)
		backoff = min(2*backoff, 50*time.Millisecond)
	}
}

// failBatch answers every op whose caller is still waiting with err.
func (s *Store) failBatch(ops []*writeOp, err error) {
	for _, op := range ops {
		if op.state.CompareAndSwap(opQueued, opStarted) || op.state.Load() == opStarted {
			op.answer(s.translate(context.Background(), op.name, err))
		}
	}
}

// commitBatch is one attempt at ops' transaction. It answers the ops and
// returns nil when the transaction committed (or nothing was left to run);
// errRerun when a write failed, was answered, and the others are to run
// again without it; otherwise it rolls back, answers nothing, and returns
// the error that ended the attempt.
func (s *Store) commitBatch(ops []*writeOp) error {
	ctx := context.Background() // a write that started runs to the end
	var b *batchTx
	abort := func(err error) error {
		if _, rerr := b.stmt(qRollback).Exec(); rollbackFailed(rerr) {
			s.releaseWriterConn(true) // in an unknown state
		}
		return err
	}
	started := 0
	for _, op := range ops {
		if !op.live(s) {
			continue
		}
		if b == nil {
			// The connection is used once a write is to run, so a batch
			// whose callers all gave up costs nothing. Writes are marked
			// started only after BEGIN IMMEDIATE: while the batch waits
			// for the lock, their callers may give up.
			wc, err := s.writerConn(ctx)
			if err != nil {
				return err
			}
			b = &batchTx{stmts: wc.stmts}
			if _, err := b.stmt(qBegin).Exec(); err != nil {
				return abort(err)
			}
		}
		if !op.start(s) {
			continue
		}
		started++
		op.result = op.fn(b)
		if op.result == nil || errors.Is(op.result, retrysafe.ErrLeaseLost) {
			continue // a fenced write that matched no row changed nothing
		}
		if isBusy(op.result) {
			return abort(op.result)
		}
		// The statement failed. SQLite undid the statement (or, after
		// some errors, the whole transaction); rather than tell which,
		// the batch is rolled back and run again without this write,
		// which is answered with its error now: nothing of it committed.
		abort(nil)
		op.state.Store(opFailed)
		op.answer(s.translate(ctx, op.name, op.result))
		return errRerun
	}
	if started == 0 {
		if b != nil {
			abort(nil) // every caller gave up while the batch began
		}
		return nil
	}
	if _, err := b.stmt(qCommit).Exec(); err != nil {
		return abort(err)
	}
	s.writer.batches.Add(1)
	s.writer.ops.Add(int64(started))
	for _, op := range ops {
		if op.state.Load() == opStarted {
			op.answer(s.translate(ctx, op.name, op.result))
		}
	}
	return nil
}

// writeQueries are the statements batches run.
func (s *Store) writeQueries() []string {
	return []string{s.q.claim, s.q.get, s.q.extend, s.q.complete, s.q.release, s.q.del, s.q.sweep, s.q.retire}
}

// stop tells an idle writer goroutine to give back its connection and exit
// now rather than after writerLinger.
func (w *writer) stop() {
	w.mu.Lock()
	w.closed = true
	wake := w.wake
	w.mu.Unlock()
	if wake != nil {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
}
