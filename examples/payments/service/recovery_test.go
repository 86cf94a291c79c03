package service_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/client"
	"github.com/retrysafe/retrysafe/examples/payments/provider"
	"github.com/retrysafe/retrysafe/examples/payments/repo"
	"github.com/retrysafe/retrysafe/examples/payments/service"
	"github.com/retrysafe/retrysafe/retrysafetest"
	"github.com/retrysafe/retrysafe/store/sqlite"
)

// How far a dead process got with a payment before it died.
const (
	diedClaimed  = "claimed"  // claimed the key, phase 1 not committed
	diedRecorded = "recorded" // phase 1 committed (payment and checkpoint), charge not sent
	diedCharged  = "charged"  // and the provider charged; the answer was lost with the process
)

// deadAttempt leaves what a process that died at how would: its claim of
// key (its lease ran out an hour ago), and as far as how says, phase 1 of
// the payment of order (the pending payment and the checkpoint
// "payment-recorded", written in one transaction with the store's
// CheckpointTx) and the charge at the provider. It returns the payment (nil
// for diedClaimed).
func deadAttempt(t *testing.T, e *env, key, order string, amount int64, how string) *repo.Payment {
	t.Helper()
	ctx := context.Background()
	body, _ := json.Marshal(payBody(order, amount, "EUR"))
	past := time.Now().Add(-time.Hour)
	claim, err := e.database().Store().Claim(ctx, &retrysafe.ClaimParams{
		Key: key, Fingerprint: retrysafe.Fingerprint(http.MethodPost, "/payments", "", body, nil),
		Token: retrysafe.NewToken(), Now: past, Lease: time.Second,
	})
	if err != nil || !claim.Claimed {
		t.Fatalf("claim: %+v %v", claim, err)
	}
	if how == diedClaimed {
		return nil
	}
	opCtx, _, err := retrysafetest.OperationContext(ctx, claim.Record, time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	providerKey, _ := client.DeriveKey(opCtx, "psp-charge")
	sum := sha256.Sum256([]byte("\n" + key)) // the operation key: scope (none) and key
	pay := &repo.Payment{ID: repo.NewID("pay", past), OrderID: order, OpKey: hex.EncodeToString(sum[:]),
		ProviderKey: providerKey, Amount: amount, Currency: "EUR", CreatedAt: past}
	cp, _ := json.Marshal(map[string]string{"paymentId": pay.ID, "providerKey": providerKey})
	err = e.database().InTx(ctx, func(tx *repo.Tx) error {
		if err := tx.TransitionOrder(ctx, order, repo.OrderPaying, "test", past); err != nil {
			return err
		}
		if err := tx.InsertPayment(ctx, pay); err != nil {
			return err
		}
		return tx.Checkpoint(ctx, &retrysafe.ExtendParams{Key: key, Token: claim.Record.Token, Now: past, Lease: time.Second,
			Checkpoint: &retrysafe.Checkpoint{Name: service.CheckpointPaymentRecorded, Data: cp}})
	})
	if err != nil {
		t.Fatal(err)
	}
	if how == diedCharged {
		psp := &provider.Client{BaseURL: e.psp.URL(), HTTP: &http.Client{Transport: &client.Transport{}}}
		if _, err := psp.Charge(client.WithKey(ctx, providerKey), provider.ChargeRequest{Amount: amount, Currency: "EUR", Reference: pay.ID}); err != nil {
			t.Fatal(err)
		}
	}
	return pay
}

// TestCrashedPaymentRecovers: a process claimed a payment's key and died,
// before phase 1 committed, after it, or after the provider charged. When
// the client retries after the lease ran out, the payment ends succeeded
// with exactly one charge, however far the dead attempt got:
//
//   - takeover (the default policy): the retry takes the operation over
//     (attempt 2), reads the checkpoint with Resumed, and charges with the
//     same derived key (the provider replays the charge it made); with no
//     checkpoint it starts from the beginning;
//   - with the Resolver: the retry first asks the provider about the
//     charge with the payment's key. Found, the Resolver settles the
//     payment and completes the record (no takeover: attempt stays 1, the
//     retry gets the stored answer as a replay); not found, it lets the
//     retry take over and resume as above.
func TestCrashedPaymentRecovers(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, resolver := range []bool{false, true} {
			for _, how := range []string{diedClaimed, diedRecorded, diedCharged} {
				name := how
				if resolver {
					name = "resolver/" + how
				}
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					e := newEnv(t, b, provider.Config{}, func(c *service.Config) { c.ResolveWithProvider = resolver })
					order := e.createOrder(4200, "EUR")
					key := randomHex(16)
					pay := deadAttempt(t, e, key, order, 4200, how)

					a := e.mustPost("/payments", key, payBody(order, 4200, "EUR"))
					var got paymentJSON
					a.decode(t, &got)
					if a.Status != http.StatusCreated || got.Status != "succeeded" || (pay != nil && got.ID != pay.ID) {
						t.Fatalf("retry after the crash: %d %s, want 201 succeeded for %+v", a.Status, a.Body, pay)
					}
					if n := e.psp.ChargeCount(); n != 1 {
						t.Fatalf("provider charges = %d, want 1", n)
					}
					ch, ok := chargeByReference(e.psp, got.ID)
					if !ok || ch.ID != got.ChargeID {
						t.Fatalf("the answer's charge %s is not the provider's %+v", got.ChargeID, ch)
					}
					wantAttempt, wantReplay := 2, false
					if resolver && how == diedCharged {
						wantAttempt, wantReplay = 1, true // completed by the Resolver
					}
					if a.Replayed != wantReplay {
						t.Errorf("Idempotent-Replayed = %v, want %v", a.Replayed, wantReplay)
					}
					rec, err := e.database().Store().Get(context.Background(), &retrysafe.GetParams{Key: key, Now: time.Now()})
					if err != nil || rec.State != retrysafe.StateCompleted || rec.Attempt != wantAttempt {
						t.Fatalf("record after recovery: %+v %v, want completed at attempt %d", rec, err, wantAttempt)
					}
					if !strings.Contains(string(rec.Response.Body), got.ID) {
						t.Fatalf("stored answer: %s", rec.Response.Body)
					}
					var o orderJSON
					e.mustGet("/orders/"+order).decode(t, &o)
					if o.Status != repo.OrderPaid || len(o.Payments) != 1 {
						t.Fatalf("order after recovery: %+v", o)
					}
				})
			}
		}
	})
}

