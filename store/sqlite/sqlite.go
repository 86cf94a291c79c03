package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/internal/groupcommit"
)

// Compile-time interface guards.
var (
	_ retrysafe.Store    = (*Store)(nil)
	_ admin.Pinger       = (*Store)(nil)
	_ admin.Sweeper      = (*Store)(nil)
	_ retrysafe.Notifier = (*Store)(nil)
	_ admin.Admin        = (*Store)(nil)
)

// DefaultTable is the records table used when Config.Table is empty.
const DefaultTable = "retrysafe_records"

// DefaultBusyTimeout is used when Config.BusyTimeout is zero.
const DefaultBusyTimeout = 5 * time.Second

// DefaultSweepBatch is the number of records one Sweep statement deletes
// when SweepParams.BatchSize is zero. Each batch is one of the Store's
// writes, and the sweep queues its next batch only once the last has
// committed, so each group commit holds at most one of its batches: the
// batch size is what a sweep takes of the writer's time, and how long
// the claims and completions committed with a batch wait for it. A sweep of
// 1M expired records under 32 callers of new-key traffic raised their p99
// (against the p99 just before the sweep) 3.6–5.8× with batches of 1000,
// 1.6–3.3× with 100 (once 11×, on a loaded machine), and 0.96–1.25× with
// 25, which also kept 79–85 % of the traffic's rate (100: 23–56 %); the
// sweep took 44–60 s instead of 16–40 s (2026-12-02; docs/performance.md,
// "As the store grows").
const DefaultSweepBatch = 25

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Config configures a [Store]. The zero value is valid and means the
// documented defaults.
type Config struct {
	// Table is the records table, default [DefaultTable]. It must be an SQL
	// identifier ([A-Za-z_][A-Za-z0-9_]*). Migrate also creates
	// Table+"_migrations" (the schema version table) and an index named
	// Table+"_expires_at".
	Table string
	// BusyTimeout bounds how long an operation waits for a write lock held
	// by another connection or process (SQLITE_BUSY) before it fails with
	// retrysafe.ErrStoreUnavailable. Default [DefaultBusyTimeout]. Open sets
	// it as the connection's busy_timeout; the store also retries busy
	// errors itself within this bound, so it holds on a caller's *sql.DB
	// that has no busy_timeout.
	BusyTimeout time.Duration
	// Synchronous is SQLite's synchronous setting for connections opened
	// with [DSN] or [Open]: "FULL" (the default) syncs the write-ahead log
	// on every commit, so an acknowledged record survives power loss;
	// "NORMAL" survives a crash of the process but may lose the last
	// commits on power loss or an OS crash — a lost claim or completion
	// lets a retry run the operation again. Choose NORMAL only where that
	// risk is accepted (tests, caches of idempotent work).
	Synchronous string
}

func (c Config) withDefaults() (Config, error) {
	switch strings.ToUpper(c.Synchronous) {
	case "":
		c.Synchronous = "FULL"
	case "FULL", "NORMAL":
		c.Synchronous = strings.ToUpper(c.Synchronous)
	default:
		return c, fmt.Errorf("sqlite: Synchronous %q is not FULL or NORMAL", c.Synchronous)
	}
	if c.Table == "" {
		c.Table = DefaultTable
	}
	if !identifier.MatchString(c.Table) {
		return c, fmt.Errorf("sqlite: invalid table name %q: want an SQL identifier [A-Za-z_][A-Za-z0-9_]*", c.Table)
	}
	if c.BusyTimeout < 0 {
		return c, fmt.Errorf("sqlite: negative BusyTimeout %s", c.BusyTimeout)
	}
	if c.BusyTimeout == 0 {
		c.BusyTimeout = DefaultBusyTimeout
	}
	return c, nil
}

// Store is a [retrysafe.Store] on an SQLite database. It also implements
// [admin.Pinger], [admin.Sweeper], [retrysafe.Notifier] and
// [admin.Admin]. It is safe for concurrent use by many goroutines, and
// several processes may share one database file.
type Store struct {
	db     *sql.DB
	ownsDB bool
	cfg    Config
	q      queries

	// committer batches this Store's writes (Claim, Extend, Complete,
	// Release, Delete, Sweep) into group commits: see Store.write.
	// SQLite admits one writer at a time anyway; one transaction and one
	// WAL sync for many callers' writes is what makes the durable default
	// (synchronous=FULL) fast. Every decision is still made by a single
	// atomic statement under SQLite's write lock, and writers in other
	// processes (or other Stores) are handled by busy_timeout.
	committer *writeCommitter
	// wc is the connection the committer's leader (the writer) commits
	// on, kept from batch to batch while it has work. Only the batch
	// function and the committer's Idle and Exit hooks use it, one at a
	// time (one batch at a time, on one leader).
	wc *writerConn

	subs subscribers

	stmtMu sync.Mutex
	stmts  map[string]*sql.Stmt // prepared on first use, by query text
}

