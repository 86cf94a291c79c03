package storeurl_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/internal/storeurl"
	"github.com/retrysafe/retrysafe/internal/testenv"
	"github.com/retrysafe/retrysafe/store/memory"
	"github.com/retrysafe/retrysafe/store/mysql"
	"github.com/retrysafe/retrysafe/store/postgres"
	"github.com/retrysafe/retrysafe/store/redis"
	"github.com/retrysafe/retrysafe/store/sqlite"
)

// roundTrip claims and completes a record, proving the store works.
func roundTrip(t *testing.T, s retrysafe.Store) {
	t.Helper()
	ctx := context.Background()
	now := time.Now()
	res, err := s.Claim(ctx, &retrysafe.ClaimParams{Scope: "s", Key: "k-" + retrysafe.NewToken(), Fingerprint: "f",
		Token: retrysafe.NewToken(), Now: now, Lease: time.Minute})
	if err != nil || !res.Claimed {
		t.Fatalf("Claim = %+v, %v", res, err)
	}
	err = s.Complete(ctx, &retrysafe.CompleteParams{Scope: "s", Key: res.Record.Key, Token: res.Record.Token, Now: now,
		TTL: time.Minute, Response: &retrysafe.Response{Status: 201, Body: []byte("ok")}})
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
}

func TestOpenMemoryAndSQLite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	abs := filepath.Join(dir, "abs.db")
	tests := map[string]struct {
		url  string
		file string // the SQLite file that must exist afterwards
		want any
	}{
		"memory":             {url: "memory:", want: &memory.Store{}},
		"sqlite absolute":    {url: "sqlite:" + abs, file: abs, want: &sqlite.Store{}},
		"sqlite three slash": {url: "sqlite://" + filepath.Join(dir, "three.db"), file: filepath.Join(dir, "three.db"), want: &sqlite.Store{}},
		"sqlite table":       {url: "sqlite:" + filepath.Join(dir, "t.db") + "?retrysafe_table=idem", file: filepath.Join(dir, "t.db"), want: &sqlite.Store{}},
		"sqlite normal sync": {url: "sqlite:" + filepath.Join(dir, "n.db") + "?synchronous=normal", file: filepath.Join(dir, "n.db"), want: &sqlite.Store{}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, closeFn, err := storeurl.Open(context.Background(), tc.url)
			if err != nil {
				t.Fatal(err)
			}
			defer closeFn()
			switch tc.want.(type) {
			case *memory.Store:
				if _, ok := s.(*memory.Store); !ok {
					t.Fatalf("got %T", s)
				}
			case *sqlite.Store:
				if _, ok := s.(*sqlite.Store); !ok {
					t.Fatalf("got %T", s)
				}
			}
			roundTrip(t, s)
			if tc.file != "" {
				if _, err := os.Stat(tc.file); err != nil {
					t.Fatalf("database file: %v", err)
				}
			}
			if err := storeurl.Migrate(context.Background(), s); err != nil && !errors.Is(err, storeurl.ErrNotSupported) {
				t.Fatalf("Migrate: %v", err)
			}
			if _, err := storeurl.Sweep(context.Background(), s, &admin.SweepParams{Now: time.Now()}); err != nil {
				t.Fatalf("Sweep: %v", err)
			}
		})
	}
}

func TestOpenRelativeSQLite(t *testing.T) {
	// Not parallel: changes the working directory.
	dir := t.TempDir()
	t.Chdir(dir)
	for _, u := range []string{"sqlite:rel.db", "sqlite://rel2.db", ""} {
		s, closeFn, err := storeurl.Open(context.Background(), u)
		if err != nil {
			t.Fatalf("%q: %v", u, err)
		}
		roundTrip(t, s)
		closeFn()
	}
	for _, f := range []string{"rel.db", "rel2.db", "retrysafe.db"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		url  string
		want []string
	}{
		"unknown scheme": {"mongodb://u:hunter2@db/x", []string{`unknown scheme "mongodb"`, "memory:", "sqlite:PATH", "postgres://", "redis://", "mysql://", "xxxxx"}},
		"mysql no db":    {"mysql://u:hunter2@db:3306", []string{"must name one database", "xxxxx"}},
		"mysql param":    {"mysql://u:hunter2@db:3306/x?timeout=soon", []string{"timeout"}},
		"no scheme":      {"retrysafe.db", []string{"no scheme", "sqlite:retrysafe.db"}},
		"empty sqlite":   {"sqlite:", []string{"empty path"}},
		"sqlite param":   {"sqlite:x.db?mode=ro", []string{`unknown parameter "mode"`}},
		"memory path":    {"memory:foo", []string{"memory:"}},
		"sqlite sync":    {"sqlite:x.db?synchronous=off", []string{`"off"`, "FULL or NORMAL"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, _, err := storeurl.Open(context.Background(), tc.url)
			if err == nil {
				t.Fatal("Open succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error shows the password: %v", err)
			}
		})
	}
}

