package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
)

// signalTimeout bounds waits for a notification; it guards against a hang
// and is not a speed requirement.
const signalTimeout = 10 * time.Second

func waitSignal(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(signalTimeout):
		t.Fatalf("%s: no notification within %s", what, signalTimeout)
	}
}

func drain(ch <-chan struct{}) {
	select {
	case <-ch:
	default:
	}
}

// TestNotifyAcrossInstances: a subscriber on one store hears completions,
// releases and deletes made through another store on another pool (as
// another process), only for its own key; CompleteTx notifies on commit;
// and after its listener connection is killed the store reconnects, wakes
// every subscriber, and delivers later notifications again.
func TestNotifyAcrossInstances(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	waiter := newStoreOn(t, newPool(t, 2), schema)
	writer := newStoreOn(t, newPool(t, 4), schema)
	ctx := t.Context()

	subscribe := func(key string) <-chan struct{} {
		t.Helper()
		ch, unsubscribe, err := waiter.Subscribe(ctx, scope, key)
		if err != nil {
			t.Fatalf("Subscribe(%q): %v", key, err)
		}
		t.Cleanup(unsubscribe)
		return ch
	}
	other := subscribe("unrelated")

	p := claimP("k1", fpA, at(0))
	mustClaim(t, writer, p)
	ch := subscribe("k1")
	if err := writer.Complete(ctx, &retrysafe.CompleteParams{Scope: scope, Key: "k1", Token: p.Token, Now: at(1), TTL: ttl, Response: &retrysafe.Response{Status: 200}}); err != nil {
		t.Fatal(err)
	}
	waitSignal(t, "Complete through another instance", ch)
	// Notifications arrive in commit order on the one listener connection:
	// had k1's reached the unrelated subscriber, it would be there now.
	select {
	case <-other:
		t.Fatal("a subscriber of another key was signalled")
	default:
	}

	p = claimP("k2", fpA, at(0))
	mustClaim(t, writer, p)
	ch = subscribe("k2")
	if err := writer.Release(ctx, &retrysafe.ReleaseParams{Scope: scope, Key: "k2", Token: p.Token}); err != nil {
		t.Fatal(err)
	}
	waitSignal(t, "Release through another instance", ch)

	p = claimP("k3", fpA, at(0))
	mustClaim(t, writer, p)
	ch = subscribe("k3")
	tx, err := writer.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := writer.CompleteTx(ctx, tx, &retrysafe.CompleteParams{Scope: scope, Key: "k3", Token: p.Token, Now: at(1), TTL: ttl, Response: &retrysafe.Response{Status: 200}}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	waitSignal(t, "CompleteTx after commit", ch)

	p = claimP("k4", fpA, at(0))
	mustClaim(t, writer, p)
	ch = subscribe("k4")
	if err := writer.Delete(ctx, scope, "k4"); err != nil {
		t.Fatal(err)
	}
	waitSignal(t, "Delete through another instance", ch)

	// Kill the listener's backend: the store reconnects and wakes everyone.
	drain(ch)
	drain(other)
	var killed int
	if err := sharedPool(t).QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE pid <> pg_backend_pid() AND query LIKE 'LISTEN %' AND strpos(query, $1) > 0`, schema).Scan(&killed); err != nil || killed != 1 {
		t.Fatalf("terminating the listener backend: killed %d, %v", killed, err)
	}
	waitSignal(t, "wake-up after the listener reconnected", ch)
	waitSignal(t, "wake-up of the unrelated subscriber after the listener reconnected", other)

	p = claimP("k5", fpA, at(0))
	mustClaim(t, writer, p)
	ch = subscribe("k5")
	if err := writer.Complete(ctx, &retrysafe.CompleteParams{Scope: scope, Key: "k5", Token: p.Token, Now: at(1), TTL: ttl, Response: &retrysafe.Response{Status: 200}}); err != nil {
		t.Fatal(err)
	}
	waitSignal(t, "Complete after the listener reconnected", ch)
}

// TestSubscribeDuringCompleteTx: a Subscribe that arrives while a CompleteTx
// holds the record waits for the transaction, and the waiter's re-read then
// finds the record completed.
func TestSubscribeDuringCompleteTx(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	p := claimP("k", fpA, at(0))
	mustClaim(t, s, p)
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if err := s.CompleteTx(ctx, tx, &retrysafe.CompleteParams{Scope: scope, Key: "k", Token: p.Token, Now: at(1), TTL: ttl, Response: &retrysafe.Response{Status: 200}}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, unsubscribe, err := s.Subscribe(ctx, scope, "k")
		if err == nil {
			unsubscribe()
		}
		done <- err
	}()
	select {
	case err := <-done:
		// CompleteTx already holds the row: returning now means the flag
		// update did not wait for the transaction.
		t.Fatalf("Subscribe returned (%v) while the completing transaction was open", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Subscribe after the commit: %v", err)
	}
	rec, err := s.Get(ctx, &retrysafe.GetParams{Scope: scope, Key: "k", Now: at(2)})
	if err != nil || rec.State != retrysafe.StateCompleted {
		t.Fatalf("re-read after Subscribe: %+v, %v", rec, err)
	}
}
