package postgres_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/postgres"
)

// Open a store from a URL, as the CLI does: it creates its own pool and
// migrates the table. Schema and table may come from the URL.
func ExampleOpen() {
	ctx := context.Background()
	s, err := postgres.Open(ctx, "postgres://app@db.internal:5432/app?sslmode=require&retrysafe_schema=idempotency", postgres.Config{})
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

// Build a store on the application's own pool and complete the idempotency
// record in the same transaction as the business write: both commit, or
// neither does.
func ExampleStore_CompleteTx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@db.internal:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	s, err := postgres.New(pool, postgres.Config{})
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
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO payments (id, amount) VALUES ($1, $2)", "pay_123", 1000); err != nil {
				return err
			}
			return s.CompleteTx(ctx, tx, op.CompleteParams(resp))
		})
		if err != nil {
			return err
		}
		op.MarkCompleted() // the engine must not complete the record again
		return nil
	}
	_ = handle
}
