package retrysafegrpc_test

import (
	"context"
	"testing"

	"github.com/retrysafe/retrysafe"
	retrysafegrpc "github.com/retrysafe/retrysafe/grpc"
	"github.com/retrysafe/retrysafe/retrysafetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// The caller's own retries: a key pinned to the context is sent on every
// call made with it, and the second call replays the first's answer.
func TestClientPinnedKeyAcrossCallerRetries(t *testing.T) {
	t.Parallel()
	eachTransport(t, func(t *testing.T, tr string) {
		e := newEnv(t, tr, nil, grpc.WithUnaryInterceptor(retrysafegrpc.UnaryClientInterceptor(retrysafegrpc.ClientConfig{})))
		ctx := retrysafegrpc.WithNewKey(testContext(t))
		first := e.charge(ctx, "", map[string]any{"amount": 1})
		again := e.charge(ctx, "", map[string]any{"amount": 1})
		if first.err != nil || again.err != nil || !retrysafegrpc.Replayed(again.header) {
			t.Fatalf("first %v, again %v (replayed %v)", first.err, again.err, again.header)
		}
		if e.pay.effects.Load() != 1 || e.pay.effectsOf(retrysafegrpc.KeyFromContext(ctx)) != 1 {
			t.Fatalf("effects %d", e.pay.effects.Load())
		}
		// A key that needs quoting reads back as itself on the server.
		odd := retrysafegrpc.WithKey(testContext(t), `has "quotes", commas`)
		if r := e.charge(odd, "", nil); r.err != nil || e.pay.effectsOf(`"has \"quotes\", commas"`) != 1 {
			t.Fatalf("quoted key: %v", r.err)
		}
		// Explicit metadata wins over the interceptor.
		if r := e.charge(ctx, "explicit", nil); r.err != nil || e.pay.effectsOf("explicit") != 1 {
			t.Fatalf("explicit key: %v", r.err)
		}
		// An invalid pinned key fails before anything is sent.
		bad := retrysafegrpc.WithKey(testContext(t), "bad\x01")
		if r := e.charge(bad, "", nil); status.Code(r.err) != codes.InvalidArgument {
			t.Fatalf("invalid pinned key: %v", r.err)
		}
	})
}

func TestClientLeavesHealthAlone(t *testing.T) {
	t.Parallel()
	var sent metadata.MD
	ic := retrysafegrpc.UnaryClientInterceptor(retrysafegrpc.ClientConfig{})
	invoker := func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
		sent, _ = metadata.FromOutgoingContext(ctx)
		return nil
	}
	_ = ic(context.Background(), "/grpc.health.v1.Health/Check", nil, nil, nil, invoker)
	if len(sent.Get(retrysafegrpc.MetadataKey)) != 0 {
		t.Fatal("health call got a key")
	}
	_ = ic(context.Background(), methodCharge, nil, nil, nil, invoker)
	if v := sent.Get(retrysafegrpc.MetadataKey); len(v) != 1 || len(v[0]) != 36 {
		t.Fatalf("charge sent %q", v)
	}
}

// A handler behind the server interceptor derives the key of its own
// outbound call from the operation: the same for each retry of the
// incoming call, different per label.
func TestDerivedKey(t *testing.T) {
	t.Parallel()
	rec := &retrysafe.Record{Scope: "tenant-a", Key: "incoming-1", Attempt: 1}
	ctx, _, err := retrysafetest.OperationContext(context.Background(), rec, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	k1, ok1 := retrysafegrpc.DeriveKey(ctx, "psp-charge")
	k2, _ := retrysafegrpc.DeriveKey(ctx, "psp-charge")
	k3, _ := retrysafegrpc.DeriveKey(ctx, "send-receipt")
	if !ok1 || k1 != k2 || k1 == k3 {
		t.Fatalf("derived keys %q %q %q", k1, k2, k3)
	}
	if got := retrysafegrpc.KeyFromContext(retrysafegrpc.WithDerivedKey(ctx, "psp-charge")); got != k1 {
		t.Fatalf("WithDerivedKey pinned %q", got)
	}
	if _, ok := retrysafegrpc.DeriveKey(context.Background(), "x"); ok {
		t.Fatal("derived a key without an operation")
	}
}
