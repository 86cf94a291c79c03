package consumers_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/examples/consumers"
	"github.com/retrysafe/retrysafe/internal/testenv"
	"github.com/retrysafe/retrysafe/store/postgres"
	redisstore "github.com/retrysafe/retrysafe/store/redis"
)

// Local defaults of the servers; CI sets the RETRYSAFE_* variables.
const (
	defaultAMQPURL     = "amqp://guest:guest@127.0.0.1:5672/"
	defaultNATSURL     = "nats://127.0.0.1:4222"
	defaultPostgresURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	defaultRedisAddr   = "127.0.0.1:6379"
)

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// randomName returns prefix plus 12 random hex digits: a queue, stream,
// schema or message id of the test's own.
func randomName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

const (
	account = "acct-1"
	amount  = 500
)

// transferBody is the body of every test message: credit 500 to acct-1.
var transferBody = []byte(fmt.Sprintf(`{"account":%q,"amount":%d}`, account, amount))

// waitFor bounds every wait for a broker event; it is a deadlock guard,
// not a speed assertion.
const waitFor = 30 * time.Second

// world is one test's effect store (an SQLite ledger in the test's temp
// directory) and the retrysafe store Do uses.
type world struct {
	ledger *consumers.Ledger
	store  retrysafe.Store
}

// storeKinds are the retrysafe stores every broker test runs with: the
// ledger's own SQLite file, PostgreSQL (own schema) and Redis (own key
// prefix), the last two with the ledger still in SQLite.
var storeKinds = []struct {
	name string
	open func(t *testing.T, l *consumers.Ledger) retrysafe.Store
}{
	{"sqlite", func(t *testing.T, l *consumers.Ledger) retrysafe.Store { return l.Records() }},
	{"postgres", openPostgres},
	{"redis", openRedis},
}

// forEachStore runs test as a parallel subtest per store kind.
func forEachStore(t *testing.T, test func(t *testing.T, w *world)) {
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			l := newLedger(t)
			test(t, &world{ledger: l, store: kind.open(t, l)})
		})
	}
}

func newLedger(t *testing.T) *consumers.Ledger {
	t.Helper()
	ctx := context.Background()
	l, err := consumers.OpenLedger(ctx, filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if err := l.OpenAccount(ctx, account); err != nil {
		t.Fatal(err)
	}
	return l
}

// openPostgres returns a PostgreSQL store in a schema of the test's own,
// dropped when the test ends.
func openPostgres(t *testing.T, _ *consumers.Ledger) retrysafe.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	schema := randomName("consumers_")
	s, err := postgres.Open(ctx, env("RETRYSAFE_POSTGRES_URL", defaultPostgresURL), postgres.Config{Schema: schema})
	if err != nil {
		testenv.Unreachable(t, "PostgreSQL", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := s.Pool().Exec(ctx, `DROP SCHEMA "`+schema+`" CASCADE`); err != nil {
			t.Errorf("dropping schema %s: %v", schema, err)
		}
		s.Close()
	})
	return s
}

// consumer returns a Consumer on w's store that applies transfers with
// apply (default: the ledger's Credit).
func (w *world) consumer(apply func(context.Context, string, consumers.Transfer) (consumers.Receipt, error)) *consumers.Consumer {
	if apply == nil {
		apply = w.ledger.Credit
	}
	return &consumers.Consumer{
		Do:     retrysafe.DoConfig{Store: w.store, Scope: "transfers"},
		Apply:  apply,
		Logger: slog.New(slog.DiscardHandler),
	}
}

// assertOnce checks that the message's effect was applied exactly once.
func (w *world) assertOnce(t *testing.T, messageID string) {
	t.Helper()
	ctx := context.Background()
	n, err := w.ledger.Entries(ctx, messageID)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("ledger has %d entries for the message, want exactly 1", n)
	}
	b, err := w.ledger.Balance(ctx, account)
	if err != nil {
		t.Fatal(err)
	}
	if b != amount {
		t.Errorf("balance = %d, want %d (one credit)", b, amount)
	}
}

// failFirst wraps apply so that its first call fails with a transient
// error before applying anything.
func failFirst(apply func(context.Context, string, consumers.Transfer) (consumers.Receipt, error)) func(context.Context, string, consumers.Transfer) (consumers.Receipt, error) {
	var once sync.Once
	return func(ctx context.Context, id string, tr consumers.Transfer) (consumers.Receipt, error) {
		failed := false
		once.Do(func() { failed = true })
		if failed {
			return consumers.Receipt{}, errors.New("ledger database briefly unavailable")
		}
		return apply(ctx, id, tr)
	}
}

// claimWatch is the store with a signal on every Claim: a test uses it to
// know that a second delivery has reached Do while the first is still
// applying the effect. Every call goes to the real store.
type claimWatch struct {
	retrysafe.Store
	claimed chan struct{}
}

func watchClaims(s retrysafe.Store) *claimWatch {
	return &claimWatch{Store: s, claimed: make(chan struct{}, 64)}
}

func (c *claimWatch) Claim(ctx context.Context, p *retrysafe.ClaimParams) (*retrysafe.ClaimResult, error) {
	res, err := c.Store.Claim(ctx, p)
	select {
	case c.claimed <- struct{}{}:
	default:
	}
	return res, err
}

// await waits for ch, failing the test after waitFor.
func await[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitFor):
		t.Fatalf("timed out after %s waiting for %s", waitFor, what)
		panic("unreachable")
	}
}

// openRedis returns a Redis store under a key prefix of the test's own,
// whose keys are deleted when the test ends.
func openRedis(t *testing.T, _ *consumers.Ledger) retrysafe.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client := goredis.NewClient(&goredis.Options{Addr: env("RETRYSAFE_REDIS_ADDR", defaultRedisAddr)})
	if err := client.Ping(ctx).Err(); err != nil {
		_ = client.Close()
		testenv.Unreachable(t, "Redis", err)
	}
	prefix := randomName("retrysafe-consumers-") + ":"
	s, err := redisstore.New(client, redisstore.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		iter := client.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			if err := client.Del(ctx, iter.Val()).Err(); err != nil {
				t.Errorf("deleting %s: %v", iter.Val(), err)
			}
		}
		if err := iter.Err(); err != nil {
			t.Errorf("scanning prefix %s: %v", prefix, err)
		}
		_ = client.Close()
	})
	return s
}
