package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/internal/groupcommit"
)

// Group commit. Every write of a Store (Claim, Extend, Complete, Release,
// Delete, Sweep) is an item of the Store's committer
// (internal/groupcommit), which does the queueing, the batching and the
// callers' cancellation. Its leader goroutine, the writer, runs each
// batch through runBatch: one BEGIN IMMEDIATE transaction, on a
// connection the writer holds while it has work, with the writes'
// statements prepared on it once.

// maxBatch caps the writes committed by one transaction, so that one
// batch (and the wait of its first caller) stays short.
const maxBatch = 64

// writerLinger is how long an idle writer waits for the next write before
// it exits. Keeping it alive between batches under load saves starting a
// goroutine, and growing its stack to the SQLite engine's depth, for every
// batch.
const writerLinger = time.Second

// writeOp is one caller's write: fn runs it in a batch's transaction.
type writeOp struct {
	name string // the store operation, for errors
	fn   func(b *batchTx) error
}

// writeCommitter is the committer of a Store's writes. A write's result
// is its error alone.
type writeCommitter = groupcommit.Committer[*writeOp, struct{}]

// committerConfig is the configuration of the committer of s's writes,
// whose idle writer waits linger for more. One batch runs at a time
// (SQLite has one writer), so the hooks and runBatch share s.wc without a
// lock. An idle writer keeps its connection (see holdWhileIdle); an
// exiting one, including the idle writer that Close ends at once, gives
// it back.
func (s *Store) committerConfig(linger time.Duration) groupcommit.Config {
	return groupcommit.Config{
		MaxBatch: maxBatch,
		Linger:   linger,
		// Under load (the last batch held more than one write), the
		// writer yields once before it takes the next batch, so that
		// handlers already runnable queue their writes first: batches of
		// 5-6 writes became 9-10 in the gateway at 32 clients, a fifth of
		// them single instead of half (docs/performance.md).
		Gather: true,
		Idle: func() {
			if !s.holdWhileIdle() {
				s.releaseWriterConn(false)
			}
		},
		Exit: func() { s.releaseWriterConn(false) },
	}
}

