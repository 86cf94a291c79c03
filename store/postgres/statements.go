package postgres

import "strings"

// recordColumns are the columns every statement that returns a record
// selects, in the order scanRecord reads them.
const recordColumns = "scope, key, fingerprint, state, token, attempt, created_at_ns, updated_at_ns, lease_until_ns, expires_at_ns, status, header, body"

// statements holds the SQL of every operation, with the table name filled in
// once by buildStatements.
type statements struct {
	claim, get, extend, complete, release      string
	subscribe                                  string
	sweep, list, listScope, delete, listNoBody string
	listScopeNoBody                            string
}

// claimable is true for a stored row r that a claim with fingerprint $3 at
// time $5 may take: a completed record that has expired, or a processing
// record whose lease has run out and whose fingerprint is the claimant's.
const claimable = `((r.state = 'completed' AND r.expires_at_ns <= $5) OR ` +
	`(r.state = 'processing' AND r.lease_until_ns <= $5 AND r.fingerprint = $3))`

// claimSQL is the whole claim: one statement, one round trip, for every state
// the key can be in. Parameters: $1 scope, $2 key, $3 fingerprint, $4 token,
// $5 now, $6 lease until (nanoseconds).
//
// cur reads the row in the statement's snapshot. If that row exists and is
// not claimable (a live completed record, a live lease, or a different
// fingerprint), ins inserts nothing, takes no lock and writes nothing, and
// the statement returns cur: a replay or a conflict is a plain read. The
// answer is exact as of the snapshot, which is this claim's linearisation
// point.
//
// Otherwise (absent or claimable in the snapshot) ins runs INSERT … ON
// CONFLICT DO UPDATE. PostgreSQL then works on the latest committed version
// of the row, not on the snapshot, and locks it: a row inserted, taken over
// or completed by a concurrent claim that committed after our snapshot is
// seen here. The DO UPDATE has no WHERE clause, so RETURNING always yields
// the row: when the locked row is still claimable every column is replaced
// (a takeover), otherwise every column is set to its own value (a no-op
// write that only exists so the current row comes back in this same round
// trip; it happens only when a concurrent claimant won the race). Whether we
// won is then simply whether the returned token is ours.
//
// A takeover of an expired lease keeps created_at_ns and adds one to the
// attempt; replacing an expired completed record starts afresh (attempt 1,
// created now), as an absent key would.
var claimSQL = `WITH cur AS (
    SELECT ` + recordColumns + ` FROM {{table}} WHERE scope = $1 AND key = $2
), ins AS (
    INSERT INTO {{table}} AS r (scope, key, fingerprint, state, token, attempt, created_at_ns, updated_at_ns, lease_until_ns)
    SELECT $1::text, $2::text, $3::text, 'processing', $4::text, 1, $5::bigint, $5::bigint, $6::bigint
    WHERE NOT EXISTS (SELECT 1 FROM cur AS r WHERE NOT ` + claimable + `)
    ON CONFLICT (scope, key) DO UPDATE SET
        fingerprint    = CASE WHEN {{take}} THEN excluded.fingerprint ELSE r.fingerprint END,
        state          = CASE WHEN {{take}} THEN 'processing' ELSE r.state END,
        token          = CASE WHEN {{take}} THEN excluded.token ELSE r.token END,
        attempt        = CASE WHEN NOT {{take}} THEN r.attempt WHEN r.state = 'processing' THEN r.attempt + 1 ELSE 1 END,
        created_at_ns  = CASE WHEN {{take}} AND r.state = 'completed' THEN excluded.created_at_ns ELSE r.created_at_ns END,
        updated_at_ns  = CASE WHEN {{take}} THEN excluded.updated_at_ns ELSE r.updated_at_ns END,
        lease_until_ns = CASE WHEN {{take}} THEN excluded.lease_until_ns ELSE r.lease_until_ns END,
        expires_at_ns  = CASE WHEN {{take}} THEN NULL ELSE r.expires_at_ns END,
        status         = CASE WHEN {{take}} THEN NULL ELSE r.status END,
        header         = CASE WHEN {{take}} THEN NULL ELSE r.header END,
        body           = CASE WHEN {{take}} THEN NULL ELSE r.body END
    RETURNING ` + recordColumns + `
)
SELECT ` + recordColumns + `, token = $4 FROM ins
UNION ALL
SELECT ` + recordColumns + `, false FROM cur WHERE NOT EXISTS (SELECT 1 FROM ins)`

func buildStatements(table string) statements {
	r := strings.NewReplacer("{{table}}", table, "{{take}}", claimable)
	sel := "SELECT " + recordColumns + " FROM " + table
	listCols := strings.Replace(recordColumns, ", body", ", NULL::bytea", 1)
	return statements{
		claim: r.Replace(claimSQL),
		get:   sel + " WHERE scope = $1 AND key = $2",
		// $1 scope, $2 key, $3 token, $4 lease until, $5 now.
		extend: "UPDATE " + table + " SET lease_until_ns = $4, updated_at_ns = $5" +
			" WHERE scope = $1 AND key = $2 AND token = $3 AND state = 'processing'",
		// $1 scope, $2 key, $3 token, $4 now, $5 expires, $6 status,
		// $7 header, $8 body, $9 channel, $10 payload. It returns one row
		// if the record was completed. The notification is sent only if
		// someone subscribed to the record (the notify flag), and (like
		// every NOTIFY) only when the transaction commits.
		complete: "WITH u AS (UPDATE " + table + " SET state = 'completed', updated_at_ns = $4, expires_at_ns = $5," +
			" status = $6, header = $7, body = $8" +
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
		// $1 after scope, $2 after key, $3 limit [, $4 scope].
		list:            sel + " WHERE (scope, key) > ($1, $2) ORDER BY scope, key LIMIT $3",
		listScope:       sel + " WHERE (scope, key) > ($1, $2) AND scope = $4 ORDER BY scope, key LIMIT $3",
		listNoBody:      "SELECT " + listCols + " FROM " + table + " WHERE (scope, key) > ($1, $2) ORDER BY scope, key LIMIT $3",
		listScopeNoBody: "SELECT " + listCols + " FROM " + table + " WHERE (scope, key) > ($1, $2) AND scope = $4 ORDER BY scope, key LIMIT $3",
		// $1 scope, $2 key, $3 channel, $4 payload.
		delete: "WITH d AS (DELETE FROM " + table + " WHERE scope = $1 AND key = $2 RETURNING notify)" +
			" SELECT CASE WHEN notify THEN pg_notify($3, $4)::text END FROM d",
	}
}
