package dynamodb_test

import (
	"net"
	"testing"

	"github.com/retrysafe/retrysafe"
	rsdynamodb "github.com/retrysafe/retrysafe/store/dynamodb"
	"github.com/retrysafe/retrysafe/store/storetest"
)

// TestConformance runs the shared store suite, each scenario on a table of
// its own.
func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) retrysafe.Store { return newStore(t) })
}

// TestShared runs the two-instance suite: two stores on independent
// clients (as two processes would have) over one table.
func TestShared(t *testing.T) {
	t.Parallel()
	storetest.RunShared(t, func(t *testing.T) (a, b retrysafe.Store) {
		table := newTable(t)
		return newStoreOn(t, table, nil), newStoreOn(t, table, nil)
	})
}

// TestUnavailable runs the unreachable-store suite on a client whose
// endpoint is a port nobody listens on, with the SDK's default retries.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	storetest.RunUnavailable(t, func(t *testing.T) retrysafe.Store {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		s, err := rsdynamodb.New(newClient(t, "http://"+addr, nil), rsdynamodb.Config{Table: "absent"})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
