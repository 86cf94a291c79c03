package retrysafe_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/keyquote"
)

// TestDoer checks the prepared Doer: it validates its config once, runs fn
// once per key within its scope, and replays to every Doer of that store and scope alike.
func TestDoer(t *testing.T) {
	t.Parallel()
	if _, err := retrysafe.NewDoer(retrysafe.DoConfig{}); err == nil {
		t.Fatal("NewDoer without a store: no error")
	}
	if _, err := retrysafe.NewDoer(retrysafe.DoConfig{Store: newMemory(t), Lease: -time.Second}); err == nil {
		t.Fatal("NewDoer with a negative lease: no error")
	}
	s := newMemory(t)
	d, err := retrysafe.NewDoer(retrysafe.DoConfig{Store: s, Scope: "queue-a"})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	fn := func(context.Context) (receipt, error) {
		return receipt{ID: "r", Amount: int(runs.Add(1))}, nil
	}
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if v, err := retrysafe.Run(context.Background(), d, "m1", "fp", fn); err != nil || v.Amount != 1 {
				t.Errorf("Run = %+v, %v; want the first run's result", v, err)
			}
		})
	}
	wg.Wait()
	if runs.Load() != 1 {
		t.Fatalf("runs = %d, want 1", runs.Load())
	}
	// Another Doer with the same store and scope sees the same record.
	v, err := doWith(context.Background(), &retrysafe.DoConfig{Store: s, Scope: "queue-a"}, "m1", "fp", fn)
	if err != nil || v.Amount != 1 || runs.Load() != 1 {
		t.Fatalf("a second Doer after Run = %+v, %v (runs %d)", v, err, runs.Load())
	}
	// Another scope is another key space.
	if v, err := retrysafe.Do(context.Background(), s, "m1", "fp", fn); err != nil || v.Amount != 2 {
		t.Fatalf("Do in the empty scope = %+v, %v; want a new run", v, err)
	}
	if _, err := retrysafe.Run(context.Background(), d, "", "fp", fn); !errors.Is(err, retrysafe.ErrInvalidKey) {
		t.Fatalf("Run with an empty key: err = %v, want ErrInvalidKey", err)
	}
}

// TestDoStoredFailureRepresentation checks how a permanent failure is kept:
// with its own marker, so that a stored success whose status is 500 is
// not mistaken for one.
func TestDoStoredFailureRepresentation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newMemory(t)
	complete := func(key string, resp *retrysafe.Response) {
		t.Helper()
		res, err := s.Claim(ctx, &retrysafe.ClaimParams{Key: key, Fingerprint: "fp", Token: retrysafe.NewToken(), Now: time.Now(), Lease: time.Minute})
		if err != nil || !res.Claimed {
			t.Fatal(res, err)
		}
		if err := s.Complete(ctx, &retrysafe.CompleteParams{Key: key, Token: res.Record.Token, Now: time.Now(), TTL: time.Hour, Response: resp}); err != nil {
			t.Fatal(err)
		}
	}
	never := func(context.Context) (int, error) { t.Error("ran for a completed key"); return 0, nil }

	var failed *retrysafe.FailedError
	// A success completed by the caller (CompleteTx with ResultResponse)
	// whose status says 500 is a result, not a failure.
	resp, err := retrysafe.ResultResponse(7)
	if err != nil {
		t.Fatal(err)
	}
	resp.Status = http.StatusInternalServerError
	complete("result-500", resp)
	if v, err := retrysafe.Do(ctx, s, "result-500", "fp", never); err != nil || v != 7 {
		t.Fatalf("stored result with status 500 = %d, %v; want 7", v, err)
	}

	// A failure stored now carries the marker and still reads back.
	if _, err := retrysafe.Do(ctx, s, "new-failure", "fp", func(context.Context) (int, error) {
		return 0, retrysafe.Permanent(errors.New("insufficient funds"))
	}); err == nil {
		t.Fatal("permanent failure: no error")
	}
	rec, err := s.Get(ctx, &retrysafe.GetParams{Key: "new-failure", Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if ct := rec.Response.Header.Get("Content-Type"); ct != "application/vnd.retrysafe.failure" || rec.Response.Status != 500 {
		t.Fatalf("stored failure: status %d Content-Type %q", rec.Response.Status, ct)
	}
	if _, err := retrysafe.Do(ctx, s, "new-failure", "fp", never); !errors.As(err, &failed) || failed.Message != "insufficient funds" {
		t.Fatalf("new stored failure: err = %v", err)
	}
}

// releaseLostStore is a real store whose Release answers ErrLeaseLost, as
// after another claimant took the lease over.
type releaseLostStore struct{ retrysafe.Store }

func (releaseLostStore) Release(context.Context, *retrysafe.ReleaseParams) error {
	return retrysafe.ErrLeaseLost
}

// outcomeLog records the outcomes an Observer is given.
type outcomeLog struct {
	mu       sync.Mutex
	outcomes []retrysafe.Outcome
}

func (o *outcomeLog) Outcome(oc retrysafe.Outcome, _ time.Duration) {
	o.mu.Lock()
	o.outcomes = append(o.outcomes, oc)
	o.mu.Unlock()
}
func (o *outcomeLog) StoreCall(string, time.Duration, error) {}
func (o *outcomeLog) InFlight(int)                           {}

// TestDoLeaseLostOnRelease checks that Do, like the middleware, reports a
// release that found the lease taken over as lease_lost (it reported
// released).
func TestDoLeaseLostOnRelease(t *testing.T) {
	t.Parallel()
	obs := &outcomeLog{}
	cfg := &retrysafe.DoConfig{Store: releaseLostStore{newMemory(t)}, Observer: obs}
	transient := errors.New("provider timeout")
	_, err := doWith(context.Background(), cfg, "k", "", func(context.Context) (int, error) { return 0, transient })
	if !errors.Is(err, transient) {
		t.Fatalf("err = %v, want the function's error", err)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if len(obs.outcomes) != 1 || obs.outcomes[0] != retrysafe.OutcomeLeaseLost {
		t.Fatalf("outcomes %v, want [lease_lost]", obs.outcomes)
	}
}

// TestDoKeyRulesAreParseKeys checks that Do accepts exactly the keys an
// Idempotency-Key header can carry: 1 to MaxKeyLength printable ASCII
// characters.
func TestDoKeyRulesAreParseKeys(t *testing.T) {
	t.Parallel()
	s := newMemory(t)
	for _, key := range []string{
		"a", "order 1", `q"uote\`, strings.Repeat("k", retrysafe.MaxKeyLength),
		"", strings.Repeat("k", retrysafe.MaxKeyLength+1), "tab\tkey", "caf\u00e9", "del\x7f",
	} {
		_, parseErr := retrysafe.ParseKey(keyquote.Quote(key))
		_, doErr := retrysafe.Do(context.Background(), s, key, "", func(context.Context) (int, error) { return 1, nil })
		if (parseErr == nil) != (doErr == nil) {
			t.Errorf("key %q: ParseKey error %v, Do error %v; want both or neither", key, parseErr, doErr)
		}
		if doErr != nil && !errors.Is(doErr, retrysafe.ErrInvalidKey) {
			t.Errorf("key %q: Do error %v does not match ErrInvalidKey", key, doErr)
		}
	}
}
