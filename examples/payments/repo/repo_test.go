package repo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/retrysafe/retrysafe/internal/testenv"
)

// openBackends returns a fresh database of each kind: its own SQLite file
// and its own PostgreSQL schema (skipped locally when PostgreSQL is
// unreachable, a failure under CI=true).
func openBackends(t *testing.T) map[string]func() *DB {
	return map[string]func() *DB{
		"sqlite": func() *DB {
			db, err := OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "p.db"), SQLiteOptions{ProcessCrashSafeOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(db.Close)
			return db
		},
		"postgres": func() *DB {
			url := os.Getenv("RETRYSAFE_POSTGRES_URL")
			if url == "" {
				url = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			conn, err := pgx.Connect(ctx, url)
			if err != nil {
				testenv.Unreachable(t, "PostgreSQL", err)
			}
			b := make([]byte, 6)
			_, _ = rand.Read(b)
			schema := "payments_repo_test_" + hex.EncodeToString(b)
			t.Cleanup(func() {
				_, _ = conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
				_ = conn.Close(context.Background())
			})
			db, err := OpenPostgres(ctx, url, schema)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(db.Close)
			return db
		},
	}
}

// TestBusinessRules: the schema's and the code's rules hold on both
// backends.
func TestBusinessRules(t *testing.T) {
	t.Parallel()
	for name, open := range openBackends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := open()
			ctx := context.Background()
			now := time.Now()
			in := func(fn func(tx *Tx) error) error { return db.InTx(ctx, fn) }
			order := &Order{ID: NewID("ord", now), Amount: 500, Currency: "UAH", CreatedAt: now}
			payment := func() *Payment {
				return &Payment{ID: NewID("pay", now), OrderID: order.ID, OpKey: NewID("op", now), ProviderKey: NewID("k", now),
					Amount: 500, Currency: "UAH", CreatedAt: now}
			}
			if err := in(func(tx *Tx) error { return tx.InsertOrder(ctx, order, NewID("op", now)) }); err != nil {
				t.Fatal(err)
			}
			a, b, c := payment(), payment(), payment()
			if err := in(func(tx *Tx) error { return tx.InsertPayment(ctx, a) }); err != nil {
				t.Fatal(err)
			}
			// One payment in flight per order.
			if err := in(func(tx *Tx) error { return tx.InsertPayment(ctx, b) }); !errors.Is(err, ErrUnique) {
				t.Fatalf("second in-flight payment: %v, want ErrUnique", err)
			}
			// A succeeded payment needs its charge (CHECK).
			if err := in(func(tx *Tx) error {
				return tx.TransitionPayment(ctx, a.ID, PaymentSucceeded, "test", PaymentChange{}, now)
			}); err == nil {
				t.Fatal("succeeded without a charge id was accepted")
			}
			// A rolled-back transition leaves neither the change nor its audit.
			errRollback := errors.New("rollback")
			if err := in(func(tx *Tx) error {
				if err := tx.TransitionPayment(ctx, a.ID, PaymentUnknown, "test", PaymentChange{}, now); err != nil {
					return err
				}
				return errRollback
			}); !errors.Is(err, errRollback) {
				t.Fatal(err)
			}
			if p, _ := db.Read().Payment(ctx, a.ID); p.Status != PaymentPending {
				t.Fatalf("after rollback: %s", p.Status)
			}
			if audit, _ := db.Read().Audit(ctx, a.ID); len(audit) != 1 {
				t.Fatalf("after rollback: %d audit rows, want 1", len(audit))
			}
			if err := in(func(tx *Tx) error {
				return tx.TransitionPayment(ctx, a.ID, PaymentSucceeded, "test", PaymentChange{ChargeID: "ch_1"}, now)
			}); err != nil {
				t.Fatal(err)
			}
			// Transitions not in the table are refused.
			for _, to := range []string{PaymentPending, PaymentUnknown, PaymentFailed} {
				if err := in(func(tx *Tx) error { return tx.TransitionPayment(ctx, a.ID, to, "test", PaymentChange{}, now) }); !errors.Is(err, ErrTransition) {
					t.Errorf("succeeded > %s: %v, want ErrTransition", to, err)
				}
			}
			// At most one successful payment per order, even when a second
			// one got in flight.
			if err := in(func(tx *Tx) error { return tx.InsertPayment(ctx, c) }); err != nil {
				t.Fatal(err)
			}
			if err := in(func(tx *Tx) error {
				return tx.TransitionPayment(ctx, c.ID, PaymentSucceeded, "test", PaymentChange{ChargeID: "ch_2"}, now)
			}); !errors.Is(err, ErrUnique) {
				t.Fatalf("second successful payment: %v, want ErrUnique", err)
			}
			// Status values are CHECK-constrained.
			if _, err := db.a.exec(ctx, "UPDATE payments SET status = 'paid-twice' WHERE id = $1", c.ID); err == nil {
				t.Fatal("an unknown status was accepted")
			}
			// Refunds: at most the amount; the last one refunds in full.
			refund := func(amount int64) error {
				return in(func(tx *Tx) error {
					return tx.InsertRefund(ctx, &Refund{ID: NewID("ref", now), PaymentID: a.ID, OpKey: NewID("op", now), Amount: amount, CreatedAt: now})
				})
			}
			if err := refund(501); !errors.Is(err, ErrRefundExceeds) {
				t.Fatalf("refund above the amount: %v", err)
			}
			if err := refund(200); err != nil {
				t.Fatal(err)
			}
			if err := refund(300); err != nil {
				t.Fatal(err)
			}
			if p, _ := db.Read().Payment(ctx, a.ID); p.Status != PaymentRefunded || p.Refunded != 500 {
				t.Fatalf("after refunds: %+v", p)
			}
			if err := refund(1); !errors.Is(err, ErrTransition) {
				t.Fatalf("refund of a refunded payment: %v", err)
			}
			var steps []string
			audit, _ := db.Read().Audit(ctx, a.ID)
			for _, e := range audit {
				steps = append(steps, e.From+">"+e.To)
			}
			if want := []string{">pending", "pending>succeeded", "succeeded>refunded"}; len(steps) != 3 || steps[0] != want[0] || steps[1] != want[1] || steps[2] != want[2] {
				t.Fatalf("audit %v, want %v", steps, want)
			}
		})
	}
}

// TestTransitionTables: every target status has predecessors except
// pending (created only by insert), and terminal statuses go nowhere.
func TestTransitionTables(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		table map[string][]string
		to    string
		want  []string
	}{
		"payment pending":   {PaymentTransitions, PaymentPending, nil},
		"payment unknown":   {PaymentTransitions, PaymentUnknown, []string{PaymentPending}},
		"payment succeeded": {PaymentTransitions, PaymentSucceeded, []string{PaymentPending, PaymentUnknown}},
		"payment failed":    {PaymentTransitions, PaymentFailed, []string{PaymentPending, PaymentUnknown}},
		"payment refunded":  {PaymentTransitions, PaymentRefunded, []string{PaymentSucceeded}},
		"order paying":      {OrderTransitions, OrderPaying, []string{OrderOpen}},
		"order paid":        {OrderTransitions, OrderPaid, []string{OrderPaying}},
		"order open":        {OrderTransitions, OrderOpen, []string{OrderPaying}},
	}
	for name, tc := range tests {
		got := predecessors(tc.table, tc.to)
		if len(got) != len(tc.want) {
			t.Errorf("%s: %v, want %v", name, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%s: %v, want %v", name, got, tc.want)
			}
		}
	}
}
