package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/internal/scopehash"
	"github.com/retrysafe/retrysafe/internal/storeurl"
	"github.com/retrysafe/retrysafe/internal/testenv"
	"github.com/retrysafe/retrysafe/store/memory"
	"github.com/retrysafe/retrysafe/store/mysql"
	"github.com/retrysafe/retrysafe/store/postgres"
)

// cliBackend is a store the admin commands are tested against: a URL the
// command opens, and the same store opened by the test to arrange records.
type cliBackend struct {
	name  string
	url   string
	store retrysafe.Store
	open  storeOpener
}

// cliBackends returns the memory and SQLite stores, and PostgreSQL,
// MySQL/MariaDB and Redis when they are reachable (skipped otherwise; under
// CI=true an unreachable server fails the test). Each is isolated: its own
// SQLite file, PostgreSQL schema, MySQL table and Redis key prefix.
func cliBackends(t *testing.T) []cliBackend {
	t.Helper()
	var out []cliBackend

	out = append(out, memoryBackend(t))

	out = append(out, openCLIBackend(t, "sqlite", "sqlite:"+filepath.Join(t.TempDir(), "records.db")))

	suffix := cliRandom(t)
	pgURL := os.Getenv("RETRYSAFE_POSTGRES_URL")
	if pgURL == "" {
		pgURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	if u, err := url.Parse(pgURL); err == nil {
		q := u.Query()
		q.Set(postgres.URLParamSchema, "rs_cli_"+suffix)
		u.RawQuery = q.Encode()
		if b, ok := openCLIBackendIfUp(t, "postgres", u.String()); ok {
			schema := "rs_cli_" + suffix
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_, _ = b.store.(*postgres.Store).Pool().Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
			})
			out = append(out, b)
		}
	}

	// The same PostgreSQL through PgBouncer in transaction mode
	// (docs/postgres.md), in a schema of its own.
	bouncerURL := os.Getenv("RETRYSAFE_PGBOUNCER_URL")
	if bouncerURL == "" {
		bouncerURL = "postgres://postgres@127.0.0.1:6432/test?sslmode=disable"
	}
	if u, err := url.Parse(bouncerURL); err == nil {
		schema := "rs_clipgb_" + suffix
		q := u.Query()
		q.Set(postgres.URLParamSchema, schema)
		q.Set(postgres.URLParamPoolMode, postgres.PoolModeTransaction)
		u.RawQuery = q.Encode()
		if b, ok := openCLIBackendIfUp(t, "postgres+pgbouncer", u.String()); ok {
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_, _ = b.store.(*postgres.Store).Pool().Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
			})
			out = append(out, b)
		}
	}

	mysqlURL := os.Getenv("RETRYSAFE_MYSQL_URL")
	if mysqlURL == "" {
		mysqlURL = "mysql://root@127.0.0.1:3306/test"
	}
	if u, err := url.Parse(mysqlURL); err == nil {
		table := "rs_cli_" + suffix
		q := u.Query()
		q.Set(mysql.URLParamTable, table)
		u.RawQuery = q.Encode()
		if b, ok := openCLIBackendIfUp(t, "mysql", u.String()); ok {
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				db := b.store.(*mysql.Store).DB()
				for _, stmt := range testenv.MySQLDropStatements(table) {
					_, _ = db.ExecContext(ctx, stmt)
				}
			})
			out = append(out, b)
		}
	}

	redisAddr := os.Getenv("RETRYSAFE_REDIS_ADDR")
	if redisAddr == "" {
		redisAddr = "127.0.0.1:6379"
	}
	redisURL := "redis://" + redisAddr + "/0?" + storeurl.ParamPrefix + "=" + url.QueryEscape("retrysafe-cli-test:"+suffix+":")
	if b, ok := openCLIBackendIfUp(t, "redis", redisURL); ok {
		t.Cleanup(func() { cliDeleteAll(b.store) })
		out = append(out, b)
	}
	return out
}

// memoryBackend returns a memory store that the commands under test reach
// through their opener (a memory: URL opened by a command would be a new,
// empty store).
func memoryBackend(t *testing.T) cliBackend {
	mem := memory.New(memory.Config{JanitorInterval: -1})
	t.Cleanup(func() { _ = mem.Close() })
	return cliBackend{
		name: "memory", url: "memory:", store: mem,
		open: func(context.Context, string, storeurl.Options) (retrysafe.Store, func() error, error) {
			return mem, func() error { return nil }, nil
		},
	}
}

