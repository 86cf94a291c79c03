package postgres

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	// DefaultSchema is the schema used when Config.Schema is empty.
	DefaultSchema = "public"
	// DefaultTable is the table used when Config.Table is empty.
	DefaultTable = "retrysafe_records"
	// DefaultMaxBatch is the batch size cap used when Config.MaxBatch is
	// zero.
	DefaultMaxBatch = 64
	// DefaultBatchesInFlight is the number of concurrent batch statements
	// used when Config.BatchesInFlight is zero.
	DefaultBatchesInFlight = 2
	// DefaultNotifyPollInterval is how often a Store that cannot LISTEN
	// (PoolMode "transaction" without NotifyConnString) reads the records
	// its subscribers wait for, when Config.NotifyPollInterval is zero.
	DefaultNotifyPollInterval = 100 * time.Millisecond

	// migrationsTable holds the applied migration versions of every
	// retrysafe table in a schema. Config.Table may not take this name.
	migrationsTable = "retrysafe_migrations"

	// maxIdentifier is PostgreSQL's identifier limit in bytes (NAMEDATALEN-1).
	maxIdentifier = 63
	// maxTable leaves room for the names derived from the table's
	// ("<table>_expires_at_idx", "<table>_claim") within maxIdentifier.
	maxTable = maxIdentifier - len("_expires_at_idx")
)

// Pool modes ([Config.PoolMode]): what stands between the store's pool and
// PostgreSQL. docs/postgres.md describes each topology.
const (
	// PoolModeDirect: the pool connects to PostgreSQL itself (the zero
	// value).
	PoolModeDirect = ""
	// PoolModeSession: a pooler such as PgBouncer in session mode (a
	// client connection keeps one server session). Everything works as
	// with PoolModeDirect; [Open] checks the server's isolation level
	// instead of sending it as a startup parameter, which PgBouncer
	// rejects.
	PoolModeSession = "session"
	// PoolModeTransaction: a pooler such as PgBouncer in transaction mode
	// (a server session per transaction; consecutive statements of one
	// client may run on different sessions). The store then keeps no
	// state in a session: statements run without named prepared
	// statements (the pool must not use pgx's QueryExecModeCacheStatement;
	// [Open] picks QueryExecModeCacheDescribe), Migrate holds only a
	// transaction-level advisory lock, and Subscribe, which needs a
	// session for LISTEN, uses the direct connection
	// [Config.NotifyConnString] names or else polls.
	PoolModeTransaction = "transaction"
	// poolModeStatement is PgBouncer's statement mode, which the store
	// refuses: it allows no multi-statement transaction (Migrate,
	// CompleteTx).
	poolModeStatement = "statement"
)

// identifierRE accepts the identifiers Config takes: a letter or underscore,
// then letters, digits and underscores. Names are quoted when used, so
// upper-case letters are kept as written.
var identifierRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Config configures a [Store]. The zero value is valid and means the
// documented defaults.
type Config struct {
	// Schema holds the records table and the migrations table. Default
	// "public". Migrate creates it when it is missing.
	Schema string
	// Table is the records table. Default "retrysafe_records"; at most 48
	// bytes. Migrate also creates the index "<table>_expires_at_idx" and
	// the functions "<table>_claim" and "<table>_batch" beside it. Several tables may share one
	// schema; each is migrated on its own.
	Table string
	// NotifyChannel is the LISTEN/NOTIFY channel on which Complete, Release
	// and Delete announce changes. Default: "<schema>.<table>", or
	// "retrysafe_" plus a hash of it when that is longer than 63 bytes.
	// Stores that share a table must use the same channel.
	NotifyChannel string
	// MaxBatch caps the Claims, Completes, Releases and Extends that one
	// statement (one transaction) carries when concurrent callers of the
	// Store are grouped. Default 64; 1 sends every operation on its own.
	MaxBatch int
	// BatchesInFlight is the number of batch statements the Store runs at
	// once, each on a connection of its own. Default 2. A batch is sent as
	// soon as a batch slot is free, so a lone operation never waits; the
	// more slots, the smaller the batches. While another batch runs, a
	// free slot first lets the callers that are already runnable queue
	// (one scheduler yield, no timer), so that the callers one batch
	// answered go on in one next batch rather than one of them alone.
	BatchesInFlight int

	// PoolMode says what stands between the pool and PostgreSQL:
	// [PoolModeDirect] (""), [PoolModeSession] or [PoolModeTransaction].
	// Statement pooling is not supported. The URL parameter
	// retrysafe_pool_mode sets it for [Open].
	PoolMode string
	// NotifyConnString is the connection string of the dedicated LISTEN
	// connection of [Store.Subscribe]: a postgres:// URL or keyword/value
	// string as pgx.ParseConfig takes. It must reach a PostgreSQL session
	// of its own (PostgreSQL directly, or a pooler in session mode).
	// Default: the pool's own connection settings, except with
	// PoolMode "transaction", where a LISTEN through the pooler would be
	// lost and Subscribe polls instead. The URL parameter
	// retrysafe_notify_url sets it for [Open].
	NotifyConnString string
	// NotifyPollInterval is how often Subscribe reads the records being
	// waited for when it polls (PoolMode "transaction" without
	// NotifyConnString): one statement per interval for all of a Store's
	// subscriptions, none while there are none. Default 100ms. The URL
	// parameter retrysafe_notify_poll (a Go duration) sets it for [Open].
	NotifyPollInterval time.Duration
}

