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
	"github.com/retrysafe/retrysafe/store/sqlite"
)

// Open a store on a file, claim a key, store the result, and see a retry
// with the same key get the stored result instead of running again.
func ExampleOpen() {
	dir, err := os.MkdirTemp("", "retrysafe-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(dir, "retrysafe.db"), sqlite.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	claim := func() *retrysafe.ClaimResult {
		res, err := store.Claim(ctx, &retrysafe.ClaimParams{
			Scope:       "customer-42",
			Key:         "8e03978e-40d5-43e8-bc93-6894a57f9324",
			Fingerprint: "POST /payments amount=4200",
			Token:       retrysafe.NewToken(),
			Now:         time.Now(),
			Lease:       30 * time.Second,
		})
		if err != nil {
			log.Fatal(err)
		}
		return res
	}

	first := claim()
	fmt.Println("first request claimed:", first.Claimed)
	// ... charge the card, then store the answer, fenced by the token.
	err = store.Complete(ctx, &retrysafe.CompleteParams{
		Scope: first.Record.Scope, Key: first.Record.Key, Token: first.Record.Token,
		Now: time.Now(), TTL: 24 * time.Hour,
		Response: &retrysafe.Response{
			Status: http.StatusCreated,
			Header: http.Header{"Content-Type": {"application/json"}},
			Body:   []byte(`{"payment":"pay_1"}`),
		},
	})
	if err != nil {
		log.Fatal(err)
	}

	retry := claim()
	fmt.Println("retry claimed:", retry.Claimed)
	fmt.Println("retry replays:", retry.Record.Response.Status, string(retry.Record.Response.Body))
	// Output:
	// first request claimed: true
	// retry claimed: false
	// retry replays: 201 {"payment":"pay_1"}
}