// TestBlockedPaymentWaitsForResolution: under OnUnknown block (no
// Resolver), a retry after the dead attempt's lease gets 409
// outcome-unknown with Retry-After and nothing runs: no takeover, no
// charge, until someone resolves the record.
func TestBlockedPaymentWaitsForResolution(t *testing.T) {
	t.Parallel()
	e := newEnv(t, backends[0], provider.Config{}, func(c *service.Config) { c.OnUnknown = retrysafe.OnUnknownBlock })
	order := e.createOrder(4200, "EUR")
	key := randomHex(16)
	deadAttempt(t, e, key, order, 4200, diedRecorded)
	for range 2 {
		a := e.mustPost("/payments", key, payBody(order, 4200, "EUR"))
		if a.Status != http.StatusConflict || !strings.Contains(string(a.Body), "outcome-unknown") || a.Header.Get("Retry-After") == "" {
			t.Fatalf("retry of a blocked payment: %d %v %s, want 409 outcome-unknown with Retry-After", a.Status, a.Header, a.Body)
		}
	}
	if n := e.psp.Stats().Requests; n != 0 {
		t.Fatalf("provider requests = %d, want 0", n)
	}
	rec, err := e.database().Store().Get(context.Background(), &retrysafe.GetParams{Key: key, Now: time.Now()})
	if err != nil || rec.State != retrysafe.StateProcessing || rec.Attempt != 1 || rec.Checkpoint == nil {
		t.Fatalf("blocked record: %+v %v", rec, err)
	}
}

