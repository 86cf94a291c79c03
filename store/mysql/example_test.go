package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"time"

	_ "github.com/go-sql-driver/mysql" // registers the "mysql" database/sql driver

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/mysql"
)

// Open a store from a URL, as the CLI does: it creates its own *sql.DB and
// migrates the table. The table may come from the URL.
func ExampleOpen() {
	ctx := context.Background()
	s, err := mysql.Open(ctx, "mysql://app:secret@db.internal:3306/app?tls=true&retrysafe_table=idempotency", mysql.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	p := &retrysafe.ClaimParams{
		Scope: "tenant-hash", Key: "8e03978e-40d5-43e8-bc93-6894a57f9324", Fingerprint: "request-hash",
		Token: retrysafe.NewToken(), Now: time.Now(), Lease: 30 * time.Second,
	}
	res, err := s.Claim(ctx, p)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("claimed:", res.Claimed)
}

// Build a store on the application's own *sql.DB and complete the
// idempotency record in the same transaction as the business write: both
// commit, or neither does.
func ExampleStore_CompleteTx() {
	ctx := context.Background()
	db, err := sql.Open("mysql", "app:secret@tcp(db.internal:3306)/app")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	db.SetMaxIdleConns(16) // the store prepares its statements on each connection
	s, err := mysql.New(db, mysql.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil { // usually run at deploy time
		log.Fatal(err)
	}

	// Inside a handler run by the retrysafe middleware or retrysafe.Do:
	handle := func(ctx context.Context) error {
		op := retrysafe.OperationFromContext(ctx)
		resp := &retrysafe.Response{Status: 201, Body: []byte(`{"id":"pay_123"}`)}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, "INSERT INTO payments (id, amount) VALUES (?, ?)", "pay_123", 1000); err != nil {
			return err
		}
		if err := s.CompleteTx(ctx, tx, op.CompleteParams(resp)); err != nil {
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		op.MarkCompleted() // the engine must not complete the record again
		return nil
	}
	_ = handle
}
