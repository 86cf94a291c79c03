package consumers_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/examples/consumers"
)

// waitEntries polls the ledger until messageID has an entry: the consume
// loops handle messages in order, so a last "sentinel" message being
// applied means every message before it was handled. A deadlock guard,
// not a speed assertion.
func waitEntries(t *testing.T, l *consumers.Ledger, messageID string) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		n, err := l.Entries(context.Background(), messageID)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("message %s was not applied within %s", messageID, waitFor)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ConsumeAMQP handles a duplicate publish and stops when ctx ends.
func TestConsumeAMQP(t *testing.T) {
	t.Parallel()
	l := newLedger(t)
	w := &world{ledger: l, store: l.Records()}
	conn := dialAMQP(t)
	q := declareQueue(t)
	id, sentinel := randomName("msg-"), randomName("sentinel-")
	publishAMQP(t, conn, q, id)
	publishAMQP(t, conn, q, id)
	publishAMQP(t, conn, q, sentinel)

	c := w.consumer(nil)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.ConsumeAMQP(ctx, deliveriesOf(t, conn, q)) }()
	waitEntries(t, l, sentinel)
	cancel()
	if err := await(t, done, "ConsumeAMQP to return"); !errors.Is(err, context.Canceled) {
		t.Errorf("ConsumeAMQP returned %v, want context.Canceled", err)
	}
	// Both copies were handled before the sentinel; one was applied.
	n, err := l.Entries(t.Context(), id)
	if err != nil || n != 1 {
		t.Errorf("ledger entries = %d (err %v), want 1", n, err)
	}
}

// ConsumeJetStream handles a duplicate publish (after the duplicates
// window) and stops when ctx ends.
func TestConsumeJetStream(t *testing.T) {
	t.Parallel()
	l := newLedger(t)
	w := &world{ledger: l, store: l.Records()}
	s := newStream(t, 100*time.Millisecond)
	id, sentinel := randomName("msg-"), randomName("sentinel-")
	s.publish(t, id)
	time.Sleep(300 * time.Millisecond) // past the duplicates window
	if s.publish(t, id) {
		t.Fatal("the re-publish was dropped as a duplicate")
	}
	s.publish(t, sentinel)

	c := w.consumer(nil)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	cons := s.consumer(t)
	go func() { done <- c.ConsumeJetStream(ctx, cons) }()
	waitEntries(t, l, sentinel)
	cancel()
	if err := await(t, done, "ConsumeJetStream to return"); !errors.Is(err, context.Canceled) {
		t.Errorf("ConsumeJetStream returned %v, want context.Canceled", err)
	}
	// Both copies were handled before the sentinel; one was applied.
	n, err := l.Entries(t.Context(), id)
	if err != nil || n != 1 {
		t.Errorf("ledger entries = %d (err %v), want 1", n, err)
	}
}

// A permanent failure is acknowledged and logged at warn level with the
// delivery's coordinates; the message id (the idempotency key) appears only
// at debug level.
func TestHandleDeliveryLogsPermanentFailure(t *testing.T) {
	t.Parallel()
	l := newLedger(t)
	if err := l.CloseAccount(t.Context(), account); err != nil {
		t.Fatal(err)
	}
	w := &world{ledger: l, store: l.Records()}
	conn := dialAMQP(t)
	q := declareQueue(t)
	id := randomName("msg-")
	publishAMQP(t, conn, q, id)

	var buf syncBuffer
	c := w.consumer(nil)
	c.Logger = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	h := await(t, consumeAMQP(t, conn, q, c, nil), "the delivery")
	if h.result.Action != consumers.Ack || !errors.Is(h.result.Err, consumers.ErrAccountClosed) || h.settleErr != nil {
		t.Fatalf("action %v, err %v, settle err %v; want an acked permanent failure", h.result.Action, h.result.Err, h.settleErr)
	}
	out := buf.String()
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "failed permanently") || !strings.Contains(out, "routing_key="+q) {
		t.Errorf("log does not report the permanent failure with the delivery's coordinates:\n%s", out)
	}
	if strings.Contains(out, id) {
		t.Errorf("the message id appears in the log above debug level:\n%s", out)
	}
}

// syncBuffer is a bytes.Buffer safe for the consumer goroutine's writes
// and the test's read.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
