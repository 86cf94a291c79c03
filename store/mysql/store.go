package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	driver "github.com/go-sql-driver/mysql"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/internal/groupcommit"
)

// Store is a [retrysafe.Store] on MySQL 8 or MariaDB 10.11 (InnoDB). It
// also implements [admin.Pinger], [admin.Sweeper],
// [retrysafe.Notifier] (in-process only) and [admin.Admin]. A Store is
// safe for concurrent use, and any number of Stores in any number of
// processes may share one table: correctness comes from InnoDB's row locks
// and primary key alone.
type Store struct {
	db    *sql.DB
	ownDB bool
	cfg   Config
	q     queries
	subs  subscribers

	stmtMu sync.Mutex
	stmts  map[string]*sql.Stmt // prepared on first use, by query text
	closed bool

	deadlocks atomic.Int64 // claims and sweep batches run again after a deadlock

	// committer groups concurrent Claims, Completes, Releases and
	// Extends into batches (batch.go).
	committer *groupcommit.Committer[*batchOp, opResult]
	alone     atomic.Int64 // operations batches left alone (BatchStats)
	// reads groups the plain reads of concurrent Claims (claim.go).
	reads *groupcommit.Committer[scopeKey, *retrysafe.Record]
}

// Compile-time checks of the interfaces Store implements.
var (
	_ retrysafe.Store    = (*Store)(nil)
	_ admin.Pinger       = (*Store)(nil)
	_ admin.Sweeper      = (*Store)(nil)
	_ retrysafe.Notifier = (*Store)(nil)
	_ admin.Admin        = (*Store)(nil)
	_ io.Closer          = (*Store)(nil)
	_ admin.Batcher      = (*Store)(nil)
)

