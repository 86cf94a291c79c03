package memory

import (
	"cmp"
	"context"
	"slices"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
)

// The operator's view ([admin.Admin]). Each call reads one shard at a
// time under its lock, so a record written during the call may or may not
// be seen. It returns records decoded for the call, as Get does.

// List implements [admin.Admin]. It sorts the matching records on
// every call, so it costs O(n log n) in the number of stored records:
// fine for an operator's occasional look, not for a hot path. It lists
// expired completed records until they are swept.
func (s *Store) List(ctx context.Context, p *admin.ListParams) ([]*retrysafe.Record, error) {
	if err := s.open(ctx, "list"); err != nil {
		return nil, err
	}
	limit := p.PageSize()
	after := id{p.AfterScope, p.AfterKey}
	page := []*retrysafe.Record{}
	s.each(func(i id, e entry) {
		if compareID(i, after) <= 0 || !p.Matches(&e.decode(false).rec) { // the filters read no header
			return
		}
		page = append(page, decode(e, p.WithBodies))
		if len(page) == 2*limit { // keep the first limit: memory bounded by the page, not the store
			slices.SortFunc(page, compareRecords)
			page = page[:limit]
		}
	})
	slices.SortFunc(page, compareRecords)
	return page[:min(len(page), limit)], nil
}

// Find implements [admin.Admin]. Without a scope it looks at every
// record, O(n) in the number stored. It finds expired completed records
// until they are swept.
func (s *Store) Find(ctx context.Context, p *admin.FindParams) ([]*retrysafe.Record, error) {
	if p.OneScope() {
		i := id{p.Scope, p.Key}
		sh, err := s.lock(ctx, "find", i)
		if err != nil {
			return nil, err
		}
		e, ok := sh.records[i]
		sh.mu.Unlock()
		if !ok {
			return []*retrysafe.Record{}, nil // empty, not nil, as every other answer
		}
		return []*retrysafe.Record{decode(e, p.WithBodies)}, nil
	}
	if err := s.open(ctx, "find"); err != nil {
		return nil, err
	}
	found := []*retrysafe.Record{} // empty, not nil, when nothing matches
	s.each(func(i id, e entry) {
		if i.key == p.Key {
			found = append(found, decode(e, p.WithBodies))
		}
	})
	slices.SortFunc(found, compareRecords)
	return found, nil
}

// Stats implements [admin.Admin]: one pass over every record, O(n).
func (s *Store) Stats(ctx context.Context, p *admin.StatsParams) (*admin.Stats, error) {
	if err := s.open(ctx, "stats"); err != nil {
		return nil, err
	}
	var all []*retrysafe.Record
	s.each(func(_ id, e entry) { all = append(all, &e.decode(false).rec) }) // counting needs no header
	return admin.StatsOf(all, p), nil
}

// Delete implements [admin.Admin]: it removes the record whatever its
// state or owner (not fenced), and wakes its waiters.
func (s *Store) Delete(ctx context.Context, scope, key string) error {
	i := id{scope, key}
	sh, err := s.lock(ctx, "delete", i)
	if err != nil {
		return err
	}
	defer sh.mu.Unlock()
	if _, ok := sh.records[i]; !ok {
		return retrysafe.ErrNotFound
	}
	s.deleteLocked(sh, i)
	return nil
}

// each calls f for every record, one shard at a time under the shard's
// lock. A shard closed meanwhile holds none.
func (s *Store) each(f func(id, entry)) {
	for k := range s.shards {
		sh := &s.shards[k]
		sh.mu.Lock()
		for i, e := range sh.records {
			f(i, e)
		}
		sh.mu.Unlock()
	}
}

// decode returns the record e keeps, without its response's body unless
// withBodies.
func decode(e entry, withBodies bool) *retrysafe.Record {
	rec := &e.decode(true).rec
	if rec.Response != nil && !withBodies {
		rec.Response.Body = nil
	}
	return rec
}

func compareID(a, b id) int {
	return cmp.Or(cmp.Compare(a.scope, b.scope), cmp.Compare(a.key, b.key))
}

func compareRecords(a, b *retrysafe.Record) int {
	return compareID(id{a.Scope, a.Key}, id{b.Scope, b.Key})
}
