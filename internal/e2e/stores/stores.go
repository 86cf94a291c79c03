// Package stores gives tests isolated stores of every backend on the real
// servers of the machine: its own SQLite file, PostgreSQL schema, MySQL
// or DynamoDB table, or Redis key prefix per test. A server that cannot be reached skips the test
// locally and fails it when CI=true (testenv.Unreachable).
//
// It imports every store and driver, so it lives in the module of the tests
// that run against all stores (internal/e2e), never in a store's module.
package stores

import (
	"context"
	"database/sql"
	"net"
	"net/url"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/testenv"
	"github.com/retrysafe/retrysafe/store/mysql"
	"github.com/retrysafe/retrysafe/store/postgres"
	"github.com/retrysafe/retrysafe/store/redis"
	"github.com/retrysafe/retrysafe/store/sqlite"
)

// SQLite returns a store on a new SQLite file.
func SQLite(t testing.TB) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), testenv.SQLitePath(t), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// PostgresSchemaURL creates a fresh schema, dropped at the end of the test,
// and returns a URL that selects it for the postgres store (the
// retrysafe_schema parameter) together with the schema's name.
func PostgresSchemaURL(t testing.TB) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, testenv.PostgresURL())
	if err != nil {
		testenv.Unreachable(t, "PostgreSQL at "+testenv.PostgresURL(), err)
	}
	defer conn.Close(ctx)
	schema := testenv.Name("rs_test_")
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, testenv.PostgresURL()); err == nil {
			_, _ = c.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
			_ = c.Close(ctx)
		}
	})
	u, err := url.Parse(testenv.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("retrysafe_schema", schema)
	u.RawQuery = q.Encode()
	return u.String(), schema
}

// PostgresPool returns a new pool, closed at the end of the test.
func PostgresPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, testenv.PostgresURL())
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		testenv.Unreachable(t, "PostgreSQL at "+testenv.PostgresURL(), err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Postgres returns a migrated store in a fresh schema on its own pool.
func Postgres(t testing.TB) *postgres.Store {
	t.Helper()
	_, schema := PostgresSchemaURL(t)
	s, err := postgres.New(PostgresPool(t), postgres.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// PgBouncerURL returns a URL of PgBouncer in transaction mode
// (testenv.PgBouncerURL) for the postgres store in a fresh schema, made and
// dropped on PostgreSQL directly (see PostgresSchemaURL), with
// retrysafe_pool_mode=transaction, and the schema's name.
func PgBouncerURL(t testing.TB) (string, string) {
	t.Helper()
	_, schema := PostgresSchemaURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg, err := pgx.ParseConfig(testenv.PgBouncerURL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		testenv.Unreachable(t, "PgBouncer at "+testenv.PgBouncerURL(), err)
	}
	_ = conn.Close(ctx)
	u, err := url.Parse(testenv.PgBouncerURL())
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set(postgres.URLParamSchema, schema)
	q.Set(postgres.URLParamPoolMode, postgres.PoolModeTransaction)
	u.RawQuery = q.Encode()
	return u.String(), schema
}

// PgBouncer returns a migrated store in a fresh schema that reaches
// PostgreSQL through PgBouncer in transaction mode (Subscribe polls).
func PgBouncer(t testing.TB) *postgres.Store {
	t.Helper()
	u, _ := PgBouncerURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := postgres.Open(ctx, u, postgres.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// MySQLTableURL returns a mysql:// URL of the test server whose
// retrysafe_table parameter names a fresh table (dropped at the end of the
// test with its migrations table and procedures), and the table's
// name.
func MySQLTableURL(t testing.TB) (string, string) {
	t.Helper()
	db := mysqlDB(t)
	table := testenv.Name("rs_test_")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, stmt := range testenv.MySQLDropStatements(table) {
			if _, err := db.ExecContext(ctx, stmt); err != nil {
				t.Errorf("%s: %v", stmt, err)
			}
		}
	})
	u, err := url.Parse(testenv.MySQLURL())
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set(mysql.URLParamTable, table)
	u.RawQuery = q.Encode()
	return u.String(), table
}

// mysqlDB returns a *sql.DB of the test server, closed at the end of the
// test (after the cleanups registered later).
func mysqlDB(t testing.TB) *sql.DB {
	t.Helper()
	dc, _, err := mysql.ParseURL(testenv.MySQLURL())
	if err != nil {
		t.Fatal(err)
	}
	connector, err := mysqldriver.NewConnector(dc)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(connector)
	// A bounded pool: 200 concurrent callers must not open 200 connections
	// (the server's max_connections is 151 by default).
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(16)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		testenv.Unreachable(t, "MySQL/MariaDB at "+testenv.MySQLURL(), err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// MySQL returns a migrated store on a fresh table, on its own *sql.DB.
func MySQL(t testing.TB) *mysql.Store {
	t.Helper()
	db := mysqlDB(t)
	_, table := MySQLTableURL(t)
	s, err := mysql.New(db, mysql.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// RedisURL returns a redis:// URL for the test server, after checking that
// it answers.
func RedisURL(t testing.TB) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", testenv.RedisAddr(), 2*time.Second)
	if err != nil {
		testenv.Unreachable(t, "Redis at "+testenv.RedisAddr(), err)
	}
	_ = c.Close()
	return "redis://" + testenv.RedisAddr() + "/0"
}

// RedisClient returns a client of the test server, closed at the end.
func RedisClient(t testing.TB) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: testenv.RedisAddr(), DialTimeout: 2 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		testenv.Unreachable(t, "Redis at "+testenv.RedisAddr(), err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// RedisPrefix returns a fresh key prefix whose keys are deleted at the end.
func RedisPrefix(t testing.TB) string {
	t.Helper()
	prefix := testenv.Name("rs_test_") + ":"
	t.Cleanup(func() {
		c := goredis.NewClient(&goredis.Options{Addr: testenv.RedisAddr()})
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			_ = c.Del(ctx, iter.Val()).Err()
		}
	})
	return prefix
}

// Redis returns a store with a fresh key prefix on its own client.
func Redis(t testing.TB) *redis.Store {
	t.Helper()
	s, err := redis.New(RedisClient(t), redis.Config{Prefix: RedisPrefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// All lists a constructor for every store, for tests that run against
// all of them.
var All = map[string]func(t testing.TB) retrysafe.Store{
	"mysql":    func(t testing.TB) retrysafe.Store { return MySQL(t) },
	"memory":   func(t testing.TB) retrysafe.Store { return testenv.Memory(t) },
	"sqlite":   func(t testing.TB) retrysafe.Store { return SQLite(t) },
	"postgres": func(t testing.TB) retrysafe.Store { return Postgres(t) },
	"redis":    func(t testing.TB) retrysafe.Store { return Redis(t) },
	"dynamodb": func(t testing.TB) retrysafe.Store { return DynamoDB(t) },

	// PostgreSQL behind PgBouncer in transaction mode.
	"postgres+pgbouncer": func(t testing.TB) retrysafe.Store { return PgBouncer(t) },
}
