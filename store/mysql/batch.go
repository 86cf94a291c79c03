package mysql

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"

	driver "github.com/go-sql-driver/mysql"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/internal/groupcommit"
)

// Group commit. Claim (of a key whose plain read did not answer it),
// Complete, Release and Extend queue their operation on the Store's
// committer (internal/groupcommit). Its leader sends every operation
// queued while the previous batch ran as a few plain statements
// (sendBatch), one multi-row statement per kind, in one transaction with
// one COMMIT. A lone operation is sent at once with its own single
// statement (runOne: an INSERT for a claim of a key the plain read found
// absent, else the claim procedure; or one fenced UPDATE or DELETE), so
// one caller still pays one round trip and the cheapest statement. Every
// caller is answered only after the COMMIT that holds its operation.
//
// The keys of one batch are distinct: a second operation on a key is
// answered "alone" and its caller runs it with its single statement once
// the batch has committed, as if after it. The batch also leaves alone a
// claim of a key that has a record (a takeover, or a record that
// appeared since the plain read: the claim procedure decides those) and a
// fenced operation whose row another transaction holds locked (an
// uncommitted CompleteTx, say), which it does not wait for. A batch whose
// statement the server refuses is rolled back whole and every operation
// runs alone, so that one whose statement fails fails on its own.

// Operation kinds.
const (
	opClaim    = 'c'
	opComplete = 'd'
	opRelease  = 'r'
	opExtend   = 'e'
)

// maxBatchedPayload is the largest response (header and body together)
// that a completion carries into a batch. A larger one runs with its
// single statement: a batch's statement, its bytes written in hex, must
// stay well below max_allowed_packet (64 completions of 64 KiB are 8 MiB
// of hex; MariaDB's default is 16 MiB).
const maxBatchedPayload = 64 << 10

// batchOp is one caller's operation, with its arguments encoded.
type batchOp struct {
	kind              byte
	scope, key, token string
	now, until        int64 // until: a claim's or an extension's lease end, a completion's expiry

	claim  *retrysafe.ClaimParams // claim
	absent bool                   // claim: the plain read found no record of the key

	args []any // complete and extend: the arguments of the single statement

	status       int    // complete
	header, body []byte // complete; a nil header is NULL

	result opResult // its outcome in a batch (sendBatch)
}

// payload is the number of bytes of response op carries.
func (op *batchOp) payload() int { return len(op.header) + len(op.body) }

// opResult is what became of one operation.
type opResult struct {
	claim *retrysafe.ClaimResult // a claim's result
	lost  bool                   // a fenced operation matched no record
	alone bool                   // the batch did not decide: run it alone
}

// scopeKey identifies a record within a batch.
type scopeKey struct{ scope, key string }

// opKey returns the record op is about.
func opKey(op *batchOp) scopeKey { return scopeKey{op.scope, op.key} }

// BatchStats returns how many batches this Store has sent, how many
// operations they held, how many of those batches held one operation
// (sent with its single statement), and how many operations a batch left
// undecided, which then ran with their single statement. It implements
// [admin.Batcher].
func (s *Store) BatchStats() admin.BatchStats {
	st := s.committer.Stats()
	return admin.BatchStats{Batches: st.Batches, Items: st.Items, Single: st.Single, Alone: s.alone.Load()}
}

// submit runs op in a batch and returns its outcome, running it alone
// when the batch did not decide it (or when it is too large for one).
// Errors are translated for the operation name.
func (s *Store) submit(ctx context.Context, name string, op *batchOp) (opResult, error) {
	var (
		res opResult
		err error
	)
	if op.payload() > maxBatchedPayload {
		res, err = s.runOne(ctx, op)
	} else {
		res, err = s.committer.Do(ctx, op)
		if errors.Is(err, groupcommit.ErrClosed) {
			err = errClosed
		}
		if err == nil && res.alone {
			// Left to the claim procedure (a record may have appeared
			// since the plain read: a second operation on the key in the
			// batch, say), or to the single statement, which waits for a
			// row's holder.
			op.absent = false
			s.alone.Add(1)
			res, err = s.runOne(ctx, op)
		}
	}
	if err != nil {
		return res, s.wrap(ctx, name, err)
	}
	return res, nil
}

