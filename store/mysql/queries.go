package mysql

import "strings"

// queries holds the SQL of every operation, with the table's names filled
// in once by buildQueries.
type queries struct {
	claim, get, extend, complete, release, del   string
	sweep, retire                                string
	list, listScope, listNoBody, listScopeNoBody string
	find, findScope, findNoBody, findScopeNoBody string
}

func buildQueries(table string) queries {
	t := quote(table)
	sel := "SELECT " + recordColumns + " FROM " + t
	selNoBody := "SELECT " + strings.Replace(recordColumns, ", body", ", NULL", 1) + " FROM " + t
	// The cursor condition is spelled out instead of a row comparison
	// (scope, idem_key) > (?, ?), so that every server version uses the
	// primary key's range.
	after := " WHERE (scope > ? OR (scope = ? AND idem_key > ?))"
	return queries{
		// scope, key, fingerprint, token, now, lease until: the claim
		// procedure of migrations/0002_claim_procedure.sql.
		claim: "CALL " + quote(table+"_claim") + "(?, ?, ?, ?, ?, ?)",
		get:   sel + " WHERE scope = ? AND idem_key = ?",
		// The fenced statements: each matches only the owner's processing
		// record, and changes it (revision), so one affected row means
		// the owner's call took effect.
		// lease until, now, scope, key, token.
		extend: "UPDATE " + t + " SET lease_until_ns = ?, updated_at_ns = ?, revision = revision + 1" +
			" WHERE scope = ? AND idem_key = ? AND token = ? AND state = 'processing'",
		// now, expires, status, header, body, scope, key, token.
		complete: "UPDATE " + t + " SET state = 'completed', updated_at_ns = ?, expires_at_ns = ?," +
			" status = ?, header = ?, body = ?, revision = revision + 1" +
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
		// after scope (twice), after key, [scope,] limit.
		list:            sel + after + " ORDER BY scope, idem_key LIMIT ?",
		listScope:       sel + after + " AND scope = ? ORDER BY scope, idem_key LIMIT ?",
		listNoBody:      selNoBody + after + " ORDER BY scope, idem_key LIMIT ?",
		listScopeNoBody: selNoBody + after + " AND scope = ? ORDER BY scope, idem_key LIMIT ?",
		// key [, scope].
		find:            sel + " WHERE idem_key = ? ORDER BY scope",
		findScope:       sel + " WHERE idem_key = ? AND scope = ?",
		findNoBody:      selNoBody + " WHERE idem_key = ? ORDER BY scope",
		findScopeNoBody: selNoBody + " WHERE idem_key = ? AND scope = ?",
	}
}
