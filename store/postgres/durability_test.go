package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/retrysafe/retrysafe/store/postgres"
)

// TestCheckDurability: the local server runs with fsync and
// synchronous_commit on, so no warning; a pool whose sessions turn
// synchronous_commit off (as a role, a database or the URL's options can)
// gets one.
func TestCheckDurability(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var fsync, syncCommit string
	if err := sharedPool(t).QueryRow(ctx, "SELECT current_setting('fsync'), current_setting('synchronous_commit')").Scan(&fsync, &syncCommit); err != nil {
		t.Fatal(err)
	}
	if fsync != "on" || syncCommit == "off" {
		t.Fatalf("the test server runs with fsync=%s synchronous_commit=%s; this test wants a durable server", fsync, syncCommit)
	}
	w, err := newStore(t).CheckDurability(ctx)
	if err != nil || len(w) != 0 {
		t.Errorf("durable server: warnings %+v, %v; want none", w, err)
	}

	cfg, err := pgxpool.ParseConfig(testURL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s, err := postgres.New(pool, postgres.Config{Schema: newSchema(t)})
	if err != nil {
		t.Fatal(err)
	}
	w, err = s.CheckDurability(ctx)
	if err != nil || len(w) != 1 || w[0].Setting != "synchronous_commit" || w[0].Value != "off" {
		t.Errorf("synchronous_commit=off: warnings %+v, %v; want one about synchronous_commit", w, err)
	}
}