// DSN returns the data source name that [Open] uses for path: SQLite URI
// form with modernc.org/sqlite's parameters for WAL journal mode,
// synchronous=FULL, foreign keys, the busy timeout, and BEGIN IMMEDIATE for
// every transaction started with (*sql.DB).BeginTx. Use it to open your own
// *sql.DB for [New] with the same durability and locking behaviour.
//
// Durability: in WAL mode synchronous=FULL syncs the write-ahead log on
// every commit, so a completed record survives an operating system crash or
// power loss, not just a crash of the process. (synchronous=NORMAL would be
// faster but may lose the last commits on power loss; a lost completion
// means a retry runs the operation a second time, which is what this
// package exists to prevent.)
func DSN(path string, cfg Config) string {
	if cfg.BusyTimeout <= 0 {
		cfg.BusyTimeout = DefaultBusyTimeout
	}
	sync := "FULL"
	if strings.EqualFold(cfg.Synchronous, "NORMAL") {
		sync = "NORMAL"
	}
	q := url.Values{}
	q.Set("_busy_timeout", strconv.FormatInt(cfg.BusyTimeout.Milliseconds(), 10))
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", sync)
	q.Set("_foreign_keys", "1")
	q.Set("_txlock", "immediate")
	return "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
}

// Open opens (creating if needed) the SQLite database file at path (a file
// name, not a URI; ":memory:" is refused) with the settings of [DSN], runs [Store.Migrate], and returns a Store that owns the
// database: [Store.Close] closes it.
//
// Pool: at most max(8, 2+2*GOMAXPROCS) connections. Writes of one Store
// are group-committed by one writer (SQLite has a single writer, see the
// package documentation), so they use one connection at a time; WAL lets reads (Get,
// duplicate Claims, List) run beside them on the others. The headroom is
// for callers that run their own transactions on [Store.DB]: a transaction
// waiting for the write lock holds a connection while it waits, and must
// not starve the store's reads.
func Open(ctx context.Context, path string, cfg Config) (*Store, error) {
	if path == "" {
		return nil, errors.New("sqlite: empty database path")
	}
	if path == ":memory:" {
		// Each pooled connection would get its own empty database.
		return nil, errors.New("sqlite: :memory: is not supported; use a file (or store/memory)")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlite", DSN(path, cfg))
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	n := max(8, 2+2*runtime.GOMAXPROCS(0))
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	s := newStore(db, cfg)
	s.ownsDB = true
	if err := s.Migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// New returns a Store on the caller's database. The caller runs
// [Store.Migrate] (or its own migrations with the same schema) and closes
// db; [Store.Close] does not close it.
//
// Open db with [DSN], or at least with WAL journal mode and a busy timeout.
// Transactions passed to [Store.CompleteTx] should begin with BEGIN
// IMMEDIATE (DSN's _txlock=immediate does that for BeginTx), so that their
// first write never fails with SQLITE_BUSY on a lock upgrade. The Store's
// own batch transactions (see the package documentation) run an explicit
// BEGIN IMMEDIATE on one connection the writer holds while it has work, on
// any *sql.DB; a busy error retries the whole batch. On a db limited to
// fewer than four connections the writer gives its connection back as soon
// as it is idle.
func New(db *sql.DB, cfg Config) (*Store, error) {
	if db == nil {
		return nil, errors.New("sqlite: nil *sql.DB")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return newStore(db, cfg), nil
}

func newStore(db *sql.DB, cfg Config) *Store {
	s := &Store{
		db:    db,
		cfg:   cfg,
		q:     newQueries(cfg.Table),
		stmts: make(map[string]*sql.Stmt),
	}
	s.committer = groupcommit.New(s.committerConfig(writerLinger), s.runBatch)
	return s
}

// DB returns the database the Store uses, for example to begin the
// transaction passed to [Store.CompleteTx].
func (s *Store) DB() *sql.DB { return s.db }

// Close releases the Store's prepared statements and closes the database if
// the Store opened it with [Open]; a Store from [New] leaves the caller's
// database open. Close ends every subscription after a last wake-up.
// Writes queued for a batch fail (with an error wrapping
// [retrysafe.ErrStoreUnavailable]), a batch already running is waited
// for, the idle writer gives its connection back at once, and later
// writes (Claim, Extend, Complete, Release, Delete, Sweep) fail.
func (s *Store) Close() error {
	s.committer.Close()
	s.subs.Close()
	s.stmtMu.Lock()
	var errs []error
	for q, st := range s.stmts {
		errs = append(errs, st.Close())
		delete(s.stmts, q)
	}
	s.stmtMu.Unlock()
	if s.ownsDB {
		errs = append(errs, s.db.Close())
	}
	return errors.Join(errs...)
}

// stmt returns query prepared on the Store's database, preparing it on
// first use (lazily, because the table may not exist before Migrate).
// database/sql re-prepares it on each connection as needed; parsing the
// claim statement costs more than running it.
func (s *Store) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	s.stmtMu.Lock()
	defer s.stmtMu.Unlock()
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

// Ping checks that the database answers a query.
func (s *Store) Ping(ctx context.Context) error {
	var one int
	err := s.db.QueryRowContext(ctx, "SELECT 1").Scan(&one)
	return s.translate(ctx, "ping", err)
}
