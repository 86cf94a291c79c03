package consumers_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/examples/consumers"
)

// Handle's decisions for messages that must not simply be applied: each
// case delivers a message twice and checks both answers and the ledger.
func TestHandleOutcomes(t *testing.T) {
	t.Parallel()
	otherBody := []byte(`{"account":"acct-1","amount":700}`)
	tests := map[string]struct {
		id          string
		body        []byte
		setup       func(t *testing.T, l *consumers.Ledger)
		secondBody  []byte // default: body again
		first, then consumers.Action
		firstErr    func(error) bool
		thenErr     func(error) bool
		entries     int
	}{
		"closed account fails permanently and replays the failure": {
			body: transferBody,
			setup: func(t *testing.T, l *consumers.Ledger) {
				if err := l.CloseAccount(context.Background(), account); err != nil {
					t.Fatal(err)
				}
			},
			first: consumers.Ack, then: consumers.Ack,
			firstErr: func(err error) bool {
				return retrysafe.IsPermanent(err) && errors.Is(err, consumers.ErrAccountClosed)
			},
			thenErr: isFailedError(consumers.ErrAccountClosed.Error()),
		},
		"invalid body fails permanently": {
			body:  []byte(`{"account":"acct-1","amount":-5}`),
			first: consumers.Ack, then: consumers.Ack,
			firstErr: func(err error) bool { return errors.Is(err, consumers.ErrInvalidTransfer) },
			thenErr:  isFailedError(consumers.ErrInvalidTransfer.Error()),
		},
		"message without id is discarded": {
			id: "-", body: transferBody,
			first: consumers.Discard, then: consumers.Discard,
			firstErr: func(err error) bool { return errors.Is(err, consumers.ErrNoMessageID) },
			thenErr:  func(err error) bool { return errors.Is(err, consumers.ErrNoMessageID) },
		},
		"id that is not a valid key is discarded": {
			id: strings.Repeat("x", 256), body: transferBody,
			first: consumers.Discard, then: consumers.Discard,
			firstErr: isKeyError, thenErr: isKeyError,
		},
		"id reused for another body is discarded": {
			body: transferBody, secondBody: otherBody,
			first: consumers.Ack, then: consumers.Discard,
			firstErr: func(err error) bool { return err == nil },
			thenErr:  func(err error) bool { return errors.Is(err, retrysafe.ErrMismatch) },
			entries:  1,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l := newLedger(t)
			if tc.setup != nil {
				tc.setup(t, l)
			}
			w := &world{ledger: l, store: l.Records()}
			id := tc.id
			switch id {
			case "":
				id = randomName("msg-")
			case "-":
				id = ""
			}
			c := w.consumer(nil)
			r := c.Handle(t.Context(), id, tc.body)
			if r.Action != tc.first || !tc.firstErr(r.Err) {
				t.Fatalf("first delivery: action %v, err %v; want %v", r.Action, r.Err, tc.first)
			}
			second := tc.secondBody
			if second == nil {
				second = tc.body
			}
			r = c.Handle(t.Context(), id, second)
			if r.Action != tc.then || !tc.thenErr(r.Err) {
				t.Fatalf("second delivery: action %v, err %v; want %v", r.Action, r.Err, tc.then)
			}
			if n, err := l.Entries(t.Context(), id); err != nil || n != tc.entries {
				t.Errorf("ledger entries = %d (err %v), want %d", n, err, tc.entries)
			}
		})
	}
}

func isFailedError(contains string) func(error) bool {
	return func(err error) bool {
		var f *retrysafe.FailedError
		return errors.As(err, &f) && strings.Contains(f.Message, contains)
	}
}

func isKeyError(err error) bool {
	var k *retrysafe.KeyError
	return errors.As(err, &k)
}

// A transient failure releases the key: the redelivery applies the effect.
// The failed attempt is never marked done.
func TestHandleTransientFailureRetries(t *testing.T) {
	t.Parallel()
	l := newLedger(t)
	w := &world{ledger: l, store: l.Records()}
	c := w.consumer(failFirst(l.Credit))
	id := randomName("msg-")
	if r := c.Handle(t.Context(), id, transferBody); r.Action != consumers.Retry || r.Err == nil || retrysafe.IsPermanent(r.Err) {
		t.Fatalf("first delivery: action %v, err %v; want a transient retry", r.Action, r.Err)
	}
	if n, _ := l.Entries(t.Context(), id); n != 0 {
		t.Fatalf("a failed attempt left %d ledger entries", n)
	}
	if r := c.Handle(t.Context(), id, transferBody); r.Action != consumers.Ack || r.Err != nil {
		t.Fatalf("redelivery: action %v, err %v", r.Action, r.Err)
	}
	w.assertOnce(t, id)
}