// runOne runs op with its single statement: the claim procedure (a
// deadlock victim runs again), or one fenced statement. It decides every
// case, waiting for a row lock another transaction holds.
func (s *Store) runOne(ctx context.Context, op *batchOp) (opResult, error) {
	var (
		n   int64
		err error
	)
	switch op.kind {
	case opClaim:
		var res *retrysafe.ClaimResult
		err = s.retryDeadlock(ctx, func() error {
			var err error
			if op.absent {
				res, err = s.insertClaim(ctx, op)
				if err == nil || !isDuplicateKey(err) {
					return err
				}
				// The key has a record now: the claim procedure decides.
				op.absent = false
			}
			res, err = s.claimOnce(ctx, op.claim, op.now, op.until)
			return err
		})
		return opResult{claim: res}, err
	case opComplete:
		n, err = s.exec(ctx, s.q.complete, op.args...)
	case opRelease:
		n, err = s.exec(ctx, s.q.release, op.scope, op.key, op.token)
	case opExtend:
		n, err = s.exec(ctx, s.q.extend, op.args...)
	default:
		return opResult{}, fmt.Errorf("mysql: unknown operation %q", op.kind)
	}
	if err != nil {
		return opResult{}, err
	}
	return opResult{lost: n == 0}, nil
}

// insertClaim claims the key of op, which the plain read found absent,
// with one INSERT, autocommitted: the claim is won once the INSERT's
// COMMIT returns, as a batch's, and costs one plain statement instead of
// a CALL of the claim procedure. A record that appeared since the read
// fails it with a duplicate key (isDuplicateKey), and the claim procedure
// decides then; a concurrent claimant's uncommitted insert of the key is
// waited for, as the claim procedure waits.
func (s *Store) insertClaim(ctx context.Context, op *batchOp) (*retrysafe.ClaimResult, error) {
	p := op.claim
	if _, err := s.exec(ctx, s.q.insert, p.Scope, p.Key, p.Fingerprint, p.Token, op.now, op.now, op.until, p.Route); err != nil {
		return nil, err
	}
	return &retrysafe.ClaimResult{Claimed: true, Record: p.ProcessingRecord(1, fromNanosValue(op.now), fromNanosValue(op.now), fromNanosValue(op.until))}, nil
}

// runBatch is the committer's batch function: the operations of the
// batch that are still wanted, at most one per key, sent by sendBatch.
func (s *Store) runBatch(b *groupcommit.Batch[*batchOp, opResult]) error {
	type entry struct {
		i  int // the item's index in b
		op *batchOp
	}
	first, later := groupcommit.Distinct(b, opKey, opResult{alone: true})
	entries := make([]entry, len(first))
	for j, i := range first {
		entries[j] = entry{i, b.Input(i)}
	}
	switch len(entries) {
	case 0:
		return nil
	case 1:
		res, err := s.runOne(b.Context(), entries[0].op)
		b.Set(entries[0].i, res, err)
		return nil
	}
	// In key order, so that two batches (of two Stores on one table) that
	// share keys lock them in the same order and do not deadlock.
	slices.SortFunc(entries, func(x, y entry) int {
		return cmp.Or(cmp.Compare(x.op.scope, y.op.scope), cmp.Compare(x.op.key, y.op.key))
	})
	ops := make([]*batchOp, len(entries))
	for j, e := range entries {
		ops[j] = e.op
	}
	if err := s.sendBatch(b.Context(), ops); err != nil {
		// The outcome is unknown (the COMMIT failed, the connection
		// broke): every operation of the batch fails.
		return err
	}
	for _, e := range entries {
		op := e.op
		res := op.result
		if res.alone && later[opKey(op)] {
			// Left undecided, with later operations of its key in the
			// batch, which run alone once this batch has answered: it
			// runs here first (as submit runs an operation left alone),
			// so that they run after it.
			op.absent = false
			s.alone.Add(1)
			res, err := s.runOne(b.Context(), op)
			b.Set(e.i, res, err)
			continue
		}
		b.Set(e.i, res, nil)
	}
	return nil
}

// errRowCount is a batch statement that changed other rows than the
// batch decided under its locks: the batch is rolled back.
var errRowCount = errors.New("mysql: a batch statement changed an unexpected number of rows")

