package retrysafegrpc_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	retrysafegrpc "github.com/retrysafe/retrysafe/grpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

func TestReplayByteExact(t *testing.T) {
	t.Parallel()
	eachTransport(t, func(t *testing.T, tr string) {
		e := newEnv(t, tr, nil)
		ctx := testContext(t)
		first := e.charge(ctx, "k-replay", map[string]any{"amount": 42})
		if first.err != nil {
			t.Fatal(first.err)
		}
		again := e.charge(ctx, "k-replay", map[string]any{"amount": 42})
		if again.err != nil {
			t.Fatal(again.err)
		}
		if !bytes.Equal(first.raw, again.raw) || len(first.raw) == 0 {
			t.Fatalf("replayed bytes differ:\n first %x\n again %x", first.raw, again.raw)
		}
		if !proto.Equal(first.msg, again.msg) || first.msg.Fields["amount"].GetNumberValue() != 42 {
			t.Fatalf("messages: %v, %v", first.msg, again.msg)
		}
		if got := e.pay.effects.Load(); got != 1 {
			t.Fatalf("%d effects, want 1", got)
		}
		if retrysafegrpc.Replayed(first.header) || !retrysafegrpc.Replayed(again.header) {
			t.Fatalf("replay marker: first %v, again %v", first.header, again.header)
		}
		for _, k := range []string{"x-charge-id", "x-raw-bin"} {
			if a, b := first.header.Get(k), again.header.Get(k); len(a) != 1 || len(b) != 1 || a[0] != b[0] {
				t.Errorf("header %s: first %q, replay %q", k, a, b)
			}
		}
		if v := again.header.Get("x-raw-bin"); len(v) != 1 || v[0] != string([]byte{0, 0xff, 1}) {
			t.Errorf("binary header replayed as %q", v)
		}
		if a, b := first.trailer.Get("x-trailer"), again.trailer.Get("x-trailer"); len(a) != 1 || len(b) != 1 || a[0] != b[0] {
			t.Errorf("trailer: first %q, replay %q", a, b)
		}
		// A third replay is the same again (the stored bytes, not a re-encoding).
		third := e.charge(ctx, "k-replay", map[string]any{"amount": 42})
		if !bytes.Equal(third.raw, first.raw) {
			t.Fatal("third answer differs")
		}
	})
}

func TestErrorReplayed(t *testing.T) {
	t.Parallel()
	eachTransport(t, func(t *testing.T, tr string) {
		e := newEnv(t, tr, nil)
		ctx := testContext(t)
		first := e.charge(ctx, "k-fail", map[string]any{"fail": float64(codes.FailedPrecondition)})
		again := e.charge(ctx, "k-fail", map[string]any{"fail": float64(codes.FailedPrecondition)})
		for _, r := range []*reply{first, again} {
			st := status.Convert(r.err)
			if st.Code() != codes.FailedPrecondition || st.Message() != "declined ch_1" {
				t.Fatalf("status = %v", st)
			}
			if ei := errorInfo(r.err); ei.GetReason() != "CARD_DECLINED" {
				t.Fatalf("details lost: %v", st.Details())
			}
			if v := r.trailer.Get("x-trailer"); len(v) != 1 || v[0] != "t-ch_1" {
				t.Fatalf("trailer = %v", r.trailer)
			}
		}
		if !retrysafegrpc.Replayed(again.header) || e.pay.effects.Load() != 1 {
			t.Fatalf("replayed %v, effects %d", again.header, e.pay.effects.Load())
		}
	})
}

func TestReleasedCodes(t *testing.T) {
	t.Parallel()
	eachTransport(t, func(t *testing.T, tr string) {
		e := newEnv(t, tr, nil)
		ctx := testContext(t)
		for _, c := range []codes.Code{codes.Unavailable, codes.DeadlineExceeded, codes.Canceled} {
			r := e.charge(ctx, "k-rel", map[string]any{"fail_before": float64(c)})
			if status.Code(r.err) != c || retrysafegrpc.Replayed(r.header) {
				t.Fatalf("%v: got %v, replayed %v", c, r.err, retrysafegrpc.Replayed(r.header))
			}
		}
		// Each ran: the key was released every time, and runs now.
		if ok := e.charge(ctx, "k-rel", map[string]any{}); ok.err != nil || retrysafegrpc.Replayed(ok.header) {
			t.Fatalf("after releases: %v", ok.err)
		}
		e.pay.mu.Lock()
		n := len(e.pay.keys)
		e.pay.mu.Unlock()
		if n != 4 {
			t.Fatalf("handler ran %d times, want 4", n)
		}
	})
}

