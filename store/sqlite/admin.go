package sqlite

import (
	"context"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
)

// List returns up to params.Limit records (default [admin.DefaultListLimit])
// ordered by (Scope, Key), strictly after the cursor (AfterScope,
// AfterKey), in params.Scope or in every scope when it is empty, that pass
// params' filters (see [admin.ListParams.Matches]). It lists
// records as stored, including expired ones that no sweep has deleted yet.
// Response bodies are included only with params.WithBodies.
func (s *Store) List(ctx context.Context, params *admin.ListParams) ([]*retrysafe.Record, error) {
	var p admin.ListParams
	if params != nil {
		p = *params
	}
	query, args := s.listQuery(&p)
	return s.query(ctx, "list", query, args...)
}

// Find returns the records with params.Key, ordered by scope, in every
// scope or in the one params selects, expired ones included until a sweep
// deletes them. Without a scope it reads the whole table (there is no
// index on the key alone): it is meant for operators.
func (s *Store) Find(ctx context.Context, params *admin.FindParams) ([]*retrysafe.Record, error) {
	query := s.q.findNoBody
	if params.WithBodies {
		query = s.q.find
	}
	return s.query(ctx, "find", query, params.Key, params.Scope, params.OneScope())
}

// query runs a SELECT of records (retrying on a busy database) and returns
// them.
func (s *Store) query(ctx context.Context, op, query string, args ...any) ([]*retrysafe.Record, error) {
	var recs []*retrysafe.Record
	err := s.retry(ctx, op, func() error {
		recs = recs[:0]
		rows, err := s.db.QueryContext(ctx, query, args...)
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
