package mysql

import "strings"

// queries holds the SQL of every operation, with the table's names filled
// in once by buildQueries.
type queries struct {
	table                                              string // quoted
	claim, insert, get, extend, complete, release, del string
	sweep, retire                                      string
	statsCounts, statsOldest, statsUnknown             string
}

func buildQueries(table string) queries {
	t := quote(table)
	sel := "SELECT " + recordColumns + " FROM " + t
	selNoBody := "SELECT " + selectColumns(false) + " FROM " + t
	return queries{
		table: t,
		// scope, key, fingerprint, token, now, lease until, route: the
		// claim procedure of procedures.sql.
		// no takeover, takeover token.
		claim: "CALL " + quote(table+"_claim") + "(?, ?, ?, ?, ?, ?, ?, ?, ?)",
		// scope, key, fingerprint, token, now, now, lease until, route: a
		// lone claim of a key that the plain read found absent (runOne),
		// the row a batch inserts for a claim (insertClaims).
		insert: "INSERT INTO " + t + " (scope, idem_key, fingerprint, state, token, attempt, created_at_ns, updated_at_ns, lease_until_ns, route)" +
			" VALUES (?, ?, ?, 'processing', ?, 1, ?, ?, ?, ?)",
		get: sel + " WHERE scope = ? AND idem_key = ?",
		// The fenced statements: each matches only the owner's processing
		// record, and changes it (revision), so one affected row means
		// the owner's call took effect.
		// abandon, lease until, now, abandon, has checkpoint, its name,
		// has checkpoint, its data, has checkpoint, now, scope, key, token.
		// An abandon leaves the lease as it is; without a checkpoint the
		// stored one stays. (MySQL assigns left to right: no assignment
		// reads a column assigned before it.)
		extend: "UPDATE " + t + " SET lease_until_ns = IF(?, lease_until_ns, ?), updated_at_ns = ?, abandoned = abandoned OR ?," +
			" checkpoint_name = IF(?, ?, checkpoint_name), checkpoint_data = IF(?, ?, checkpoint_data)," +
			" checkpoint_at_ns = IF(?, ?, checkpoint_at_ns), revision = revision + 1" +
			" WHERE scope = ? AND idem_key = ? AND token = ? AND state = 'processing'",
		// now, expires, status, header, body, scope, key, token.
		complete: "UPDATE " + t + " SET state = 'completed', updated_at_ns = ?, expires_at_ns = ?," +
			" status = ?, header = ?, body = ?, abandoned = FALSE, revision = revision + 1" +
			" WHERE scope = ? AND idem_key = ? AND token = ? AND state = 'processing'",
		// scope, key, token.
		release: "DELETE FROM " + t + " WHERE scope = ? AND idem_key = ? AND token = ? AND state = 'processing'",
		// scope, key.
		del: "DELETE FROM " + t + " WHERE scope = ? AND idem_key = ?",
		// now, batch size, now: the first LIMIT expired completed
		// records, found by a range of the (state, expires_at_ns) index
		// (FORCE INDEX), then deleted by primary key. MariaDB's
		// optimizer, left to itself, may read state = 'completed' from
		// the (state, lease_until_ns) index instead (the two indexes cost
		// the same to it), which, when many live records share one lease
		// time, reads every one of them before the first expired record
		// (about 90 rows deleted per second); a single-table DELETE
		// takes no index hint, so the hint goes in the derived table of
		// a multi-table DELETE, which takes no LIMIT of its own. The
		// condition is checked again on the newest version of each
		// locked row, so a record taken over meanwhile is kept.
		sweep: "DELETE t FROM " + t + " AS t JOIN (SELECT scope, idem_key FROM " + t +
			" FORCE INDEX (" + quote(table+"_expires_at_idx") + ") WHERE state = 'completed' AND expires_at_ns <= ? LIMIT ?) AS x" +
			" USING (scope, idem_key) WHERE t.state = 'completed' AND t.expires_at_ns <= ?",
		// now minus the processing retention, batch size, the same
		// bound: abandoned attempts, through the (state,
		// lease_until_ns) index, in the same shape.
		retire: "DELETE t FROM " + t + " AS t JOIN (SELECT scope, idem_key FROM " + t +
			" FORCE INDEX (" + quote(table+"_processing_lease_idx") + ") WHERE state = 'processing' AND lease_until_ns <= ? LIMIT ?) AS x" +
			" USING (scope, idem_key) WHERE t.state = 'processing' AND t.lease_until_ns <= ?",
		// now (three times): the counts of Admin.Stats, in one pass.
		statsCounts: "SELECT" +
			" COALESCE(SUM(CASE WHEN state = 'processing' THEN 1 ELSE 0 END), 0)," +
			" COALESCE(SUM(CASE WHEN state = 'completed' THEN 1 ELSE 0 END), 0)," +
			" COALESCE(SUM(CASE WHEN state = 'processing' AND (lease_until_ns <= ? OR abandoned) THEN 1 ELSE 0 END), 0)," +
			" COALESCE(SUM(CASE WHEN state = 'completed' AND status >= 400 AND expires_at_ns > ? THEN 1 ELSE 0 END), 0)," +
			" COALESCE(SUM(CASE WHEN state = 'completed' AND expires_at_ns <= ? THEN 1 ELSE 0 END), 0)" +
			" FROM " + t,
		// now: the processing record with a live lease created first
		// (an abandoned one is unknown, not in flight).
		statsOldest: selNoBody + " WHERE state = 'processing' AND lease_until_ns > ? AND NOT abandoned" +
			" ORDER BY created_at_ns, scope, idem_key LIMIT 1",
		// now, limit: the processing records whose lease ran out or whose
		// owner abandoned them, the longest expired first.
		statsUnknown: selNoBody + " WHERE state = 'processing' AND (lease_until_ns <= ? OR abandoned)" +
			" ORDER BY lease_until_ns, scope, idem_key LIMIT ?",
	}
}

// selectColumns are recordColumns, with the body read as NULL unless
// withBodies (Admin's List, Find and Stats). A checkpoint's data is read
// either way: it is the owner's note, not a stored answer.
func selectColumns(withBodies bool) string {
	if withBodies {
		return recordColumns
	}
	return strings.Replace(recordColumns, ", body", ", NULL", 1)
}