func openCLIBackend(t *testing.T, name, rawURL string) cliBackend {
	t.Helper()
	b, ok := openCLIBackendIfUp(t, name, rawURL)
	if !ok {
		t.Fatalf("open %s: unreachable", name)
	}
	return b
}

// openCLIBackendIfUp opens rawURL for the test; false when the server is
// unreachable (a failure under CI=true).
func openCLIBackendIfUp(t *testing.T, name, rawURL string) (cliBackend, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, closeStore, err := storeurl.Open(ctx, rawURL)
	if err == nil {
		if p, ok := s.(admin.Pinger); ok {
			err = p.Ping(ctx)
		}
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s at %s is unreachable (CI=true): %v", name, storeurl.Redact(rawURL), err)
		}
		t.Logf("%s at %s is unreachable, skipping it: %v", name, storeurl.Redact(rawURL), err)
		if closeStore != nil {
			_ = closeStore()
		}
		return cliBackend{}, false
	}
	t.Cleanup(func() { _ = closeStore() })
	return cliBackend{name: name, url: rawURL, store: s, open: storeurl.OpenWith}, true
}

func cliRandom(t *testing.T) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// cliDeleteAll removes every record of a store (the test's Redis prefix).
func cliDeleteAll(s retrysafe.Store) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a := s.(admin.Admin)
	recs, _ := a.List(ctx, &admin.ListParams{Limit: 10000})
	for _, r := range recs {
		_ = a.Delete(ctx, r.Scope, r.Key)
	}
}

// cliRun runs a command and returns its stdout, stderr and error.
func cliRun(t *testing.T, b cliBackend, cmd func(storeOpener) func(context.Context, []string, *bytes.Buffer, *bytes.Buffer) error, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := cmd(b.open)(ctx, args, &stdout, &stderr)
	return stdout.String(), stderr.String(), err
}

func keysCmdForTest(open storeOpener) func(context.Context, []string, *bytes.Buffer, *bytes.Buffer) error {
	return func(ctx context.Context, args []string, stdout, stderr *bytes.Buffer) error {
		return runKeys(ctx, args, stdout, stderr, open)
	}
}

// Scopes of the arranged records: the gateway's hash of two credentials.
var (
	aliceScope = scopehash.Sum("Bearer alice")
	bobScope   = scopehash.Sum("Bearer bob")
)

// cliRecord arranges one record: completed with status (and a body) when
// status > 0, else left processing.
type cliRecord struct {
	scope, key string
	status     int
	at         time.Time // claim and completion time
	ttl        time.Duration
}

func cliArrange(t *testing.T, s retrysafe.Store, recs ...cliRecord) map[string]string {
	t.Helper()
	ctx := context.Background()
	tokens := map[string]string{}
	for _, r := range recs {
		token := retrysafe.NewToken()
		tokens[r.key] = token
		res, err := s.Claim(ctx, &retrysafe.ClaimParams{
			Scope: r.scope, Key: r.key, Fingerprint: "fp-" + r.key, Token: token, Now: r.at, Lease: time.Minute,
		})
		if err != nil || !res.Claimed {
			t.Fatalf("claim %s: %v (claimed %v)", r.key, err, res != nil && res.Claimed)
		}
		if r.status == 0 {
			continue
		}
		err = s.Complete(ctx, &retrysafe.CompleteParams{
			Scope: r.scope, Key: r.key, Token: token, Now: r.at, TTL: r.ttl,
			Response: &retrysafe.Response{
				Status: r.status,
				Header: map[string][]string{"Content-Type": {"application/json"}},
				Body:   []byte(fmt.Sprintf(`{"secret":"body-of-%s"}`, r.key)),
			},
		})
		if err != nil {
			t.Fatalf("complete %s: %v", r.key, err)
		}
	}
	return tokens
}

