package consumers_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/examples/consumers"
	"github.com/retrysafe/retrysafe/store/memory"
)

// The same message delivered three times — say a duplicate publish and a
// redelivery after a crash before the ack — is applied once; the later
// deliveries get the stored receipt and are acknowledged. A broker adapter
// (HandleDelivery, HandleMsg) does the same and then settles the message.
func Example() {
	store := memory.New(memory.Config{})
	defer store.Close()

	var (
		mu      sync.Mutex
		balance int64
		applied int
	)
	c := &consumers.Consumer{
		Do: retrysafe.DoConfig{Store: store, Scope: "transfers"},
		Apply: func(ctx context.Context, messageID string, t consumers.Transfer) (consumers.Receipt, error) {
			mu.Lock()
			defer mu.Unlock()
			applied++
			balance += t.Amount
			return consumers.Receipt{EntryID: int64(applied), Balance: balance}, nil
		},
	}

	body := []byte(`{"account":"acct-1","amount":500}`)
	for range 3 {
		r := c.Handle(context.Background(), "msg-0001", body)
		fmt.Println(r.Action, r.Receipt.EntryID, r.Receipt.Balance, r.Err)
	}
	fmt.Println("applied", applied, "time(s)")
	// Output:
	// ack 1 500 <nil>
	// ack 1 500 <nil>
	// ack 1 500 <nil>
	// applied 1 time(s)
}

// A permanent failure is stored: the redelivery gets the same failure back
// (as *retrysafe.FailedError) without running the effect, and both are
// acknowledged. A transient failure releases the key: the message is
// redelivered and runs again.
func ExampleConsumer_Handle_failures() {
	store := memory.New(memory.Config{})
	defer store.Close()

	calls := 0
	c := &consumers.Consumer{
		Do: retrysafe.DoConfig{Store: store},
		Apply: func(ctx context.Context, messageID string, t consumers.Transfer) (consumers.Receipt, error) {
			calls++
			switch t.Account {
			case "closed":
				return consumers.Receipt{}, retrysafe.Permanent(errors.New("account closed"))
			case "flaky":
				if calls == 2 {
					return consumers.Receipt{}, errors.New("ledger busy")
				}
			}
			return consumers.Receipt{EntryID: int64(calls), Balance: t.Amount}, nil
		},
	}
	ctx := context.Background()

	closed := []byte(`{"account":"closed","amount":500}`)
	r := c.Handle(ctx, "msg-1", closed)
	fmt.Println(r.Action, r.Err)
	r = c.Handle(ctx, "msg-1", closed)
	var failed *retrysafe.FailedError
	fmt.Println(r.Action, r.Err, errors.As(r.Err, &failed))

	flaky := []byte(`{"account":"flaky","amount":500}`)
	r = c.Handle(ctx, "msg-2", flaky)
	fmt.Println(r.Action, r.Err)
	r = c.Handle(ctx, "msg-2", flaky)
	fmt.Println(r.Action, r.Receipt.EntryID, r.Err)
	fmt.Println("calls", calls)
	// Output:
	// ack account closed
	// ack account closed true
	// retry ledger busy
	// ack 3 <nil>
	// calls 3
}

// CreditAndComplete commits the credit and the stored receipt in one SQLite
// transaction, so no crash can leave a credit whose message would be
// applied again.
func ExampleLedger_CreditAndComplete() {
	dir, err := os.MkdirTemp("", "consumers-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)

	ctx := context.Background()
	ledger, err := consumers.OpenLedger(ctx, filepath.Join(dir, "ledger.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ledger.Close()
	if err := ledger.OpenAccount(ctx, "acct-1"); err != nil {
		fmt.Println(err)
		return
	}

	c := &consumers.Consumer{
		// The records live in the ledger's database: CompleteTx needs that.
		Do:    retrysafe.DoConfig{Store: ledger.Records(), Scope: "transfers"},
		Apply: ledger.CreditAndComplete,
	}
	body := []byte(`{"account":"acct-1","amount":500}`)
	for range 2 {
		r := c.Handle(ctx, "msg-0001", body)
		fmt.Println(r.Action, r.Receipt.Balance, r.Err)
	}
	n, _ := ledger.Entries(ctx, "msg-0001")
	fmt.Println("ledger entries:", n)
	// Output:
	// ack 500 <nil>
	// ack 500 <nil>
	// ledger entries: 1
}
