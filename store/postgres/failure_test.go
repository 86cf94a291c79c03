package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/retrysafe/retrysafe"
)

// waitForBlockedBackend returns the pid of the backend that waits on a lock
// while running a statement on schema's table.
func waitForBlockedBackend(t *testing.T, pool *pgxpool.Pool, schema string) int32 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var pid int32
		err := pool.QueryRow(t.Context(), `SELECT pid FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid() AND strpos(query, $1) > 0
			LIMIT 1`, `"`+schema+`"`).Scan(&pid)
		if err == nil {
			return pid
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the claim never blocked on the held lock")
	return 0
}

// TestBackendKilledMidClaim holds a lock so that a claim blocks inside its
// statement, terminates the claim's backend with pg_terminate_backend, and
// checks that the claim fails with ErrStoreUnavailable and leaves no wedged
// record: once the lock holder is gone the key is claimed normally.
func TestBackendKilledMidClaim(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		// setup prepares the row (through s) and returns the SQL the lock
		// holder runs in its open transaction.
		setup       func(t *testing.T, s retrysafe.Store) string
		wantAttempt int
	}{
		"new key held by an uncommitted insert": {
			setup: func(t *testing.T, s retrysafe.Store) string {
				return `INSERT INTO {{t}} (scope, key, fingerprint, state, token, attempt, created_at_ns, updated_at_ns, lease_until_ns)
					VALUES ('` + scope + `', 'k', 'x', 'processing', 'holder', 1, 0, 0, 0)`
			},
			wantAttempt: 1,
		},
		"expired lease held by a row lock": {
			setup: func(t *testing.T, s retrysafe.Store) string {
				mustClaim(t, s, claimP("k", fpA, at(0)))
				return `SELECT 1 FROM {{t}} WHERE scope = '` + scope + `' AND key = 'k' FOR UPDATE`
			},
			wantAttempt: 2,
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			schema := newSchema(t)
			s := newStoreOn(t, newPool(t, 2), schema)
			admin := sharedPool(t)
			holdSQL := tc.setup(t, s)

			holder, err := admin.Begin(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Rollback(context.Background())
			if _, err := holder.Exec(t.Context(), replaceTable(holdSQL, schema)); err != nil {
				t.Fatal(err)
			}

			errc := make(chan error, 1)
			go func() {
				_, err := s.Claim(context.Background(), claimP("k", fpA, at(lease)))
				errc <- err
			}()
			pid := waitForBlockedBackend(t, admin, schema)
			var ok bool
			if err := admin.QueryRow(t.Context(), "SELECT pg_terminate_backend($1)", pid).Scan(&ok); err != nil || !ok {
				t.Fatalf("pg_terminate_backend(%d) = %v, %v", pid, ok, err)
			}
			err = <-errc
			if !errors.Is(err, retrysafe.ErrStoreUnavailable) || errors.Is(err, context.Canceled) {
				t.Fatalf("Claim whose backend was terminated: %v, want ErrStoreUnavailable", err)
			}
			t.Logf("claim error: %v", err)

			if err := holder.Rollback(t.Context()); err != nil {
				t.Fatal(err)
			}
			p := claimP("k", fpA, at(lease))
			res := mustClaim(t, s, p) // the pool replaces the dead connection
			if !res.Claimed || res.Record.Attempt != tc.wantAttempt {
				t.Fatalf("claim after the killed one: claimed=%v attempt=%d, want a win with attempt %d", res.Claimed, res.Record.Attempt, tc.wantAttempt)
			}
			if err := s.Complete(t.Context(), &retrysafe.CompleteParams{Scope: scope, Key: "k", Token: p.Token, Now: at(lease), TTL: ttl, Response: &retrysafe.Response{Status: 200}}); err != nil {
				t.Fatalf("Complete after recovery: %v", err)
			}
		})
	}
}

func replaceTable(sql, schema string) string {
	return strings.ReplaceAll(sql, "{{t}}", `"`+schema+`"."retrysafe_records"`)
}
