package mysql_test

import (
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	driver "github.com/go-sql-driver/mysql"
	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/internal/testenv"
	"github.com/retrysafe/retrysafe/store/mysql"
	"github.com/retrysafe/retrysafe/store/storetest"
)

func TestParseURL(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		url                         string
		user, pass, addr, db, table string
		timeout                     time.Duration
		tls                         string
	}{
		"minimal":         {url: "mysql://root@127.0.0.1/test", user: "root", addr: "127.0.0.1:3306", db: "test", timeout: 5 * time.Second},
		"password":        {url: "mysql://app:s%40cr%3At@db.example:3307/app", user: "app", pass: "s@cr:t", addr: "db.example:3307", db: "app", timeout: 5 * time.Second},
		"table and param": {url: "mysql://u@h:1/d?retrysafe_table=idem&timeout=2s&tls=skip-verify", user: "u", addr: "h:1", db: "d", table: "idem", timeout: 2 * time.Second, tls: "skip-verify"},
		"ipv6":            {url: "mysql://u@[::1]:3306/d", user: "u", addr: "[::1]:3306", db: "d", timeout: 5 * time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dc, table, err := mysql.ParseURL(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			if dc.User != tc.user || dc.Passwd != tc.pass || dc.Addr != tc.addr || dc.DBName != tc.db || dc.Net != "tcp" || table != tc.table || dc.Timeout != tc.timeout || dc.TLSConfig != tc.tls {
				t.Errorf("ParseURL(%q) = user %q pass %q addr %q db %q net %q table %q timeout %s tls %q", tc.url, dc.User, dc.Passwd, dc.Addr, dc.DBName, dc.Net, table, dc.Timeout, dc.TLSConfig)
			}
			if _, ok := dc.Params["retrysafe_table"]; ok {
				t.Error("retrysafe_table reached the driver's parameters")
			}
		})
	}
	for name, u := range map[string]string{
		"no database":   "mysql://u:hunter2@h:3306",
		"two path":      "mysql://u:hunter2@h:3306/a/b",
		"no host":       "mysql:///d",
		"other scheme":  "postgres://u:hunter2@h/d",
		"bad parameter": "mysql://u:hunter2@h/d?timeout=soon",
		"bad url":       "mysql://u:hunter2@h:port/d",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, _, err := mysql.ParseURL(u)
			if err == nil {
				t.Fatalf("ParseURL(%q) succeeded", u)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error shows the password: %v", err)
			}
		})
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	connector, err := driver.NewConnector(driver.NewConfig()) // never dialled
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	for _, table := range []string{"1abc", "a-b", "a`b", "a b", strings.Repeat("t", 44)} {
		if _, err := mysql.New(db, mysql.Config{Table: table}); err == nil {
			t.Errorf("New with table %q succeeded", table)
		}
	}
	if _, err := mysql.New(nil, mysql.Config{}); err == nil {
		t.Error("New(nil) succeeded")
	}
	s, err := mysql.New(db, mysql.Config{})
	if err != nil || s.Config().Table != mysql.DefaultTable {
		t.Fatalf("New with the zero Config: %v, table %q", err, s.Config().Table)
	}
	if _, err := mysql.New(db, mysql.Config{Table: strings.Repeat("t", 43)}); err != nil {
		t.Errorf("a 43-byte table name: %v", err)
	}
}

// TestConformanceDSNOptions runs the suite on a *sql.DB whose DSN sets
// clientFoundRows (an UPDATE that changes nothing still counts its row)
// and interpolateParams (queries with arguments go as text): the store's
// fencing and claim do not depend on either.
func TestConformanceDSNOptions(t *testing.T) {
	t.Parallel()
	sharedDB(t)
	dc, _, err := mysql.ParseURL(testenv.MySQLURL())
	if err != nil {
		t.Fatal(err)
	}
	dc.ClientFoundRows = true
	dc.InterpolateParams = true
	connector, err := driver.NewConnector(dc)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(16)
	t.Cleanup(func() { db.Close() })
	storetest.Run(t, func(t *testing.T) retrysafe.Store { return newStoreOn(t, db, newTable(t)) })
}

// TestExtendSameValues: an Extend that sets the lease and UpdatedAt they
// already have (the same call sent twice) succeeds; only another token is
// fenced.
func TestExtendSameValues(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	p := claimP("k", fpA, at(0))
	mustClaim(t, s, p)
	for range 2 {
		if err := s.Extend(t.Context(), &retrysafe.ExtendParams{Scope: scope, Key: "k", Token: p.Token, Now: at(time.Second), Lease: lease}); err != nil {
			t.Fatalf("Extend: %v", err)
		}
	}
	err := s.Extend(t.Context(), &retrysafe.ExtendParams{Scope: scope, Key: "k", Token: "other", Now: at(time.Second), Lease: lease})
	if !errors.Is(err, retrysafe.ErrLeaseLost) {
		t.Fatalf("Extend by another token: %v", err)
	}
}

