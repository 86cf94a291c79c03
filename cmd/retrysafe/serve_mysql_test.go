package main

import (
	"fmt"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/internal/storeurl"
	"github.com/retrysafe/retrysafe/internal/testenv"
	"github.com/retrysafe/retrysafe/store/mysql"
)

// TestServeMySQL runs two gateways (serve, in-process) with --store
// mysql://… on one table, as two instances behind a load balancer would:
// concurrent duplicates sent to both reach the upstream once, retries on
// either replay the stored answer, and distinct keys each run once.
func TestServeMySQL(t *testing.T) {
	t.Parallel()
	base := os.Getenv("RETRYSAFE_MYSQL_URL")
	if base == "" {
		base = testenv.DefaultMySQLURL
	}
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

	up := newChargeUpstream(t, func(n int64) {
		if n == 1 {
			time.Sleep(300 * time.Millisecond) // the duplicates arrive while the first runs
		}
	})
	proxies := []string{serveUntilEnd(t, "--upstream", up.URL, "--store", storeURL), serveUntilEnd(t, "--upstream", up.URL, "--store", storeURL)}

	// Ten concurrent duplicates, alternating between the gateways.
	const dups = 10
	answers := make([]*answer, dups)
	errs := make([]error, dups)
	var wg sync.WaitGroup
	for i := range dups {
		wg.Go(func() { answers[i], errs[i] = post(ctx, proxies[i%2]+"/payments", "mysql-dup", `{"amount":1}`) })
	}
	wg.Wait()
	var first string
	for i, a := range answers {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		switch a.status {
		case 201:
			if first != "" && a.body != first {
				t.Fatalf("two different answers for one key: %q and %q", first, a.body)
			}
			first = a.body
		case 409: // in flight at the other gateway or this one
		default:
			t.Fatalf("duplicate %d: %d %s", i, a.status, a.body)
		}
	}
	if n := up.calls.Load(); n != 1 {
		t.Fatalf("upstream called %d times for one key through two gateways, want 1", n)
	}
	for i, p := range proxies {
		again, err := post(ctx, p+"/payments", "mysql-dup", `{"amount":1}`)
		if err != nil || again.status != 201 || again.body != `{"charge":1}` || again.header.Get(retrysafe.HeaderReplayed) != "true" {
			t.Fatalf("retry through gateway %d = %+v, %v; want the replayed first answer", i, again, err)
		}
	}
	// A different body under the same key is refused.
	if a, err := post(ctx, proxies[1]+"/payments", "mysql-dup", `{"amount":2}`); err != nil || a.status != 422 {
		t.Fatalf("same key, other body = %+v, %v; want 422", a, err)
	}

	// Distinct keys, spread over both gateways: each runs once.
	for i := range 20 {
		a, err := post(ctx, proxies[i%2]+"/payments", fmt.Sprintf("mysql-key-%d", i), `{"amount":1}`)
		if err != nil || a.status != 201 {
			t.Fatalf("key %d = %+v, %v", i, a, err)
		}
	}
	if n := up.calls.Load(); n != 21 {
		t.Fatalf("upstream calls = %d, want 21", n)
	}
	recs, err := s.(admin.Admin).List(ctx, &admin.ListParams{})
	if err != nil || len(recs) != 21 {
		t.Fatalf("List = %d records, %v; want 21", len(recs), err)
	}
}

// serveUntilEnd runs `retrysafe serve` with args in this process
// (serveInProcess) until the test ends, checks that it then exits 0, and
// returns its proxy URL.
func serveUntilEnd(t *testing.T, args ...string) string {
	t.Helper()
	proxyURL, stop := serveInProcess(t, args...)
	t.Cleanup(func() {
		if code, stderr := stop(); code != 0 {
			t.Errorf("serve exited %d; stderr:\n%s", code, stderr)
		}
	})
	return proxyURL
}
