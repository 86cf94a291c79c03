// Command grpcpayments is the payments example as a gRPC service: orders
// and payments on the payments example's repository (SQLite), behind
// retrysafe's gRPC server interceptor, with the idempotency records in the
// same database.
//
//	go run ./examples/grpcpayments -listen 127.0.0.1:50051
//
// Every creating call needs an idempotency-key (RequireKey), and a
// caller's identity (its authorization metadata, which the tiny auth
// interceptor below stands in for verifying): a retry with the same key
// gets the first answer, byte for byte, with idempotent-replayed: true.
// GetOrder is marked NO_SIDE_EFFECTS in the service's descriptor
// (paymentspb.File) and needs no key.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/examples/grpcpayments/paymentspb"
	"github.com/retrysafe/retrysafe/examples/payments/repo"
	retrysafegrpc "github.com/retrysafe/retrysafe/grpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:50051", "address to serve gRPC on")
	dbPath := flag.String("db", "", "SQLite file (default: one in a temporary directory)")
	flag.Parse()
	if err := run(*listen, *dbPath); err != nil {
		fmt.Fprintln(os.Stderr, "grpcpayments:", err)
		os.Exit(1)
	}
}

func run(listen, dbPath string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if dbPath == "" {
		dir, err := os.MkdirTemp("", "grpcpayments")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		dbPath = filepath.Join(dir, "payments.db")
	}
	db, err := repo.OpenSQLite(ctx, dbPath, repo.SQLiteOptions{})
	if err != nil {
		return err
	}
	defer db.Close()
	srv, err := newServer(db, time.Now)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	slog.Info("grpcpayments: serving", "addr", ln.Addr().String(), "db", dbPath)
	go func() {
		<-ctx.Done()
		srv.GracefulStop()
	}()
	return srv.Serve(ln)
}

// newServer returns the gRPC server: authentication, then retrysafe's
// interceptors (last, so that they store what the handler answered), the
// Payments service, health and reflection (which pass retrysafe untouched).
func newServer(db *repo.DB, now func() time.Time) (*grpc.Server, error) {
	ic, err := retrysafegrpc.New(retrysafegrpc.Config{
		Retrysafe:    retrysafe.Config{Store: db.Store(), RouteName: "grpc Payments"},
		RequireKey:   true,
		Scope:        retrysafegrpc.ScopeFromMetadata("authorization"),
		RequireScope: true,
	})
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(authenticate, ic.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(ic.StreamServerInterceptor()),
	)
	paymentspb.RegisterPaymentsServer(srv, &service{db: db, now: now})
	healthpb.RegisterHealthServer(srv, health.NewServer())
	reflection.Register(srv)
	return srv, nil
}

// authenticate stands in for a real token check: a call to the Payments
// service needs "authorization: Bearer <token>", and the token is the
// caller's identity (hashed into the scope by ScopeFromMetadata).
func authenticate(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if strings.HasPrefix(info.FullMethod, "/"+paymentspb.ServiceName+"/") {
		v := metadata.ValueFromIncomingContext(ctx, "authorization")
		if len(v) != 1 || !strings.HasPrefix(v[0], "Bearer ") || len(v[0]) == len("Bearer ") {
			return nil, status.Error(codes.Unauthenticated, "send authorization: Bearer <token>")
		}
	}
	return h(ctx, req)
}
