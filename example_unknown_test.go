package retrysafe_test

import (
	"context"
	"fmt"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/memory"
)

// A charge that records a checkpoint once the provider was asked; the
// attempt that takes over after the first one was lost looks the charge up
// instead of charging again.
func ExampleOperation_Checkpoint() {
	store := memory.New(memory.Config{})
	defer store.Close()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	d, err := retrysafe.NewDoer(retrysafe.DoConfig{Store: store, Lease: time.Minute, Now: func() time.Time { return now }})
	if err != nil {
		panic(err)
	}
	charge := func(ctx context.Context) (string, error) {
		op := retrysafe.OperationFromContext(ctx)
		if step, ref, ok := op.Resumed(); ok && step == "charge-requested" {
			return "looked up " + string(ref), nil // ask the provider about ref
		}
		ref := "ch_1" // the provider's reference for the charge just requested
		if err := op.Checkpoint(ctx, "charge-requested", []byte(ref)); err != nil {
			return "", err
		}
		op.Abandon() // here: the answer was lost, the outcome is unknown
		return "", nil
	}
	_, _ = retrysafe.Run(context.Background(), d, "order-7", "fp", charge)
	now = now.Add(time.Minute) // the lease runs out; the redelivery takes over
	got, err := retrysafe.Run(context.Background(), d, "order-7", "fp", charge)
	fmt.Println(got, err)
	// Output: looked up ch_1 <nil>
}

// A Resolver asks the system the operation acted on, and the engine
// follows its answer instead of re-running the operation blindly.
func ExampleResolver() {
	store := memory.New(memory.Config{})
	defer store.Close()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	charged := map[string]bool{"ch_1": true} // the provider's own record
	d, err := retrysafe.NewDoer(retrysafe.DoConfig{
		Store: store, Lease: time.Minute, Now: func() time.Time { return now },
		OnUnknown: retrysafe.OnUnknownBlock,
		Resolver: func(ctx context.Context, rec *retrysafe.Record) (retrysafe.Resolution, error) {
			if rec.Checkpoint == nil || !charged[string(rec.Checkpoint.Data)] {
				return retrysafe.Resolution{Action: retrysafe.ResolveRerun}, nil
			}
			resp, err := retrysafe.ResultResponse("charged " + string(rec.Checkpoint.Data))
			return retrysafe.Resolution{Action: retrysafe.ResolveComplete, Response: resp}, err
		},
	})
	if err != nil {
		panic(err)
	}
	_, _ = retrysafe.Run(context.Background(), d, "order-8", "fp", func(ctx context.Context) (string, error) {
		op := retrysafe.OperationFromContext(ctx)
		if err := op.Checkpoint(ctx, "charge-requested", []byte("ch_1")); err != nil {
			return "", err
		}
		op.Abandon() // the answer was lost
		return "", nil
	})
	now = now.Add(time.Minute)
	got, err := retrysafe.Run(context.Background(), d, "order-8", "fp", func(context.Context) (string, error) {
		return "charged again", nil // never runs: the Resolver found the charge
	})
	fmt.Println(got, err)
	// Output: charged ch_1 <nil>
}