// New returns a Store that runs its statements on db, a *sql.DB of the
// github.com/go-sql-driver/mysql driver (any DSN options). The caller keeps
// ownership of db ([Store.Close] does not close it) and runs
// [Store.Migrate] before first use.
//
// The store prepares its statements (one round trip per call afterwards)
// and works whatever the DSN says about interpolateParams,
// clientFoundRows or multiStatements. Its connections must run in
// autocommit mode (the server's default; do not set autocommit=0 in the
// DSN): each statement outside the claim procedure and a batch's
// transaction commits on its own. Give db enough idle connections
// (SetMaxIdleConns) for the concurrency you expect: database/sql closes
// connections beyond the idle limit, and a new connection prepares every
// statement again.
func New(db *sql.DB, cfg Config) (*Store, error) {
	if db == nil {
		return nil, errors.New("mysql: nil *sql.DB")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Store{db: db, cfg: cfg, q: buildQueries(cfg.Table), stmts: make(map[string]*sql.Stmt)}
	s.committer = groupcommit.New(groupcommit.Config{MaxBatch: cfg.MaxBatch, MaxInFlight: cfg.BatchesInFlight, Gather: true}, s.runBatch)
	s.reads = groupcommit.New(groupcommit.Config{MaxBatch: cfg.MaxBatch, MaxInFlight: cfg.BatchesInFlight, Gather: true}, s.runReads)
	return s, nil
}

// Connection pool of a Store from [Open].
const (
	openMaxConns    = 32
	openMaxIdleTime = 5 * time.Minute
	openDialTimeout = 5 * time.Second
)

// Open connects to the database that url names, runs [Store.Migrate], and
// returns a Store that owns its *sql.DB: [Store.Close] closes it. url is
// either a mysql:// URL (see [ParseURL]) or a DSN of go-sql-driver/mysql
// ("user:password@tcp(host:3306)/db?param=value"). Config.Table is taken
// from the URL's retrysafe_table parameter when it is empty; a parameter
// that disagrees with a non-empty Config.Table is an error.
//
// The pool holds up to 32 connections, all kept idle for five minutes, and
// dials with a 5 second timeout unless the URL sets timeout.
func Open(ctx context.Context, url string, cfg Config) (*Store, error) {
	dc, table, err := parse(url)
	if err != nil {
		return nil, err
	}
	if table != "" {
		if cfg.Table != "" && cfg.Table != table {
			return nil, fmt.Errorf("mysql: URL parameter %s=%q disagrees with Config.Table %q", URLParamTable, table, cfg.Table)
		}
		cfg.Table = table
	}
	connector, err := driver.NewConnector(dc)
	if err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(openMaxConns)
	db.SetMaxIdleConns(openMaxConns)
	db.SetConnMaxIdleTime(openMaxIdleTime)
	s, err := New(db, cfg)
	if err != nil {
		db.Close()
		return nil, err
	}
	s.ownDB = true
	if err := s.Migrate(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// DB returns the database the store runs on, for example to begin the
// transaction passed to [Store.CompleteTx].
func (s *Store) DB() *sql.DB { return s.db }

// Config returns the store's configuration with defaults filled in.
func (s *Store) Config() Config { return s.cfg }

// Close releases the store's prepared statements, ends every subscription
// after a last wake-up and, if the store was made by [Open], closes its
// database. Later calls fail with an error wrapping
// [retrysafe.ErrStoreUnavailable].
func (s *Store) Close() error {
	s.committer.Close()
	s.reads.Close()
	s.subs.Close()
	s.stmtMu.Lock()
	s.closed = true
	var errs []error
	for q, st := range s.stmts {
		errs = append(errs, st.Close())
		delete(s.stmts, q)
	}
	s.stmtMu.Unlock()
	if s.ownDB {
		errs = append(errs, s.db.Close())
	}
	return errors.Join(errs...)
}

// Ping checks that the database answers. It implements [admin.Pinger].
func (s *Store) Ping(ctx context.Context) error {
	if err := s.open(); err != nil {
		return s.wrap(ctx, "ping", err)
	}
	return s.wrap(ctx, "ping", s.db.PingContext(ctx))
}

var errClosed = errors.New("mysql: store closed")

func (s *Store) open() error {
	s.stmtMu.Lock()
	defer s.stmtMu.Unlock()
	if s.closed {
		return errClosed
	}
	return nil
}

// stmt returns query prepared on the store's database, preparing it on
// first use (lazily: the table may not exist before Migrate). database/sql
// prepares it again on each connection as needed.
func (s *Store) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	s.stmtMu.Lock()
	defer s.stmtMu.Unlock()
	if s.closed {
		return nil, errClosed
	}
	if st, ok := s.stmts[query]; ok {
		return st, nil
	}
	st, err := s.db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	s.stmts[query] = st
	return st, nil
}

// exec runs a prepared statement and returns the number of rows it
// affected.
func (s *Store) exec(ctx context.Context, query string, args ...any) (int64, error) {
	st, err := s.stmt(ctx, query)
	if err != nil {
		return 0, err
	}
	res, err := st.ExecContext(ctx, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// MySQL error numbers the store treats specially.
const (
	erLockDeadlock = 1213 // ER_LOCK_DEADLOCK: the transaction was rolled back
	erNoSuchTable  = 1146 // ER_NO_SUCH_TABLE
	erDupEntry     = 1062 // ER_DUP_ENTRY: a duplicate key
)

// isDuplicateKey reports whether err is a duplicate key (ER_DUP_ENTRY).
func isDuplicateKey(err error) bool {
	var me *driver.MySQLError
	return errors.As(err, &me) && me.Number == erDupEntry
}

// isDeadlock reports whether err is InnoDB's deadlock error, after which
// the whole transaction has been rolled back and may run again.
func isDeadlock(err error) bool {
	var me *driver.MySQLError
	return errors.As(err, &me) && me.Number == erLockDeadlock
}

// Deadlock retries: a claim that InnoDB chose as a deadlock victim was
// rolled back entirely and runs again, up to this many times.
const deadlockRetries = 10

// retryDeadlock runs fn again while it fails with a deadlock, with a short
// jittered pause, at most deadlockRetries times.
func (s *Store) retryDeadlock(ctx context.Context, fn func() error) error {
	for i := 0; ; i++ {
		err := fn()
		if err == nil || !isDeadlock(err) || i == deadlockRetries || ctx.Err() != nil {
			return err
		}
		s.deadlocks.Add(1)
		t := time.NewTimer(time.Duration(rand.Int64N(int64(time.Millisecond)<<min(i, 4))) + 100*time.Microsecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// wrap translates a driver error from operation op: the core's answers
// (ErrLeaseLost, ErrNotFound) pass through; context errors stay context
// errors (if ctx is done, whatever broke the call is reported as the
// context's error); anything else wraps [retrysafe.ErrStoreUnavailable].
func (s *Store) wrap(ctx context.Context, op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, retrysafe.ErrLeaseLost), errors.Is(err, retrysafe.ErrNotFound):
		return err
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case ctx.Err() != nil:
		return fmt.Errorf("mysql: %s: %w (%v)", op, ctx.Err(), err)
	}
	return retrysafe.Unavailable(op, err)
}
