package sealed_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"strings"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/memory"
	"github.com/retrysafe/retrysafe/store/sealed"
)

// A key file: one ID:BASE64 key per line, oldest first, and the hmac
// entry. Generate a key
// with: head -c 32 /dev/urandom | base64. (Never put real keys in code.)
const exampleKeys = `
# keys the scopes and fingerprints: generated once, never rotated
hmac:QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVphYmNkZWY=
# retired in December
2026-06:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=
# seals new responses
2026-11:H8/7+fz//fj6+/r8/v38/P3+/v/+/f79/v7+/v79/v0=
`

// Wrap a store: what it keeps is sealed with the newest key of the ring,
// and reads through the wrapper open it again. (The SQLite store's
// ExampleStore_CompleteTx_sealed shows sealing a completion written in the
// caller's own transaction.)
func ExampleNew() {
	ctx := context.Background()
	ring, err := sealed.ParseKeyRing([]byte(exampleKeys))
	if err != nil {
		log.Fatal(err)
	}
	inner := memory.New(memory.Config{})
	defer inner.Close()
	store, err := sealed.New(inner, ring, sealed.Config{})
	if err != nil {
		log.Fatal(err)
	}

	now := time.Now()
	res, err := store.Claim(ctx, &retrysafe.ClaimParams{
		Scope: "customer-42", Key: "order-7", Fingerprint: "POST /orders",
		Token: retrysafe.NewToken(), Now: now, Lease: 30 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	err = store.Complete(ctx, &retrysafe.CompleteParams{
		Scope: "customer-42", Key: "order-7", Token: res.Record.Token, Now: now, TTL: 24 * time.Hour,
		Response: &retrysafe.Response{Status: http.StatusCreated, Body: []byte(`{"order":"ord_7","name":"Jane Doe"}`)},
	})
	if err != nil {
		log.Fatal(err)
	}

	// The inner store keeps the record under the HMAC of its scope.
	raw, err := inner.Get(ctx, &retrysafe.GetParams{Scope: ring.Scope("customer-42"), Key: "order-7", Now: now})
	if err != nil {
		log.Fatal(err)
	}
	id, _ := sealed.KeyID(raw.Response)
	fmt.Println("stored: sealed with key", id, "holds the name:", strings.Contains(string(raw.Response.Body), "Jane"),
		"holds the fingerprint:", strings.Contains(raw.Fingerprint, "POST"))
	rec, err := store.Get(ctx, &retrysafe.GetParams{Scope: "customer-42", Key: "order-7", Now: now})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("read back:", rec.Response.Status, string(rec.Response.Body))
	// Output:
	// stored: sealed with key 2026-11 holds the name: false holds the fingerprint: false
	// read back: 201 {"order":"ord_7","name":"Jane Doe"}
}
