// Package mysql is a [retrysafe.Store] on MySQL 8 or MariaDB 10.11 (InnoDB),
// built on github.com/go-sql-driver/mysql through database/sql.
//
// Several gateway or service instances pointed at one database share their
// idempotency records safely: every guarantee comes from InnoDB's primary
// key and row locks, never from locks inside a process.
//
// # Setting up
//
// [New] builds a Store on the caller's *sql.DB; run [Store.Migrate] once
// (at deploy time, or with `retrysafe migrate`) before use. [Open] connects
// from a mysql:// URL (see [ParseURL]) or a driver DSN, migrates, and closes
// its *sql.DB on [Store.Close]:
//
//	mysql://app:secret@db:3306/app?tls=true&retrysafe_table=idem
//
// Migrate creates the table (Config.Table, default "retrysafe_records")
// and its indexes from embedded numbered migrations
// (migrations/NNNN_name.sql), records them in "<table>_migrations", and
// creates the stored procedure "<table>_claim" from procedures.sql. It
// does so under a named lock (GET_LOCK), so concurrent
// Migrate calls from several processes are safe.
//
// v0.1.0 starts the schema afresh at migrations/0001_schema.sql. A table
// migrated by a pre-release build (which recorded other migrations) is
// refused by Migrate with an error saying so: drop it, its migrations
// table and its procedure (or use another Config.Table) and migrate again.
//
// # Round trips and group commit
//
// Claim first reads the record with one plain primary-key SELECT: a
// replay or a conflict is answered from it, one read that writes and
// locks nothing. The reads of concurrent Claims are grouped as their
// writes are: a lone read is sent at once, reads sent while others run
// share one SELECT of all their keys. Get is the same SELECT, alone. Statements are prepared once per
// connection, whatever the DSN says about interpolateParams.
//
// Claims that get past the read, Completes, Releases and Extends are
// group-committed (internal/groupcommit): a lone operation is sent at
// once with its single statement (an INSERT for a claim of a key the read
// found absent, else a CALL of the claim procedure; one fenced UPDATE or
// DELETE); operations sent while a batch runs go together into one
// transaction with one COMMIT: a few plain statements, each for
// all the batch's operations of one kind (batch.go; a batch of claims
// only is one INSERT, a transaction of its own). Every caller is answered
// only after the COMMIT that holds its operation. A second operation on a
// key of a batch, a claim of a key that has a record (a takeover), and a
// fenced operation whose row another transaction holds run alone, with
// their single statement, after the batch; a batch whose statement the
// server refuses is rolled back whole and every operation runs alone, so
// that one that fails fails alone. [Config] MaxBatch and BatchesInFlight
// tune it; [Store.BatchStats] counts it. Extend, Complete and Release are
// fenced by the owner token and state 'processing' in a batch as alone.
//
// [Store.CompleteTx] runs the completion in the caller's *sql.Tx, so a
// handler's business rows and the stored response commit or roll back
// together; [Store.CheckpointTx] does the same for a checkpoint.
//
// # Times and bytes
//
// Times are stored as Unix nanoseconds in BIGINT columns, so the times
// callers pass in params.Now come back exactly; expiry is decided by
// params.Now, never by the server's clock. Scope, key, fingerprint, token,
// headers and body are binary columns (VARBINARY, BLOB): every byte is
// kept, keys compare byte by byte (case and trailing spaces count), and
// Admin.List orders by bytes. Scope, key and route may be up to 1024
// bytes, the fingerprint 1024 and the token 255; bodies up to the server's
// max_allowed_packet.
//
// # Notifications
//
// MySQL has no LISTEN/NOTIFY. [Store.Subscribe] signals changes made
// through the same Store value only; waiters in other processes rely on the
// engine's fallback poll.
//
// # Sweeping
//
// Expired records read as absent whether or not they are deleted.
// [Store.Sweep] reclaims their space in batches and retires processing
// records whose lease ran out more than SweepParams.ProcessingRetention
// ago.
//
// # Errors
//
// Driver errors (connection refused, a killed connection, a lock wait
// timeout) are returned wrapping [retrysafe.ErrStoreUnavailable]; a done
// context is returned as the context's error. A claim chosen as a deadlock
// victim is rolled back whole by InnoDB and retried.
//
// # Durability and replication
//
// A claim or a completion is as durable as the server's commit:
// innodb_flush_log_at_trx_commit=1 (and sync_binlog=1 with the binary log
// on) is needed for an acknowledged record to survive a crash of the
// server. With asynchronous replication a failover can lose the last
// acknowledged records, so a retry at the new primary may run the
// operation again. docs/mysql.md in the repository has the details.
package mysql