func TestStoreCodeConfigurable(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "bufconn", func(c *retrysafegrpc.Config) {
		c.StoreCode = func(c codes.Code) bool { return c == codes.OK }
	})
	ctx := testContext(t)
	for range 2 {
		r := e.charge(ctx, "k-nostore", map[string]any{"fail": float64(codes.Internal)})
		if status.Code(r.err) != codes.Internal || retrysafegrpc.Replayed(r.header) {
			t.Fatalf("got %v", r.err)
		}
	}
	if n := e.pay.effects.Load(); n != 2 {
		t.Fatalf("%d effects, want 2 (Internal not stored)", n)
	}
}

func TestMismatch(t *testing.T) {
	t.Parallel()
	eachTransport(t, func(t *testing.T, tr string) {
		e := newEnv(t, tr, nil)
		ctx := testContext(t)
		if r := e.charge(ctx, "k-mm", map[string]any{"amount": 1}); r.err != nil {
			t.Fatal(r.err)
		}
		r := e.charge(ctx, "k-mm", map[string]any{"amount": 2})
		wantRefusal(t, r.err, codes.FailedPrecondition, retrysafegrpc.ReasonKeyReused)
		if e.pay.effects.Load() != 1 {
			t.Fatal("the mismatching call ran")
		}
	})
}

func TestInFlight(t *testing.T) {
	t.Parallel()
	eachTransport(t, func(t *testing.T, tr string) {
		e := newEnv(t, tr, nil)
		ctx := testContext(t)
		done := make(chan *reply)
		go func() { done <- e.charge(ctx, "k-if", map[string]any{"block": true}) }()
		<-e.pay.started
		r := e.charge(ctx, "k-if", map[string]any{"block": true})
		wantRefusal(t, r.err, codes.Aborted, retrysafegrpc.ReasonRequestInProgress)
		if d := retryDelay(r.err); d != time.Second {
			t.Fatalf("RetryInfo delay = %v, want 1s", d)
		}
		e.pay.unblock()
		if first := <-done; first.err != nil {
			t.Fatal(first.err)
		}
		if r := e.charge(ctx, "k-if", map[string]any{"block": true}); r.err != nil || !retrysafegrpc.Replayed(r.header) {
			t.Fatalf("after the first: %v", r.err)
		}
	})
}

func TestInFlightWait(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "tcp", func(c *retrysafegrpc.Config) { c.Retrysafe.InFlight = retrysafe.InFlightWait })
	ctx := testContext(t)
	done := make(chan *reply)
	go func() { done <- e.charge(ctx, "k-wait", map[string]any{"block": true}) }()
	<-e.pay.started
	waiting := make(chan *reply)
	go func() { waiting <- e.charge(ctx, "k-wait", map[string]any{"block": true}) }()
	time.Sleep(50 * time.Millisecond) // let it wait (it cannot answer before the first)
	e.pay.unblock()
	first, second := <-done, <-waiting
	if first.err != nil || second.err != nil || !bytes.Equal(first.raw, second.raw) || !retrysafegrpc.Replayed(second.header) {
		t.Fatalf("first %v, waiter %v", first.err, second.err)
	}
	if e.pay.effects.Load() != 1 {
		t.Fatal("the waiter ran")
	}
}

func TestOutcomeUnknown(t *testing.T) {
	t.Parallel()
	eachTransport(t, func(t *testing.T, tr string) {
		e := newEnv(t, tr, nil)
		ctx := testContext(t)
		e.charge(ctx, "k-unk", map[string]any{"abandon": true})
		r := e.charge(ctx, "k-unk", map[string]any{"abandon": true})
		wantRefusal(t, r.err, codes.Aborted, retrysafegrpc.ReasonOutcomeUnknown)
		if d := retryDelay(r.err); d < time.Second || d > 3*time.Second {
			t.Fatalf("RetryInfo delay = %v, want the lease left (<= 3s)", d)
		}
		if errorInfo(r.err).GetMetadata()["lease_until"] == "" {
			t.Fatal("no lease_until")
		}
	})
}