// TestOpen: Open takes the table from the URL, refuses a URL and a Config
// that disagree, and migrates; SchemaVersion reports the latest version.
func TestOpen(t *testing.T) {
	t.Parallel()
	sharedDB(t)
	table := newTable(t)
	u := testenv.MySQLURL()
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	u += sep + mysql.URLParamTable + "=" + table
	if _, err := mysql.Open(t.Context(), u, mysql.Config{Table: "other"}); err == nil || !strings.Contains(err.Error(), "disagrees") {
		t.Fatalf("Open with a URL table and another Config.Table: %v", err)
	}
	s, err := mysql.Open(t.Context(), u, mysql.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Config().Table != table {
		t.Fatalf("table %q, want %q", s.Config().Table, table)
	}
	v, err := s.SchemaVersion(t.Context())
	if err != nil || v != mysql.LatestSchemaVersion() {
		t.Fatalf("SchemaVersion = %d, %v; want %d", v, err, mysql.LatestSchemaVersion())
	}
	// A driver DSN works too.
	dc, _, _ := mysql.ParseURL(testenv.MySQLURL())
	dc.Params = map[string]string{mysql.URLParamTable: table}
	s2, err := mysql.Open(t.Context(), dc.FormatDSN(), mysql.Config{})
	if err != nil {
		t.Fatalf("Open with a DSN: %v", err)
	}
	defer s2.Close()
	if s2.Config().Table != table {
		t.Fatalf("table from the DSN %q, want %q", s2.Config().Table, table)
	}
	res := mustClaim(t, s2, claimP("k", fpA, at(0)))
	if got := mustClaim(t, s, claimP("k", fpA, at(time.Second))); got.Claimed || got.Record.Token != res.Record.Token {
		t.Fatalf("the two stores do not share the table: %+v", got)
	}
}

// TestMigrateConcurrently: eight stores migrate one new table at once; all
// succeed and the table ends at the latest version, each migration applied
// once.
func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	db := sharedDB(t)
	table := newTable(t)
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() {
			s, err := mysql.New(newDB(t, 2), mysql.Config{Table: table})
			if err == nil {
				err = s.Migrate(t.Context())
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Migrate %d: %v", i, err)
		}
	}
	var n, max int
	if err := db.QueryRowContext(t.Context(), "SELECT COUNT(*), MAX(version) FROM `"+table+"_migrations`").Scan(&n, &max); err != nil {
		t.Fatal(err)
	}
	if n != mysql.LatestSchemaVersion() || max != mysql.LatestSchemaVersion() {
		t.Fatalf("%d migrations recorded, last %d; want each of %d once", n, max, mysql.LatestSchemaVersion())
	}
}

// TestInputLimits: values longer than their columns and times outside the
// storable range are refused before any statement runs (they are the
// caller's errors, not an unavailable store).
func TestInputLimits(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	long := strings.Repeat("k", 1025)
	for name, p := range map[string]*retrysafe.ClaimParams{
		"key":         {Scope: scope, Key: long, Fingerprint: fpA, Token: "t", Now: at(0), Lease: lease},
		"scope":       {Scope: long, Key: "k", Fingerprint: fpA, Token: "t", Now: at(0), Lease: lease},
		"fingerprint": {Scope: scope, Key: "k", Fingerprint: long, Token: "t", Now: at(0), Lease: lease},
		"token":       {Scope: scope, Key: "k", Fingerprint: fpA, Token: strings.Repeat("t", 256), Now: at(0), Lease: lease},
		"route":       {Scope: scope, Key: "k", Fingerprint: fpA, Token: "t", Now: at(0), Lease: lease, Route: long},
		"time":        {Scope: scope, Key: "k", Fingerprint: fpA, Token: "t", Now: time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC), Lease: lease},
	} {
		_, err := s.Claim(ctx, p)
		if err == nil || errors.Is(err, retrysafe.ErrStoreUnavailable) {
			t.Errorf("Claim with a too long %s: %v, want a plain error", name, err)
		}
	}
	// The longest values that fit are stored exactly.
	p := &retrysafe.ClaimParams{Scope: strings.Repeat("s", 1024), Key: strings.Repeat("k", 1024), Fingerprint: strings.Repeat("f", 1024),
		Token: strings.Repeat("t", 255), Now: at(0), Lease: lease, Route: strings.Repeat("r", 1024)}
	if res := mustClaim(t, s, p); !res.Claimed {
		t.Fatalf("claim of the longest values: %+v", res)
	}
	rec, err := s.Get(ctx, &retrysafe.GetParams{Scope: p.Scope, Key: p.Key, Now: at(0)})
	if err != nil || rec.Fingerprint != p.Fingerprint || rec.Token != p.Token || rec.Route != p.Route {
		t.Fatalf("Get of the longest values: %v", err)
	}
}

// TestListKeyPrefixBytes: List's KeyPrefix is an exact byte prefix on the
// binary key column: pattern characters, case, trailing spaces and bytes
// past 0x7f (no upper bound then, see ListParams.KeyPrefixEnd) are
// matched as bytes.
func TestListKeyPrefixBytes(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	keys := []string{"a%b", "a_b", "aXb", "A%b", "a% ", "a%", "\xffa", "\xff\xffb", "\xfe", "%\xffz", "X\xffz"}
	for i, k := range keys {
		mustClaim(t, s, &retrysafe.ClaimParams{Scope: scope, Key: k, Fingerprint: fpA, Token: fmt.Sprint("t", i), Now: at(0), Lease: lease})
	}
	for _, c := range []struct {
		prefix string
		want   []string
	}{
		{"a%", []string{"a%", "a% ", "a%b"}},
		{"a% ", []string{"a% "}},
		{"a_", []string{"a_b"}},
		{"A", []string{"A%b"}},
		{"\xff", []string{"\xffa", "\xff\xffb"}},
		{"\xff\xff", []string{"\xff\xffb"}},
		{"%\xff", []string{"%\xffz"}}, // no upper bound: the prefix test alone
	} {
		recs, err := s.List(t.Context(), &admin.ListParams{KeyPrefix: c.prefix})
		if err != nil {
			t.Fatalf("List with prefix %q: %v", c.prefix, err)
		}
		var got []string
		for _, r := range recs {
			got = append(got, r.Key)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("List with prefix %q = %q, want %q", c.prefix, got, c.want)
		}
	}
}
