package consumers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/retrysafe/retrysafe"
)

// Transfer is the body of a message: credit Amount (in cents) to Account.
type Transfer struct {
	Account string `json:"account"`
	Amount  int64  `json:"amount"`
}

// Receipt is the result of applying a [Transfer]. Do stores it, and every
// redelivery of the same message gets the same Receipt back without the
// effect running again.
type Receipt struct {
	// EntryID is the ledger row written by the one application.
	EntryID int64 `json:"entry_id"`
	// Balance is the account balance right after the credit.
	Balance int64 `json:"balance"`
}

// Action says how a consumer settles a message once [Consumer.Handle]
// returns.
type Action int

const (
	// Ack: the message is done — applied now, applied before (replayed), or
	// failed permanently (stored; a redelivery gets the same failure).
	Ack Action = iota
	// Retry: a transient failure (Do released the key, so a redelivery
	// runs the effect again), or another delivery of the message holds
	// the key (in progress, or its outcome unknown until its lease runs
	// out: a redelivery after that takes it over). Nack with requeue
	// (AMQP) or Nak (JetStream).
	Retry
	// Discard: the message can never be processed — it has no id, or its
	// id was used before for a different body. Reject without requeue
	// (dead-lettered if the queue has a dead-letter exchange) or Term.
	Discard
)

// String returns "ack", "retry" or "discard".
func (a Action) String() string {
	switch a {
	case Ack:
		return "ack"
	case Retry:
		return "retry"
	case Discard:
		return "discard"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// ErrNoMessageID is the Result.Err of a message without a message id: with
// nothing to key Do by, it cannot be processed safely.
var ErrNoMessageID = errors.New("consumers: message has no message id")

// Result is what [Consumer.Handle] did with one message.
type Result struct {
	Action Action
	// Receipt is the effect's result (the stored one for a replay). Zero
	// unless Err is nil or wraps retrysafe.ErrResultNotStored.
	Receipt Receipt
	// Err is the reason for anything but a plain success: a permanent
	// failure (*retrysafe.FailedError on a replay), a transient error,
	// retrysafe.ErrMismatch, ErrNoMessageID. An Err with Action Ack is
	// worth logging; it is not a reason to redeliver.
	Err error
}

// Consumer applies each message's effect at most once per message id. It
// does not talk to a broker itself: [Consumer.HandleDelivery] (RabbitMQ)
// and [Consumer.HandleMsg] (JetStream) call [Consumer.Handle] and settle
// the message. A Consumer is safe for concurrent use; several consumer
// processes may share one store (PostgreSQL, Redis, or an SQLite file on
// one machine).
type Consumer struct {
	// Do configures the retrysafe.Doer each message runs through. Do.Store is required; Do.Scope keeps
	// this consumer's message ids apart from other consumers sharing the
	// store. InFlight defaults to wait: a redelivery that arrives while the
	// first delivery is still applying the effect waits for its result.
	Do retrysafe.DoConfig
	// Apply applies one transfer's effect; it runs inside Do, so its
	// context carries the *retrysafe.Operation. Return an error marked
	// with retrysafe.Permanent for a failure a redelivery would only
	// repeat (the account is closed); any other error makes the message
	// come again. [Ledger.Credit] and [Ledger.CreditAndComplete] fit.
	Apply func(ctx context.Context, messageID string, t Transfer) (Receipt, error)
	// Logger receives what the broker adapters log about messages that
	// are not plain successes. Default slog.Default(). Message ids are
	// logged at debug level only.
	Logger *slog.Logger
}

func (c *Consumer) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.Default()
}

// log reports a Result that was not a plain success; attrs say where the
// message came from (queue and delivery tag, stream and sequence).
func (c *Consumer) log(ctx context.Context, messageID string, r Result, settleErr error, attrs ...any) {
	l := c.logger()
	attrs = append(attrs, "action", r.Action.String())
	if r.Err != nil {
		attrs = append(attrs, "err", r.Err)
	}
	if settleErr != nil {
		attrs = append(attrs, "settle_err", settleErr)
	}
	l.DebugContext(ctx, "consumers: message handled", append(attrs, "message_id", messageID)...)
	switch {
	case settleErr != nil:
		l.WarnContext(ctx, "consumers: settling the message failed; the broker will redeliver it and Do will replay the result", attrs...)
	case errors.Is(r.Err, retrysafe.ErrResultNotStored):
		l.ErrorContext(ctx, "consumers: the effect ran but its result was not stored; acknowledged so it does not run again", attrs...)
	case r.Action == Ack && r.Err != nil:
		l.WarnContext(ctx, "consumers: the message failed permanently; acknowledged", attrs...)
	case r.Action == Discard:
		l.ErrorContext(ctx, "consumers: the message cannot be processed; discarded", attrs...)
	case r.Action == Retry:
		l.InfoContext(ctx, "consumers: transient failure; the message will be redelivered", attrs...)
	}
}

// Handle runs the message's effect through retrysafe.Run, keyed by
// messageID, and says how to settle the message. It never settles anything
// itself: acknowledge only after Handle returns, so that a crash in
// between leads to a redelivery, which Do answers from the stored result.
func (c *Consumer) Handle(ctx context.Context, messageID string, body []byte) Result {
	if messageID == "" {
		return Result{Action: Discard, Err: ErrNoMessageID}
	}
	if c.Apply == nil {
		return Result{Action: Retry, Err: errors.New("consumers: Consumer.Apply is nil")}
	}
	// The fingerprint tells a redelivery (same body) from a publisher bug
	// that reuses an id for another message (ErrMismatch). Canonical JSON
	// makes it ignore key order and whitespace.
	fp := retrysafe.Fingerprint("", "", "", body, nil)
	d, err := retrysafe.NewDoer(c.Do)
	if err != nil {
		return Result{Action: actionFor(err), Err: err}
	}
	r, err := retrysafe.Run(ctx, d, messageID, fp, func(ctx context.Context) (Receipt, error) {
		t, err := decodeTransfer(body)
		if err != nil {
			return Receipt{}, retrysafe.Permanent(err)
		}
		return c.Apply(ctx, messageID, t)
	})
	return Result{Action: actionFor(err), Receipt: r, Err: err}
}

// actionFor maps Do's error to how the message is settled.
func actionFor(err error) Action {
	var keyErr *retrysafe.KeyError
	switch {
	case err == nil:
		return Ack
	case errors.Is(err, retrysafe.ErrResultNotStored):
		// The effect happened but its record could not be completed. A
		// redelivery after the lease ran out would apply it again, so do
		// not ask for one: acknowledge (and log the error).
		return Ack
	case retrysafe.IsPermanent(err):
		return Ack
	case errors.Is(err, retrysafe.ErrMismatch), errors.As(err, &keyErr):
		return Discard
	default:
		// A transient failure of the effect (Do released the key), the
		// store being unavailable, a wait for another delivery that timed
		// out (*retrysafe.InProgressError), or ctx ending.
		return Retry
	}
}

// ErrInvalidTransfer is the permanent failure of a body that is not a
// valid [Transfer].
var ErrInvalidTransfer = errors.New("consumers: invalid transfer")

func decodeTransfer(body []byte) (Transfer, error) {
	var t Transfer
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		return t, fmt.Errorf("%w: %w", ErrInvalidTransfer, err)
	}
	if t.Account == "" || t.Amount <= 0 {
		return t, fmt.Errorf("%w: need an account and a positive amount", ErrInvalidTransfer)
	}
	return t, nil
}
