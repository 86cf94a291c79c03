package retrysafegrpc_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	retrysafegrpc "github.com/retrysafe/retrysafe/grpc"
	"github.com/retrysafe/retrysafe/store/memory"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// The test service: a payments service whose messages are
// google.protobuf.Struct, registered with a hand-written ServiceDesc so
// that no generated code is needed.
const (
	serviceName  = "retrysafe.grpctest.Payments"
	methodCharge = "/" + serviceName + "/Charge"
	methodWatch  = "/" + serviceName + "/Watch"
)

// payments counts the effects of Charge per key and answers as the
// request says:
//
//	"amount"       echoed in the answer
//	"fail"         a gRPC code returned (with an ErrorInfo) after the effect
//	"fail_before"  a gRPC code returned before any effect
//	"block"        wait until release is closed
//	"abandon"      mark the outcome unknown
type payments struct {
	effects   atomic.Int64
	failFirst atomic.Bool   // the next Charge fails with Unavailable before any effect
	started   chan struct{} // receives once per Charge that began
	release   chan struct{} // closed to let blocked Charges go on
	done      chan struct{} // receives once per Charge that returned
	once      sync.Once

	mu     sync.Mutex
	perKey map[string]int
	keys   []string // the idempotency-key of every Charge that ran, in order
}

func newPayments() *payments {
	return &payments{
		started: make(chan struct{}, 100), release: make(chan struct{}), done: make(chan struct{}, 100),
		perKey: map[string]int{},
	}
}

func (p *payments) charge(ctx context.Context, req *structpb.Struct) (*structpb.Struct, error) {
	defer func() { p.done <- struct{}{} }()
	p.started <- struct{}{}
	f := req.GetFields()
	key := ""
	if v := metadata.ValueFromIncomingContext(ctx, retrysafegrpc.MetadataKey); len(v) > 0 {
		key = v[0]
	}
	p.mu.Lock()
	p.keys = append(p.keys, key)
	p.mu.Unlock()
	if p.failFirst.CompareAndSwap(true, false) {
		return nil, status.Error(codes.Unavailable, "try again")
	}
	if c := f["fail_before"].GetNumberValue(); c != 0 {
		return nil, status.Error(codes.Code(c), "nothing ran")
	}
	if f["block"].GetBoolValue() {
		<-p.release
	}
	n := p.effects.Add(1)
	p.mu.Lock()
	p.perKey[key]++
	p.mu.Unlock()
	id := fmt.Sprintf("ch_%d", n)
	_ = grpc.SetHeader(ctx, metadata.Pairs("x-charge-id", id, "x-raw-bin", string([]byte{0, 0xff, 1})))
	_ = grpc.SetTrailer(ctx, metadata.Pairs("x-trailer", "t-"+id))
	if f["abandon"].GetBoolValue() {
		retrysafe.OperationFromContext(ctx).Abandon()
	}
	if c := f["fail"].GetNumberValue(); c != 0 {
		st, _ := status.New(codes.Code(c), "declined "+id).WithDetails(&errdetails.ErrorInfo{Reason: "CARD_DECLINED", Domain: "example.com"})
		return nil, st.Err()
	}
	// Many map members, so that an encoder's map order would show.
	tags := map[string]any{}
	for i := range 20 {
		tags["t"+strconv.Itoa(i)] = float64(i)
	}
	return structpb.NewStruct(map[string]any{"id": id, "amount": f["amount"].GetNumberValue(), "tags": tags})
}

func (p *payments) effectsOf(key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.perKey[key]
}

func (p *payments) register(s *grpc.Server) {
	s.RegisterService(&grpc.ServiceDesc{
		ServiceName: serviceName,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Charge",
			Handler: func(_ any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
				req := new(structpb.Struct)
				if err := dec(req); err != nil {
					return nil, err
				}
				h := func(ctx context.Context, req any) (any, error) { return p.charge(ctx, req.(*structpb.Struct)) }
				if ic == nil {
					return h(ctx, req)
				}
				return ic(ctx, req, &grpc.UnaryServerInfo{FullMethod: methodCharge}, h)
			},
		}},
		Streams: []grpc.StreamDesc{{
			StreamName:    "Watch",
			ServerStreams: true,
			Handler: func(_ any, ss grpc.ServerStream) error {
				req := new(structpb.Struct)
				if err := ss.RecvMsg(req); err != nil {
					return err
				}
				for range 3 {
					if err := ss.SendMsg(req); err != nil {
						return err
					}
				}
				return nil
			},
		}},
	}, nil)
}

// tenantKey carries the tenant an auth interceptor found.
type tenantKey struct{}

