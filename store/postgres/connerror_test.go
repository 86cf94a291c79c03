package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/postgres"
)

// TestOpenDownServerErrorOnce: with the default sslmode (prefer) pgx tries
// a server twice, with TLS and without, and its error lists both identical
// dial failures. Open reports the failure once, on one line, and the error
// still unwraps to ErrStoreUnavailable and the driver's ConnectError.
func TestOpenDownServerErrorOnce(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = postgres.Open(ctx, fmt.Sprintf("postgres://postgres@%s/test", addr), postgres.Config{})
	if err == nil {
		t.Fatal("Open succeeded with no server")
	}
	var ce *pgconn.ConnectError
	if !errors.As(err, &ce) {
		t.Fatalf("error %v does not unwrap to *pgconn.ConnectError", err)
	}
	if n := strings.Count(ce.Error(), "connection refused"); n != 2 {
		t.Fatalf("the driver's own message names the failure %d times, want 2 (one per sslmode=prefer attempt):\n%s", n, ce)
	}
	if !errors.Is(err, retrysafe.ErrStoreUnavailable) {
		t.Errorf("error %v does not wrap ErrStoreUnavailable", err)
	}
	msg := err.Error()
	if n := strings.Count(msg, "connection refused"); n != 1 {
		t.Errorf("the failure is printed %d times, want once:\n%s", n, msg)
	}
	if strings.Contains(msg, "\n") || !strings.Contains(msg, addr) {
		t.Errorf("want one line naming %s, got:\n%s", addr, msg)
	}
}
