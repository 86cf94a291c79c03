package mysql

import (
	"fmt"
	"regexp"
)

const (
	// DefaultTable is the records table used when Config.Table is empty.
	DefaultTable = "retrysafe_records"
	// DefaultSweepBatch is the number of records one Sweep statement
	// deletes when SweepParams.BatchSize is zero.
	DefaultSweepBatch = 1000
	// DefaultMaxBatch is the batch size cap used when Config.MaxBatch is
	// zero.
	DefaultMaxBatch = 64
	// DefaultBatchesInFlight is the number of batches run at once when
	// Config.BatchesInFlight is zero.
	DefaultBatchesInFlight = 2

	// maxIdentifier is MySQL's limit on table, index and routine names.
	maxIdentifier = 64
	// maxTable leaves room for the names derived from the table's
	// ("<table>_migrations", "<table>_expires_at_idx", …).
	maxTable = maxIdentifier - len("_processing_lease_idx")

	// Column sizes (migrations/0001_schema.sql). Longer values are refused
	// with an error before any statement runs.
	maxScope       = 1024
	maxKey         = 1024
	maxFingerprint = 1024
	maxToken       = 255
	maxRoute       = 1024
)

// identifierRE accepts the table names Config takes: a letter or
// underscore, then letters, digits and underscores. Names are quoted with
// backticks when used.
var identifierRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Config configures a [Store]. The zero value is valid and means the
// documented defaults.
type Config struct {
	// Table is the records table, in the connection's database. Default
	// "retrysafe_records"; at most 43 bytes. Migrate also creates the table
	// "<table>_migrations" (applied schema versions), the stored procedure
	// "<table>_claim", and the indexes "<table>_expires_at_idx" and
	// "<table>_processing_lease_idx". Several tables may share a database;
	// each is migrated on its own.
	Table string
	// MaxBatch caps the Claims, Completes, Releases and Extends that one
	// batch (one transaction, one COMMIT) carries
	// when concurrent callers of the Store are grouped. Default 64; 1
	// sends every operation on its own, with its single statement.
	MaxBatch int
	// BatchesInFlight is the number of batches the Store runs at once,
	// each on a connection of its own. Default 2. A batch is sent as soon
	// as a batch slot is free, so a lone operation never waits; the more
	// slots, the smaller the batches. While another batch runs, a free
	// slot first lets the callers that are already runnable queue (one
	// scheduler yield, no timer).
	BatchesInFlight int
}

// withDefaults returns c with empty fields set to their defaults, or an
// error if a name is not valid.
func (c Config) withDefaults() (Config, error) {
	if c.Table == "" {
		c.Table = DefaultTable
	}
	if !identifierRE.MatchString(c.Table) || len(c.Table) > maxTable {
		return c, fmt.Errorf("mysql: invalid table name %q: want letters, digits and underscores, not starting with a digit, at most %d bytes", c.Table, maxTable)
	}
	if c.MaxBatch < 0 {
		return c, fmt.Errorf("mysql: MaxBatch %d is negative", c.MaxBatch)
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = DefaultMaxBatch
	}
	if c.BatchesInFlight < 0 {
		return c, fmt.Errorf("mysql: BatchesInFlight %d is negative", c.BatchesInFlight)
	}
	if c.BatchesInFlight == 0 {
		c.BatchesInFlight = DefaultBatchesInFlight
	}
	return c, nil
}

// quote quotes an identifier that Config has validated.
func quote(name string) string { return "`" + name + "`" }

// checkSizes returns an error when a value does not fit its column.
func checkSizes(op, scope, key, fingerprint, token, route string) error {
	for _, f := range []struct {
		name  string
		value string
		max   int
	}{{"scope", scope, maxScope}, {"key", key, maxKey}, {"fingerprint", fingerprint, maxFingerprint}, {"token", token, maxToken}, {"route", route, maxRoute}} {
		if len(f.value) > f.max {
			return fmt.Errorf("mysql: %s: %s is %d bytes, longer than the %d the table holds", op, f.name, len(f.value), f.max)
		}
	}
	return nil
}
