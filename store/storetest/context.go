package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
)

func contextScenarios() []scenario {
	return []scenario{
		{"CancelledContext", testCancelledContext},
	}
}

// wantCancelled fails the test unless err reports the cancelled context
// (errors.Is context.Canceled) or an unavailable store.
func wantCancelled(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		t.Errorf("%s with a cancelled context: no error, want context.Canceled or ErrStoreUnavailable", what)
		return
	}
	if !errors.Is(err, context.Canceled) && !errors.Is(err, retrysafe.ErrStoreUnavailable) {
		t.Errorf("%s with a cancelled context: error %v, want one matching context.Canceled or ErrStoreUnavailable", what, err)
	}
}

// testCancelledContext: every method called with an already-cancelled
// context returns an error and changes nothing, as a fresh context shows
// afterwards.
func testCancelledContext(t *testing.T, h *harness) {
	cancelled, cancel := context.WithCancel(h.ctx)
	cancel()
	now := at(time.Second)

	// Set up: one processing record, one completed record.
	proc, procRec := h.claimNew(scope1, "processing", fpA, at(0))
	done, _ := h.claimNew(scope1, "completed", fpA, at(0))
	h.mustComplete(scope1, "completed", done.Token, at(0), sampleResponse())
	doneRec := h.get(scope1, "completed", now)

	_, err := h.s.Claim(cancelled, claimParams(scope1, "new", fpA, now))
	wantCancelled(t, "Claim of a new key", err)
	h.getNotFound(scope1, "new", now)

	_, err = h.s.Claim(cancelled, claimParams(scope1, "processing", fpA, at(lease)))
	wantCancelled(t, "Claim taking over an expired lease", err)

	_, err = h.s.Get(cancelled, &retrysafe.GetParams{Scope: scope1, Key: "processing", Now: now})
	wantCancelled(t, "Get", err)

	err = h.s.Extend(cancelled, &retrysafe.ExtendParams{Scope: scope1, Key: "processing", Token: proc.Token, Now: now, Lease: time.Hour})
	wantCancelled(t, "Extend", err)

	err = h.s.Complete(cancelled, &retrysafe.CompleteParams{Scope: scope1, Key: "processing", Token: proc.Token, Now: now, TTL: ttl, Response: sampleResponse()})
	wantCancelled(t, "Complete", err)

	err = h.s.Release(cancelled, &retrysafe.ReleaseParams{Scope: scope1, Key: "processing", Token: proc.Token})
	wantCancelled(t, "Release", err)

	if p, ok := retrysafe.As[admin.Pinger](h.s); ok {
		wantCancelled(t, "Ping", p.Ping(cancelled))
	}
	if rc, ok := retrysafe.As[admin.ReadyChecker](h.s); ok {
		wantCancelled(t, "CheckReady", rc.CheckReady(cancelled))
	}
	if sw, ok := retrysafe.As[admin.Sweeper](h.s); ok {
		n, err := sw.Sweep(cancelled, &admin.SweepParams{Now: at(ttl + time.Hour)})
		wantCancelled(t, "Sweep", err)
		if n != 0 {
			t.Errorf("Sweep with a cancelled context reported %d deletions, want 0", n)
		}
	}
	if nf, ok := retrysafe.As[retrysafe.Notifier](h.s); ok {
		_, unsubscribe, err := nf.Subscribe(cancelled, scope1, "processing")
		wantCancelled(t, "Subscribe", err)
		if err == nil && unsubscribe != nil {
			unsubscribe()
		}
	}
	if ad, ok := retrysafe.As[admin.Admin](h.s); ok {
		_, err := ad.List(cancelled, &admin.ListParams{})
		wantCancelled(t, "List", err)
		_, err = ad.Find(cancelled, &admin.FindParams{Key: "completed"})
		wantCancelled(t, "Find", err)
		wantCancelled(t, "Delete", ad.Delete(cancelled, scope1, "completed"))
	}

	// Nothing changed.
	checkSameRecord(t, "processing record after calls with a cancelled context", h.get(scope1, "processing", now), procRec)
	after := h.get(scope1, "completed", now)
	checkSameRecord(t, "completed record after calls with a cancelled context", after, doneRec)
	checkResponse(t, "completed response after calls with a cancelled context", after.Response, sampleResponse())
	if ad, ok := retrysafe.As[admin.Admin](h.s); ok {
		recs, err := ad.List(h.ctx, &admin.ListParams{})
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		if len(recs) != 2 {
			t.Errorf("List after calls with a cancelled context: %d records, want 2", len(recs))
		}
	}
}
