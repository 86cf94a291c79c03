package main

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/examples/grpcpayments/paymentspb"
	"github.com/retrysafe/retrysafe/examples/payments/repo"
	retrysafegrpc "github.com/retrysafe/retrysafe/grpc"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
)

func newClient(t *testing.T) (*paymentspb.PaymentsClient, *repo.DB) {
	t.Helper()
	ctx := context.Background()
	db, err := repo.OpenSQLite(ctx, filepath.Join(t.TempDir(), "payments.db"), repo.SQLiteOptions{ProcessCrashSafeOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	srv, err := newServer(db, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	ln := bufconn.Listen(1 << 20)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///payments",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return ln.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(retrysafegrpc.UnaryClientInterceptor(retrysafegrpc.ClientConfig{})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return paymentspb.NewPaymentsClient(conn), db
}

func caller(t *testing.T, token string) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

func TestPayOnce(t *testing.T) {
	t.Parallel()
	c, db := newClient(t)
	alice := caller(t, "alice")

	// A retried CreateOrder (the caller pins one key) creates one order.
	create := retrysafegrpc.WithNewKey(alice)
	var h1, h2 metadata.MD
	o1, err := c.CreateOrder(create, &paymentspb.CreateOrderRequest{Amount: 1250, Currency: "EUR"}, grpc.Header(&h1))
	if err != nil {
		t.Fatal(err)
	}
	o2, err := c.CreateOrder(create, &paymentspb.CreateOrderRequest{Amount: 1250, Currency: "EUR"}, grpc.Header(&h2))
	if err != nil || *o1 != *o2 || retrysafegrpc.Replayed(h1) || !retrysafegrpc.Replayed(h2) {
		t.Fatalf("create retried: %v, %v vs %v", err, o1, o2)
	}

	// Pay, retry: one payment, the same answer.
	pay := retrysafegrpc.WithNewKey(alice)
	p1, err := c.PayOrder(pay, &paymentspb.PayOrderRequest{OrderID: o1.ID})
	if err != nil || p1.Status != repo.PaymentSucceeded {
		t.Fatalf("pay: %v %v", p1, err)
	}
	p2, err := c.PayOrder(pay, &paymentspb.PayOrderRequest{OrderID: o1.ID}, grpc.Header(&h2))
	if err != nil || *p1 != *p2 || !retrysafegrpc.Replayed(h2) {
		t.Fatalf("pay retried: %v %v", p2, err)
	}

	// Another key for the paid order: the business rule refuses it.
	_, err = c.PayOrder(retrysafegrpc.WithNewKey(alice), &paymentspb.PayOrderRequest{OrderID: o1.ID})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("second payment: %v", err)
	}
	// The pay key with another order: the key was used for another request.
	_, err = c.PayOrder(pay, &paymentspb.PayOrderRequest{OrderID: "ord_other"})
	if status.Code(err) != codes.FailedPrecondition || reason(err) != retrysafegrpc.ReasonKeyReused {
		t.Fatalf("reused key: %v", err)
	}

	// GetOrder is NO_SIDE_EFFECTS: no key needed, though RequireKey is set.
	got, err := c.GetOrder(alice, &paymentspb.GetOrderRequest{OrderID: o1.ID})
	if err != nil || got.Status != repo.OrderPaid {
		t.Fatalf("get: %v %v", got, err)
	}
	payments, err := db.Read().PaymentsOfOrder(context.Background(), o1.ID)
	if err != nil || len(payments) != 1 || payments[0].ChargeID != p1.ChargeID {
		t.Fatalf("payments of the order: %v %v", payments, err)
	}
	if payments[0].ProviderKey == "" {
		t.Fatal("no derived provider key")
	}
}

func TestRefusals(t *testing.T) {
	t.Parallel()
	c, _ := newClient(t)
	_, err := c.CreateOrder(context.Background(), &paymentspb.CreateOrderRequest{Amount: 1, Currency: "EUR"})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no caller: %v", err)
	}
	// The same key from two callers: two orders, never the other's answer.
	k := retrysafegrpc.NewKey()
	a, err1 := c.CreateOrder(retrysafegrpc.WithKey(caller(t, "alice"), k), &paymentspb.CreateOrderRequest{Amount: 5, Currency: "EUR"})
	b, err2 := c.CreateOrder(retrysafegrpc.WithKey(caller(t, "bob"), k), &paymentspb.CreateOrderRequest{Amount: 5, Currency: "EUR"})
	if err1 != nil || err2 != nil || a.ID == b.ID {
		t.Fatalf("tenants: %v %v, %v %v", a, err1, b, err2)
	}
}

// The descriptor marks GetOrder NO_SIDE_EFFECTS, where DefaultProtect reads
// it: the interceptors leave GetOrder alone and protect the writes.
func TestGetOrderIsUnprotected(t *testing.T) {
	t.Parallel()
	for method, want := range map[string]bool{"CreateOrder": true, "PayOrder": true, "GetOrder": false} {
		if got := retrysafegrpc.DefaultProtect("/" + paymentspb.ServiceName + "/" + method); got != want {
			t.Errorf("DefaultProtect(%s) = %v, want %v", method, got, want)
		}
	}
}

func reason(err error) string {
	for _, d := range status.Convert(err).Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei.GetReason()
		}
	}
	return ""
}
