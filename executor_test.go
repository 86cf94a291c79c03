package retrysafe_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/retrysafe/retrysafe"
)

// TestExecutor: the transport-neutral seam runs an operation once, replays
// its response byte for byte, releases the key for a nil response, refuses
// a key reused with another fingerprint, and runs fn detached from the
// caller's cancellation.
func TestExecutor(t *testing.T) {
	t.Parallel()
	obs := &outcomeLog{}
	x, err := retrysafe.NewExecutor(retrysafe.Config{Store: newMemory(t), Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	answer := func(ctx context.Context) *retrysafe.Response {
		runs.Add(1)
		if op := retrysafe.OperationFromContext(ctx); op == nil || op.Key() != "k" || op.Attempt() != 1 {
			t.Errorf("operation in fn's context = %v", op)
		}
		return &retrysafe.Response{Status: 6, Header: http.Header{"Grpc-Status-Details": {"x"}}, Body: []byte{0, 1, 0xff}}
	}
	first, replayed, err := x.Execute(context.Background(), "tenant", "k", "fp", answer)
	if err != nil || replayed || first.Status != 6 {
		t.Fatalf("first: %+v replayed %v err %v", first, replayed, err)
	}
	again, replayed, err := x.Execute(context.Background(), "tenant", "k", "fp", answer)
	if err != nil || !replayed || again.Status != 6 || !bytes.Equal(again.Body, []byte{0, 1, 0xff}) || again.Header.Get("Grpc-Status-Details") != "x" || runs.Load() != 1 {
		t.Fatalf("replay: %+v replayed %v err %v runs %d", again, replayed, err, runs.Load())
	}
	if _, _, err := x.Execute(context.Background(), "tenant", "k", "other", answer); !errors.Is(err, retrysafe.ErrMismatch) {
		t.Fatalf("other fingerprint: err = %v, want ErrMismatch", err)
	}
	if _, _, err := x.Execute(context.Background(), "other-tenant", "k", "other", answer); err != nil || runs.Load() != 2 {
		t.Fatalf("another scope: err %v runs %d, want its own run", err, runs.Load())
	}

	// A nil response releases the key: the retry runs again.
	var nilRuns atomic.Int64
	none := func(context.Context) *retrysafe.Response { nilRuns.Add(1); return nil }
	for range 2 {
		if resp, replayed, err := x.Execute(context.Background(), "tenant", "released", "fp", none); resp != nil || replayed || err != nil {
			t.Fatalf("nil response: %v %v %v", resp, replayed, err)
		}
	}
	if nilRuns.Load() != 2 {
		t.Fatalf("a released key ran %d times in 2 calls, want 2", nilRuns.Load())
	}

	// fn outlives the caller's cancellation.
	ctx, cancel := context.WithCancel(context.Background())
	_, _, err = x.Execute(ctx, "tenant", "detached", "fp", func(fctx context.Context) *retrysafe.Response {
		cancel()
		if fctx.Err() != nil {
			t.Error("the caller's cancellation reached fn")
		}
		return &retrysafe.Response{Status: 0}
	})
	if err != nil {
		t.Fatal(err)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	want := []retrysafe.Outcome{retrysafe.OutcomeNew, retrysafe.OutcomeReplayed, retrysafe.OutcomeMismatch, retrysafe.OutcomeNew,
		retrysafe.OutcomeReleased, retrysafe.OutcomeReleased, retrysafe.OutcomeNew}
	if len(obs.outcomes) != len(want) {
		t.Fatalf("outcomes %v, want %v", obs.outcomes, want)
	}
	for i := range want {
		if obs.outcomes[i] != want[i] {
			t.Fatalf("outcomes %v, want %v", obs.outcomes, want)
		}
	}
}

// TestExecutorPanicReleases: a panicking fn releases the key and the panic
// goes on; the next call runs.
func TestExecutorPanicReleases(t *testing.T) {
	t.Parallel()
	x, err := retrysafe.NewExecutor(retrysafe.Config{Store: newMemory(t)})
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if recover() != "boom" {
				t.Error("the panic did not go on")
			}
		}()
		_, _, _ = x.Execute(context.Background(), "", "k", "fp", func(context.Context) *retrysafe.Response { panic("boom") })
	}()
	resp, replayed, err := x.Execute(context.Background(), "", "k", "fp", func(context.Context) *retrysafe.Response { return &retrysafe.Response{Status: 1} })
	if err != nil || replayed || resp.Status != 1 {
		t.Fatalf("after the panic: %v %v %v, want a new run", resp, replayed, err)
	}
}
