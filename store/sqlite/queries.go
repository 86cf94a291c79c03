package sqlite

import "strings"

// recordColumns are the columns scanRecord reads, in order.
const recordColumns = `scope, idem_key, fingerprint, state, token, attempt,
	created_at, updated_at, lease_until, expires_at, status, headers, body, route,
	abandoned, checkpoint_name, checkpoint_data, checkpoint_at`

// queries holds the store's SQL with the table name filled in.
type queries struct {
	claimNew, claim, get, extend, complete, release, sweep, del string
	retire                                                      string
	find, findNoBody                                            string
}

// selectColumns are recordColumns, with the body read as NULL unless
// withBodies (Admin's List, Find and Stats). A checkpoint's data is read
// either way: it is the owner's note, not a stored answer.
func selectColumns(withBodies bool) string {
	if withBodies {
		return recordColumns
	}
	return strings.Replace(recordColumns, "body", "NULL", 1)
}

// quoteIdent quotes an identifier already validated by Config (so that a
// valid name that is also an SQL keyword, such as "order", works).
func quoteIdent(name string) string { return `"` + name + `"` }

func newQueries(table string) queries {
	r := strings.NewReplacer("{{table}}", quoteIdent(table), "{{columns}}", recordColumns)
	return queries{
		// A new key: the insert alone, no RETURNING (SQLite buffers
		// RETURNING rows in an ephemeral table, which doubles the
		// statement's CPU). It changes nothing when the key exists.
		claimNew: r.Replace(`INSERT INTO {{table}} (
	scope, idem_key, fingerprint, state, token, attempt,
	created_at, updated_at, lease_until, expires_at, status, headers, body, route
) VALUES (?1, ?2, ?3, 'processing', ?4, 1, ?5, ?5, ?6, NULL, NULL, NULL, NULL, ?7)
ON CONFLICT (scope, idem_key) DO NOTHING`),

		// One atomic statement: insert, or take over the existing row
		// when it is completed and expired, or processing with an
		// expired lease and the same fingerprint (unless ?8, NoTakeover, is
		// set, or ?9, TakeoverToken, names another owner). The DO UPDATE's WHERE
		// leaves any other row untouched and RETURNING then yields no
		// row. A takeover keeps CreatedAt and the checkpoint, clears
		// abandoned and increments Attempt; an expired completed record is
		// replaced by a new one.
		claim: r.Replace(`INSERT INTO {{table}} (
	scope, idem_key, fingerprint, state, token, attempt,
	created_at, updated_at, lease_until, expires_at, status, headers, body, route
) VALUES (?1, ?2, ?3, 'processing', ?4, 1, ?5, ?5, ?6, NULL, NULL, NULL, NULL, ?7)
ON CONFLICT (scope, idem_key) DO UPDATE SET
	fingerprint = excluded.fingerprint,
	route       = excluded.route,
	state       = 'processing',
	token       = excluded.token,
	attempt     = CASE WHEN {{table}}.state = 'completed' THEN 1 ELSE {{table}}.attempt + 1 END,
	created_at  = CASE WHEN {{table}}.state = 'completed' THEN excluded.created_at ELSE {{table}}.created_at END,
	updated_at  = excluded.updated_at,
	lease_until = excluded.lease_until,
	expires_at  = NULL,
	status      = NULL,
	headers     = NULL,
	body        = NULL,
	abandoned   = 0,
	checkpoint_name = CASE WHEN {{table}}.state = 'completed' THEN NULL ELSE {{table}}.checkpoint_name END,
	checkpoint_data = CASE WHEN {{table}}.state = 'completed' THEN NULL ELSE {{table}}.checkpoint_data END,
	checkpoint_at   = CASE WHEN {{table}}.state = 'completed' THEN NULL ELSE {{table}}.checkpoint_at END
WHERE ({{table}}.state = 'completed' AND {{table}}.expires_at <= excluded.updated_at)
   OR ({{table}}.state = 'processing' AND {{table}}.lease_until <= excluded.updated_at
       AND {{table}}.fingerprint = excluded.fingerprint
       AND NOT ?8 AND (?9 = '' OR {{table}}.token = ?9))
RETURNING attempt, created_at`),

		get: r.Replace(`SELECT {{columns}} FROM {{table}} WHERE scope = ?1 AND idem_key = ?2`),

		// The fenced statements: one each, matching only the owner's
		// processing record.
		// ?6 Abandon (the lease stays as it is), ?7 the checkpoint's name
		// (NULL: no checkpoint, the stored one stays), ?8 its data.
		extend: r.Replace(`UPDATE {{table}} SET lease_until = CASE WHEN ?6 THEN lease_until ELSE ?4 END, updated_at = ?5,
	abandoned = abandoned OR ?6,
	checkpoint_name = coalesce(?7, checkpoint_name),
	checkpoint_data = CASE WHEN ?7 IS NULL THEN checkpoint_data ELSE ?8 END,
	checkpoint_at   = CASE WHEN ?7 IS NULL THEN checkpoint_at ELSE ?5 END
WHERE scope = ?1 AND idem_key = ?2 AND token = ?3 AND state = 'processing'`),
		complete: r.Replace(`UPDATE {{table}} SET state = 'completed', updated_at = ?4, expires_at = ?5,
	status = ?6, headers = ?7, body = ?8, abandoned = 0
WHERE scope = ?1 AND idem_key = ?2 AND token = ?3 AND state = 'processing'`),
		release: r.Replace(`DELETE FROM {{table}}
WHERE scope = ?1 AND idem_key = ?2 AND token = ?3 AND state = 'processing'`),

		sweep: r.Replace(`DELETE FROM {{table}} WHERE rowid IN (
	SELECT rowid FROM {{table}} WHERE state = 'completed' AND expires_at <= ?1 LIMIT ?2)`),
		// ?1 is Now - ProcessingRetention: processing records whose lease
		// ran out at least the retention ago. The condition is part of the
		// DELETE, so a record extended or taken over is kept.
		retire: r.Replace(`DELETE FROM {{table}} WHERE rowid IN (
	SELECT rowid FROM {{table}} WHERE state = 'processing' AND lease_until <= ?1 LIMIT ?2)`),

		del: r.Replace(`DELETE FROM {{table}} WHERE scope = ?1 AND idem_key = ?2`),

		// ?1 key, ?2 scope, ?3 whether ?2 selects one scope.
		find: r.Replace(`SELECT {{columns}} FROM {{table}}
WHERE idem_key = ?1 AND (NOT ?3 OR scope = ?2) ORDER BY scope`),
		findNoBody: r.Replace(`SELECT ` + selectColumns(false) + ` FROM {{table}}
WHERE idem_key = ?1 AND (NOT ?3 OR scope = ?2) ORDER BY scope`),
	}
}
