package sqlite

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// TestSweepUsesIndexes: each sweep statement finds its batch through its
// partial index (completed rows by expires_at, processing rows by
// lease_until) rather than by scanning the table.
func TestSweepUsesIndexes(t *testing.T) {
	t.Parallel()
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "plan.db"), Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for query, index := range map[string]string{
		s.q.sweep:  "retrysafe_records_expires_at",
		s.q.retire: "retrysafe_records_processing_lease",
	} {
		rows, err := s.db.Query("EXPLAIN QUERY PLAN "+query, 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		if !strings.Contains(strings.Join(plan, "\n"), "INDEX "+index+" ") {
			t.Errorf("plan of %q does not use %s:\n%s", query, index, strings.Join(plan, "\n"))
		}
	}
}
