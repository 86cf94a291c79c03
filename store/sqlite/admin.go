package sqlite

import (
	"context"

	"github.com/retrysafe/retrysafe"
)

// List returns up to params.Limit records (default [retrysafe.DefaultListLimit])
// ordered by (Scope, Key), strictly after the cursor (AfterScope,
// AfterKey), in params.Scope or in every scope when it is empty. It lists
// records as stored, including expired ones that no sweep has deleted yet.
// Response bodies are included only with params.WithBodies.
func (s *Store) List(ctx context.Context, params *retrysafe.ListParams) ([]*retrysafe.Record, error) {
	var p retrysafe.ListParams
	if params != nil {
		p = *params
	}
	p.Limit = p.PageSize()
	query := s.q.listNoBody
	if p.WithBodies {
		query = s.q.list
	}
	var recs []*retrysafe.Record
	err := s.retry(ctx, "list", func() error {
		recs = recs[:0]
		rows, err := s.db.QueryContext(ctx, query, p.Scope, p.AfterScope, p.AfterKey, p.Limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			rec, err := scanRecord(rows)
			if err != nil {
				return err
			}
			recs = append(recs, rec)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return recs, nil
}

// Delete removes the record for key in scope whatever its state or owner
// (an operator's action, not fenced) and returns [retrysafe.ErrNotFound]
// when there was none. Subscribers in this process are notified.
func (s *Store) Delete(ctx context.Context, scope, key string) error {
	err := s.write(ctx, "delete", func(b *batchTx) error {
		res, err := b.stmt(s.q.del).Exec(scope, key)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if n == 0 {
			return retrysafe.ErrNotFound
		}
		return nil
	})
	if err == nil {
		s.subs.notify(scope, key)
	}
	return err
}
