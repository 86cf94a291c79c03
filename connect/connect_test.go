package retrysafeconnect_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/retrysafe/retrysafe"
	retrysafeconnect "github.com/retrysafe/retrysafe/connect"
	"github.com/retrysafe/retrysafe/store/memory"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/structpb"
)

const (
	procCharge = "/retrysafe.connecttest.Payments/Charge" // a unary call with effects
	procEcho   = "/retrysafe.connecttest.Payments/Echo"   // a Struct (map field) in and out
	procGet    = "/retrysafe.connecttest.Payments/Get"    // NO_SIDE_EFFECTS: may be sent as GET
)

type service struct {
	effects atomic.Int64
	started chan struct{}
	release chan struct{}
	once    sync.Once

	mu      sync.Mutex
	methods []string // the HTTP method of every call that reached the handlers
}

func (s *service) saw(m string) {
	s.mu.Lock()
	s.methods = append(s.methods, m)
	s.mu.Unlock()
}

type env struct {
	svc    *service
	url    string
	client *http.Client
}

// newEnv serves the two procedures behind the middleware (with cfg's
// policy; RequireKey set) wrapped in retrysafeconnect.Errors.
func newEnv(t *testing.T, http2 bool) *env {
	t.Helper()
	s := &service{started: make(chan struct{}, 10), release: make(chan struct{})}
	mux := http.NewServeMux()
	// The request is a list [amount, block], not a Struct: binary
	// protobuf encodes map fields in random order, so two encodings of one
	// Struct differ in bytes, which is what the middleware fingerprints
	// (see TestMapsNeedJSON).
	charge := connect.NewUnaryHandler(procCharge, func(ctx context.Context, req *connect.Request[structpb.ListValue]) (*connect.Response[structpb.Struct], error) {
		s.saw(req.HTTPMethod())
		s.started <- struct{}{}
		if req.Msg.GetValues()[1].GetBoolValue() {
			<-s.release
		}
		n := s.effects.Add(1)
		out, _ := structpb.NewStruct(map[string]any{"id": "ch_" + strconv.FormatInt(n, 10), "amount": req.Msg.GetValues()[0].GetNumberValue()})
		return connect.NewResponse(out), nil
	})
	get := connect.NewUnaryHandler(procGet, func(ctx context.Context, req *connect.Request[structpb.Struct]) (*connect.Response[structpb.Struct], error) {
		s.saw(req.HTTPMethod())
		return connect.NewResponse(&structpb.Struct{}), nil
	}, connect.WithIdempotency(connect.IdempotencyNoSideEffects))
	echo := connect.NewUnaryHandler(procEcho, func(ctx context.Context, req *connect.Request[structpb.Struct]) (*connect.Response[structpb.Struct], error) {
		s.saw(req.HTTPMethod())
		s.effects.Add(1)
		return connect.NewResponse(req.Msg), nil
	})
	mw, err := retrysafe.NewMiddleware(retrysafe.Config{Store: memory.New(memory.Config{}), RequireKey: true, Lease: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	mux.Handle(procCharge, retrysafeconnect.Errors(mw(charge)))
	mux.Handle(procEcho, retrysafeconnect.Errors(mw(echo)))
	mux.Handle(procGet, retrysafeconnect.Errors(mw(get)))
	srv := httptest.NewUnstartedServer(mux)
	if http2 {
		srv.EnableHTTP2 = true
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(func() {
		s.once.Do(func() { close(s.release) })
		srv.Close()
	})
	return &env{svc: s, url: srv.URL, client: srv.Client()}
}

func (e *env) charge(ctx context.Context, key string, amount float64, block bool, opts ...connect.ClientOption) (*connect.Response[structpb.Struct], error) {
	c := connect.NewClient[structpb.ListValue, structpb.Struct](e.client, e.url+procCharge, opts...)
	msg, _ := structpb.NewList([]any{amount, block})
	req := connect.NewRequest(msg)
	req.Header().Set("Authorization", "Bearer tenant-a")
	if key != "" {
		req.Header().Set(retrysafe.HeaderKey, key)
	}
	return c.CallUnary(ctx, req)
}

// reasonOf returns the reason of err's google.rpc.ErrorInfo detail.
func reasonOf(t *testing.T, err error) string {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) {
		t.Fatalf("not a Connect error: %v", err)
	}
	for _, d := range ce.Details() {
		if d.Type() == "google.rpc.ErrorInfo" {
			if r := reasonOfDetail(d.Bytes()); r != "" {
				return r
			}
			t.Fatalf("bad ErrorInfo %x", d.Bytes())
		}
	}
	t.Fatalf("no ErrorInfo in %v", ce.Details())
	return ""
}

// reasonOfDetail returns the reason (field 1) of an encoded
// google.rpc.ErrorInfo, or "".
func reasonOfDetail(b []byte) string {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType {
			return ""
		}
		b = b[n:]
		v, n := protowire.ConsumeString(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		if num == 1 {
			return v
		}
	}
	return ""
}

func TestConnectUnaryPostProtected(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	ctx := context.Background()
	first, err := e.charge(ctx, "k1", 10, false)
	if err != nil {
		t.Fatal(err)
	}
	again, err := e.charge(ctx, "k1", 10, false)
	if err != nil {
		t.Fatal(err)
	}
	if first.Msg.Fields["id"].GetStringValue() != again.Msg.Fields["id"].GetStringValue() || e.svc.effects.Load() != 1 {
		t.Fatalf("replay: %v vs %v, %d effects", first.Msg, again.Msg, e.svc.effects.Load())
	}
	if again.Header().Get(retrysafe.HeaderReplayed) != "true" || first.Header().Get(retrysafe.HeaderReplayed) != "" {
		t.Fatal("replay marker")
	}
	if e.svc.methods[0] != http.MethodPost {
		t.Fatalf("unary call sent as %s", e.svc.methods[0])
	}
}

func TestConnectErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	ctx := context.Background()
	_, err := e.charge(ctx, "", 1, false)
	if connect.CodeOf(err) != connect.CodeInvalidArgument || reasonOf(t, err) != "MISSING_KEY" {
		t.Fatalf("missing key: %v", err)
	}
	if _, err := e.charge(ctx, "k-mm", 1, false); err != nil {
		t.Fatal(err)
	}
	_, err = e.charge(ctx, "k-mm", 2, false)
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || reasonOf(t, err) != "KEY_REUSED" {
		t.Fatalf("mismatch: %v", err)
	}
	done := make(chan error)
	go func() { _, err := e.charge(ctx, "k-if", 1, true); done <- err }()
	<-e.svc.started
	<-e.svc.started // k-mm's first call, then k-if's
	_, err = e.charge(ctx, "k-if", 1, true)
	if connect.CodeOf(err) != connect.CodeAborted || reasonOf(t, err) != "REQUEST_IN_PROGRESS" {
		t.Fatalf("in flight: %v", err)
	}
	var ce *connect.Error
	errors.As(err, &ce)
	if len(ce.Details()) != 2 || ce.Details()[1].Type() != "google.rpc.RetryInfo" {
		t.Fatalf("no RetryInfo: %v", ce.Details())
	}
	e.svc.once.Do(func() { close(e.svc.release) })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A gRPC-protocol client of the same handler reads the refusal from
// grpc-status.
func TestGRPCProtocolErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	_, err := e.charge(context.Background(), "", 1, false, connect.WithGRPC())
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("gRPC protocol, missing key: %v", err)
	}
}

