// Command torture runs retrysafe's Jepsen-style torture test (package
// internal/torture) against one or more shared stores and writes a report
// per store: report.md, report.json, history.json and the gateways' logs,
// plus porcupine's HTML view of any store-level history that is not
// linearizable. It exits 1 when an anomaly is found.
//
//	go run ./internal/torture/cmd/torture -stores sqlite,postgres,redis,mysql -ops 10000 -out torture-out
//	go run ./internal/torture/cmd/torture -resolve -stores sqlite,postgres,redis,mysql -ops 12000 -out torture-resolve
//	go run ./internal/torture/cmd/torture -check torture-out/postgres   # judge a saved history again
//
// -resolve runs the gateways with a resolve URL that the upstream answers
// from its own effect log, and the completer: no operation may run twice,
// and every unknown outcome must end resolved.
package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	awsdynamodb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"

	"github.com/retrysafe/retrysafe/internal/storeurl"
	"github.com/retrysafe/retrysafe/internal/torture"
	"github.com/retrysafe/retrysafe/store/dynamodb"
	"github.com/retrysafe/retrysafe/store/mysql"
)

func main() {
	var (
		stores   = flag.String("stores", "sqlite,postgres,redis", "comma-separated stores to torture: sqlite, postgres, redis, mysql, dynamodb")
		pgURL    = flag.String("postgres", envOr("RETRYSAFE_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL `URL` (a schema of its own is created per run)")
		redis    = flag.String("redis", envOr("RETRYSAFE_REDIS_ADDR", "127.0.0.1:6379"), "Redis `address` (a key prefix of its own is used per run)")
		myURL    = flag.String("mysql", envOr("RETRYSAFE_MYSQL_URL", "mysql://root@127.0.0.1:3306/test"), "MySQL or MariaDB `URL` (a table of its own is used per run)")
		dynamo   = flag.String("dynamodb", envOr("RETRYSAFE_DYNAMODB_ENDPOINT", "http://127.0.0.1:8000"), "DynamoDB endpoint `URL` (a table of its own is made per run; credentials from the AWS SDK's chain)")
		dur      = flag.Duration("duration", time.Minute, "length of each store's run (unless -ops ends it)")
		ops      = flag.Int64("ops", 0, "end each store's run after this many client requests (0: -duration decides)")
		gateways = flag.Int("gateways", 3, "gateway processes on PostgreSQL, Redis and MySQL (SQLite always runs 2 on one file)")
		clients  = flag.Int("clients", 12, "concurrent clients")
		tenants  = flag.Int("tenants", 3, "tenants (Authorization values)")
		lease    = flag.Duration("lease", 3*time.Second, "the gateways' --lease")
		faults   = flag.Bool("faults", true, "inject faults")
		storeOps = flag.Int("store-ops", 300, "store-level linearizability check: calls per worker (0 skips it)")
		out      = flag.String("out", "torture-out", "output `directory`")
		race     = flag.Bool("race", false, "build the retrysafe binary with -race")
		binary   = flag.String("binary", "", "retrysafe binary to run (default: build ./cmd/retrysafe)")
		resolve  = flag.Bool("resolve", false, "resolve mode: the gateways ask the upstream's resolve URL about unknown outcomes (--resolve-url) and run the completer")
	)
	recheck := flag.String("check", "", "check the history a run wrote to this `directory` again (no new run)")
	flag.Parse()
	if *recheck != "" {
		h, err := torture.LoadHistory(*recheck)
		if err != nil {
			fatal(err)
		}
		res := torture.Check(h, torture.CheckOptionsFor(h.Params))
		fmt.Print(torture.NewReport(h, res, nil).Markdown())
		if len(res.Anomalies) > 0 {
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fatal(err)
	}
	bin := *binary
	if bin == "" {
		dir, err := os.MkdirTemp("", "retrysafe-torture-")
		if err != nil {
			fatal(err)
		}
		defer os.RemoveAll(dir)
		fmt.Fprintln(os.Stderr, "building retrysafe …")
		if bin, err = torture.BuildBinary(ctx, dir, *race); err != nil {
			fatal(err)
		}
	}
	failed := false
	for _, name := range strings.Split(*stores, ",") {
		dir := filepath.Join(*out, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			fatal(err)
		}
		storeURL, cleanup, err := isolate(ctx, name, urls{postgres: *pgURL, redis: *redis, mysql: *myURL, dynamodb: *dynamo}, dir)
		if err != nil {
			fatal(err)
		}
		cfg := torture.Config{Binary: bin, Store: storeURL, Gateways: *gateways, Clients: *clients, Tenants: *tenants,
			Duration: *dur, MaxOps: *ops, Lease: *lease, Faults: *faults, Resolve: *resolve, Dir: dir,
			Logf: func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }}
		if name == "sqlite" {
			cfg.Gateways = 2
		}
		if *ops > 0 {
			cfg.Duration = 24 * time.Hour
		}
		start := time.Now()
		h, err := torture.Run(ctx, cfg)
		if err != nil {
			cleanup()
			fatal(err)
		}
		res := torture.Check(h, torture.CheckOptionsFor(h.Params))
		var storeResults []*torture.StoreResult
		if *storeOps > 0 {
			sr, err := linearizability(ctx, name, storeURL, *storeOps, dir)
			if err != nil {
				cleanup()
				fatal(err)
			}
			storeResults = append(storeResults, sr)
		}
		cleanup()
		rep := torture.NewReport(h, res, storeResults)
		if err := rep.WriteFiles(dir, h); err != nil {
			fatal(err)
		}
		as := rep.Anomalies()
		injected := 0
		for _, n := range rep.Faults {
			injected += n
		}
		unknown := ""
		if u := res.Unknowns; u != nil {
			unknown = fmt.Sprintf(", %d unknown outcomes (resolver %d, retry %d, completer %d, owner %d, unresolved %d; %d refused by the fence)",
				u.Total, u.Resolver, u.Retry, u.Completer, u.Owner, u.Unresolved, u.Refused)
		}
		fmt.Printf("%s: %d requests, %d effects, %d faults injected, %d repeats %v%s, %d anomalies in %s; report in %s\n",
			name, res.Requests, res.Effects, injected, len(res.Repeats), res.RepeatsByCause(), unknown, len(as), time.Since(start).Round(time.Second), filepath.Join(dir, "report.md"))
		if len(as) > 0 {
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}

// linearizability records a store-level history against the store through
// its Go API and checks it.
func linearizability(ctx context.Context, name, storeURL string, ops int, dir string) (*torture.StoreResult, error) {
	s, closeStore, err := storeurl.Open(ctx, storeURL)
	if err != nil {
		return nil, err
	}
	defer closeStore()
	h := torture.RecordStore(ctx, s, torture.StoreWorkload{Ops: ops})
	return torture.CheckStore(name, h, 5*time.Minute, filepath.Join(dir, "linearizability.html"))
}

// urls are where the shared stores run.
type urls struct {
	postgres, redis, mysql, dynamodb string
}

// isolate returns a --store URL of the store's own for this run, and a
// function that removes what the run left.
func isolate(ctx context.Context, name string, at urls, dir string) (string, func(), error) {
	pgURL, redisAddr := at.postgres, at.redis
	id := randomName()
	switch name {
	case "sqlite":
		return "sqlite:" + filepath.Join(dir, "retrysafe.db"), func() {}, nil
	case "postgres":
		conn, err := pgx.Connect(ctx, pgURL)
		if err != nil {
			return "", nil, fmt.Errorf("postgres: %w", err)
		}
		defer conn.Close(ctx)
		schema := "rs_torture_" + id
		if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
			return "", nil, err
		}
		u, err := url.Parse(pgURL)
		if err != nil {
			return "", nil, err
		}
		q := u.Query()
		q.Set("retrysafe_schema", schema)
		u.RawQuery = q.Encode()
		return u.String(), func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if c, err := pgx.Connect(ctx, pgURL); err == nil {
				_, _ = c.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
				_ = c.Close(ctx)
			}
		}, nil
	case "redis":
		prefix := "rs_torture_" + id + ":"
		u := url.URL{Scheme: "redis", Host: redisAddr, Path: "/0", RawQuery: url.Values{storeurl.ParamPrefix: {prefix}}.Encode()}
		return u.String(), func() {
			c := goredis.NewClient(&goredis.Options{Addr: redisAddr})
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
			for iter.Next(ctx) {
				_ = c.Del(ctx, iter.Val()).Err()
			}
		}, nil
	case "mysql":
		return isolateMySQL(ctx, at.mysql, "rs_torture_"+id)
	case "dynamodb":
		return isolateDynamoDB(ctx, at.dynamodb, "rs_torture_"+id)
	}
	return "", nil, errors.New("unknown store " + name + "; use sqlite, postgres, redis, mysql or dynamodb")
}

// isolateMySQL returns a --store URL whose records live in a table of
// their own (the store creates it, with its migrations table and claim
// procedure, when the first gateway starts), and a function that drops
// them.
func isolateMySQL(ctx context.Context, rawURL, table string) (string, func(), error) {
	dc, _, err := mysql.ParseURL(rawURL)
	if err != nil {
		return "", nil, err
	}
	connector, err := mysqldriver.NewConnector(dc)
	if err != nil {
		return "", nil, fmt.Errorf("mysql: %w", err)
	}
	db := sql.OpenDB(connector)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return "", nil, fmt.Errorf("mysql: %w", err)
	}
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != "mysql" {
		db.Close()
		return "", nil, fmt.Errorf("-mysql: want a mysql:// URL, not %q", storeurl.Redact(rawURL))
	}
	q := u.Query()
	q.Set(mysql.URLParamTable, table)
	u.RawQuery = q.Encode()
	return u.String(), func() {
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, stmt := range []string{"DROP TABLE IF EXISTS `" + table + "`", "DROP TABLE IF EXISTS `" + table + "_migrations`",
			"DROP PROCEDURE IF EXISTS `" + table + "_claim`"} {
			if _, err := db.ExecContext(ctx, stmt); err != nil {
				fmt.Fprintf(os.Stderr, "torture: mysql cleanup: %s: %v\n", stmt, err)
			}
		}
	}, nil
}

func randomName() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "torture:", err)
	os.Exit(2)
}

// isolateDynamoDB creates a table of its own on the endpoint and returns
// its --store URL (region us-east-1 unless AWS_REGION says otherwise), and
// a function that deletes it.
func isolateDynamoDB(ctx context.Context, endpoint, table string) (string, func(), error) {
	region := envOr("AWS_REGION", "us-east-1")
	raw := "dynamodb://" + table + "?" + url.Values{"region": {region}, "endpoint": {endpoint}}.Encode()
	s, err := dynamodb.Open(ctx, raw, dynamodb.Config{})
	if err != nil {
		return "", nil, err
	}
	if err := s.Migrate(ctx); err != nil {
		return "", nil, fmt.Errorf("dynamodb: %w", err)
	}
	return raw, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = s.Client().DeleteTable(ctx, &awsdynamodb.DeleteTableInput{TableName: &table})
	}, nil
}