// chargeByReference returns the provider's charge for a payment.
func chargeByReference(psp *provider.Server, paymentID string) (provider.Charge, bool) {
	for _, c := range psp.Charges() {
		if c.Reference == paymentID {
			return c, true
		}
	}
	return provider.Charge{}, false
}

// TestFailureAfterChargeAbandons: when phase 3 cannot be written after the
// provider charged (here the payments table is renamed away right after
// the checkpoint, while the idempotency records stay reachable), the key
// is not released — the charge happened — but the attempt is abandoned:
// the client gets 503 temporarily-unavailable, its retries get 409
// outcome-unknown at once, and after the lease a retry takes the
// operation over, resumes from the checkpoint and gets the one charge.
func TestFailureAfterChargeAbandons(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "payments.db")
	b := backend{"sqlite", func(testing.TB) func(ctx context.Context) (*repo.DB, error) {
		return func(ctx context.Context) (*repo.DB, error) {
			return repo.OpenSQLite(ctx, path, repo.SQLiteOptions{ProcessCrashSafeOnly: true})
		}
	}}
	var raw atomic.Pointer[sql.DB] // a connection of the test's own
	var once sync.Once
	e := newEnv(t, b, provider.Config{}, func(c *service.Config) {
		c.Lease = time.Second
		c.Crash = func(point string, op *retrysafe.Operation) {
			if point == service.CrashAfterCheckpoint {
				once.Do(func() {
					if _, err := raw.Load().Exec("ALTER TABLE payments RENAME TO payments_away"); err != nil {
						t.Errorf("rename: %v", err)
					}
				})
			}
		}
	})
	db, err := sql.Open("sqlite", sqlite.DSN(path, sqlite.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	raw.Store(db)
	order := e.createOrder(4200, "EUR")
	key := randomHex(16)
	a := e.mustPost("/payments", key, payBody(order, 4200, "EUR"))
	if a.Status != http.StatusServiceUnavailable || !strings.Contains(string(a.Body), "temporarily-unavailable") {
		t.Fatalf("first attempt: %d %s, want 503 temporarily-unavailable", a.Status, a.Body)
	}
	if _, err := db.Exec("ALTER TABLE payments_away RENAME TO payments"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for a.Status != http.StatusCreated && time.Now().Before(deadline) {
		a = e.mustPost("/payments", key, payBody(order, 4200, "EUR"))
		if a.Status != http.StatusCreated && (a.Status != http.StatusConflict || !strings.Contains(string(a.Body), "outcome-unknown")) {
			t.Fatalf("retry: %d %s, want 409 outcome-unknown until the lease ran out, then 201", a.Status, a.Body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var got paymentJSON
	a.decode(t, &got)
	if a.Status != http.StatusCreated || got.Status != "succeeded" {
		t.Fatalf("retry after the lease: %d %s", a.Status, a.Body)
	}
	if n := e.psp.ChargeCount(); n != 1 {
		t.Fatalf("provider charges = %d, want 1", n)
	}
	rec, err := e.database().Store().Get(context.Background(), &retrysafe.GetParams{Key: key, Now: time.Now()})
	if err != nil || rec.State != retrysafe.StateCompleted || rec.Attempt != 2 || rec.Checkpoint == nil || rec.Checkpoint.Name != service.CheckpointChargeAnswered {
		t.Fatalf("record: %+v %v, want completed at attempt 2 with the checkpoint charge-answered", rec, err)
	}
}

// TestCompleterResolvesStrandedRecords: with the Resolver, a
// reconciliation run first completes stranded records with no retry
// waiting: the one whose charge the provider holds is completed with the
// succeeded payment (its retry then gets that answer as a replay); the
// ones the provider holds no charge for (the attempt died before phase 1,
// or after it but before the charge) are marked resolved not done, not
// released: each one's retry takes it over as attempt 2 without asking
// again, the second resuming from its checkpoint (the same payment, which
// the reconciliation settled meanwhile), and nothing is charged twice.
func TestCompleterResolvesStrandedRecords(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, provider.Config{}, func(c *service.Config) { c.ResolveWithProvider = true })
		ctx := context.Background()
		charged, claimed, recorded := e.createOrder(4200, "EUR"), e.createOrder(4300, "EUR"), e.createOrder(4400, "EUR")
		chargedKey, claimedKey, recordedKey := randomHex(16), randomHex(16), randomHex(16)
		pay := deadAttempt(t, e, chargedKey, charged, 4200, diedCharged)
		deadAttempt(t, e, claimedKey, claimed, 4300, diedClaimed)
		recordedPay := deadAttempt(t, e, recordedKey, recorded, 4400, diedRecorded)

		rep, err := e.service().Reconcile(ctx, time.Hour)
		if err != nil || len(rep.Errors) != 0 {
			t.Fatalf("reconcile: %+v %v", rep, err)
		}
		if rep.Stranded == nil || *rep.Stranded != (retrysafe.Stranded{Completed: 1, AwaitingRetry: 2}) {
			t.Fatalf("completer: %+v, want 1 completed and 2 awaiting retry", rep.Stranded)
		}
		rec, err := e.database().Store().Get(ctx, &retrysafe.GetParams{Key: chargedKey, Now: time.Now()})
		if err != nil || rec.State != retrysafe.StateCompleted || rec.Response.Status != http.StatusCreated || !strings.Contains(string(rec.Response.Body), `"succeeded"`) {
			t.Fatalf("completed record: %+v %v", rec, err)
		}
		for _, key := range []string{claimedKey, recordedKey} {
			rec, err := e.database().Store().Get(ctx, &retrysafe.GetParams{Key: key, Now: time.Now()})
			if err != nil || rec.State != retrysafe.StateProcessing || rec.Attempt != 1 || !rec.ResolvedNotDone() {
				t.Fatalf("record found not done: %+v %v, want it kept at attempt 1, resolved not done", rec, err)
			}
		}
		if n := e.psp.ChargeCount(); n != 1 {
			t.Fatalf("provider charges = %d, want 1", n)
		}
		a := e.mustPost("/payments", chargedKey, payBody(charged, 4200, "EUR"))
		if a.Status != http.StatusCreated || !a.Replayed || !strings.Contains(string(a.Body), pay.ID) {
			t.Fatalf("retry of the completed payment: %d replayed=%v %s", a.Status, a.Replayed, a.Body)
		}
		if a := e.mustPost("/payments", claimedKey, payBody(claimed, 4300, "EUR")); a.Status != http.StatusCreated || a.Replayed {
			t.Fatalf("retry of the payment that never got past phase 1: %d replayed=%v %s", a.Status, a.Replayed, a.Body)
		}
		a = e.mustPost("/payments", recordedKey, payBody(recorded, 4400, "EUR"))
		if a.Status != http.StatusCreated || a.Replayed || !strings.Contains(string(a.Body), recordedPay.ID) {
			t.Fatalf("retry of the recorded payment: %d replayed=%v %s, want payment %s resumed", a.Status, a.Replayed, a.Body, recordedPay.ID)
		}
		for _, key := range []string{claimedKey, recordedKey} {
			rec, err := e.database().Store().Get(ctx, &retrysafe.GetParams{Key: key, Now: time.Now()})
			if err != nil || rec.State != retrysafe.StateCompleted || rec.Attempt != 2 {
				t.Fatalf("record after its retry: %+v %v, want it completed at attempt 2", rec, err)
			}
		}
		// The reconciliation after the completer settled the recorded
		// payment, for which the provider held no charge, as failed: its
		// resumed retry answers with that payment and charges nothing.
		if n := e.psp.ChargeCount(); n != 2 {
			t.Fatalf("provider charges after the retries = %d, want 2 (the first and the unclaimed payment's)", n)
		}

	})
}
