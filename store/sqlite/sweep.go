package sqlite

import (
	"context"
	"errors"

	"github.com/retrysafe/retrysafe"
)

// Sweep deletes completed records with ExpiresAt <= params.Now, then
// retires processing records with LeaseUntil + params.ProcessingRetention
// <= params.Now (default [retrysafe.DefaultProcessingRetention]), and
// returns how many it deleted. It deletes in batches of params.BatchSize
// (default [DefaultSweepBatch]) records, each batch one DELETE … WHERE rowid
// IN (SELECT … LIMIT n) committed as one of the Store's writes (in a group
// commit, see the package documentation), so claims interleave with a long
// sweep instead of waiting for it. Each kind loops until a batch deletes
// fewer than BatchSize records. On error it returns the count deleted so
// far with the error.
//
// Sweeping only reclaims space: Claim and Get treat expired records as
// absent whether or not a sweeper runs. A processing record is kept until a
// sweep retires it.
func (s *Store) Sweep(ctx context.Context, params *retrysafe.SweepParams) (int, error) {
	if params == nil {
		return 0, errors.New("sqlite: sweep: nil params")
	}
	if params.Now.IsZero() {
		return 0, errors.New("sqlite: sweep: params.Now is zero")
	}
	retention, err := params.Retention()
	if err != nil {
		return 0, err
	}
	batch := params.BatchSize
	if batch <= 0 {
		batch = DefaultSweepBatch
	}
	total, err := s.deleteBatches(ctx, s.q.sweep, toNanos(params.Now), batch)
	if err != nil {
		return total, err
	}
	retired, err := s.deleteBatches(ctx, s.q.retire, toNanos(params.Now.Add(-retention)), batch)
	return total + retired, err
}

// deleteBatches runs the batch DELETE query (arguments: the time bound and
// the batch size) until a batch deletes fewer than batch records, and
// returns how many it deleted.
func (s *Store) deleteBatches(ctx context.Context, query string, bound int64, batch int) (int, error) {
	total := 0
	for {
		var n int64
		err := s.write(ctx, "sweep", func(b *batchTx) error {
			res, err := b.stmt(query).Exec(bound, batch)
			if err != nil {
				return err
			}
			n, err = res.RowsAffected()
			return err
		})
		if err != nil {
			return total, err
		}
		total += int(n)
		if n < int64(batch) {
			return total, nil
		}
	}
}