func TestKeys(t *testing.T) {
	t.Parallel()
	for _, b := range cliBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			now := time.Now()
			tokens := cliArrange(t, b.store,
				cliRecord{scope: aliceScope, key: "pay-completed", status: 201, at: now, ttl: time.Hour},
				cliRecord{scope: aliceScope, key: "pay-failed", status: 502, at: now, ttl: time.Hour},
				cliRecord{scope: bobScope, key: "pay-processing", at: now},
				cliRecord{scope: aliceScope, key: "shared-key", status: 200, at: now, ttl: time.Hour},
				cliRecord{scope: bobScope, key: "shared-key", status: 200, at: now, ttl: time.Hour},
				cliRecord{scope: "", key: "anonymous-key", status: 409, at: now, ttl: time.Hour},
			)
			run := func(args ...string) (string, error) {
				t.Helper()
				out, _, err := cliRun(t, b, keysCmdForTest, append(args, "--store", b.url)...)
				for _, tok := range tokens {
					if strings.Contains(out, tok) {
						t.Fatalf("keys %v printed an owner token", args)
					}
				}
				return out, err
			}

			t.Run("list", func(t *testing.T) {
				out, err := run("list")
				if err != nil {
					t.Fatal(err)
				}
				for _, want := range []string{"SCOPE", "pay-completed", "completed", "pay-failed", "failed", "pay-processing", "processing", aliceScope[:12] + "…", "502"} {
					if !strings.Contains(out, want) {
						t.Errorf("list output lacks %q:\n%s", want, out)
					}
				}
				if strings.Contains(out, "body-of") {
					t.Errorf("list printed a body:\n%s", out)
				}
			})

			t.Run("list json and paging", func(t *testing.T) {
				var all []keysJSONRecord
				after := ""
				for page := 0; ; page++ {
					args := []string{"list", "--json", "--limit", "2"}
					if after != "" {
						args = append(args, "--after", after)
					}
					out, err := run(args...)
					if err != nil {
						t.Fatal(err)
					}
					var res struct {
						Records []keysJSONRecord `json:"records"`
						Next    string           `json:"next"`
					}
					if err := json.Unmarshal([]byte(out), &res); err != nil {
						t.Fatalf("page %d is not JSON: %v\n%s", page, err, out)
					}
					all = append(all, res.Records...)
					if res.Next == "" {
						break
					}
					after = res.Next
					if page > 5 {
						t.Fatal("paging does not end")
					}
				}
				states := map[string]string{}
				for _, r := range all {
					states[r.Scope+"/"+r.Key] = r.State
				}
				want := map[string]string{
					aliceScope + "/pay-completed": "completed",
					aliceScope + "/pay-failed":    "failed",
					bobScope + "/pay-processing":  "processing",
					aliceScope + "/shared-key":    "completed",
					bobScope + "/shared-key":      "completed",
					"/anonymous-key":              "failed",
				}
				if len(all) != len(want) {
					t.Fatalf("paged through %d records, want %d: %v", len(all), len(want), states)
				}
				for k, st := range want {
					if states[k] != st {
						t.Errorf("%s: state %q, want %q", k, states[k], st)
					}
				}
			})

			t.Run("list one scope by prefix", func(t *testing.T) {
				out, err := run("list", "--scope", bobScope[:10])
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(out, "pay-processing") || strings.Contains(out, "pay-completed") {
					t.Errorf("--scope %s listed the wrong records:\n%s", bobScope[:10], out)
				}
			})

			t.Run("empty scope", func(t *testing.T) {
				out, err := run("list", "--scope", "-")
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(out, "anonymous-key") || strings.Contains(out, "pay-") {
					t.Errorf("list --scope - listed the wrong records:\n%s", out)
				}
				out, err = run("show", "--scope", "-", "anonymous-key")
				if err != nil || !strings.Contains(out, "callers without credentials") || !strings.Contains(out, "409") {
					t.Errorf("show --scope - anonymous-key: %v\n%s", err, out)
				}
			})

			t.Run("show", func(t *testing.T) {
				out, err := run("show", "pay-completed")
				if err != nil {
					t.Fatal(err)
				}
				for _, want := range []string{aliceScope, "201 Created", "Content-Type: application/json", "fp-pay-completed", "add --bodies"} {
					if !strings.Contains(out, want) {
						t.Errorf("show lacks %q:\n%s", want, out)
					}
				}
				if strings.Contains(out, "body-of") {
					t.Errorf("show printed the body without --bodies:\n%s", out)
				}
				out, err = run("show", "--bodies", "--identity", "Bearer alice", "pay-completed")
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(out, "body-of-pay-completed") {
					t.Errorf("show --bodies lacks the body:\n%s", out)
				}
			})

			t.Run("show json", func(t *testing.T) {
				out, err := run("show", "--json", "--scope", aliceScope, "pay-failed")
				if err != nil {
					t.Fatal(err)
				}
				var r keysJSONRecord
				if err := json.Unmarshal([]byte(out), &r); err != nil {
					t.Fatalf("not JSON: %v\n%s", err, out)
				}
				if r.State != "failed" || r.Status != 502 || r.Body != nil || r.ExpiresAt == nil {
					t.Errorf("show --json = %+v", r)
				}
			})

			t.Run("show ambiguous key", func(t *testing.T) {
				_, err := run("show", "shared-key")
				var ue *usageError
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), "2 scopes") {
					t.Errorf("show of a key in two scopes: err = %v, want a usage error naming 2 scopes", err)
				}
			})

			t.Run("show missing", func(t *testing.T) {
				if _, err := run("show", "no-such-key"); err == nil || !strings.Contains(err.Error(), "no record") {
					t.Errorf("show of a missing key: err = %v", err)
				}
			})

			t.Run("delete", func(t *testing.T) {
				out, err := run("delete", "--scope", bobScope[:8], "shared-key")
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(out, "deleted") || !strings.Contains(out, bobScope) {
					t.Errorf("delete output:\n%s", out)
				}
				_, err = b.store.Get(context.Background(), &retrysafe.GetParams{Scope: bobScope, Key: "shared-key", Now: time.Now()})
				if !errors.Is(err, retrysafe.ErrNotFound) {
					t.Errorf("after delete, Get: %v, want ErrNotFound", err)
				}
				if _, err := b.store.Get(context.Background(), &retrysafe.GetParams{Scope: aliceScope, Key: "shared-key", Now: time.Now()}); err != nil {
					t.Errorf("delete removed the other scope's record too: %v", err)
				}
				if _, err := run("delete", "--scope", bobScope, "shared-key"); err == nil {
					t.Error("a second delete succeeded")
				}
			})
		})
	}
}