// polls reports whether Subscribe polls instead of listening.
func (c Config) polls() bool {
	return c.PoolMode == PoolModeTransaction && c.NotifyConnString == ""
}

// withDefaults returns c with empty fields set to their defaults, or an
// error if a name is not a valid identifier.
func (c Config) withDefaults() (Config, error) {
	if c.Schema == "" {
		c.Schema = DefaultSchema
	}
	if c.Table == "" {
		c.Table = DefaultTable
	}
	if err := checkIdentifier("schema", c.Schema); err != nil {
		return c, err
	}
	if err := checkIdentifier("table", c.Table); err != nil {
		return c, err
	}
	if len(c.Table) > maxTable {
		return c, fmt.Errorf("postgres: table name %q is longer than %d bytes", c.Table, maxTable)
	}
	if c.Table == migrationsTable {
		return c, fmt.Errorf("postgres: table name %q is reserved for the migrations table", c.Table)
	}
	if c.MaxBatch < 0 {
		return c, fmt.Errorf("postgres: MaxBatch %d is negative", c.MaxBatch)
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = DefaultMaxBatch
	}
	if c.BatchesInFlight < 0 {
		return c, fmt.Errorf("postgres: BatchesInFlight %d is negative", c.BatchesInFlight)
	}
	if c.BatchesInFlight == 0 {
		c.BatchesInFlight = DefaultBatchesInFlight
	}
	switch c.PoolMode {
	case PoolModeDirect, PoolModeSession, PoolModeTransaction:
	case poolModeStatement:
		return c, fmt.Errorf("postgres: pool mode %q is not supported: statement pooling allows no transactions, which Migrate and CompleteTx need; use transaction pooling (docs/postgres.md)", c.PoolMode)
	default:
		return c, fmt.Errorf("postgres: unknown pool mode %q: want %q, %q or empty (PostgreSQL directly)", c.PoolMode, PoolModeSession, PoolModeTransaction)
	}
	if c.NotifyPollInterval < 0 {
		return c, fmt.Errorf("postgres: NotifyPollInterval %s is negative", c.NotifyPollInterval)
	}
	if c.NotifyPollInterval == 0 {
		c.NotifyPollInterval = DefaultNotifyPollInterval
	}
	if c.NotifyChannel == "" {
		c.NotifyChannel = c.Schema + "." + c.Table
		if len(c.NotifyChannel) > maxIdentifier {
			sum := sha256.Sum256([]byte(c.NotifyChannel))
			c.NotifyChannel = "retrysafe_" + hex.EncodeToString(sum[:16])
		}
	}
	if len(c.NotifyChannel) > maxIdentifier {
		return c, fmt.Errorf("postgres: notify channel %q is longer than %d bytes", c.NotifyChannel, maxIdentifier)
	}
	return c, nil
}

func checkIdentifier(what, name string) error {
	if len(name) > maxIdentifier || !identifierRE.MatchString(name) {
		return fmt.Errorf("postgres: invalid %s name %q: want letters, digits and underscores, not starting with a digit, at most %d bytes", what, name, maxIdentifier)
	}
	return nil
}

// quoted returns the schema-qualified, quoted name of table in schema.
func quoted(schema, table string) string {
	return pgx.Identifier{schema, table}.Sanitize()
}
