package bench

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"
	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/sqlite"
)

// floor is the durability floor of a store: an upstream that does, itself,
// the durable writes the gateway does per new key (a row inserted, then
// updated, each its own commit with the store's durability settings; for
// Redis SET then SET), on the same server. The harness puts the plain
// proxy in front of it: a service that wanted the same safety without
// retrysafe would pay at least this.
type floor struct {
	upstream *httptest.Server
	proxy    *httptest.Server
	close    func()
}

// floorWriter is the floor's pair of writes for one request: insert the key as
// in progress, then record the response under it.
type floorWriter interface {
	insert(ctx context.Context, key string) error
	update(ctx context.Context, key string, resp []byte) error
}

// startFloor starts the floor's upstream over w and the plain proxy in
// front of it; closeW releases w's connections.
func startFloor(w floorWriter, closeW func()) *floor {
	var calls atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		key := r.Header.Get(retrysafe.HeaderKey)
		if err := w.insert(r.Context(), key); err != nil {
			http.Error(rw, err.Error(), http.StatusInternalServerError)
			return
		}
		n := calls.Add(1)
		body := fmt.Appendf(nil, `{"paymentId":"pay_%d","status":"succeeded"}`, n)
		if err := w.update(r.Context(), key, body); err != nil {
			http.Error(rw, err.Error(), http.StatusInternalServerError)
			return
		}
		rw.Header().Set("Content-Type", "application/json")
		rw.WriteHeader(http.StatusCreated)
		_, _ = rw.Write(body)
	}))
	proxy := StartPlainProxy(up.URL)
	return &floor{upstream: up, proxy: proxy, close: func() { proxy.Close(); up.Close(); closeW() }}
}

// sqlFloor is the floor on a database/sql server: autocommit INSERT, then
// autocommit UPDATE, each one durable commit.
type sqlFloor struct {
	db             *sql.DB
	insSQL, updSQL string
}

func (f *sqlFloor) insert(ctx context.Context, key string) error {
	_, err := f.db.ExecContext(ctx, f.insSQL, key, Body)
	return err
}

func (f *sqlFloor) update(ctx context.Context, key string, resp []byte) error {
	_, err := f.db.ExecContext(ctx, f.updSQL, resp, key)
	return err
}

// sqliteFloor opens the SQLite floor: its own file in dir, with the DSN the
// store uses (WAL, synchronous=FULL unless sync says NORMAL, busy timeout,
// immediate transactions), and one connection, SQLite's single writer, so
// the writers queue in Go instead of spinning on the busy handler.
func sqliteFloor(ctx context.Context, path string, cfg sqlite.Config) (*floor, error) {
	db, err := sql.Open("sqlite", sqlite.DSN(path, cfg))
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, `CREATE TABLE floor (k TEXT PRIMARY KEY, state INTEGER NOT NULL, req BLOB, resp BLOB, created INTEGER NOT NULL DEFAULT (unixepoch()))`); err != nil {
		_ = db.Close()
		return nil, err
	}
	w := &sqlFloor{db: db,
		insSQL: `INSERT INTO floor (k, state, req) VALUES (?, 0, ?)`,
		updSQL: `UPDATE floor SET state = 1, resp = ? WHERE k = ?`}
	return startFloor(w, func() { _ = db.Close() }), nil
}

// mysqlFloor is the floor on MySQL/MariaDB: an InnoDB table in the same
// database as the store, autocommit (one redo-log flush per commit with
// innodb_flush_log_at_trx_commit=1), the store's pool size (32).
func mysqlFloor(ctx context.Context, db *sql.DB, table string) (*floor, error) {
	if _, err := db.ExecContext(ctx, "CREATE TABLE `"+table+"` (k VARBINARY(255) PRIMARY KEY, state TINYINT NOT NULL, req BLOB, resp BLOB, created TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB"); err != nil {
		return nil, err
	}
	w := &sqlFloor{db: db,
		insSQL: "INSERT INTO `" + table + "` (k, state, req) VALUES (?, 0, ?)",
		updSQL: "UPDATE `" + table + "` SET state = 1, resp = ? WHERE k = ?"}
	return startFloor(w, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = db.ExecContext(ctx, "DROP TABLE IF EXISTS `"+table+"`")
		_ = db.Close()
	}), nil
}

