package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/internal/groupcommit"
)

// Group commit. Claim, Complete, Release and Extend queue their operation
// on the Store's committer; its leader sends every operation queued while
// the previous batch ran as one call of the batch function (migration
// 0005, made cheaper in 0007): one statement, one transaction, one
// commit, one round trip. A lone operation is sent at once with its own
// single statement (runOne), so one caller still pays one round trip and
// the cheapest statement. The keys of one batch are distinct: a second
// operation on a key is answered "alone" and its caller runs it with the
// single statement once the batch has committed.
// functions.sql explains the function's contract.

// opKind names an operation of a batch as the batch function reads it.
type opKind string

const (
	opClaim    opKind = "claim"
	opComplete opKind = "complete"
	opRelease  opKind = "release"
	opExtend   opKind = "extend"
)

// batchOp is one caller's operation, with its arguments encoded.
type batchOp struct {
	kind        opKind
	scope, key  string
	fingerprint string // claim
	route       string // claim
	token       string
	now, until  int64 // until: a claim's or an extend's lease end, a completion's expiry
	status      *int32
	header      []byte
	body        []byte
	payload     string // the notification payload (complete, release)
	// A claim's takeover policy (ClaimParams.NoTakeover, TakeoverToken).
	noTakeover    bool
	takeoverToken string
	// An extension's abandon and checkpoint (hasCheckpoint: cpName and
	// cpData are one; otherwise the stored checkpoint stays).
	abandon       bool
	hasCheckpoint bool
	cpName        string
	cpData        []byte
}

// outcome is what the batch function decided for one operation.
type outcome string

const (
	outClaimed outcome = "claimed"
	outBlocked outcome = "blocked"
	outDone    outcome = "done"
	outLost    outcome = "lost"
	// outAlone: the batch did not decide (a row locked by another
	// transaction, or a concurrent insert); the caller runs the operation
	// alone with its single statement. Also the outcome of every operation
	// of a batch that PostgreSQL rolled back with an error, so that an
	// operation that fails fails alone.
	outAlone outcome = "alone"
)

// batchResult is one operation's outcome, and a claim's record.
type batchResult struct {
	outcome outcome
	rec     *retrysafe.Record
}

// BatchStats counts the batches a Store has sent: the batches, the
// operations they held, the batches that held one operation (sent with
// its single statement instead of the batch function), and the
// operations a batch left undecided, which then ran with their single
// statement: a second operation on a key already in the batch, a takeover
// (an expired record or lease), a row another transaction held, or every
// operation of a batch that failed.
type BatchStats = admin.BatchStats

// BatchStats returns how many batches this Store has sent, how many
// operations they held, and how many of those ran alone afterwards. It
// implements [admin.Batcher].
func (s *Store) BatchStats() BatchStats {
	st := s.committer.Stats()
	return BatchStats{Batches: st.Batches, Items: st.Items, Single: st.Single, Alone: s.alone.Load()}
}

// submit runs op in a batch and returns its outcome, running it alone
// when the batch did not decide it. Errors are translated for the
// operation name.
func (s *Store) submit(ctx context.Context, name string, op *batchOp) (batchResult, error) {
	res, err := s.committer.Do(ctx, op)
	if errors.Is(err, groupcommit.ErrClosed) {
		return res, retrysafe.Unavailable(name, errors.New("postgres: store closed"))
	}
	if err == nil && res.outcome == outAlone {
		s.alone.Add(1)
		res, err = s.runOne(ctx, s.pool, op)
	}
	if err != nil {
		return res, s.wrap(ctx, name, err)
	}
	return res, nil
}

// runOne runs op with its single statement on q: the claim function, or
// one fenced statement. It decides every case, waiting for a row lock
// another transaction holds. A batch of one operation runs this way (a
// lone caller pays one round trip and the cheapest statement), and so
// does an operation a batch left alone.
func (s *Store) runOne(ctx context.Context, q querier, op *batchOp) (batchResult, error) {
	if op.kind == opClaim {
		var claimed bool
		rec, err := scanRecord(q.QueryRow(ctx, s.sql.claim, op.scope, op.key, op.fingerprint, op.token, op.now, op.until, op.route,
			op.noTakeover, op.takeoverToken), nil, &claimed)
		if err != nil {
			// The statement always returns exactly one row, so ErrNoRows
			// too is a failure of the store.
			return batchResult{}, err
		}
		if claimed {
			return batchResult{outcome: outClaimed, rec: rec}, nil
		}
		return batchResult{outcome: outBlocked, rec: rec}, nil
	}
	var (
		tag pgconn.CommandTag
		err error
	)
	switch op.kind {
	case opComplete:
		tag, err = q.Exec(ctx, s.sql.complete, op.scope, op.key, op.token, op.now, op.until, op.status, op.header, op.body,
			s.cfg.NotifyChannel, op.payload)
	case opRelease:
		tag, err = q.Exec(ctx, s.sql.release, op.scope, op.key, op.token, s.cfg.NotifyChannel, op.payload)
	case opExtend:
		var name *string // NULL: no checkpoint
		if op.hasCheckpoint {
			name = &op.cpName
		}
		tag, err = q.Exec(ctx, s.sql.extend, op.scope, op.key, op.token, op.until, op.now, op.abandon, name, op.cpData)
	default:
		return batchResult{}, fmt.Errorf("postgres: unknown operation %q", op.kind)
	}
	if err != nil {
		return batchResult{}, err
	}
	if tag.RowsAffected() == 0 {
		return batchResult{outcome: outLost}, nil
	}
	return batchResult{outcome: outDone}, nil
}

