package mysql

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
)

// listQuery builds List's keyset query: the cursor, the scope and each
// filter of p that is set become a WHERE clause, so that with one scope
// selected the primary key (scope, idem_key) bounds the scan. The columns
// are binary, so LENGTH counts bytes and the comparisons are byte-wise.
func (s *Store) listQuery(p *admin.ListParams) (string, []any, error) {
	var b strings.Builder
	args := []any{p.AfterScope, p.AfterScope, p.AfterKey}
	// The cursor condition is spelled out instead of a row comparison
	// (scope, idem_key) > (?, ?), so that every server version uses the
	// primary key's range.
	b.WriteString("SELECT " + selectColumns(p.WithBodies) + " FROM " + quote(s.cfg.Table) + " WHERE (scope > ? OR (scope = ? AND idem_key > ?))")
	add := func(clause string, a ...any) {
		b.WriteString(" AND " + clause)
		args = append(args, a...)
	}
	addTime := func(clause string, t time.Time) error {
		n, err := nanos(t)
		if err != nil {
			return err
		}
		add(clause, n)
		return nil
	}
	if p.OneScope() {
		add("scope = ?", p.Scope)
	}
	if p.State != "" {
		add("state = ?", string(p.State))
	}
	if p.KeyPrefix != "" {
		// An exact byte prefix test (never LIKE: the prefix is not a
		// pattern), and the range it implies for the index.
		add("LEFT(idem_key, LENGTH(?)) = ?", p.KeyPrefix, p.KeyPrefix)
		add("idem_key >= ?", p.KeyPrefix)
		if end, ok := p.KeyPrefixEnd(); ok {
			add("idem_key < ?", end)
		}
	}
	if !p.UpdatedFrom.IsZero() {
		if err := addTime("updated_at_ns >= ?", p.UpdatedFrom); err != nil {
			return "", nil, err
		}
	}
	if !p.UpdatedTo.IsZero() {
		if err := addTime("updated_at_ns < ?", p.UpdatedTo); err != nil {
			return "", nil, err
		}
	}
	if !p.LeaseExpiredBy.IsZero() {
		if err := addTime("state = 'processing' AND (lease_until_ns <= ? OR abandoned)", p.LeaseExpiredBy); err != nil {
			return "", nil, err
		}
	}
	if p.Route != "" {
		add("route = ?", p.Route)
	}
	b.WriteString(" ORDER BY scope, idem_key LIMIT ?")
	args = append(args, p.PageSize())
	return b.String(), args, nil
}

// Stats implements [admin.Admin.Stats]: one pass over the table for
// the counts, and two queries over the processing records (found through
// the (state, lease_until_ns) index) for the oldest in flight and the
// unknown outcomes. The three statements are prepared once, like the
// others.
func (s *Store) Stats(ctx context.Context, p *admin.StatsParams) (*admin.Stats, error) {
	if p == nil {
		return nil, errors.New("mysql: stats: nil params")
	}
	now, err := nanos(p.Now)
	if err != nil {
		return nil, err
	}
	st, err := s.stmt(ctx, s.q.statsCounts)
	if err != nil {
		return nil, s.wrap(ctx, "stats", err)
	}
	var out admin.Stats
	if err := st.QueryRowContext(ctx, now, now, now).Scan(&out.Processing, &out.Completed, &out.LeaseExpired,
		&out.Failed, &out.Expired); err != nil {
		return nil, s.wrap(ctx, "stats", err)
	}
	oldest, err := s.query(ctx, "stats", s.q.statsOldest, now)
	if err != nil {
		return nil, err
	}
	if len(oldest) > 0 {
		out.OldestInFlight = oldest[0]
	}
	out.Unknown, err = s.query(ctx, "stats", s.q.statsUnknown, now, p.UnknownLimit())
	if err != nil {
		return nil, err
	}
	if out.Unknown == nil {
		out.Unknown = []*retrysafe.Record{}
	}
	return &out, nil
}
