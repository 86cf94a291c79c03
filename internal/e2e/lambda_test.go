package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/e2e/stores"
	retrysafelambda "github.com/retrysafe/retrysafe/lambda"
)

// TestLambdaOnEveryStore runs the Lambda wrapper's scenarios on every
// store: overlapping duplicate invocations run once; an invocation that
// times out mid-operation leaves a record whose lease ends by its
// deadline plus the grace, and the retry after it takes over; an SQS
// batch with a duplicate inside it and a redelivery of the batch runs
// each message once; an invocation whose deadline has passed leaves
// nothing behind.
func TestLambdaOnEveryStore(t *testing.T) {
	t.Parallel()
	for name, newStore := range stores.All {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			store := newStore(t)
			scope := fmt.Sprintf("fn-%d", time.Now().UnixNano())
			base := retrysafelambda.Config{Store: store, Scope: scope, Key: "/id", StoreTimeout: 30 * time.Second, WaitTimeout: 30 * time.Second}

			t.Run("concurrent duplicates", func(t *testing.T) {
				const n = 10
				var effects atomic.Int64
				var started sync.WaitGroup
				started.Add(n)
				h, err := retrysafelambda.Func(base, func(ctx context.Context, ev map[string]any) (int64, error) {
					e := effects.Add(1)
					time.Sleep(300 * time.Millisecond) // the others arrive while it runs
					return e, nil
				})
				if err != nil {
					t.Fatal(err)
				}
				var wg sync.WaitGroup
				got := make([]int64, n)
				errs := make([]error, n)
				for i := range n {
					wg.Go(func() {
						started.Done()
						started.Wait()
						ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
						defer cancel()
						got[i], errs[i] = h(ctx, json.RawMessage(`{"id":"dup"}`))
					})
				}
				wg.Wait()
				if effects.Load() != 1 {
					t.Fatalf("%d effects, want 1", effects.Load())
				}
				for i := range n {
					if errs[i] != nil || got[i] != 1 {
						t.Errorf("invocation %d: %d, %v", i, got[i], errs[i])
					}
				}
			})

			t.Run("timeout then retry", func(t *testing.T) {
				cfg := base
				cfg.DeadlineGrace = 300 * time.Millisecond
				var attempts []int
				h, err := retrysafelambda.Func(cfg, func(ctx context.Context, ev map[string]any) (int, error) {
					a := retrysafe.OperationFromContext(ctx).Attempt()
					attempts = append(attempts, a)
					if a == 1 {
						<-ctx.Done()
						return 0, ctx.Err()
					}
					return a, nil
				})
				if err != nil {
					t.Fatal(err)
				}
				deadline := time.Now().Add(time.Second)
				ctx, cancel := context.WithDeadline(context.Background(), deadline)
				if _, err := h(ctx, json.RawMessage(`{"id":"slow"}`)); !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("timed-out invocation: %v", err)
				}
				cancel()
				rec, err := store.Get(context.Background(), &retrysafe.GetParams{Scope: scope, Key: "slow", Now: time.Now()})
				if err != nil || rec.State != retrysafe.StateProcessing || !rec.Abandoned || rec.LeaseUntil.Round(0).After(deadline.Round(0).Add(cfg.DeadlineGrace)) {
					t.Fatalf("record after the timeout: %+v, %v; want processing, abandoned, its lease ending by %v", rec, err, deadline.Add(cfg.DeadlineGrace))
				}
				time.Sleep(time.Until(rec.LeaseUntil) + 50*time.Millisecond)
				for i, want := range []int{2, 2} {
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					got, err := h(ctx, json.RawMessage(`{"id":"slow"}`))
					cancel()
					if err != nil || got != want {
						t.Fatalf("retry %d: %d, %v; want the result of attempt %d", i, got, err, want)
					}
				}
				if len(attempts) != 2 {
					t.Fatalf("attempts %v, want [1 2]", attempts)
				}
			})

			t.Run("sqs duplicates", func(t *testing.T) {
				cfg := base
				cfg.Key = "" // the messageId
				var mu sync.Mutex
				effects := map[string]int{}
				h, err := retrysafelambda.SQS(cfg, func(ctx context.Context, m events.SQSMessage) error {
					mu.Lock()
					defer mu.Unlock()
					effects[m.MessageId]++
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				batch := events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m1", Body: "{}"}, {MessageId: "m2", Body: "{}"}, {MessageId: "m1", Body: "{}"}}}
				for i := range 2 {
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					resp, err := h(ctx, batch)
					cancel()
					if err != nil || len(resp.BatchItemFailures) != 0 {
						t.Fatalf("batch %d: %+v, %v", i, resp, err)
					}
				}
				if effects["m1"] != 1 || effects["m2"] != 1 {
					t.Fatalf("effects %v, want one each", effects)
				}
			})

			t.Run("past deadline", func(t *testing.T) {
				h, err := retrysafelambda.Func(base, func(ctx context.Context, ev map[string]any) (int, error) { return 1, nil })
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Millisecond))
				defer cancel()
				if _, err := h(ctx, json.RawMessage(`{"id":"late"}`)); !errors.Is(err, retrysafelambda.ErrNoTimeLeft) {
					t.Fatalf("err %v, want ErrNoTimeLeft", err)
				}
				if _, err := store.Get(context.Background(), &retrysafe.GetParams{Scope: scope, Key: "late", Now: time.Now()}); !errors.Is(err, retrysafe.ErrNotFound) {
					t.Fatalf("Get after a late invocation: %v, want ErrNotFound", err)
				}
			})
		})
	}
}