func TestRequiredKey(t *testing.T) {
	t.Parallel()
	eachTransport(t, func(t *testing.T, tr string) {
		e := newEnv(t, tr, func(c *retrysafegrpc.Config) { c.RequireKey = true })
		ctx := testContext(t)
		wantRefusal(t, e.charge(ctx, "", nil).err, codes.InvalidArgument, retrysafegrpc.ReasonMissingKey)
		wantRefusal(t, e.charge(ctx, strings.Repeat("x", 256), nil).err, codes.InvalidArgument, retrysafegrpc.ReasonInvalidKey)
		wantRefusal(t, e.charge(ctx, "a,b", nil).err, codes.InvalidArgument, retrysafegrpc.ReasonInvalidKey)
		empty := metadata.AppendToOutgoingContext(ctx, retrysafegrpc.MetadataKey, "")
		wantRefusal(t, e.charge(empty, "", nil).err, codes.InvalidArgument, retrysafegrpc.ReasonInvalidKey)
		two := metadata.AppendToOutgoingContext(ctx, retrysafegrpc.MetadataKey, "one", retrysafegrpc.MetadataKey, "two")
		wantRefusal(t, e.charge(two, "", nil).err, codes.InvalidArgument, retrysafegrpc.ReasonInvalidKey)
		if e.pay.effects.Load() != 0 {
			t.Fatal("a refused call ran")
		}
		// A quoted key is the same key as the bare one.
		if r := e.charge(ctx, "k-q", nil); r.err != nil {
			t.Fatal(r.err)
		}
		if r := e.charge(ctx, `"k-q"`, nil); r.err != nil || !retrysafegrpc.Replayed(r.header) {
			t.Fatalf("quoted key: %v %v", r.err, r.header)
		}
	})
}

func TestUnkeyedPassesThrough(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "bufconn", nil)
	ctx := testContext(t)
	for range 2 {
		if r := e.charge(ctx, "", nil); r.err != nil || retrysafegrpc.Replayed(r.header) {
			t.Fatal(r.err)
		}
	}
	if e.pay.effects.Load() != 2 {
		t.Fatal("unkeyed calls must each run")
	}
}

func TestTenantScope(t *testing.T) {
	t.Parallel()
	eachTransport(t, func(t *testing.T, tr string) {
		e := newEnv(t, tr, func(c *retrysafegrpc.Config) { c.RequireScope = true })
		base, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		a := metadata.AppendToOutgoingContext(base, "authorization", "tenant-a")
		b := metadata.AppendToOutgoingContext(base, "authorization", "tenant-b")
		ra := e.charge(a, "shared", map[string]any{"amount": 5})
		rb := e.charge(b, "shared", map[string]any{"amount": 5})
		if ra.err != nil || rb.err != nil || retrysafegrpc.Replayed(rb.header) {
			t.Fatalf("a %v, b %v (replayed %v)", ra.err, rb.err, rb.header)
		}
		if ra.msg.Fields["id"].GetStringValue() == rb.msg.Fields["id"].GetStringValue() {
			t.Fatal("tenant b got tenant a's charge")
		}
		// The client cannot choose its scope by metadata the server does not read.
		spoof := metadata.AppendToOutgoingContext(base, "authorization", "tenant-b", "scope", "tenant-a")
		if r := e.charge(spoof, "shared", map[string]any{"amount": 5}); r.msg.Fields["id"].GetStringValue() != rb.msg.Fields["id"].GetStringValue() {
			t.Fatal("scope taken from client metadata")
		}
		wantRefusal(t, e.charge(base, "shared", nil).err, codes.Unauthenticated, retrysafegrpc.ReasonEmptyScope)
		if e.pay.effects.Load() != 2 {
			t.Fatalf("%d effects, want 2", e.pay.effects.Load())
		}
	})
}

func TestConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	eachTransport(t, func(t *testing.T, tr string) {
		e := newEnv(t, tr, func(c *retrysafegrpc.Config) { c.Retrysafe.InFlight = retrysafe.InFlightWait })
		ctx := testContext(t)
		const n = 50
		var wg sync.WaitGroup
		replies := make([]*reply, n)
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				replies[i] = e.charge(ctx, "k-50", map[string]any{"amount": 7})
			})
		}
		close(start)
		wg.Wait()
		if got := e.pay.effectsOf("k-50"); got != 1 {
			t.Fatalf("%d effects, want exactly 1", got)
		}
		replayed := 0
		for _, r := range replies {
			if r.err != nil {
				t.Fatal(r.err)
			}
			if !bytes.Equal(r.raw, replies[0].raw) {
				t.Fatal("answers differ")
			}
			if retrysafegrpc.Replayed(r.header) {
				replayed++
			}
		}
		if replayed != n-1 {
			t.Fatalf("%d replayed, want %d", replayed, n-1)
		}
	})
}

