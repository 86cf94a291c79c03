package sqlite_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/sealed"
	"github.com/retrysafe/retrysafe/store/sqlite"
)

// A key file: one ID:BASE64 key per line, oldest first, and the hmac
// entry. Generate a key
// with: head -c 32 /dev/urandom | base64. (Never put real keys in code.)
const exampleSealedKeys = `
# keys the scopes and fingerprints: generated once, never rotated
hmac:QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVphYmNkZWY=
# retired in December
2026-06:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=
# seals new responses
2026-11:H8/7+fz//fj6+/r8/v38/P3+/v/+/f79/v7+/v79/v0=
`

// Seal the completion that CompleteTx writes in the caller's own
// transaction (sealed.KeyRing.SealComplete), so that it commits with the
// business write and is read back through the sealed store like any other.
func ExampleStore_CompleteTx_sealed() {
	dir, err := os.MkdirTemp("", "retrysafe-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()

	ring, err := sealed.ParseKeyRing([]byte(exampleSealedKeys))
	if err != nil {
		log.Fatal(err)
	}
	inner, err := sqlite.Open(ctx, filepath.Join(dir, "app.db"), sqlite.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer inner.Close()
	store, err := sealed.New(inner, ring, sealed.Config{})
	if err != nil {
		log.Fatal(err)
	}

	claim := func() *retrysafe.ClaimResult {
		res, err := store.Claim(ctx, &retrysafe.ClaimParams{
			Scope: "customer-42", Key: "order-7", Fingerprint: "POST /orders",
			Token: retrysafe.NewToken(), Now: time.Now(), Lease: 30 * time.Second,
		})
		if err != nil {
			log.Fatal(err)
		}
		return res
	}
	first := claim()

	tx, err := inner.DB().BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	// ... the business write in tx, then the completion in the same tx:
	params, err := ring.SealComplete(&retrysafe.CompleteParams{
		Scope: first.Record.Scope, Key: first.Record.Key, Token: first.Record.Token,
		Now: time.Now(), TTL: 24 * time.Hour,
		Response: &retrysafe.Response{
			Status: http.StatusCreated,
			Header: http.Header{"Content-Type": {"application/json"}},
			Body:   []byte(`{"order":"ord_7","name":"Jane Doe"}`),
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := inner.CompleteTx(ctx, tx, params); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}

	raw, err := inner.Get(ctx, &retrysafe.GetParams{Scope: ring.Scope("customer-42"), Key: "order-7", Now: time.Now()})
	if err != nil {
		log.Fatal(err)
	}
	id, _ := sealed.KeyID(raw.Response)
	fmt.Println("stored: sealed with key", id)

	retry := claim()
	fmt.Println("retry replays:", retry.Record.Response.Status, string(retry.Record.Response.Body))
	// Output:
	// stored: sealed with key 2026-11
	// retry replays: 201 {"order":"ord_7","name":"Jane Doe"}
}