// write runs fn as one of this Store's writes and returns its outcome.
//
// Group commit: the writer takes every queued write, up to maxBatch, and
// runs them in one transaction on one connection. A write whose statement
// fails (an SQL error, not a fenced statement that matched no row) is
// answered with its error, and the batch is rolled back and run again
// without it: the others never see its partial effects. Every caller is
// answered only after the COMMIT that holds its write; if that COMMIT
// fails, every write of the batch fails with an error matching
// retrysafe.ErrStoreUnavailable. There is no timer to gather writes: the
// writer takes what queued while the previous batch committed (after one
// scheduler yield when that batch held more than one write), and a lone
// write commits at once.
//
// fn runs on the writer's goroutine, must do its work through b only, and
// may run more than once (the whole batch is run again on SQLITE_BUSY, or
// without a write that failed), so it must set its results afresh on each
// run. fn must change nothing when it returns an error other than through
// a failed statement (a fenced write that matched no row returns
// retrysafe.ErrLeaseLost having changed nothing).
//
// Context: a write whose ctx ends before its statement starts (queued, or
// in a batch still waiting for the write lock) is dropped and the call
// returns the context's error. Once its statement has started it runs to
// the end of the batch, and the call returns its outcome (nil or the
// statement's error) even if ctx has ended meanwhile: the write may have
// committed, and the caller must not be told otherwise. After Close,
// write fails with an error matching retrysafe.ErrStoreUnavailable.
func (s *Store) write(ctx context.Context, name string, fn func(b *batchTx) error) error {
	_, err := s.committer.Do(ctx, &writeOp{name: name, fn: fn})
	if errors.Is(err, groupcommit.ErrClosed) {
		return retrysafe.Unavailable(name, errors.New("sqlite: store closed"))
	}
	// Not ctx: a write that started answers its own outcome.
	return s.translate(context.Background(), name, err)
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

// writeQueries are the statements batches run.
func (s *Store) writeQueries() []string {
	return []string{s.q.claimNew, s.q.claim, s.q.get, s.q.extend, s.q.complete, s.q.release, s.q.del, s.q.sweep, s.q.retire}
}

// writerConn is a connection the writer holds while it has work, with
// every statement of a batch prepared on it once. Keeping one connection
// also keeps its page cache valid from batch to batch (only the writer
// changes the pages it caches).
type writerConn struct {
	conn *sql.Conn
	tx   batchTx
}

// writerConn returns the writer's connection, taking one from the pool and
// preparing the batches' statements on it if it has none.
func (s *Store) writerConn(ctx context.Context) (*writerConn, error) {
	if s.wc != nil {
		return s.wc, nil
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	wc := &writerConn{conn: conn, tx: batchTx{stmts: make(map[string]*sql.Stmt)}}
	for _, q := range append(s.writeQueries(), qBegin, qCommit, qRollback) {
		st, err := conn.PrepareContext(ctx, q)
		if err != nil {
			wc.close(false)
			return nil, err
		}
		wc.tx.stmts[q] = st
	}
	s.wc = wc
	return wc, nil
}

// releaseWriterConn gives the writer's connection back to the pool (or,
// if bad, has the pool discard it).
func (s *Store) releaseWriterConn(bad bool) {
	if wc := s.wc; wc != nil {
		s.wc = nil
		wc.close(bad)
	}
}

func (wc *writerConn) close(bad bool) {
	for _, st := range wc.tx.stmts {
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

// errRerun ends an attempt at a batch that is to run again at once,
// without a write that failed.
var errRerun = errors.New("sqlite: batch to run again without a failed write")

// runBatch is the committer's batch function: it commits b's writes in one
// transaction, retrying the whole transaction on SQLITE_BUSY/SQLITE_LOCKED
// for up to BusyTimeout (during that wait, callers whose write has not
// started may still give up). An error it returns (a failed COMMIT, say)
// answers every write of b not answered yet.
func (s *Store) runBatch(b *groupcommit.Batch[*writeOp, struct{}]) error {
	deadline := time.Now().Add(s.cfg.BusyTimeout)
	backoff := time.Millisecond
	for {
		err := s.commitBatch(b)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, errRerun):
			continue // without the write that failed, already answered
		case !isBusy(err) || time.Now().After(deadline):
			return err
		}
		// Full jitter, as in retry; a batch whose callers all gave up
		// ends at its next attempt.
		t := time.NewTimer(time.Duration(rand.Int64N(int64(backoff))) + time.Millisecond)
		select {
		case <-t.C:
		case <-b.Context().Done():
			t.Stop()
		}
		backoff = min(2*backoff, 50*time.Millisecond)
	}
}

// commitBatch is one attempt at b's transaction. It returns nil when the
// transaction committed (the writes' results are set) or nothing was left
// to run; errRerun when a write failed, was answered, and the others are
// to run again without it; otherwise it rolls back and returns the error
// that ended the attempt.
func (s *Store) commitBatch(b *groupcommit.Batch[*writeOp, struct{}]) error {
	if b.Context().Err() != nil {
		// Every caller gave up before its write started: a batch
		// nobody waits for costs no transaction.
		return nil
	}
	ctx := context.Background() // a write that started runs to the end
	wc, err := s.writerConn(ctx)
	if err != nil {
		return err
	}
	tx := &wc.tx
	abort := func(err error) error {
		if _, rerr := tx.stmt(qRollback).Exec(); rollbackFailed(rerr) {
			s.releaseWriterConn(true) // in an unknown state
		}
		return err
	}
	if _, err := tx.stmt(qBegin).Exec(); err != nil {
		return abort(err)
	}
	// Writes start only after BEGIN IMMEDIATE: while the batch waits for
	// the lock, their callers may give up.
	started := 0
	for i := range b.Len() {
		if !b.Start(i) {
			continue
		}
		started++
		err := b.Input(i).fn(tx)
		if err == nil || errors.Is(err, retrysafe.ErrLeaseLost) {
			// A fenced write that matched no row changed nothing.
			b.Set(i, struct{}{}, err)
			continue
		}
		if isBusy(err) {
			return abort(err)
		}
		// The statement failed. SQLite undid the statement (or, after
		// some errors, the whole transaction); rather than tell which,
		// the batch is rolled back and run again without this write,
		// which is answered with its error now: nothing of it committed.
		abort(nil)
		b.Answer(i, struct{}{}, err)
		return errRerun
	}
	if started == 0 {
		return abort(nil) // every caller gave up while the batch began
	}
	if _, err := tx.stmt(qCommit).Exec(); err != nil {
		return abort(err)
	}
	return nil
}

// BatchStats returns how many write transactions (batches) this Store's
// writer has committed and how many calls they held. It implements
// [admin.Batcher]. Calls that write nothing (a replay, a Get) are not
// batched and not counted; the writer never leaves a call undecided, so
// Alone is zero.
func (s *Store) BatchStats() admin.BatchStats {
	st := s.committer.Stats()
	return admin.BatchStats{Batches: st.Batches, Items: st.Items, Single: st.Single}
}
