// Package sqlite is the embedded, durable default [retrysafe.Store]: one
// SQLite file, no server, no cgo (it uses the pure-Go driver
// modernc.org/sqlite through database/sql).
//
// Use [Open] for a file the store manages (WAL, synchronous=FULL, busy
// timeout, migrations run on open), or [New] on your own *sql.DB, for
// example the one that holds your business tables, so that [Store.CompleteTx]
// can commit an operation's business write and its completion in one
// transaction, and [Store.CheckpointTx] a step's business write and the
// checkpoint that records it.
//
// # Schema
//
// One table (Config.Table, default "retrysafe_records") keyed by
// (scope, idem_key), created by embedded numbered migrations
// (migrations/NNNN_*.sql, starting afresh at 0001_schema.sql in v0.1.0)
// recorded in Config.Table+"_migrations". Times are integer Unix
// nanoseconds and come back in UTC; headers are BLOBs in a length-prefixed
// binary encoding that keeps every byte; bodies are BLOBs. A database
// migrated by a pre-release build (which recorded other migrations) is
// refused by Migrate with an error saying so: recreate it.
//
// # Atomicity and fencing
//
// Claim inserts a new key with INSERT … ON CONFLICT DO NOTHING; when the
// key exists, it reads the record that blocked the insert (a replay, a
// request in flight, a mismatch), and only a record that may be taken over
// goes on to a single INSERT … ON CONFLICT DO UPDATE … WHERE … RETURNING
// statement, whose WHERE decides. All of it runs in one transaction, under
// the write lock. Extend,
// Complete and Release are single UPDATE/DELETE statements matching scope,
// key, owner token and state 'processing', and report
// [retrysafe.ErrLeaseLost] when they match no row. Nothing is ever checked
// and then written outside SQLite's write lock.
//
// # Concurrency
//
// A Store is safe for many goroutines, and several processes (or several
// *sql.DB) may use one file. With WAL, readers (Get, List) never wait for
// the writer.
//
// SQLite allows one writer at a time, and with synchronous=FULL each
// commit waits for a sync of the write-ahead log (milliseconds on many
// disks). A Store therefore group-commits its writes (the writing part of
// Claim, and Extend, Complete, Release, Delete, Sweep): callers queue
// them, and a writer goroutine (started when a write arrives, gone once
// none has come for a second) takes every queued write, up to 64, and runs
// them in one transaction on one connection, then commits once. There is
// no delay to gather writes: a lone write commits at once, and writes that
// arrive while a commit is in progress share the next one.
//
//   - Each write is still atomic under SQLite's write lock,
//     and the writes of a batch run one after the other in queue order, so
//     each sees the ones before it: two claims of one key in one batch
//     behave exactly as if serialised (one wins, the other sees its
//     record).
//   - A write whose statement fails is answered with its error, and the
//     batch is rolled back and run again without it, so none of it
//     commits and the rest of the batch goes on.
//   - Every caller is answered only after the COMMIT that holds its write
//     has succeeded. If the COMMIT fails, every write of the batch fails
//     with an error matching [retrysafe.ErrStoreUnavailable], and none of
//     them took effect: nothing is reported done that is not durable.
//   - Context: a write whose context ends while it is queued is dropped, and
//     the call returns the context's error. Once its statement has started
//     it runs to the end of its batch, and the call returns its outcome
//     (success, or the statement's error) even if its context ended
//     meanwhile, because the write may have committed. That wait is one
//     batch, plus busy retries of it (below).
//   - [Store.Close] fails the writes still queued with an error matching
//     [retrysafe.ErrStoreUnavailable] (they change nothing), waits for the
//     batch in progress, and makes later writes fail the same way.
//
// Against other processes the store relies on busy_timeout. Busy and
// locked errors that still surface are retried with jittered backoff for
// up to Config.BusyTimeout (for a write, the whole batch transaction is
// retried), and only then returned as [retrysafe.ErrStoreUnavailable].
// While a batch waits for the lock, callers whose write has not started
// may still give up.
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
