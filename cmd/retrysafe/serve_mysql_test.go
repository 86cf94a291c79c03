package main

import (
	"net/url"
	"testing"

	"github.com/retrysafe/retrysafe/internal/storeurl"
	"github.com/retrysafe/retrysafe/internal/testenv"
	"github.com/retrysafe/retrysafe/store/mysql"
)

// TestServeMySQL runs two gateways with --store mysql://… on one table
// (checkTwoGateways).
func TestServeMySQL(t *testing.T) {
	t.Parallel()
	base := testenv.MySQLURL()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	table := testenv.Name("rs_serve_")
	q := u.Query()
	q.Set(mysql.URLParamTable, table)
	u.RawQuery = q.Encode()
	storeURL := u.String()

	// Open (and migrate) the table once, so both gateways find it; the
	// store also drops it at the end.
	ctx := t.Context()
	s, closeStore, err := storeurl.Open(ctx, storeURL)
	if err != nil {
		testenv.Unreachable(t, "MySQL/MariaDB at "+storeurl.Redact(base), err)
	}
	t.Cleanup(func() {
		db := s.(*mysql.Store).DB()
		for _, stmt := range testenv.MySQLDropStatements(table) {
			if _, err := db.Exec(stmt); err != nil {
				t.Errorf("%s: %v", stmt, err)
			}
		}
		_ = closeStore()
	})

	checkTwoGateways(t, s, storeURL, "mysql")
}
