// Package sqlite is the embedded, durable default [retrysafe.Store]: one
// SQLite file, no server, no cgo (it uses the pure-Go driver
// modernc.org/sqlite through database/sql).
//
// Use [Open] for a file the store manages (WAL, synchronous=FULL, busy
// timeout, migrations run on open), or [New] on your own *sql.DB, for
// example the one that holds your business tables, so that [Store.CompleteTx]
// can commit an operation's business write and its completion in one
// transaction.
//
// # Schema
//
// One table (Config.Table, default "retrysafe_records") keyed by
// (scope, idem_key), created by embedded numbered migrations
// (migrations/NNNN_*.sql) recorded in Config.Table+"_migrations". Times are
// integer Unix nanoseconds and come back in UTC; headers are JSON; bodies are
// BLOBs.
//
// # Atomicity and fencing
//
// Claim writes with a single INSERT … ON CONFLICT DO UPDATE … WHERE …
// RETURNING statement; a duplicate (replay, in-flight, mismatch) is answered
// by a plain read of the record that blocks it, without the write lock, and
// a read never leads to a write except through that statement. Extend,
// Complete and Release are single UPDATE/DELETE statements matching scope,
// key, owner token and state 'processing', and report
// [retrysafe.ErrLeaseLost] when they match no row. Nothing is ever checked
// and then written outside SQLite's write lock.
//
// # Concurrency
//
// A Store is safe for many goroutines, and several processes (or several
// *sql.DB) may use one file. SQLite allows one writer at a time: a Store
// queues its own writes in process (a one-slot semaphore that honours the
// context) and relies on busy_timeout against other processes. Busy and
// locked errors that still surface are retried with jittered backoff for up
// to Config.BusyTimeout, and only then returned as
// [retrysafe.ErrStoreUnavailable]. With WAL, readers (Get, List, duplicate
// claims) never wait for the writer.
//
// # Durability
//
// [Open] uses synchronous=FULL: every commit syncs the write-ahead log, so a
// claim or completion that returned survives a power loss. See [DSN].
//
// # Notifications
//
// [Store.Subscribe] is in-process only: it signals completions, releases
// and deletes made through the same Store. A waiter in another process, or
// one waiting on a record completed by [Store.CompleteTx], relies on the
// engine's fallback poll.
//
// # Errors
//
// Driver and I/O errors are wrapped with [retrysafe.Unavailable] (they match
// [retrysafe.ErrStoreUnavailable]); context cancellation and deadline
// errors are returned as the context's error.
package sqlite
