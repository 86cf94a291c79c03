package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/retrysafe/retrysafe"
)

// isBusy reports whether err is SQLITE_BUSY or SQLITE_LOCKED (any extended
// code): another connection holds a lock we need; retrying may succeed.
func isBusy(err error) bool {
	var se *msqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		return true
	}
	return false
}

// translate maps an error from database/sql or the driver to the store's
// contract: nil stays nil; the core's answers (ErrLeaseLost, ErrNotFound)
// pass through; a done context yields the context's error (wrapped with
// op); anything else wraps retrysafe.ErrStoreUnavailable.
func (s *Store) translate(ctx context.Context, op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, retrysafe.ErrLeaseLost), errors.Is(err, retrysafe.ErrNotFound):
		return err
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case ctx.Err() != nil:
		// The driver reports an interrupted statement in its own words;
		// the caller needs to see that its context ended.
		return fmt.Errorf("sqlite: %s: %w", op, ctx.Err())
	}
	return retrysafe.Unavailable(op, err)
}

// retry runs fn until it succeeds, fails with an error other than
// SQLITE_BUSY/SQLITE_LOCKED, the context ends, or BusyTimeout has passed
// since the first attempt. Busy errors thus become a bounded wait, not a
// spurious failure, even on a caller's *sql.DB without busy_timeout.
func (s *Store) retry(ctx context.Context, op string, fn func() error) error {
	deadline := time.Now().Add(s.cfg.BusyTimeout)
	backoff := time.Millisecond
	for {
		err := fn()
		if err == nil || !isBusy(err) || ctx.Err() != nil || time.Now().After(deadline) {
			return s.translate(ctx, op, err)
		}
		// Full jitter, so that contending writers spread out.
		d := time.Duration(rand.Int64N(int64(backoff))) + time.Millisecond
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return s.translate(ctx, op, ctx.Err())
		case <-t.C:
		}
		backoff = min(2*backoff, 50*time.Millisecond)
	}
}

// immediate runs fn inside a BEGIN IMMEDIATE transaction on a dedicated
// connection: the write lock is taken at BEGIN, so no statement inside can
// fail on a lock upgrade, and whatever fn reads stays true until COMMIT.
// It works whatever _txlock the caller's *sql.DB was opened with.
func (s *Store) immediate(ctx context.Context, fn func(conn *sql.Conn) error) error {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		// A BEGIN that took effect before the context ended must not
		// go back to the pool as an open transaction.
		rollback(conn)
		return err
	}
	if err := fn(conn); err != nil {
		rollback(conn)
		return err
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		rollback(conn)
		return err
	}
	return nil
}

// rollback ends the transaction open on conn, if any. If that fails the
// connection is discarded rather than returned to the pool in an unknown
// state.
func rollback(conn *sql.Conn) {
	if _, err := conn.ExecContext(context.Background(), "ROLLBACK"); rollbackFailed(err) {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	}
}

// rollbackFailed reports whether err, from a ROLLBACK, leaves the
// connection in an unknown state: any error but SQLite's answer that no
// transaction was open (one that ended on its own, such as after a failed
// BEGIN or an error that rolled the whole transaction back).
func rollbackFailed(err error) bool {
	return err != nil && !strings.Contains(err.Error(), "no transaction is active")
}
