package mysql

import "strings"

// queries holds the SQL of every operation, with the table's names filled
// in once by buildQueries.
type queries struct {
	claim, batch, get, extend, complete, release, del string
	sweep, retire                                     string
	statsCounts, statsOldest, statsUnknown            string
}

func buildQueries(table string) queries {
	t := quote(table)
	sel := "SELECT " + recordColumns + " FROM " + t
	selNoBody := "SELECT " + selectColumns(false) + " FROM " + t
	return queries{
		// scope, key, fingerprint, token, now, lease until, route: the
		// claim procedure of procedures.sql.
		// no takeover, takeover token.
		claim: "CALL " + quote(table+"_claim") + "(?, ?, ?, ?, ?, ?, ?, ?, ?)",
		// The operations of a batch, as JSON (batch.go, procedures.sql).
		batch: "CALL " + quote(table+"_batch") + "(?)",
		get:   sel + " WHERE scope = ? AND idem_key = ?",
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
		// now, batch size: a range of the (state, expires_at_ns) index,
		// read in index order until LIMIT rows are deleted (no ORDER BY:
		// MariaDB would sort the whole expired range for each batch). The
		// condition is checked on the newest version of each row, so a
		// record taken over meanwhile is kept.
		sweep: "DELETE FROM " + t + " WHERE state = 'completed' AND expires_at_ns <= ? LIMIT ?",
		// now minus the processing retention, batch size: abandoned
		// attempts, through the (state, lease_until_ns) index.
		retire: "DELETE FROM " + t + " WHERE state = 'processing' AND lease_until_ns <= ? LIMIT ?",
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