// sendBatch runs ops, of distinct keys in key order, and leaves what
// became of each in its result. With a fenced operation among them it runs, in one
// transaction:
//
//  1. the claims (insertClaims);
//  2. a locking read (FOR UPDATE SKIP LOCKED) of the fenced operations'
//     rows, which decides each under its lock on the newest committed
//     version: done (the owner's processing record) or lost; a row it
//     does not return is absent or held by another transaction, and a
//     plain read (only then) tells: lost, or alone;
//  3. the completions as one INSERT … ON DUPLICATE KEY UPDATE of rows
//     that all exist (an UPDATE cannot give each row its own values), the
//     releases as one DELETE, each extension as its single statement, of
//     exactly the rows decided done (the row counts are checked);
//  4. COMMIT.
//
// Claims alone need no transaction: their one INSERT is atomic. A claim of
// a key that had a record at its plain read is left alone at once.
//
// The transaction runs at the session's isolation level (no SET
// TRANSACTION: one round trip less). Under READ COMMITTED or REPEATABLE
// READ (the default) the plain read is the transaction's first
// consistent read, of the newest committed versions, and the other reads
// are locking reads or read rows the transaction has locked, the same at
// any level. Under REPEATABLE READ the locking read also locks the gap of
// a fenced operation's absent key until the COMMIT; the batch waits for
// no lock after its first statement, so that makes no deadlock. (Under
// SERIALIZABLE the plain read waits for a row's holder: slower, the same
// answers.)
//
// A statement the server refuses (a trigger, a deadlock, a lock wait
// timeout) before anything of the batch took effect rolls it back, and
// every operation is answered alone. A failed COMMIT or a broken
// connection is returned: the outcome is unknown.
func (s *Store) sendBatch(ctx context.Context, ops []*batchOp) error {
	var claims, fenced []*batchOp
	for _, op := range ops {
		switch {
		case op.kind == opClaim && !op.absent:
			op.result = opResult{alone: true}
		case op.kind == opClaim:
			claims = append(claims, op)
		default:
			fenced = append(fenced, op)
		}
	}
	var (
		alone bool
		err   error
	)
	if len(fenced) == 0 {
		alone, err = s.claimBatch(ctx, claims)
	} else {
		alone, err = s.fencedBatch(ctx, claims, fenced)
	}
	if err != nil {
		return err
	}
	if alone {
		for _, op := range ops {
			op.result = opResult{alone: true}
		}
	}
	return nil
}

// undecided sorts the error of a batch statement: one the server refused
// (or a row count the batch did not expect) leaves every operation to run
// alone (true, nil); any other is returned.
func undecided(err error) (bool, error) {
	if errors.Is(err, errRowCount) || errors.As(err, new(*driver.MySQLError)) {
		return true, nil
	}
	return false, err
}

// claimBatch runs claims, and nothing else, with their INSERT as a
// transaction of its own.
func (s *Store) claimBatch(ctx context.Context, claims []*batchOp) (alone bool, err error) {
	if len(claims) == 0 {
		return false, nil
	}
	n, err := s.insertClaims(ctx, s.db, claims)
	if err != nil {
		return undecided(err)
	}
	// Committed: from here on, a failure leaves the outcome unknown.
	return false, s.markClaims(ctx, s.db, claims, n)
}

// fencedBatch runs claims and fenced in one transaction (see sendBatch),
// leaving each operation's outcome in its result.
func (s *Store) fencedBatch(ctx context.Context, claims, fenced []*batchOp) (alone bool, err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return undecided(err)
	}
	defer tx.Rollback()
	if err := s.fencedStatements(ctx, tx, claims, fenced); err != nil {
		return undecided(err)
	}
	return false, tx.Commit()
}

