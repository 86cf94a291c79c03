package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/internal/sweep"
)

// Sweep implements [admin.Sweeper]: it deletes completed records whose
// ExpiresAt <= p.Now, then retires processing records whose LeaseUntil +
// p.ProcessingRetention <= p.Now (default
// [admin.DefaultProcessingRetention]), in batches of p.BatchSize
// (default 1000). Each batch is one DELETE … LIMIT in a READ
// COMMITTED transaction of its own, found through the (state,
// expires_at_ns) and (state, lease_until_ns) indexes; InnoDB checks the
// condition on the newest version of each row, so a record extended,
// taken over or completed meanwhile is kept, and READ COMMITTED takes no
// gap locks that would hold up claims. Each kind stops at its first short
// batch; Sweep returns how many it deleted.
func (s *Store) Sweep(ctx context.Context, p *admin.SweepParams) (int, error) {
	plan, err := sweep.New(p, DefaultSweepBatch)
	if err != nil {
		return 0, fmt.Errorf("mysql: %w", err)
	}
	return plan.Run(func(retire bool, bound int64) (int, error) {
		query := s.q.sweep
		if retire {
			query = s.q.retire
		}
		var n int64
		err := s.retryDeadlock(ctx, func() error {
			var err error
			n, err = s.deleteBatch(ctx, query, bound, plan.Batch)
			return err
		})
		if err != nil {
			return 0, s.wrap(ctx, "sweep", err)
		}
		return int(n), nil
	})
}

// deleteBatch runs the batch DELETE query (arguments: the time bound and
// the batch size, then the bound again) in a READ COMMITTED transaction of its own.
func (s *Store) deleteBatch(ctx context.Context, query string, bound int64, batch int) (int64, error) {
	st, err := s.stmt(ctx, query)
	if err != nil {
		return 0, err
	}
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback() }()
	res, err := tx.StmtContext(ctx, st).ExecContext(ctx, bound, batch, bound)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, err
	}
	return n, tx.Commit()
}

// List implements [admin.Admin.List]: records ordered by (Scope, Key) in
// byte order (the columns are binary), after the cursor, expired ones
// included (List takes no time), narrowed by p's filters (see
// [admin.ListParams.Matches]) as WHERE clauses of the same keyset
// query. The unfiltered queries (four shapes) are prepared once and kept;
// a filtered one is prepared for its call only, so that the many shapes
// filters make hold no server-side statements.
func (s *Store) List(ctx context.Context, p *admin.ListParams) ([]*retrysafe.Record, error) {
	if p == nil {
		p = &admin.ListParams{}
	}
	query, args, err := s.listQuery(p)
	if err != nil {
		return nil, err
	}
	if !p.Filtered() {
		return s.query(ctx, "list", query, args...)
	}
	if err := s.open(); err != nil {
		return nil, s.wrap(ctx, "list", err)
	}
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, s.wrap(ctx, "list", err)
	}
	return s.records(ctx, "list", rows)
}

// Find implements [admin.Admin.Find]: the records with p.Key ordered by
// scope, in every scope or the one p selects, expired ones included (Find
// takes no time). Without a scope it reads the whole table (the primary
// key leads with the scope): it is meant for operators.
func (s *Store) Find(ctx context.Context, p *admin.FindParams) ([]*retrysafe.Record, error) {
	if p == nil {
		return nil, errors.New("mysql: find: nil params")
	}
	sel := "SELECT " + selectColumns(p.WithBodies) + " FROM " + quote(s.cfg.Table)
	if p.OneScope() {
		return s.query(ctx, "find", sel+" WHERE idem_key = ? AND scope = ?", p.Key, p.Scope)
	}
	return s.query(ctx, "find", sel+" WHERE idem_key = ? ORDER BY scope", p.Key)
}

// query runs a SELECT of records and returns them.
func (s *Store) query(ctx context.Context, op, query string, args ...any) ([]*retrysafe.Record, error) {
	st, err := s.stmt(ctx, query)
	if err != nil {
		return nil, s.wrap(ctx, op, err)
	}
	rows, err := st.QueryContext(ctx, args...)
	if err != nil {
		return nil, s.wrap(ctx, op, err)
	}
	return s.records(ctx, op, rows)
}

// records reads the records of rows (of recordColumns) and closes it.
func (s *Store) records(ctx context.Context, op string, rows *sql.Rows) ([]*retrysafe.Record, error) {
	defer rows.Close()
	var out []*retrysafe.Record
	for rows.Next() {
		rec, err := scanRecord(rows)
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
// its state or owner, notifies subscribers in this process, and returns
// [retrysafe.ErrNotFound] when there was none.
func (s *Store) Delete(ctx context.Context, scope, key string) error {
	n, err := s.exec(ctx, s.q.del, scope, key)
	if err != nil {
		return s.wrap(ctx, "delete", err)
	}
	if n == 0 {
		return retrysafe.ErrNotFound
	}
	s.subs.notify(scope, key)
	return nil
}
