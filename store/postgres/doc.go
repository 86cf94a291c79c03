// Package postgres is a [retrysafe.Store] on PostgreSQL, built on pgx v5.
//
// Several gateway or service instances pointed at one database share their
// idempotency records safely: every guarantee comes from PostgreSQL's
// unique index and row locks, never from locks inside a process.
//
// # Setting up
//
// [New] builds a Store on the caller's *pgxpool.Pool; run [Store.Migrate]
// once (at deploy time, or with `retrysafe migrate`) before use. [Open]
// creates a pool from a URL, migrates, and closes the pool on
// [Store.Close]; the URL may carry retrysafe_schema and retrysafe_table
// query parameters, which are removed before connecting:
//
//	postgres://app@db:5432/app?sslmode=require&retrysafe_schema=idem&retrysafe_table=records
//
// [Config] names the schema (default "public") and table (default
// "retrysafe_records"). Migrate creates the schema if it is missing, applies
// the embedded numbered migrations (migrations/NNNN_name.sql) that the table
// lacks, and records them in "<schema>".retrysafe_migrations. It runs in one
// transaction under an advisory lock, so concurrent Migrate calls from
// several processes are safe.
//
// # One round trip per call
//
// Claim is one statement, whatever the key's state: it calls the
// PL/pgSQL function "<table>_claim" that Migrate creates. The function reads
// the row and, if it exists and may not be claimed, returns it: a replay or
// a conflict is a plain read. Otherwise it runs INSERT … ON CONFLICT (scope,
// key) DO UPDATE, whose CASE expressions take the row over (expired
// completed record, or expired lease with the same fingerprint) or rewrite
// it unchanged; RETURNING always yields the current row, and the claim won
// when its token is the caller's. A lost race therefore returns the
// winner's record in the same round trip. There is no retry loop and no
// SERIALIZABLE transaction; statements must run at READ COMMITTED
// (PostgreSQL's default). migrations/0003_claim_function.sql holds the
// function and the reasoning about snapshots and concurrent inserts. (An
// earlier version used one CTE statement with the same logic; the function
// answers replays faster, see docs/performance-postgres.md.)
//
// Extend, Complete and Release are one statement each, fenced by the owner
// token and state = 'processing'; zero rows affected means
// [retrysafe.ErrLeaseLost]. A new request therefore costs two round trips
// (claim, complete) and a replay one, the floor; BenchmarkRoundTrips
// counts them.
//
// [Store.CompleteTx] runs the completion in the caller's pgx.Tx, so a
// handler's business rows and the stored response commit or roll back
// together.
//
// # Times
//
// Times are stored as Unix nanoseconds in bigint columns (created_at_ns,
// updated_at_ns, lease_until_ns, expires_at_ns), so the times callers pass
// in params.Now come back exactly; timestamptz would keep only
// microseconds. Read them in SQL with to_timestamp(expires_at_ns / 1e9).
// Expiry is decided by params.Now, never by the database clock. Storable
// times run from 1677 to 2262.
//
// # Notifications
//
// [Store.Subscribe] ([retrysafe.Notifier]) uses LISTEN/NOTIFY on one
// dedicated connection per Store, reconnecting on failure; notifications
// are sent by Complete, Release and Delete for records someone subscribed
// to, with a hash of scope and key as payload. They are hints: waiters also
// poll as a fallback. See Subscribe for why only waited-for records are
// announced.
//
// # Sweeping
//
// Expired records read as absent whether or not they are deleted.
// [Store.Sweep] reclaims their space in batches (default 1000 rows per
// statement, each its own short transaction): a batch is locked with FOR
// UPDATE SKIP LOCKED through a partial index on expires_at_ns of completed
// rows, in expiry order, and deleted by ctid. It never waits for a row a
// claim holds and never locks the table. The same sweep then retires
// processing records whose lease ran out more than
// SweepParams.ProcessingRetention ago (default
// [retrysafe.DefaultProcessingRetention], 7 days): attempts whose outcome
// is unknown, which would otherwise stay forever. A partial index on
// lease_until_ns of processing rows (migration 0004) finds them.
//
// # Errors
//
// Errors from the driver (connection refused, connection killed, query
// failures) are returned wrapping [retrysafe.ErrStoreUnavailable] through
// [retrysafe.Unavailable]; a done context is returned as the context's
// error.
//
// # Connection poolers
//
// The store uses pgx's default statement cache (prepared statements). Behind
// PgBouncer in transaction mode, set the pool's
// ConnConfig.DefaultQueryExecMode to pgx.QueryExecModeExec or
// QueryExecModeCacheDescribe. LISTEN needs a session: point the pool at
// PostgreSQL directly, or accept that Subscribe then only works through the
// fallback poll.
package postgres