// fencedStatements runs the statements of fencedBatch in tx.
func (s *Store) fencedStatements(ctx context.Context, tx *sql.Tx, claims, fenced []*batchOp) error {
	// The claims first: their INSERT is the batch's only statement that
	// may wait for a lock, and the transaction holds no lock yet, so the
	// wait is no part of a deadlock with the rows locked below.
	if len(claims) > 0 {
		n, err := s.insertClaims(ctx, tx, claims)
		if err != nil {
			return err
		}
		if err := s.markClaims(ctx, tx, claims, n); err != nil {
			return err
		}
	}

	locked := make(map[scopeKey][2]string) // state, token
	err := queryRows(ctx, tx, "SELECT scope, idem_key, state, token FROM "+s.q.table+" WHERE "+keysWhere(opKeys(fenced))+" FOR UPDATE SKIP LOCKED",
		func(k scopeKey, cols [2]string) { locked[k] = cols })
	if err != nil {
		return err
	}
	var unseen []*batchOp
	for _, op := range fenced {
		cols, ok := locked[opKey(op)]
		switch {
		case !ok:
			unseen = append(unseen, op)
		case cols[0] == string(retrysafe.StateProcessing) && cols[1] == op.token:
			op.result = opResult{} // done, once its statement has run
		default:
			op.result = opResult{lost: true}
		}
	}
	if len(unseen) > 0 {
		present := make(map[scopeKey]bool)
		err := queryRows(ctx, tx, "SELECT scope, idem_key, '', '' FROM "+s.q.table+" WHERE "+keysWhere(opKeys(unseen)),
			func(k scopeKey, _ [2]string) { present[k] = true })
		if err != nil {
			return err
		}
		for _, op := range unseen {
			op.result = opResult{lost: !present[opKey(op)], alone: present[opKey(op)]}
		}
	}

	var completes, releases []*batchOp
	for _, op := range fenced {
		if op.result.lost || op.result.alone {
			continue
		}
		switch op.kind {
		case opComplete:
			completes = append(completes, op)
		case opRelease:
			releases = append(releases, op)
		case opExtend:
			// Rare: on the transaction's own connection (the pool's
			// other connections may all wait for this batch's locks).
			res, err := tx.ExecContext(ctx, s.q.extend, op.args...)
			if err := checkRows(res, err, 1); err != nil {
				return err
			}
		}
	}
	if len(completes) > 0 {
		// Every row exists and is locked by this transaction: each is a
		// duplicate key, which the update completes (two affected rows
		// each: revision always changes).
		q := s.upsert("fingerprint, state, token, attempt, created_at_ns, updated_at_ns, lease_until_ns, expires_at_ns, status, header, body",
			completes, func(op *batchOp) []any {
				return []any{"", "completed", "", 0, 0, op.now, 0, op.until, op.status, op.header, op.body}
			},
			"state = 'completed', updated_at_ns = VALUES(updated_at_ns), expires_at_ns = VALUES(expires_at_ns),"+
				" status = VALUES(status), header = VALUES(header), body = VALUES(body), abandoned = FALSE, revision = revision + 1")
		res, err := tx.ExecContext(ctx, q)
		if err := checkRows(res, err, 2*len(completes)); err != nil {
			return err
		}
	}
	if len(releases) > 0 {
		res, err := tx.ExecContext(ctx, "DELETE FROM "+s.q.table+" WHERE "+keysWhere(opKeys(releases)))
		if err := checkRows(res, err, len(releases)); err != nil {
			return err
		}
	}
	return nil
}

