package retrysafetest_test

import (
	"context"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/retrysafetest"
)

type ctxKey struct{}

func TestOperationContext(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rec := &retrysafe.Record{Scope: "tenant-a", Key: "order-1", Token: "tok", Fingerprint: "fp", Attempt: 2}
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "v"))
	ctx, op, err := retrysafetest.OperationContext(parent, rec, time.Hour, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if got := retrysafe.OperationFromContext(ctx); got != op || op == nil {
		t.Fatalf("OperationFromContext = %p, want the returned operation %p", got, op)
	}
	if op.Scope() != "tenant-a" || op.Key() != "order-1" || op.Fingerprint() != "fp" || op.Attempt() != 2 {
		t.Fatalf("operation %q %q %q %d does not describe the record", op.Scope(), op.Key(), op.Fingerprint(), op.Attempt())
	}
	if op.Disposition() != retrysafe.DispositionComplete {
		t.Fatalf("disposition %v, want the default DispositionComplete", op.Disposition())
	}
	p := op.CompleteParams(&retrysafe.Response{Status: 201})
	if p.Scope != "tenant-a" || p.Key != "order-1" || p.Token != "tok" || p.TTL != time.Hour || !p.Now.Equal(now) {
		t.Fatalf("CompleteParams = %+v", p)
	}
	if ctx.Err() != nil || ctx.Value(ctxKey{}) != "v" {
		t.Fatalf("context: err %v value %v; want never cancelled, with the parent's values", ctx.Err(), ctx.Value(ctxKey{}))
	}
	// Any scope and key, even ones a header could not carry.
	_, op, err = retrysafetest.OperationContext(context.Background(), &retrysafe.Record{Scope: "\x00", Key: ""}, 0, nil)
	if err != nil || op.Key() != "" || op.Scope() != "\x00" {
		t.Fatalf("empty key: %v, %v", op, err)
	}
	if _, _, err := retrysafetest.OperationContext(context.Background(), &retrysafe.Record{Key: "k"}, -time.Hour, nil); err == nil {
		t.Fatal("a negative ttl: no error")
	}
}
