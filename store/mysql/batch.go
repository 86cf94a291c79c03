package mysql

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/internal/groupcommit"
)

// Group commit. Claim (of a key whose plain read did not answer it),
// Complete, Release and Extend queue their operation on the Store's
// committer (internal/groupcommit). Its leader sends every operation
// queued while the previous batch ran as one CALL of the batch procedure
// (procedures.sql): one READ COMMITTED transaction, one COMMIT, one round
// trip. A lone operation is sent at once with its own single statement
// (runOne: an INSERT for a claim of a key the plain read found absent,
// else the claim procedure; or one fenced UPDATE or DELETE), so one
// caller still pays one round trip and the cheapest statement. Every
// caller is answered only after the COMMIT that holds its operation.
//
// The keys of one batch are distinct: a second operation on a key is
// answered "alone" and its caller runs it with its single statement once
// the batch has committed, as if after it. The batch procedure also
// leaves alone a claim of a key that has a record (a takeover, or a
// record that appeared since the plain read: the claim procedure decides
// those) and an operation whose row another transaction holds locked (an
// uncommitted CompleteTx, say), which it does not wait for. A batch that
// fails before its COMMIT is rolled back whole and every operation runs
// alone, so that one whose statement fails fails on its own.

// Operation kinds, as the batch procedure reads them.
const (
	opClaim    = 'c'
	opComplete = 'd'
	opRelease  = 'r'
	opExtend   = 'e'
)

// maxBatchedPayload is the largest response or checkpoint (header, body
// and checkpoint data together) that an operation carries into a batch.
// A larger one runs with its single statement: a batch's JSON, base64 and
// all, must stay well below max_allowed_packet.
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

	abandon bool                  // extend
	cp      *retrysafe.Checkpoint // extend, nil: the stored checkpoint stays
}

// payload is the number of bytes of response or checkpoint op carries.
func (op *batchOp) payload() int {
	n := len(op.header) + len(op.body)
	if op.cp != nil {
		n += len(op.cp.Data)
	}
	return n
}

// opResult is what became of one operation.
type opResult struct {
	claim *retrysafe.ClaimResult // a claim's result
	lost  bool                   // a fenced operation matched no record
	alone bool                   // the batch did not decide: run it alone
}

// scopeKey identifies a record within a batch.
type scopeKey struct{ scope, key string }

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

// runBatch is the committer's batch function: one CALL of the batch
// procedure for every operation of the batch that is still wanted.
func (s *Store) runBatch(b *groupcommit.Batch[*batchOp, opResult]) error {
	type entry struct {
		i  int // the item's index in b
		op *batchOp
	}
	seen := make(map[scopeKey]bool, b.Len()) // true: later operations of the key wait alone
	entries := make([]entry, 0, b.Len())
	for i := range b.Len() {
		if !b.Start(i) {
			continue
		}
		op := b.Input(i)
		k := scopeKey{op.scope, op.key}
		if _, dup := seen[k]; dup {
			// A second operation on a key of this batch runs alone, once
			// the batch has committed: as if after it.
			seen[k] = true
			op.absent = false
			b.Set(i, opResult{alone: true}, nil)
			continue
		}
		seen[k] = false
		entries = append(entries, entry{i, op})
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
	letters, err := s.callBatch(b.Context(), ops)
	if err != nil {
		// The outcome is unknown (the COMMIT failed, the connection
		// broke): every operation of the batch fails.
		return err
	}
	for j, e := range entries {
		op := e.op
		letter := byte('a') // "A": rolled back whole, everything alone
		if letters != "A" {
			letter = letters[j]
		}
		switch letter {
		case 'c':
			p := op.claim
			rec := p.ProcessingRecord(1, fromNanosValue(op.now), fromNanosValue(op.now), fromNanosValue(op.until))
			b.Set(e.i, opResult{claim: &retrysafe.ClaimResult{Claimed: true, Record: rec}}, nil)
		case 'd':
			b.Set(e.i, opResult{}, nil)
		case 'l':
			b.Set(e.i, opResult{lost: true}, nil)
		case 'a':
			// The key has a record, or another transaction holds its row:
			// the claim procedure decides.
			op.absent = false
			if seen[scopeKey{op.scope, op.key}] {
				// Left undecided, with later operations of its key in
				// the batch, which run alone once this batch has
				// answered: it runs here first, so that they run after
				// it.
				s.alone.Add(1)
				res, err := s.runOne(b.Context(), op)
				b.Set(e.i, res, err)
				continue
			}
			b.Set(e.i, opResult{alone: true}, nil)
		default:
			b.Set(e.i, opResult{}, fmt.Errorf("mysql: the batch procedure answered %q for an operation", letter))
		}
	}
	return nil
}

// callBatch sends ops to the batch procedure and returns its answer: one
// letter per operation, or "A" when the batch was rolled back.
func (s *Store) callBatch(ctx context.Context, ops []*batchOp) (string, error) {
	st, err := s.stmt(ctx, s.q.batch)
	if err != nil {
		return "", err
	}
	rows, err := st.QueryContext(ctx, string(encodeBatch(ops)))
	if err != nil {
		return "", err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return "", err
		}
		return "", errors.New("mysql: the batch procedure returned no row")
	}
	var out string
	if err := rows.Scan(&out); err != nil {
		return "", err
	}
	if rows.Next() {
		return "", errors.New("mysql: the batch procedure returned more than one row")
	}
	// The procedure's final status too: an error after the row must not
	// go unnoticed.
	if err := rows.Err(); err != nil {
		return "", err
	}
	if err := rows.Close(); err != nil {
		return "", err
	}
	if out != "A" && len(out) != len(ops) {
		return "", fmt.Errorf("mysql: the batch procedure answered %d letters for %d operations", len(out), len(ops))
	}
	return out, nil
}