// A NO_SIDE_EFFECTS procedure called with HTTP GET passes the middleware
// untouched: no key needed (though RequireKey is set), nothing stored.
func TestNoSideEffectsGetPassesThrough(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	c := connect.NewClient[structpb.Struct, structpb.Struct](e.client, e.url+procGet,
		connect.WithHTTPGet(), connect.WithIdempotency(connect.IdempotencyNoSideEffects))
	for range 2 {
		resp, err := c.CallUnary(context.Background(), connect.NewRequest(&structpb.Struct{}))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Header().Get(retrysafe.HeaderReplayed) != "" {
			t.Fatal("a GET was replayed")
		}
	}
	e.svc.mu.Lock()
	defer e.svc.mu.Unlock()
	if len(e.svc.methods) != 2 || e.svc.methods[0] != http.MethodGet || e.svc.methods[1] != http.MethodGet {
		t.Fatalf("methods seen: %v", e.svc.methods)
	}
}

// A message with map fields, sent with the JSON codec, is fingerprinted
// by its canonical JSON: the caller's own retries, which encode it anew
// (map members in another order), replay instead of mismatching.
func TestMapsNeedJSON(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	c := connect.NewClient[structpb.Struct, structpb.Struct](e.client, e.url+procEcho, connect.WithProtoJSON())
	fields := map[string]any{}
	for i := range 20 {
		fields["m"+strconv.Itoa(i)] = float64(i)
	}
	for i := range 5 {
		msg, _ := structpb.NewStruct(fields)
		req := connect.NewRequest(msg)
		req.Header().Set("Authorization", "Bearer tenant-a")
		req.Header().Set(retrysafe.HeaderKey, "k-json")
		resp, err := c.CallUnary(context.Background(), req)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if i > 0 && resp.Header().Get(retrysafe.HeaderReplayed) != "true" {
			t.Fatalf("call %d not replayed", i)
		}
	}
	if e.svc.effects.Load() != 1 {
		t.Fatalf("%d effects", e.svc.effects.Load())
	}
}
