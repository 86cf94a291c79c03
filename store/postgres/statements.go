package postgres

import "strings"

// recordColumns are the columns every statement that returns a record
// selects, in the order scanRecord reads them.
const recordColumns = "scope, key, fingerprint, state, token, attempt, created_at_ns, updated_at_ns, lease_until_ns, expires_at_ns, status, header, body, route," +
	" abandoned, checkpoint_name, checkpoint_data, checkpoint_at_ns"

// statements holds the SQL of every operation, with the table name filled in
// once by buildStatements.
type statements struct {
	claim, get, extend, complete, release string
	batch                                 string
	subscribe                             string
	sweep, retire, delete                 string
	pollOne, pollMany                     string
}

// selectColumns are recordColumns, with the body read as NULL unless
// withBodies (Admin's List, Find and Stats). A checkpoint's data is read
// either way: it is the owner's note, not a stored answer.
func selectColumns(withBodies bool) string {
	if withBodies {
		return recordColumns
	}
	return strings.Replace(recordColumns, ", body", ", NULL::bytea", 1)
}

func buildStatements(table, claimFn, batchFn string) statements {
	sel := "SELECT " + recordColumns + " FROM " + table
	return statements{
		// $1 scope, $2 key, $3 fingerprint, $4 token, $5 now, $6 lease
		// until, $7 route, $8 no takeover, $9 takeover token: one
		// statement, one round trip, exactly one row.
		claim: "SELECT * FROM " + claimFn + "($1, $2, $3, $4, $5, $6, $7, $8, $9)",
		// One array per argument, one element per operation, and the
		// notify channel, then the routes and the rest; see functions.sql.
		batch: "SELECT * FROM " + batchFn + "($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)",
		get:   sel + " WHERE scope = $1 AND key = $2",
		// $1 scope, $2 key, $3 token, $4 lease until, $5 now, $6 abandon
		// (the lease stays as it is), $7 checkpoint name (NULL: none, the
		// stored one stays), $8 its data.
		extend: "UPDATE " + table + " SET lease_until_ns = CASE WHEN $6 THEN lease_until_ns ELSE $4 END, updated_at_ns = $5," +
			" abandoned = abandoned OR $6, checkpoint_name = coalesce($7, checkpoint_name)," +
			" checkpoint_data = CASE WHEN $7::text IS NULL THEN checkpoint_data ELSE $8 END," +
			" checkpoint_at_ns = CASE WHEN $7::text IS NULL THEN checkpoint_at_ns ELSE $5 END" +
			" WHERE scope = $1 AND key = $2 AND token = $3 AND state = 'processing'",
		// $1 scope, $2 key, $3 token, $4 now, $5 expires, $6 status,
		// $7 header, $8 body, $9 channel, $10 payload. It returns one row
		// if the record was completed. The notification is sent only if
		// someone subscribed to the record (the notify flag), and (like
		// every NOTIFY) only when the transaction commits.
		complete: "WITH u AS (UPDATE " + table + " SET state = 'completed', updated_at_ns = $4, expires_at_ns = $5," +
			" status = $6, header = $7, body = $8, abandoned = false" +
			" WHERE scope = $1 AND key = $2 AND token = $3 AND state = 'processing' RETURNING notify)" +
			" SELECT CASE WHEN notify THEN pg_notify($9, $10)::text END FROM u",
		// $1 scope, $2 key, $3 token, $4 channel, $5 payload.
		release: "WITH d AS (DELETE FROM " + table +
			" WHERE scope = $1 AND key = $2 AND token = $3 AND state = 'processing' RETURNING notify)" +
			" SELECT CASE WHEN notify THEN pg_notify($4, $5)::text END FROM d",
		// $1 scope, $2 key. Marks a processing record as waited for. The
		// UPDATE waits for a transaction that holds the row (a CompleteTx
		// not yet committed) and then finds it completed: nothing to flag.
		subscribe: "UPDATE " + table + " SET notify = true" +
			" WHERE scope = $1 AND key = $2 AND state = 'processing' AND NOT notify",
		// $1 now, $2 batch size. The inner SELECT walks the partial
		// index in expiry order and locks the batch, skipping rows another
		// transaction holds (a claim replacing an expired record) instead of
		// waiting; the DELETE then finds the locked rows by ctid (a TID
		// scan), so no batch rescans the rows earlier batches deleted.
		sweep: "DELETE FROM " + table + " WHERE ctid = ANY (ARRAY(SELECT ctid FROM " + table +
			" WHERE state = 'completed' AND expires_at_ns <= $1 ORDER BY expires_at_ns LIMIT $2 FOR UPDATE SKIP LOCKED))",
		// $1 now minus the processing retention, $2 batch size. The same
		// shape through the partial index on lease_until_ns of processing
		// rows: it retires abandoned records. FOR UPDATE rechecks the
		// condition on the newest version of each row it locks, so a row
		// extended or taken over since the statement began is kept, and a
		// row a running Extend or claim holds is skipped.
		retire: "DELETE FROM " + table + " WHERE ctid = ANY (ARRAY(SELECT ctid FROM " + table +
			" WHERE state = 'processing' AND lease_until_ns <= $1 ORDER BY lease_until_ns LIMIT $2 FOR UPDATE SKIP LOCKED))",
		// $1 scope, $2 key: the owner token of a processing record.
		pollOne: "SELECT token FROM " + table + " WHERE scope = $1 AND key = $2 AND state = 'processing'",
		// $1 scopes, $2 keys: for each record (by position, from 1) the
		// owner token if it is processing, else NULL (poll.go).
		pollMany: "SELECT s.i, r.token FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS s(scope, key, i)" +
			" LEFT JOIN " + table + " AS r ON r.scope = s.scope AND r.key = s.key AND r.state = 'processing'",
		// $1 scope, $2 key, $3 channel, $4 payload.
		delete: "WITH d AS (DELETE FROM " + table + " WHERE scope = $1 AND key = $2 RETURNING notify)" +
			" SELECT CASE WHEN notify THEN pg_notify($3, $4)::text END FROM d",
	}
}