// insertClaims inserts the records of claims, keys the plain read found
// absent, with one INSERT … ON DUPLICATE KEY UPDATE, and returns the
// affected-row count. A key that has a record by now is not inserted: the
// update, which changes nothing but revision, takes an exclusive lock on
// its row, as the claim procedure's insert does, rather than the shared
// lock of a failed plain INSERT (or of INSERT IGNORE), which concurrent
// claimants of one key then each try to upgrade, and deadlock. A
// concurrent claimant's uncommitted insert of a key is waited for, as by
// the lone claim.
func (s *Store) insertClaims(ctx context.Context, q querier, claims []*batchOp) (int64, error) {
	ins := s.upsert("fingerprint, state, token, attempt, created_at_ns, updated_at_ns, lease_until_ns, route",
		claims, func(op *batchOp) []any {
			return []any{op.claim.Fingerprint, "processing", op.token, 1, op.now, op.now, op.until, op.claim.Route}
		},
		"revision = revision + 1")
	res, err := q.ExecContext(ctx, ins)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// markClaims sets the result of each claim after insertClaims affected n
// rows: one per inserted row and two per updated one, so every claim was
// inserted when n is their number. Otherwise a read of the claims' rows
// tells which are the caller's (its token); the others are left alone, to
// the claim procedure.
func (s *Store) markClaims(ctx context.Context, q querier, claims []*batchOp, n int64) error {
	var tokens map[scopeKey]string
	if n != int64(len(claims)) {
		tokens = make(map[scopeKey]string)
		err := queryRows(ctx, q, "SELECT scope, idem_key, token, '' FROM "+s.q.table+" WHERE "+keysWhere(opKeys(claims)),
			func(k scopeKey, cols [2]string) { tokens[k] = cols[0] })
		if err != nil {
			return err
		}
	}
	for _, op := range claims {
		if tokens != nil && tokens[opKey(op)] != op.token {
			op.result = opResult{alone: true}
			continue
		}
		rec := op.claim.ProcessingRecord(1, fromNanosValue(op.now), fromNanosValue(op.now), fromNanosValue(op.until))
		op.result = opResult{claim: &retrysafe.ClaimResult{Claimed: true, Record: rec}}
	}
	return nil
}

// upsert returns the statement that inserts one row for each of ops, its
// scope and key then the columns' values that row gives, and on a
// duplicate key runs update instead.
func (s *Store) upsert(columns string, ops []*batchOp, row func(*batchOp) []any, update string) string {
	var q sqlText
	q.raw("INSERT INTO " + s.q.table + " (scope, idem_key, " + columns + ") VALUES ")
	for j, op := range ops {
		if j > 0 {
			q.raw(", ")
		}
		q.row(append([]any{op.scope, op.key}, row(op)...)...)
	}
	q.raw(" ON DUPLICATE KEY UPDATE " + update)
	return q.String()
}

// querier is *sql.DB or *sql.Tx.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// queryRows runs query, which selects scope, idem_key and two more
// columns, and calls row for each row.
func queryRows(ctx context.Context, q querier, query string, row func(scopeKey, [2]string)) error {
	rows, err := q.QueryContext(ctx, query)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var scope, key, a, b []byte
		if err := rows.Scan(&scope, &key, &a, &b); err != nil {
			return err
		}
		row(scopeKey{string(scope), string(key)}, [2]string{string(a), string(b)})
	}
	return rows.Err()
}

// checkRows checks that a statement's result, res and err, affected
// exactly want rows.
func checkRows(res sql.Result, err error, want int) error {
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n != int64(want) {
		return fmt.Errorf("%w: %d, want %d", errRowCount, n, want)
	}
	return nil
}

// keysWhere is the condition that matches the rows of keys.
func keysWhere(keys []scopeKey) string {
	var q sqlText
	for j, k := range keys {
		if j > 0 {
			q.raw(" OR ")
		}
		q.raw("(scope = ")
		q.value(k.scope)
		q.raw(" AND idem_key = ")
		q.value(k.key)
		q.raw(")")
	}
	return q.String()
}

// opKeys returns the keys of ops.
func opKeys(ops []*batchOp) []scopeKey {
	keys := make([]scopeKey, len(ops))
	for j, op := range ops {
		keys[j] = scopeKey{op.scope, op.key}
	}
	return keys
}

// sqlText builds a batch statement with its values written in as
// literals: byte strings in hex (X'…', which no byte of the value can
// end), integers in decimal. A batch statement has one row per operation,
// so its text changes with the batch's size: with literals it needs no
// prepared statement per size (on every connection), and it is one round
// trip whatever the DSN says about interpolateParams.
type sqlText struct{ b []byte }

func (t *sqlText) raw(s string) { t.b = append(t.b, s...) }

// value writes v: a string, a []byte (nil is NULL; an empty one is the empty hex literal), an int
// or an int64.
func (t *sqlText) value(v any) {
	switch v := v.(type) {
	case string: // never NULL, "" included
		t.raw("X'")
		t.b = hex.AppendEncode(t.b, []byte(v))
		t.raw("'")
	case []byte:
		if v == nil {
			t.raw("NULL")
			return
		}
		t.raw("X'")
		t.b = hex.AppendEncode(t.b, v)
		t.raw("'")
	case int:
		t.b = strconv.AppendInt(t.b, int64(v), 10)
	case int64:
		t.b = strconv.AppendInt(t.b, v, 10)
	default:
		panic(fmt.Sprintf("mysql: sqlText: a value of type %T", v))
	}
}

// row writes one row of values, "(v, …)".
func (t *sqlText) row(vals ...any) {
	t.raw("(")
	for j, v := range vals {
		if j > 0 {
			t.raw(", ")
		}
		t.value(v)
	}
	t.raw(")")
}

func (t *sqlText) String() string { return string(t.b) }