func TestKeysUsage(t *testing.T) {
	t.Parallel()
	b := memoryBackend(t)
	for name, args := range map[string][]string{
		"no subcommand":      {},
		"unknown subcommand": {"frobnicate"},
		"show without key":   {"show"},
		"list with argument": {"list", "extra"},
		"scope and identity": {"list", "--scope", "ab", "--identity", "x"},
		"zero limit":         {"list", "--limit", "0"},
		"bad cursor":         {"list", "--after", "!!"},
		"after on delete":    {"delete", "k", "--after", "x"},
		"unknown flag":       {"list", "--nope"},
	} {
		_, _, err := cliRun(t, b, keysCmdForTest, args...)
		var ue *usageError
		if !errors.As(err, &ue) {
			t.Errorf("%s: err = %v, want a usage error", name, err)
		}
	}
	out, _, err := cliRun(t, b, keysCmdForTest, "--help")
	if !errors.Is(err, flag.ErrHelp) || !strings.Contains(out, "Examples:") || !strings.Contains(out, "keys list") {
		t.Errorf("--help: err %v, output:\n%s", err, out)
	}
	out, _, err = cliRun(t, b, keysCmdForTest, "list")
	if err != nil || !strings.Contains(out, "no records") {
		t.Errorf("list of an empty store: %v\n%s", err, out)
	}
}