func TestConcurrentDuplicatesConflict(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "tcp", nil)
	ctx := testContext(t)
	const n = 50
	var wg sync.WaitGroup
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = e.charge(ctx, "k-50c", map[string]any{"amount": 7}).err
		})
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		if c := status.Code(err); c != codes.OK && c != codes.Aborted {
			t.Fatal(err)
		}
	}
	if got := e.pay.effectsOf("k-50c"); got != 1 {
		t.Fatalf("%d effects, want exactly 1", got)
	}
}

func TestClientGone(t *testing.T) {
	t.Parallel()
	eachTransport(t, func(t *testing.T, tr string) {
		e := newEnv(t, tr, nil)
		ctx := testContext(t)
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan *reply)
		go func() { done <- e.charge(cctx, "k-gone", map[string]any{"block": true, "amount": 3}) }()
		<-e.pay.started
		cancel()
		if r := <-done; status.Code(r.err) != codes.Canceled {
			t.Fatalf("the cancelled call got %v", r.err)
		}
		e.pay.unblock() // the operation goes on without its client
		<-e.pay.done
		var r *reply
		for deadline := time.Now().Add(5 * time.Second); ; {
			r = e.charge(ctx, "k-gone", map[string]any{"block": true, "amount": 3})
			if status.Code(r.err) != codes.Aborted || time.Now().After(deadline) {
				break // Aborted: still storing the result
			}
			time.Sleep(10 * time.Millisecond)
		}
		if r.err != nil || !retrysafegrpc.Replayed(r.header) || r.msg.Fields["amount"].GetNumberValue() != 3 {
			t.Fatalf("retry after the client went: %v, replayed %v", r.err, retrysafegrpc.Replayed(r.header))
		}
		if e.pay.effects.Load() != 1 {
			t.Fatal("the retry ran again")
		}
	})
}

func TestStreams(t *testing.T) {
	t.Parallel()
	eachTransport(t, func(t *testing.T, tr string) {
		e := newEnv(t, tr, func(c *retrysafegrpc.Config) { c.RequireKey = true })
		ctx := testContext(t)
		watch := func(ctx context.Context) (int, error) {
			s, err := e.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, methodWatch)
			if err != nil {
				return 0, err
			}
			if err := s.SendMsg(&structpb.Struct{}); err != nil {
				return 0, err
			}
			if err := s.CloseSend(); err != nil {
				return 0, err
			}
			n := 0
			for {
				if err := s.RecvMsg(new(structpb.Struct)); err != nil {
					if status.Code(err) == codes.OK || err.Error() == "EOF" {
						return n, nil
					}
					return n, err
				}
				n++
			}
		}
		if n, err := watch(ctx); err != nil || n != 3 {
			t.Fatalf("unkeyed stream: %d messages, %v", n, err)
		}
		_, err := watch(metadata.AppendToOutgoingContext(ctx, retrysafegrpc.MetadataKey, "k-stream"))
		wantRefusal(t, err, codes.InvalidArgument, retrysafegrpc.ReasonKeyedStream)
	})
}

func TestHealthAndReflectionPassThrough(t *testing.T) {
	t.Parallel()
	eachTransport(t, func(t *testing.T, tr string) {
		e := newEnv(t, tr, func(c *retrysafegrpc.Config) { c.RequireKey = true; c.RequireScope = true })
		ctx := context.Background() // no key, no tenant: both required for protected methods
		hc := healthpb.NewHealthClient(e.conn)
		for range 2 {
			var h metadata.MD
			keyed := metadata.AppendToOutgoingContext(ctx, retrysafegrpc.MetadataKey, "k-health")
			for _, c := range []context.Context{ctx, keyed} {
				resp, err := hc.Check(c, &healthpb.HealthCheckRequest{Service: serviceName}, grpc.Header(&h))
				if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING || retrysafegrpc.Replayed(h) {
					t.Fatalf("health: %v %v", resp, err)
				}
			}
		}
		w, err := hc.Watch(metadata.AppendToOutgoingContext(ctx, retrysafegrpc.MetadataKey, "k-watch"), &healthpb.HealthCheckRequest{Service: serviceName})
		if err != nil {
			t.Fatal(err)
		}
		if resp, err := w.Recv(); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("keyed health watch: %v %v", resp, err)
		}
		rc, err := rpb.NewServerReflectionClient(e.conn).ServerReflectionInfo(metadata.AppendToOutgoingContext(ctx, retrysafegrpc.MetadataKey, "k-refl"))
		if err != nil {
			t.Fatal(err)
		}
		if err := rc.Send(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_ListServices{}}); err != nil {
			t.Fatal(err)
		}
		resp, err := rc.Recv()
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, s := range resp.GetListServicesResponse().GetService() {
			found = found || s.GetName() == serviceName
		}
		if !found {
			t.Fatalf("reflection lists %v", resp.GetListServicesResponse())
		}
	})
}