func TestOpenPostgres(t *testing.T) {
	t.Parallel()
	dsn := os.Getenv("RETRYSAFE_POSTGRES_URL")
	if dsn == "" {
		dsn = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	schema := "storeurl_" + retrysafe.NewToken()[:12]
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	s, closeFn, err := storeurl.Open(context.Background(), dsn+sep+"retrysafe_schema="+schema)
	if err != nil {
		testenv.Unreachable(t, "PostgreSQL", err)
	}
	defer closeFn()
	pg, ok := s.(*postgres.Store)
	if !ok {
		t.Fatalf("got %T", s)
	}
	t.Cleanup(func() {
		_, _ = pg.Pool().Exec(context.Background(), `DROP SCHEMA IF EXISTS "`+schema+`" CASCADE`)
	})
	if pg.Config().Schema != schema {
		t.Fatalf("schema %q, want %q", pg.Config().Schema, schema)
	}
	roundTrip(t, s)
	if err := storeurl.Migrate(context.Background(), s); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
}

// TestOpenMySQL: a mysql:// URL with retrysafe_table opens a migrated
// MySQL/MariaDB store on that table.
func TestOpenMySQL(t *testing.T) {
	t.Parallel()
	table := testenv.Name("storeurl_")
	u := testenv.MySQLURL()
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	s, closeFn, err := storeurl.Open(context.Background(), u+sep+"retrysafe_table="+table)
	if err != nil {
		testenv.Unreachable(t, "MySQL/MariaDB", err)
	}
	t.Cleanup(func() { _ = closeFn() }) // after the drops below (cleanups run last first)
	my, ok := s.(*mysql.Store)
	if !ok {
		t.Fatalf("got %T", s)
	}
	t.Cleanup(func() {
		for _, stmt := range testenv.MySQLDropStatements(table) {
			if _, err := my.DB().Exec(stmt); err != nil {
				t.Errorf("%s: %v", stmt, err)
			}
		}
	})
	if my.Config().Table != table {
		t.Fatalf("table %q, want %q", my.Config().Table, table)
	}
	roundTrip(t, s)
	if err := storeurl.Migrate(context.Background(), s); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if n, err := storeurl.Sweep(context.Background(), s, &admin.SweepParams{Now: time.Now()}); err != nil || n != 0 {
		t.Fatalf("Sweep = %d, %v", n, err)
	}
}

func TestOpenRedis(t *testing.T) {
	t.Parallel()
	addr := os.Getenv("RETRYSAFE_REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	if c, err := net.DialTimeout("tcp", addr, 2*time.Second); err != nil {
		testenv.Unreachable(t, "Redis", err)
	} else {
		c.Close()
	}
	s, closeFn, err := storeurl.Open(context.Background(), "redis://"+addr+"/0?retrysafe_prefix=storeurl-test:"+retrysafe.NewToken()[:8]+":")
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	if _, ok := s.(*redis.Store); !ok {
		t.Fatalf("got %T", s)
	}
	roundTrip(t, s)
	if err := storeurl.Migrate(context.Background(), s); !errors.Is(err, storeurl.ErrNotSupported) {
		t.Fatalf("Migrate = %v, want ErrNotSupported", err)
	}
}

// TestOpenWithRetention: Options.ProcessingRetention reaches the Redis
// store (a processing record's key expires Lease + retention after the
// claim), and a negative one is refused.
func TestOpenWithRetention(t *testing.T) {
	t.Parallel()
	if _, _, err := storeurl.OpenWith(context.Background(), "memory:", storeurl.Options{ProcessingRetention: -time.Second}); err == nil {
		t.Fatal("OpenWith accepted a negative processing retention")
	}
	addr := os.Getenv("RETRYSAFE_REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	if c, err := net.DialTimeout("tcp", addr, 2*time.Second); err != nil {
		testenv.Unreachable(t, "Redis", err)
	} else {
		c.Close()
	}
	prefix := "storeurl-test:" + retrysafe.NewToken()[:8] + ":"
	const retention = 10 * time.Minute
	s, closeFn, err := storeurl.OpenWith(context.Background(), "redis://"+addr+"/0?retrysafe_prefix="+prefix, storeurl.Options{ProcessingRetention: retention})
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	ctx := context.Background()
	if _, err := s.Claim(ctx, &retrysafe.ClaimParams{Scope: "s", Key: "k", Fingerprint: "f", Token: retrysafe.NewToken(), Now: time.Now(), Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	keys, err := c.Keys(ctx, prefix+"*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("keys under %q: %q, %v", prefix, keys, err)
	}
	defer c.Del(ctx, keys...)
	pttl, err := c.PTTL(ctx, keys[0]).Result()
	// The upper bound is exact; the lower one allows for the time between
	// the claim and PTTL.
	if err != nil || pttl > time.Minute+retention || pttl < retention {
		t.Fatalf("PTTL of a processing record = %s, %v; want about %s (lease + retention)", pttl, err, time.Minute+retention)
	}
}