// runBatch is the committer's batch function: one statement for every
// operation of the batch that is still wanted.
func (s *Store) runBatch(b *groupcommit.Batch[*batchOp, batchResult]) error {
	// index: position in the arrays -> item of the batch.
	index, later := groupcommit.Distinct(b, opKey, batchResult{outcome: outAlone})
	ops := make([]*batchOp, len(index)) // the operations sent, in array order
	for j, i := range index {
		ops[j] = b.Input(i)
	}
	switch len(index) {
	case 0:
		return nil
	case 1:
		res, err := s.runOne(b.Context(), s.pool, ops[0])
		b.Set(index[0], res, err)
		return nil
	}
	results := make([]batchResult, len(index))
	err := func() error {
		rows, err := s.pool.Query(b.Context(), s.sql.batch, batchArguments(ops, s.cfg.NotifyChannel)...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				ord int32
				out string
			)
			rec, err := scanRecord(rows, []any{&ord, &out})
			if err != nil {
				return err
			}
			if ord < 1 || int(ord) > len(index) || results[ord-1].outcome != "" {
				return fmt.Errorf("postgres: batch function returned position %d of %d", ord, len(index))
			}
			r := batchResult{outcome: outcome(out), rec: rec}
			if (r.outcome == outClaimed || r.outcome == outBlocked) && rec == nil {
				return fmt.Errorf("postgres: batch function returned a claim without its record (position %d)", ord)
			}
			results[ord-1] = r
		}
		return rows.Err()
	}()
	if err != nil {
		if !rolledBack(err) {
			// The outcome is unknown (the connection broke, the server
			// went away): every operation of the batch fails.
			return err
		}
		// Nothing of the batch took effect: each operation runs again
		// alone, so that one that fails fails on its own.
		for j := range results {
			results[j] = batchResult{outcome: outAlone}
		}
	}
	for j, i := range index {
		op := ops[j]
		switch {
		case results[j].outcome == "":
			b.Set(i, batchResult{}, fmt.Errorf("postgres: batch function returned no row for position %d", j+1))
		case results[j].outcome == outAlone && later[opKey(op)]:
			// Left undecided, with later operations of its key in the
			// batch, which run alone once this batch has answered: it
			// runs here first, so that they run after it.
			s.alone.Add(1)
			res, err := s.runOne(b.Context(), s.pool, op)
			b.Set(i, res, err)
		default:
			b.Set(i, results[j], nil)
		}
	}
	return nil
}

// scopeKey identifies a record.
type scopeKey struct{ scope, key string }

// opKey returns the record op is about.
func opKey(op *batchOp) scopeKey { return scopeKey{op.scope, op.key} }

// batchArguments returns the batch function's arguments for ops: one
// array per argument, one element per operation, and the notify channel
// as argument 12, between the payloads and the routes.
func batchArguments(ops []*batchOp, channel string) []any {
	n := len(ops)
	var (
		kinds, scopes, keys, fps, tokens = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		nows, untils                     = make([]int64, n), make([]int64, n)
		statuses                         = make([]*int32, n)
		headers, bodies                  = make([][]byte, n), make([][]byte, n)
		payloads, routes                 = make([]string, n), make([]string, n)
		noTakeovers, abandons            = make([]bool, n), make([]bool, n)
		takeoverTokens                   = make([]string, n)
		cpNames                          = make([]*string, n)
		cpData                           = make([][]byte, n)
	)
	for i, o := range ops {
		kinds[i], scopes[i], keys[i], fps[i], tokens[i] = string(o.kind), o.scope, o.key, o.fingerprint, o.token
		nows[i], untils[i], statuses[i], headers[i], bodies[i] = o.now, o.until, o.status, o.header, o.body
		payloads[i], routes[i] = o.payload, o.route
		noTakeovers[i], takeoverTokens[i], abandons[i], cpData[i] = o.noTakeover, o.takeoverToken, o.abandon, o.cpData
		if o.hasCheckpoint {
			cpNames[i] = &o.cpName
		}
	}
	return []any{kinds, scopes, keys, fps, tokens, nows, untils, statuses, headers, bodies, payloads, channel, routes,
		noTakeovers, takeoverTokens, abandons, cpNames, cpData}
}

// rolledBack reports whether err says that PostgreSQL ended the batch's
// transaction with an error (severity ERROR), so that none of it
// committed. A FATAL error (the backend terminated) or a broken connection
// leaves the outcome unknown: the commit may have happened just before.
func rolledBack(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Severity == "ERROR"
}
