package service_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/client"
	"github.com/retrysafe/retrysafe/examples/payments/provider"
	"github.com/retrysafe/retrysafe/examples/payments/repo"
	"github.com/retrysafe/retrysafe/retrysafetest"
)

// TestCrashAfterChargeRecovers: a process claimed a payment's key, recorded
// the pending payment, charged the provider — and died before it could
// record the outcome or answer. When the client retries after the lease ran
// out, the middleware hands the operation to the new request (attempt 2),
// which finds the payment by its operation, asks the provider again with
// the same derived key, gets the existing charge back, and answers 201:
// one charge.
func TestCrashAfterChargeRecovers(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, provider.Config{}, nil)
		ctx := context.Background()
		order := e.createOrder(4200, "EUR")
		key := randomHex(16)
		body, _ := json.Marshal(payBody(order, 4200, "EUR"))

		// The dead process's claim: its lease ran out an hour ago.
		past := time.Now().Add(-time.Hour)
		claim, err := e.database().Store().Claim(ctx, &retrysafe.ClaimParams{
			Key: key, Fingerprint: retrysafe.Fingerprint(http.MethodPost, "/payments", "", body, nil),
			Token: retrysafe.NewToken(), Now: past, Lease: time.Second,
		})
		if err != nil || !claim.Claimed {
			t.Fatalf("claim: %+v %v", claim, err)
		}
		// Its phase 1 (the pending payment, with the provider key derived
		// from the operation) and its charge, whose answer was lost.
		opCtx, _, err := retrysafetest.OperationContext(ctx, claim.Record, time.Hour, nil)
		if err != nil {
			t.Fatal(err)
		}
		providerKey, _ := client.DeriveKey(opCtx, "psp-charge")
		sum := sha256.Sum256([]byte("\n" + key)) // the operation key: scope (none) and key
		pay := &repo.Payment{ID: repo.NewID("pay", past), OrderID: order, OpKey: hex.EncodeToString(sum[:]),
			ProviderKey: providerKey, Amount: 4200, Currency: "EUR", CreatedAt: past}
		err = e.database().InTx(ctx, func(tx *repo.Tx) error {
			if err := tx.TransitionOrder(ctx, order, repo.OrderPaying, "test", past); err != nil {
				return err
			}
			return tx.InsertPayment(ctx, pay)
		})
		if err != nil {
			t.Fatal(err)
		}
		psp := &provider.Client{BaseURL: e.psp.URL(), HTTP: &http.Client{Transport: &client.Transport{}}}
		if _, err := psp.Charge(client.WithKey(ctx, providerKey), provider.ChargeRequest{Amount: 4200, Currency: "EUR", Reference: pay.ID}); err != nil {
			t.Fatal(err)
		}

		// The client's retry.
		a := e.mustPost("/payments", key, payBody(order, 4200, "EUR"))
		var got paymentJSON
		a.decode(t, &got)
		if a.Status != http.StatusCreated || got.ID != pay.ID || got.Status != "succeeded" {
			t.Fatalf("retry after the crash: %d %s, want 201 succeeded for %s", a.Status, a.Body, pay.ID)
		}
		if n := e.psp.ChargeCount(); n != 1 {
			t.Fatalf("provider charges = %d, want 1", n)
		}
		rec, err := e.database().Store().Get(ctx, &retrysafe.GetParams{Key: key, Now: time.Now()})
		if err != nil || rec.State != retrysafe.StateCompleted || rec.Attempt != 2 {
			t.Fatalf("record after recovery: %+v %v", rec, err)
		}
		if !strings.Contains(string(rec.Response.Body), pay.ID) {
			t.Fatalf("stored answer: %s", rec.Response.Body)
		}
	})
}
