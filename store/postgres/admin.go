package postgres

import (
	"context"
	"fmt"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/internal/sweep"
)

// DefaultSweepBatch is the number of records Sweep deletes per statement
// when SweepParams.BatchSize is zero.
const DefaultSweepBatch = 1000

// Sweep implements [admin.Sweeper]: it deletes completed records whose
// ExpiresAt <= p.Now, then retires processing records whose LeaseUntil +
// p.ProcessingRetention <= p.Now (default
// [admin.DefaultProcessingRetention]), in batches of p.BatchSize
// (default 1000). Each batch is one short statement in its own transaction
// that locks only the rows it deletes and skips rows another transaction
// holds (FOR UPDATE SKIP LOCKED), so sweeping never blocks claims for long.
// Partial indexes find the batches: on expires_at_ns of completed rows and
// on lease_until_ns of processing rows. Each kind stops at its first short
// batch; Sweep stops when ctx is done, and returns how many it deleted.
func (s *Store) Sweep(ctx context.Context, p *admin.SweepParams) (int, error) {
	plan, err := sweep.New(p, DefaultSweepBatch)
	if err != nil {
		return 0, fmt.Errorf("postgres: %w", err)
	}
	return plan.Run(func(retire bool, bound int64) (int, error) {
		sql := s.sql.sweep
		if retire {
			sql = s.sql.retire
		}
		tag, err := s.pool.Exec(ctx, sql, bound, plan.Batch)
		if err != nil {
			return 0, s.wrap(ctx, "sweep", err)
		}
		return int(tag.RowsAffected()), nil
	})
}

// List implements [admin.Admin.List]: records ordered by (Scope, Key) in
// byte order, after the cursor, that pass p's filters (see
// [admin.ListParams.Matches]), expired ones included.
func (s *Store) List(ctx context.Context, p *admin.ListParams) ([]*retrysafe.Record, error) {
	if p == nil {
		p = &admin.ListParams{}
	}
	sql, args, err := s.listQuery(p)
	if err != nil {
		return nil, err
	}
	return s.query(ctx, "list", sql, args...)
}

// Find implements [admin.Admin.Find]: the records with p.Key ordered by
// scope, in every scope or the one p selects, expired ones included (Find
// takes no time). Without a scope it reads the whole table (the primary
// key leads with the scope): it is meant for operators.
func (s *Store) Find(ctx context.Context, p *admin.FindParams) ([]*retrysafe.Record, error) {
	sel := "SELECT " + selectColumns(p.WithBodies) + " FROM " + s.table
	if p.OneScope() {
		return s.query(ctx, "find", sel+" WHERE key = $1 AND scope = $2", p.Key, p.Scope)
	}
	return s.query(ctx, "find", sel+" WHERE key = $1 ORDER BY scope", p.Key)
}

// query runs a SELECT of records and returns them.
func (s *Store) query(ctx context.Context, op, sql string, args ...any) ([]*retrysafe.Record, error) {
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, s.wrap(ctx, op, err)
	}
	defer rows.Close()
	var out []*retrysafe.Record
	for rows.Next() {
		rec, err := scanRecord(rows, nil)
		if err != nil {
			return nil, s.wrap(ctx, op, err)
		}
		out = append(out, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap(ctx, op, err)
	}
	return out, nil
}

// Delete implements [admin.Admin.Delete]: it removes the record whatever
// its state or owner, notifies waiters, and returns [retrysafe.ErrNotFound]
// when there was none.
func (s *Store) Delete(ctx context.Context, scope, key string) error {
	tag, err := s.pool.Exec(ctx, s.sql.delete, scope, key, s.cfg.NotifyChannel, notifyPayload(scope, key))
	if err != nil {
		return s.wrap(ctx, "delete", err)
	}
	if tag.RowsAffected() == 0 {
		return retrysafe.ErrNotFound
	}
	return nil
}
