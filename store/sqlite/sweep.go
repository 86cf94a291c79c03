package sqlite

import (
	"context"
	"fmt"

	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/internal/sweep"
)

// Sweep deletes completed records with ExpiresAt <= params.Now, then
// retires processing records with LeaseUntil + params.ProcessingRetention
// <= params.Now (default [admin.DefaultProcessingRetention]), and
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
func (s *Store) Sweep(ctx context.Context, params *admin.SweepParams) (int, error) {
	plan, err := sweep.New(params, DefaultSweepBatch)
	if err != nil {
		return 0, fmt.Errorf("sqlite: %w", err)
	}
	return plan.Run(func(retire bool, bound int64) (int, error) {
		query := s.q.sweep
		if retire {
			query = s.q.retire
		}
		var n int64
		err := s.write(ctx, "sweep", func(b *batchTx) error {
			res, err := b.stmt(query).Exec(bound, plan.Batch)
			if err != nil {
				return err
			}
			n, err = res.RowsAffected()
			return err
		})
		return int(n), err
	})
}