// auth is the server's own authentication: it takes the tenant from the
// "authorization" metadata (a stand-in for verifying a token) into the
// context, where Config.Scope finds it.
func auth(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if v := metadata.ValueFromIncomingContext(ctx, "authorization"); len(v) == 1 {
		ctx = context.WithValue(ctx, tenantKey{}, v[0])
	}
	return h(ctx, req)
}

func tenantScope(ctx context.Context) (string, error) {
	t, _ := ctx.Value(tenantKey{}).(string)
	return t, nil
}

type env struct {
	conn  *grpc.ClientConn
	pay   *payments
	store *memory.Store
}

// transports are the listeners every server test runs on.
var transports = []string{"bufconn", "tcp"}

// eachTransport runs f as a parallel subtest per transport.
func eachTransport(t *testing.T, f func(t *testing.T, transport string)) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			f(t, tr)
		})
	}
}

// newEnv serves the test service (with health and reflection) behind the
// interceptors of cfg on transport, and dials it.
func newEnv(t *testing.T, transport string, tune func(*retrysafegrpc.Config), dial ...grpc.DialOption) *env {
	t.Helper()
	e := &env{pay: newPayments(), store: memory.New(memory.Config{})}
	cfg := retrysafegrpc.Config{Retrysafe: retrysafe.Config{Store: e.store, Lease: 3 * time.Second}, Scope: tenantScope}
	if tune != nil {
		tune(&cfg)
	}
	ic, err := retrysafegrpc.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(auth, ic.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(ic.StreamServerInterceptor()),
	)
	e.pay.register(srv)
	hs := health.NewServer()
	hs.SetServingStatus(serviceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	reflection.Register(srv)

	var ln net.Listener
	target := "passthrough:///bufnet"
	switch transport {
	case "bufconn":
		bl := bufconn.Listen(1 << 20)
		ln = bl
		dial = append(dial, grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return bl.DialContext(ctx) }))
	default:
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		target = ln.Addr().String()
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		e.pay.unblock()
		srv.Stop()
	})
	dial = append(dial, grpc.WithTransportCredentials(insecure.NewCredentials()))
	e.conn, err = grpc.NewClient(target, dial...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.conn.Close() })
	return e
}

// unblock lets blocked Charges go on (once; later calls do nothing).
func (p *payments) unblock() { p.once.Do(func() { close(p.release) }) }

// reply is one Charge's answer.
type reply struct {
	raw     []byte // the response message bytes as received
	msg     *structpb.Struct
	err     error
	header  metadata.MD
	trailer metadata.MD
}

// rawCodec is the protobuf codec that also keeps the bytes it decoded.
type rawCodec struct{ raw *[]byte }

func (rawCodec) Name() string                  { return "proto" }
func (rawCodec) Marshal(v any) ([]byte, error) { return proto.Marshal(v.(proto.Message)) }
func (c rawCodec) Unmarshal(b []byte, v any) error {
	*c.raw = append([]byte(nil), b...)
	return proto.Unmarshal(b, v.(proto.Message))
}

// charge calls Charge with key ("" for none) and the request fields.
func (e *env) charge(ctx context.Context, key string, fields map[string]any, opts ...grpc.CallOption) *reply {
	req, err := structpb.NewStruct(fields)
	if err != nil {
		panic(err)
	}
	if key != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, retrysafegrpc.MetadataKey, key)
	}
	r := &reply{msg: new(structpb.Struct)}
	opts = append(opts, grpc.Header(&r.header), grpc.Trailer(&r.trailer), grpc.ForceCodec(rawCodec{&r.raw}))
	r.err = e.conn.Invoke(ctx, methodCharge, req, r.msg, opts...)
	return r
}

// errorInfo returns err's ErrorInfo detail, or nil.
func errorInfo(err error) *errdetails.ErrorInfo {
	for _, d := range status.Convert(err).Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei
		}
	}
	return nil
}

// retryInfo returns err's RetryInfo delay, or -1.
func retryDelay(err error) time.Duration {
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return -1
}

// wantRefusal fails t unless err has code c and an ErrorInfo of reason.
func wantRefusal(t *testing.T, err error, c codes.Code, reason string) {
	t.Helper()
	if got := status.Code(err); got != c {
		t.Fatalf("code = %v (%v), want %v", got, err, c)
	}
	ei := errorInfo(err)
	if ei == nil || ei.GetReason() != reason || ei.GetDomain() != retrysafegrpc.ErrorDomain {
		t.Fatalf("ErrorInfo = %v, want reason %s in %s", ei, reason, retrysafegrpc.ErrorDomain)
	}
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return metadata.AppendToOutgoingContext(ctx, "authorization", "tenant-a")
}