// Many copies of one message handled at the same moment (a start barrier,
// 16 goroutines, one per consumer): one applies the effect, every other one
// waits for it and gets the same receipt.
func TestHandleConcurrentCopies(t *testing.T) {
	t.Parallel()
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			l := newLedger(t)
			w := &world{ledger: l, store: kind.open(t, l)}
			id := randomName("msg-")
			const copies = 16
			var (
				start   = make(chan struct{})
				wg      sync.WaitGroup
				results [copies]consumers.Result
			)
			for i := range copies {
				c := w.consumer(nil) // a consumer process of its own
				wg.Go(func() {
					<-start
					results[i] = c.Handle(t.Context(), id, transferBody)
				})
			}
			close(start)
			wg.Wait()
			for i, r := range results {
				if r.Action != consumers.Ack || r.Err != nil {
					t.Fatalf("copy %d: action %v, err %v", i, r.Action, r.Err)
				}
				if r.Receipt != results[0].Receipt {
					t.Errorf("copy %d: receipt %+v, copy 0 got %+v", i, r.Receipt, results[0].Receipt)
				}
			}
			w.assertOnce(t, id)
		})
	}
}

// CreditAndComplete stores the receipt in the same transaction as the
// credit: the record is completed before Do returns, Do writes nothing
// more, and a redelivery replays the same receipt.
func TestCreditAndCompleteStoresTheReceipt(t *testing.T) {
	t.Parallel()
	l := newLedger(t)
	w := &world{ledger: l, store: l.Records()}
	c := w.consumer(l.CreditAndComplete)
	id := randomName("msg-")
	first := c.Handle(t.Context(), id, transferBody)
	if first.Action != consumers.Ack || first.Err != nil {
		t.Fatalf("first delivery: action %v, err %v", first.Action, first.Err)
	}
	rec, err := l.Records().Get(t.Context(), &retrysafe.GetParams{Scope: "transfers", Key: id, Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != retrysafe.StateCompleted {
		t.Fatalf("record state %q, want completed", rec.State)
	}
	var stored consumers.Receipt
	if err := json.Unmarshal(rec.Response.Body, &stored); err != nil || stored != first.Receipt {
		t.Fatalf("stored receipt %s (err %v), want %+v", rec.Response.Body, err, first.Receipt)
	}
	again := c.Handle(t.Context(), id, transferBody)
	if again.Action != consumers.Ack || again.Err != nil || again.Receipt != first.Receipt {
		t.Fatalf("redelivery: %+v, want a replay of %+v", again, first.Receipt)
	}
	w.assertOnce(t, id)
}

// A permanent failure inside CreditAndComplete rolls the transaction back
// and lets Do store the failure.
func TestCreditAndCompletePermanentFailure(t *testing.T) {
	t.Parallel()
	l := newLedger(t)
	if err := l.CloseAccount(t.Context(), account); err != nil {
		t.Fatal(err)
	}
	c := (&world{ledger: l, store: l.Records()}).consumer(l.CreditAndComplete)
	id := randomName("msg-")
	if r := c.Handle(t.Context(), id, transferBody); r.Action != consumers.Ack || !errors.Is(r.Err, consumers.ErrAccountClosed) {
		t.Fatalf("first delivery: action %v, err %v", r.Action, r.Err)
	}
	if r := c.Handle(t.Context(), id, transferBody); r.Action != consumers.Ack || !isFailedError(consumers.ErrAccountClosed.Error())(r.Err) {
		t.Fatalf("redelivery: action %v, err %v; want the stored failure", r.Action, r.Err)
	}
	if n, _ := l.Entries(t.Context(), id); n != 0 {
		t.Errorf("ledger entries = %d, want 0", n)
	}
}

func TestCreditAndCompleteOutsideDo(t *testing.T) {
	t.Parallel()
	l := newLedger(t)
	if _, err := l.CreditAndComplete(t.Context(), "msg-1", consumers.Transfer{Account: account, Amount: 1}); err == nil {
		t.Fatal("CreditAndComplete outside Do succeeded")
	}
}
