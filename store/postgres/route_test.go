package postgres_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/retrysafe/retrysafe"
)

// TestPreviousVersionClaimAfterRouteMigration: migration 0006 keeps the
// claim and batch functions of the previous version, so a gateway not yet
// upgraded still claims against a migrated schema; its records read back
// with the empty route.
func TestPreviousVersionClaimAfterRouteMigration(t *testing.T) {
	t.Parallel()
	pool := sharedPool(t)
	schema := newSchema(t)
	s := newStoreOn(t, pool, schema)
	ctx := t.Context()
	claimFn := pgx.Identifier{schema, "retrysafe_records_claim"}.Sanitize()
	batchFn := pgx.Identifier{schema, "retrysafe_records_batch"}.Sanitize()
	now := time.Now()
	var claimed bool
	if err := pool.QueryRow(ctx, "SELECT out_claimed FROM "+claimFn+"($1, $2, $3, $4, $5, $6)",
		scope, "old-binary", fpA, "tok-old", now.UnixNano(), now.Add(time.Minute).UnixNano()).Scan(&claimed); err != nil || !claimed {
		t.Fatalf("the previous claim function: claimed=%v, %v", claimed, err)
	}
	var result string
	if err := pool.QueryRow(ctx, "SELECT out_result FROM "+batchFn+"($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
		[]string{"claim"}, []string{scope}, []string{"old-batch"}, []string{fpA}, []string{"tok-b"},
		[]int64{now.UnixNano()}, []int64{now.Add(time.Minute).UnixNano()}, []*int32{nil}, [][]byte{nil}, [][]byte{nil},
		[]string{""}, "retrysafe").Scan(&result); err != nil || result != "claimed" {
		t.Fatalf("the previous batch function: %q, %v", result, err)
	}
	for _, key := range []string{"old-binary", "old-batch"} {
		rec, err := s.Get(ctx, &retrysafe.GetParams{Scope: scope, Key: key, Now: now})
		if err != nil || rec.Route != "" || rec.State != retrysafe.StateProcessing {
			t.Errorf("%s claimed by the previous version: %+v, %v; want processing with no route", key, rec, err)
		}
	}
}