// encodeBatch encodes ops as the batch procedure's JSON argument (see
// procedures.sql): one array per operation, byte strings in base64.
func encodeBatch(ops []*batchOp) []byte {
	n := 2
	for _, op := range ops {
		n += 160 + (len(op.scope)+len(op.key)+len(op.token)+op.payload())*4/3
		if op.claim != nil {
			n += (len(op.claim.Fingerprint) + len(op.claim.Route)) * 4 / 3
		}
	}
	buf := make([]byte, 0, n)
	str := func(s string) {
		buf = append(buf, ',', '"')
		buf = base64.StdEncoding.AppendEncode(buf, []byte(s))
		buf = append(buf, '"')
	}
	bytes := func(b []byte) {
		buf = append(buf, ',', '"')
		buf = base64.StdEncoding.AppendEncode(buf, b)
		buf = append(buf, '"')
	}
	null := func(k int) {
		for range k {
			buf = append(buf, ",null"...)
		}
	}
	num := func(v int64) {
		buf = append(buf, ',')
		buf = strconv.AppendInt(buf, v, 10)
	}
	buf = append(buf, '[')
	for j, op := range ops {
		if j > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, '[', '"', op.kind, '"')
		str(op.scope)
		str(op.key)
		switch op.kind {
		case opClaim:
			// fingerprint, token, now, until, route.
			str(op.claim.Fingerprint)
			str(op.token)
			num(op.now)
			num(op.until)
			str(op.claim.Route)
			null(3)
			buf = append(buf, ",0"...)
			null(2)
		case opComplete:
			null(1)
			str(op.token)
			num(op.now)
			num(op.until)
			null(1)
			num(int64(op.status))
			if op.header == nil {
				null(1)
			} else {
				bytes(op.header)
			}
			bytes(op.body)
			buf = append(buf, ",0"...)
			null(2)
		case opRelease:
			null(1)
			str(op.token)
			null(6)
			buf = append(buf, ",0"...)
			null(2)
		case opExtend:
			null(1)
			str(op.token)
			num(op.now)
			num(op.until)
			null(4)
			if op.abandon {
				buf = append(buf, ",1"...)
			} else {
				buf = append(buf, ",0"...)
			}
			if op.cp == nil {
				null(2)
			} else {
				str(op.cp.Name)
				bytes(encodeBody(op.cp.Data))
			}
		}
		buf = append(buf, ']')
	}
	return append(buf, ']')
}
