package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe/admin"
)

// TestSweepPlan: when every record has the same lease time (copies of one
// record, a bulk load), MariaDB's optimizer, left to itself, reads the
// sweep's state = 'completed' from the (state, lease_until_ns) index and
// so every live record before the first expired one. The sweep's plan
// (EXPLAIN) reads the (state, expires_at_ns) index, the retirement's the
// (state, lease_until_ns) one, and the sweep deletes exactly the expired
// records.
func TestSweepPlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := sharedDB(t)
	table := newTable(t)
	s := newStoreOn(t, db, table)

	const n = 2000 // live records, and as many expired ones
	now := at(0).UnixNano()
	lease := at(-lease).UnixNano()
	for _, part := range []struct {
		prefix  string
		expires int64
	}{{"live", at(ttl).UnixNano()}, {"old", at(-ttl).UnixNano()}} {
		for from := 0; from < n; from += 500 {
			var sb strings.Builder
			args := make([]any, 0, 6*500)
			sb.WriteString("INSERT INTO `" + table + "` (scope, idem_key, fingerprint, state, token, attempt," +
				" created_at_ns, updated_at_ns, lease_until_ns, expires_at_ns, status, body) VALUES ")
			for i := from; i < from+500; i++ {
				if i > from {
					sb.WriteByte(',')
				}
				sb.WriteString("(?, ?, 'fp', 'completed', 'tok', 1, ?, ?, ?, ?, 200, 'b')")
				args = append(args, scope, fmt.Sprintf("%s-%05d", part.prefix, i), lease, lease, lease, part.expires)
			}
			if _, err := db.ExecContext(ctx, sb.String(), args...); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := db.ExecContext(ctx, "ANALYZE TABLE `"+table+"`"); err != nil {
		t.Fatal(err)
	}

	sweep, retire := s.SweepQueries()
	for _, tc := range []struct {
		name, query, want string
	}{
		{"sweep", sweep, table + "_expires_at_idx"},
		{"retire", retire, table + "_processing_lease_idx"},
	} {
		keys := explainKeys(t, db, tc.query, now, 1000, now)
		if !slices.Contains(keys, tc.want) {
			t.Errorf("%s: EXPLAIN read the indexes %q, not %s", tc.name, keys, tc.want)
		}
	}

	deleted, err := s.Sweep(ctx, &admin.SweepParams{Now: at(0)})
	if err != nil {
		t.Fatal(err)
	}
	if deleted != n {
		t.Errorf("Sweep deleted %d records, want the %d expired ones", deleted, n)
	}
	var left, live int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*), COALESCE(SUM(idem_key LIKE 'live-%'), 0) FROM `"+table+"`").Scan(&left, &live); err != nil {
		t.Fatal(err)
	}
	if left != n || live != n {
		t.Errorf("after Sweep: %d records, %d of them live; want %d live", left, live, n)
	}
}

// explainKeys returns the "key" column of every row of EXPLAIN query.
func explainKeys(t *testing.T, db *sql.DB, query string, args ...any) []string {
	t.Helper()
	rows, err := db.Query("EXPLAIN "+query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		dest := make([]any, len(cols))
		for i := range vals {
			dest[i] = &vals[i]
		}
		if err := rows.Scan(dest...); err != nil {
			t.Fatal(err)
		}
		for i, c := range cols {
			if c == "key" {
				keys = append(keys, vals[i].String)
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return keys
}
