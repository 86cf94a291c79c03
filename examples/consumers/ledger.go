package consumers

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/sqlite"
)

// ErrAccountClosed is the permanent failure of a transfer to an account
// that does not exist or is closed: a redelivery would fail the same way.
var ErrAccountClosed = errors.New("consumers: account closed or unknown")

const ledgerSchema = `
CREATE TABLE IF NOT EXISTS accounts (
	id      TEXT PRIMARY KEY,
	balance INTEGER NOT NULL DEFAULT 0,
	closed  INTEGER NOT NULL DEFAULT 0
);
-- One row per application of a transfer. message_id is deliberately not
-- UNIQUE here, so that tests can see a double application; a production
-- ledger would add the constraint as a second line of defence.
CREATE TABLE IF NOT EXISTS ledger (
	entry_id   INTEGER PRIMARY KEY AUTOINCREMENT,
	message_id TEXT    NOT NULL,
	account    TEXT    NOT NULL REFERENCES accounts(id),
	amount     INTEGER NOT NULL,
	attempt    INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS ledger_message_id ON ledger(message_id);
`

// Ledger is the effect of the example consumers: account balances and an
// append-only ledger in one SQLite database, which also holds retrysafe's
// records (so that [Ledger.CreditAndComplete] can commit both in one
// transaction). It is safe for concurrent use.
type Ledger struct {
	records *sqlite.Store
}

// OpenLedger opens (creating if needed) the SQLite database at path, with
// retrysafe's records table and the ledger's tables.
func OpenLedger(ctx context.Context, path string) (*Ledger, error) {
	s, err := sqlite.Open(ctx, path, sqlite.Config{})
	if err != nil {
		return nil, err
	}
	if _, err := s.DB().ExecContext(ctx, ledgerSchema); err != nil {
		s.Close()
		return nil, fmt.Errorf("consumers: creating the ledger tables: %w", err)
	}
	return &Ledger{records: s}, nil
}

// Records returns the retrysafe store in the ledger's database, for
// retrysafe.DoConfig.Store.
func (l *Ledger) Records() *sqlite.Store { return l.records }

// Close closes the database.
func (l *Ledger) Close() error { return l.records.Close() }

// OpenAccount creates an account with a zero balance, or reopens a closed
// one.
func (l *Ledger) OpenAccount(ctx context.Context, id string) error {
	_, err := l.records.DB().ExecContext(ctx,
		`INSERT INTO accounts (id) VALUES (?) ON CONFLICT (id) DO UPDATE SET closed = 0`, id)
	return err
}

// CloseAccount closes an account: later transfers to it fail permanently.
func (l *Ledger) CloseAccount(ctx context.Context, id string) error {
	_, err := l.records.DB().ExecContext(ctx, `UPDATE accounts SET closed = 1 WHERE id = ?`, id)
	return err
}

// Credit applies t in its own transaction and returns the receipt. Run
// inside retrysafe.Do, it leaves one gap: a crash after its commit but
// before Do stores the receipt lets a redelivery (after the lease) credit
// again. [Ledger.CreditAndComplete] closes that gap.
func (l *Ledger) Credit(ctx context.Context, messageID string, t Transfer) (Receipt, error) {
	tx, err := l.records.DB().BeginTx(ctx, nil)
	if err != nil {
		return Receipt{}, err
	}
	defer tx.Rollback()
	r, err := credit(ctx, tx, messageID, attempt(ctx), t)
	if err != nil {
		return Receipt{}, err
	}
	return r, tx.Commit()
}

// CreditAndComplete applies t and completes the retrysafe record of the
// operation running it, in one transaction: either the credit and the
// stored receipt both commit, or neither does, and a crash at any point
// leaves no credit without its record. It must run inside retrysafe.Do
// with [Ledger.Records] as the store; it calls Operation.MarkCompleted, so
// Do writes nothing more.
func (l *Ledger) CreditAndComplete(ctx context.Context, messageID string, t Transfer) (Receipt, error) {
	op := retrysafe.OperationFromContext(ctx)
	if op == nil {
		return Receipt{}, errors.New("consumers: CreditAndComplete runs only inside retrysafe.Do")
	}
	tx, err := l.records.DB().BeginTx(ctx, nil)
	if err != nil {
		return Receipt{}, err
	}
	defer tx.Rollback()
	r, err := credit(ctx, tx, messageID, op.Attempt(), t)
	if err != nil {
		return Receipt{}, err
	}
	// Store exactly what Do would store, so replays decode the same Receipt.
	resp, err := retrysafe.ResultResponse(r)
	if err != nil {
		return Receipt{}, err
	}
	// Fenced by the operation's token: if another delivery took the
	// record over, this fails with ErrLeaseLost and the credit rolls back.
	if err := l.records.CompleteTx(ctx, tx, op.CompleteParams(resp)); err != nil {
		return Receipt{}, err
	}
	if err := tx.Commit(); err != nil {
		return Receipt{}, err
	}
	op.MarkCompleted()
	return r, nil
}

// credit writes one ledger row and updates the balance inside tx.
func credit(ctx context.Context, tx *sql.Tx, messageID string, attempt int, t Transfer) (Receipt, error) {
	var r Receipt
	var closed bool
	err := tx.QueryRowContext(ctx, `SELECT closed FROM accounts WHERE id = ?`, t.Account).Scan(&closed)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && closed) {
		return r, retrysafe.Permanent(fmt.Errorf("%w: %s", ErrAccountClosed, t.Account))
	}
	if err != nil {
		return r, err
	}
	if err := tx.QueryRowContext(ctx,
		`INSERT INTO ledger (message_id, account, amount, attempt) VALUES (?, ?, ?, ?) RETURNING entry_id`,
		messageID, t.Account, t.Amount, attempt).Scan(&r.EntryID); err != nil {
		return r, err
	}
	if err := tx.QueryRowContext(ctx,
		`UPDATE accounts SET balance = balance + ? WHERE id = ? RETURNING balance`,
		t.Amount, t.Account).Scan(&r.Balance); err != nil {
		return r, err
	}
	return r, nil
}

// attempt is the Do attempt carried by ctx (1 outside Do).
func attempt(ctx context.Context) int {
	if op := retrysafe.OperationFromContext(ctx); op != nil {
		return op.Attempt()
	}
	return 1
}

// Entries returns how many times the message's effect was applied: its
// ledger rows. Exactly once means 1.
func (l *Ledger) Entries(ctx context.Context, messageID string) (int, error) {
	var n int
	err := l.records.DB().QueryRowContext(ctx, `SELECT count(*) FROM ledger WHERE message_id = ?`, messageID).Scan(&n)
	return n, err
}

// Balance returns an account's balance.
func (l *Ledger) Balance(ctx context.Context, account string) (int64, error) {
	var b int64
	err := l.records.DB().QueryRowContext(ctx, `SELECT balance FROM accounts WHERE id = ?`, account).Scan(&b)
	return b, err
}