func TestKeysStateName(t *testing.T) {
	t.Parallel()
	now := time.Now()
	for name, tc := range map[string]struct {
		rec  retrysafe.Record
		want string
	}{
		"processing":    {retrysafe.Record{State: retrysafe.StateProcessing, LeaseUntil: now.Add(time.Second)}, "processing"},
		"lease expired": {retrysafe.Record{State: retrysafe.StateProcessing, LeaseUntil: now.Add(-time.Second)}, "processing (lease expired)"},
		"abandoned":     {retrysafe.Record{State: retrysafe.StateProcessing, LeaseUntil: now.Add(time.Second), Abandoned: true}, "processing (abandoned: outcome unknown)"},
		"resolved not done": {retrysafe.Record{State: retrysafe.StateProcessing, Attempt: 2, LeaseUntil: now.Add(-time.Second), Abandoned: true,
			Checkpoint: &retrysafe.Checkpoint{Name: "retrysafe-not-done attempt=2"}}, "processing (resolved not done: awaiting retry)"},
		"completed 201":      {retrysafe.Record{State: retrysafe.StateCompleted, ExpiresAt: now.Add(time.Hour), Response: &retrysafe.Response{Status: 201}}, "completed"},
		"completed 399":      {retrysafe.Record{State: retrysafe.StateCompleted, ExpiresAt: now.Add(time.Hour), Response: &retrysafe.Response{Status: 399}}, "completed"},
		"failed 400":         {retrysafe.Record{State: retrysafe.StateCompleted, ExpiresAt: now.Add(time.Hour), Response: &retrysafe.Response{Status: 400}}, "failed"},
		"failed 503":         {retrysafe.Record{State: retrysafe.StateCompleted, ExpiresAt: now.Add(time.Hour), Response: &retrysafe.Response{Status: 503}}, "failed"},
		"expired":            {retrysafe.Record{State: retrysafe.StateCompleted, ExpiresAt: now, Response: &retrysafe.Response{Status: 201}}, "expired"},
		"expired and failed": {retrysafe.Record{State: retrysafe.StateCompleted, ExpiresAt: now.Add(-time.Hour), Response: &retrysafe.Response{Status: 500}}, "expired"},
	} {
		if got := keysState(&tc.rec, now); got != tc.want {
			t.Errorf("%s: keysState = %q, want %q", name, got, tc.want)
		}
	}
}

// TestKeysShowExpiredAmongMany: show finds an expired record that is not
// swept yet, whatever the keys around it. It once listed from just before
// the key, a page of 100, and fell back to Get, which does not return
// expired records: with 199 keys sorting before it, order-2 was "no
// record" while order-11 in the same state was shown.
func TestKeysShowExpiredAmongMany(t *testing.T) {
	t.Parallel()
	for _, b := range cliBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			now := time.Now()
			// 199 keys sort before order-2, 11 of them between order-1 and
			// order-11. order-11 and order-2 completed two hours ago with
			// a TTL of one: expired.
			var recs []cliRecord
			for _, key := range ordersBefore2() {
				r := cliRecord{scope: aliceScope, key: key, at: now}
				if key == "order-11" {
					r = cliRecord{scope: aliceScope, key: key, status: 200, at: now.Add(-2 * time.Hour), ttl: time.Hour}
				}
				recs = append(recs, r)
			}
			recs = append(recs, cliRecord{scope: aliceScope, key: "order-2", status: 200, at: now.Add(-2 * time.Hour), ttl: time.Hour})
			cliArrange(t, b.store, recs...) // 199 keys sort before order-2
			for _, key := range []string{"order-2", "order-11"} {
				for _, scopeArgs := range [][]string{{"--scope", aliceScope}, {"--identity", "Bearer alice"}, nil} {
					args := append([]string{"show", "--json", key, "--store", b.url}, scopeArgs...)
					out, _, err := cliRun(t, b, keysCmdForTest, args...)
					if err != nil {
						t.Errorf("keys show %s %v: %v", key, scopeArgs, err)
						continue
					}
					var r keysJSONRecord
					if err := json.Unmarshal([]byte(out), &r); err != nil {
						t.Fatalf("not JSON: %v\n%s", err, out)
					}
					if r.Key != key || r.Scope != aliceScope || r.State != "expired" {
						t.Errorf("keys show %s %v = %s/%s %s, want it expired in alice's scope", key, scopeArgs, r.Scope, r.Key, r.State)
					}
				}
			}
		})
	}
}

// ordersBefore2 returns 199 keys that sort before "order-2": order-1,
// order-10 … order-19, order-100 … order-199 and order-1200 … order-1287.
// Only order-10 and order-100 … order-109 sort between order-1 and
// order-11.
func ordersBefore2() []string {
	keys := []string{"order-1"}
	for _, r := range [][2]int{{10, 19}, {100, 199}, {1200, 1287}} {
		for i := r[0]; i <= r[1]; i++ {
			keys = append(keys, fmt.Sprintf("order-%d", i))
		}
	}
	return keys
}