// pgFloor is the floor on PostgreSQL: a table in its own schema, two
// autocommit statements (synchronous_commit as the server has it), a
// pgxpool with pgx's default size, as the store's.
type pgFloor struct {
	pool   *pgxpool.Pool
	schema string
}

func (f *pgFloor) insert(ctx context.Context, key string) error {
	_, err := f.pool.Exec(ctx, `INSERT INTO `+f.schema+`.floor (k, state, req) VALUES ($1, 0, $2)`, key, Body)
	return err
}

func (f *pgFloor) update(ctx context.Context, key string, resp []byte) error {
	_, err := f.pool.Exec(ctx, `UPDATE `+f.schema+`.floor SET state = 1, resp = $1 WHERE k = $2`, resp, key)
	return err
}

func postgresFloor(ctx context.Context, rawURL, schema string) (*floor, error) {
	pool, err := pgxpool.New(ctx, rawURL)
	if err != nil {
		return nil, err
	}
	for _, stmt := range []string{
		`CREATE SCHEMA ` + schema,
		`CREATE TABLE ` + schema + `.floor (k text PRIMARY KEY, state smallint NOT NULL, req bytea, resp bytea, created timestamptz NOT NULL DEFAULT now())`,
	} {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			pool.Close()
			return nil, err
		}
	}
	return startFloor(&pgFloor{pool, schema}, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+schema+` CASCADE`)
		pool.Close()
	}), nil
}

// redisFloorW is the floor on Redis: SET then SET of the key (with the
// gateway's 24 h TTL), under the server's own persistence settings, with
// go-redis's default pool, as the store's.
type redisFloorW struct {
	c      *goredis.Client
	prefix string
}

func (f *redisFloorW) insert(ctx context.Context, key string) error {
	return f.c.Set(ctx, f.prefix+key, Body, 24*time.Hour).Err()
}

func (f *redisFloorW) update(ctx context.Context, key string, resp []byte) error {
	return f.c.Set(ctx, f.prefix+key, resp, 24*time.Hour).Err()
}

func redisFloor(ctx context.Context, addr, prefix string) (*floor, error) {
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		return nil, err
	}
	return startFloor(&redisFloorW{c, prefix}, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		unlinkPrefix(ctx, c, prefix)
		_ = c.Close()
	}), nil
}

// unlinkPrefix deletes every key under prefix.
func unlinkPrefix(ctx context.Context, c *goredis.Client, prefix string) {
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, prefix+"*", 5000).Result()
		if err != nil {
			return
		}
		if len(keys) > 0 {
			_ = c.Unlink(ctx, keys...).Err()
		}
		if cursor = next; cursor == 0 {
			return
		}
	}
}

// mysqlDSN turns the harness's mysql:// URL into a go-sql-driver DSN.
func mysqlDSN(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	user := u.User.Username()
	pw, _ := u.User.Password()
	cred := user
	if pw != "" {
		cred += ":" + pw
	}
	return fmt.Sprintf("%s@tcp(%s)/%s?parseTime=true", cred, u.Host, strings.TrimPrefix(u.Path, "/")), nil
}

// openMySQLFloor opens its own pool on the store's server (the store's
// size, 32) and the floor's table in it.
func openMySQLFloor(ctx context.Context, rawURL, table string) (*floor, error) {
	dsn, err := mysqlDSN(rawURL)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(32)
	db.SetMaxIdleConns(32)
	f, err := mysqlFloor(ctx, db, table)
	if err != nil {
		_ = db.Close()
	}
	return f, err
}

// TestFloor checks the SQLite floor (the one every machine has): each
// request through it leaves its row inserted and then updated, and it
// answers as the trivial upstream does.
func TestFloor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const n, conc = 40, 8
	path := filepath.Join(t.TempDir(), "floor.db")
	fl, err := sqliteFloor(ctx, path, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer fl.close()
	client := Client(conc)
	defer client.CloseIdleConnections()
	if r := Load(ctx, client, fl.proxy.URL, FreshKeys(), n, conc); r.Errors != 0 || r.Requests != n {
		t.Fatalf("floor: %+v", r)
	}
	db, err := sql.Open("sqlite", sqlite.DSN(path, sqlite.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var done, all int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FILTER (WHERE state = 1 AND resp IS NOT NULL AND req IS NOT NULL), count(*) FROM floor`).Scan(&done, &all); err != nil {
		t.Fatal(err)
	}
	if done != n || all != n {
		t.Fatalf("floor rows: %d completed of %d, want %d of %d", done, all, n, n)
	}
}
