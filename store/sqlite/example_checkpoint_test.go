package sqlite_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/sqlite"
)

// A step's business write and the checkpoint that records it commit in one
// transaction. The owner dies before completing; after its lease runs out
// the retry takes the record over and reads where the first attempt got,
// so it resumes instead of charging again.
func ExampleStore_CheckpointTx() {
	dir, err := os.MkdirTemp("", "retrysafe-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(dir, "app.db"), sqlite.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	db := store.DB()
	if _, err := db.ExecContext(ctx, `CREATE TABLE charges (id TEXT PRIMARY KEY)`); err != nil {
		log.Fatal(err)
	}

	start := time.Now()
	claim := func(now time.Time) *retrysafe.ClaimResult {
		res, err := store.Claim(ctx, &retrysafe.ClaimParams{
			Scope: "customer-42", Key: "order-7", Fingerprint: "POST /orders",
			Token: retrysafe.NewToken(), Now: now, Lease: 30 * time.Second,
		})
		if err != nil {
			log.Fatal(err)
		}
		return res
	}

	first := claim(start)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO charges (id) VALUES ('ch_1')`); err != nil {
		log.Fatal(err)
	}
	err = store.CheckpointTx(ctx, tx, &retrysafe.ExtendParams{
		Scope: first.Record.Scope, Key: first.Record.Key, Token: first.Record.Token,
		Now: start, Lease: 30 * time.Second,
		Checkpoint: &retrysafe.Checkpoint{Name: "charged", Data: []byte("ch_1")},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
	// ... the process dies here, before Complete.

	retry := claim(start.Add(time.Minute))
	cp := retry.Record.Checkpoint
	fmt.Println("retry took over:", retry.Claimed, "attempt", retry.Record.Attempt)
	fmt.Printf("resume after %q with %s\n", cp.Name, cp.Data)
	// Output:
	// retry took over: true attempt 2
	// resume after "charged" with ch_1
}
