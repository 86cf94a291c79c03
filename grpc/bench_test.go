package retrysafegrpc_test

import (
	"context"
	"net"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	retrysafegrpc "github.com/retrysafe/retrysafe/grpc"
	"github.com/retrysafe/retrysafe/store/memory"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/structpb"
)

// benchServer serves a Charge-shaped echo method on bufconn, with the
// given unary interceptors, and returns a connection to it.
func benchServer(b *testing.B, ics ...grpc.UnaryServerInterceptor) *grpc.ClientConn {
	b.Helper()
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(ics...))
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: serviceName,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Charge",
			Handler: func(_ any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
				req := new(structpb.Struct)
				if err := dec(req); err != nil {
					return nil, err
				}
				h := func(_ context.Context, req any) (any, error) { return req, nil }
				if ic == nil {
					return h(ctx, req)
				}
				return ic(ctx, req, &grpc.UnaryServerInfo{FullMethod: methodCharge}, h)
			},
		}},
	}, nil)
	ln := bufconn.Listen(1 << 20)
	go func() { _ = srv.Serve(ln) }()
	conn, err := grpc.NewClient("passthrough:///bench",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return ln.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = conn.Close()
		srv.Stop()
	})
	return conn
}

// BenchmarkUnary is the cost of one unary call over bufconn: bare (grpc-go's
// own per-call cost, no interceptor), then through the server interceptor on
// the memory store: a new key per call (claim, run, complete), the same key
// (a replay), and no key (the pass-through). Run the cases in one process,
// interleaved with -count, and compare with benchstat.
func BenchmarkUnary(b *testing.B) {
	req, _ := structpb.NewStruct(map[string]any{"amount": 1250, "currency": "EUR", "order": "ord_123"})
	ic, err := retrysafegrpc.New(retrysafegrpc.Config{Retrysafe: retrysafe.Config{Store: memory.New(memory.Config{})}})
	if err != nil {
		b.Fatal(err)
	}
	bare := benchServer(b)
	protected := benchServer(b, ic.UnaryServerInterceptor())
	var n atomic.Int64
	cases := []struct {
		name string
		conn *grpc.ClientConn
		key  func() string
	}{
		{"bare", bare, nil},
		{"retrysafe/new-key", protected, func() string { return "bench-" + strconv.FormatInt(n.Add(1), 10) }},
		{"retrysafe/replay", protected, func() string { return "bench-replay" }},
		{"retrysafe/unkeyed", protected, nil},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			ctx := context.Background()
			if err := c.conn.Invoke(ctx, methodCharge, req, new(structpb.Struct)); err != nil { // connect first
				b.Fatal(err)
			}
			cpu := processCPU()
			for b.Loop() {
				cctx := ctx
				if c.key != nil {
					cctx = metadata.AppendToOutgoingContext(ctx, retrysafegrpc.MetadataKey, c.key())
				}
				if err := c.conn.Invoke(cctx, methodCharge, req, new(structpb.Struct)); err != nil {
					b.Fatal(err)
				}
			}
			// CPU time of the whole process (client and server) per call:
			// steadier than wall time on a shared machine.
			b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkFingerprint is the canonical encoding and hash of a small
// request.
func BenchmarkFingerprint(b *testing.B) {
	req, _ := structpb.NewStruct(map[string]any{"amount": 1250, "currency": "EUR", "order": "ord_123"})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := retrysafegrpc.Fingerprint(methodCharge, req); err != nil {
			b.Fatal(err)
		}
	}
}

// processCPU returns the CPU time (user and system) the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