// failingStore is a store whose every call fails as unreachable.
type failingStore struct{ retrysafe.Store }

func (failingStore) Claim(context.Context, *retrysafe.ClaimParams) (*retrysafe.ClaimResult, error) {
	return nil, retrysafe.Unavailable("claim", errDown)
}

var errDown = status.Error(codes.Unknown, "connection refused")

func TestStoreDown(t *testing.T) {
	t.Parallel()
	eachTransport(t, func(t *testing.T, tr string) {
		e := newEnv(t, tr, func(c *retrysafegrpc.Config) {
			c.Retrysafe.Store = failingStore{c.Retrysafe.Store}
			c.Retrysafe.StoreTimeout = time.Second
		})
		r := e.charge(testContext(t), "k-down", nil)
		wantRefusal(t, r.err, codes.Unavailable, retrysafegrpc.ReasonStoreUnavailable)
		if retryDelay(r.err) <= 0 || e.pay.effects.Load() != 0 {
			t.Fatalf("retry delay %v, effects %d", retryDelay(r.err), e.pay.effects.Load())
		}
	})
	t.Run("fail open", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, "bufconn", func(c *retrysafegrpc.Config) {
			c.Retrysafe.Store = failingStore{c.Retrysafe.Store}
			c.FailOpen = true
		})
		if r := e.charge(testContext(t), "k-down", nil); r.err != nil || e.pay.effects.Load() != 1 {
			t.Fatalf("fail open: %v", r.err)
		}
	})
}

func TestResponseTooLarge(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "bufconn", func(c *retrysafegrpc.Config) { c.MaxResponseSize = 10 })
	ctx := testContext(t)
	if r := e.charge(ctx, "k-big", nil); r.err != nil {
		t.Fatalf("the first caller must get the answer: %v", r.err)
	}
	r := e.charge(ctx, "k-big", nil)
	wantRefusal(t, r.err, codes.Internal, retrysafegrpc.ReasonResponseNotStored)
	if e.pay.effects.Load() != 1 {
		t.Fatal("ran again")
	}
}

// A retry policy in the service config re-sends the call on Unavailable;
// the client interceptor's key is on every attempt, and the server, which
// released the key for the Unavailable, runs the retry and stores its
// answer.
func TestGRPCRetryPolicyKeepsKey(t *testing.T) {
	t.Parallel()
	eachTransport(t, func(t *testing.T, tr string) {
		const sc = `{"methodConfig": [{"name": [{"service": "` + serviceName + `"}],
			"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.01s", "maxBackoff": "0.05s",
			"backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`
		e := newEnv(t, tr, nil,
			grpc.WithDefaultServiceConfig(sc),
			grpc.WithUnaryInterceptor(retrysafegrpc.UnaryClientInterceptor(retrysafegrpc.ClientConfig{})))
		ctx := testContext(t)
		e.pay.failFirst.Store(true)
		r := e.charge(ctx, "", map[string]any{"amount": 9})
		if r.err != nil {
			t.Fatal(r.err)
		}
		e.pay.mu.Lock()
		keys := append([]string(nil), e.pay.keys...)
		e.pay.mu.Unlock()
		if len(keys) != 2 || keys[0] == "" || keys[0] != keys[1] {
			t.Fatalf("attempts carried keys %q, want one key twice", keys)
		}
		if e.pay.effects.Load() != 1 {
			t.Fatalf("%d effects", e.pay.effects.Load())
		}
		// A new logical call gets a new key.
		e.charge(ctx, "", nil)
		e.pay.mu.Lock()
		defer e.pay.mu.Unlock()
		if len(e.pay.keys) != 3 || e.pay.keys[2] == keys[0] || e.pay.keys[2] == "" {
			t.Fatalf("keys %q", e.pay.keys)
		}
	})
}
