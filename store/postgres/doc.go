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
// lacks, records them in "<schema>".retrysafe_migrations, and then creates
// or replaces the store's two PL/pgSQL functions, the claim and the batch,
// which are all in one file: functions.sql. It runs in one transaction
// under a transaction-level advisory lock, so concurrent Migrate calls from
// several processes are safe.
//
// v0.1.0 starts the schema afresh at migrations/0001_schema.sql. A table
// migrated by a pre-release build (which recorded other migrations) is
// refused by Migrate with an error saying so: drop it (or point the store
// at a new schema or table) and migrate again.
//
// # One round trip per call, one commit per batch
//
// Claim, Complete, Release and Extend from concurrent callers of one Store
// are grouped (group commit, through internal/groupcommit): every operation
// queued while a batch runs goes into the next batch, which is one call of
// the PL/pgSQL function "<table>_batch" (functions.sql): one transaction,
// one commit and one round trip for up to [Config.MaxBatch] operations. No batch waits for a timer: a
// lone operation is sent at once, with its own single statement, so a
// single caller pays one round trip per call, as before. Up to
// [Config.BatchesInFlight] batches run at once, each on its own connection.
// Each caller gets exactly its own answer (claimed, the existing record,
// fenced with [retrysafe.ErrLeaseLost]); [Store.BatchStats] counts batches,
// operations, batches of one and operations run alone.
//
// The batch function runs one set-based statement per kind of operation
// the batch holds (claims, completions, releases, extensions), and only
// those; the keys of one batch are distinct (a second operation on a key
// of the batch runs alone once the batch has committed, so operations of
// one key behave as if run one after another). A claim reads the row
// first: a replay or a conflict writes nothing and takes no lock. A claim
// of an absent key inserts (ON CONFLICT DO NOTHING, in key order); a
// takeover (an expired record or lease) is answered "alone", as is a claim
// of a key a concurrent claim inserted. The fenced operations lock their
// row with FOR UPDATE SKIP LOCKED, so a batch never waits for a row
// another transaction holds (say an uncommitted CompleteTx): such an
// operation is answered "alone". An operation answered alone is run by its
// caller with the single statement of before (which waits for the lock,
// bounded by its context). If PostgreSQL rolls the batch back with an
// error (a failing trigger, a deadlock), every operation of it runs alone,
// so one failing operation never fails its neighbours. If the batch's
// connection breaks or its backend is terminated, the outcome is unknown
// and every operation of the batch fails with
// [retrysafe.ErrStoreUnavailable].
//
// The single statements are unchanged: Claim alone calls the function
// "<table>_claim" (functions.sql), which reads the row
// and, if it may not be claimed, returns it, and otherwise runs INSERT … ON
// CONFLICT (scope, key) DO UPDATE, whose CASE expressions take the row over
// or rewrite it unchanged; RETURNING always yields the current row, and the
// claim won when its token is the caller's. There is no retry loop and no
// SERIALIZABLE transaction; statements must run at READ COMMITTED
// (PostgreSQL's default). Extend, Complete and Release alone are one
// statement each, fenced by the owner token and state = 'processing'.
//
// Cancellation: an operation whose context ends while it is queued is
// dropped and returns the context's error. Once its batch has been sent it
// returns the batch's real outcome, even if its context ended meanwhile;
// the batch's statement is cancelled only when every caller of the batch
// has given up. [Store.Close] fails queued operations and waits for the
// batches in flight.
//
// [Store.CompleteTx] runs the completion in the caller's pgx.Tx (never
// batched), so a handler's business rows and the stored response commit or
// roll back together; [Store.CheckpointTx] does the same for a checkpoint.
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
// [admin.DefaultProcessingRetention], 7 days): attempts whose outcome
// is unknown, which would otherwise stay forever. A partial index on
// lease_until_ns of processing rows finds them.
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
// Behind PgBouncer, say what it does with [Config.PoolMode] or the URL
// parameter retrysafe_pool_mode: "transaction" (transaction pooling) or
// "session"; statement pooling is refused. In transaction mode the store
// keeps nothing in a server session: [Open] makes pgx use unnamed
// statements (QueryExecModeCacheDescribe) and [New] refuses a pool with
// named prepared statements; Open checks that the server's sessions
// default to READ COMMITTED instead of sending it as a startup parameter
// (PgBouncer rejects those); Migrate holds only a transaction-level
// advisory lock; and Subscribe, since LISTEN needs a session of its own,
// listens on the direct connection that [Config.NotifyConnString]
// (retrysafe_notify_url) names, or else polls the waited-for records every
// [Config.NotifyPollInterval]. docs/postgres.md says what holds in each
// topology.
package postgres
