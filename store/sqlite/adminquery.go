package sqlite

import (
	"context"
	"strings"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
)

// listQuery builds List's keyset query: the cursor, the scope and each
// filter of p that is set become a WHERE clause, so that with one scope
// selected the primary key (scope, idem_key) bounds the scan.
func (s *Store) listQuery(p *admin.ListParams) (string, []any) {
	var b strings.Builder
	args := []any{p.AfterScope, p.AfterKey}
	b.WriteString("SELECT " + selectColumns(p.WithBodies) + " FROM " + quoteIdent(s.cfg.Table) + " WHERE (scope, idem_key) > (?, ?)")
	add := func(clause string, a ...any) {
		b.WriteString(" AND " + clause)
		args = append(args, a...)
	}
	if p.OneScope() {
		add("scope = ?", p.Scope)
	}
	if p.State != "" {
		add("state = ?", string(p.State))
	}
	if p.KeyPrefix != "" {
		add("substr(idem_key, 1, length(?)) = ?", p.KeyPrefix, p.KeyPrefix)
		add("idem_key >= ?", p.KeyPrefix)
		if end, ok := p.KeyPrefixEnd(); ok {
			add("idem_key < ?", end)
		}
	}
	if !p.UpdatedFrom.IsZero() {
		add("updated_at >= ?", toNanos(p.UpdatedFrom))
	}
	if !p.UpdatedTo.IsZero() {
		add("updated_at < ?", toNanos(p.UpdatedTo))
	}
	if !p.LeaseExpiredBy.IsZero() {
		add("state = 'processing' AND (lease_until <= ? OR abandoned)", toNanos(p.LeaseExpiredBy))
	}
	if p.Route != "" {
		add("route = ?", p.Route)
	}
	b.WriteString(" ORDER BY scope, idem_key LIMIT ?")
	args = append(args, p.PageSize())
	return b.String(), args
}

// Stats implements [admin.Admin]: one pass over the table for the
// counts, and two queries over the processing records (found through the
// partial index on lease_until) for the oldest in flight and the unknown
// outcomes ([admin.StatusUnknown]: a lease that ran out, or an owner
// that abandoned its attempt).
func (s *Store) Stats(ctx context.Context, p *admin.StatsParams) (*admin.Stats, error) {
	now := toNanos(p.Now)
	table := quoteIdent(s.cfg.Table)
	var st admin.Stats
	err := s.retry(ctx, "stats", func() error {
		return s.db.QueryRowContext(ctx, `SELECT
	COALESCE(SUM(CASE WHEN state = 'processing' THEN 1 ELSE 0 END), 0),
	COALESCE(SUM(CASE WHEN state = 'completed' THEN 1 ELSE 0 END), 0),
	COALESCE(SUM(CASE WHEN state = 'processing' AND (lease_until <= ?1 OR abandoned) THEN 1 ELSE 0 END), 0),
	COALESCE(SUM(CASE WHEN state = 'completed' AND status >= 400 AND expires_at > ?1 THEN 1 ELSE 0 END), 0),
	COALESCE(SUM(CASE WHEN state = 'completed' AND expires_at <= ?1 THEN 1 ELSE 0 END), 0)
FROM `+table, now).Scan(&st.Processing, &st.Completed, &st.LeaseExpired, &st.Failed, &st.Expired)
	})
	if err != nil {
		return nil, err
	}
	cols := selectColumns(false)
	oldest, err := s.query(ctx, "stats", "SELECT "+cols+" FROM "+table+
		" WHERE state = 'processing' AND lease_until > ?1 AND NOT abandoned ORDER BY created_at, scope, idem_key LIMIT 1", now)
	if err != nil {
		return nil, err
	}
	if len(oldest) > 0 {
		st.OldestInFlight = oldest[0]
	}
	st.Unknown, err = s.query(ctx, "stats", "SELECT "+cols+" FROM "+table+
		" WHERE state = 'processing' AND (lease_until <= ?1 OR abandoned) ORDER BY lease_until, scope, idem_key LIMIT ?2", now, p.UnknownLimit())
	if err != nil {
		return nil, err
	}
	if st.Unknown == nil {
		st.Unknown = []*retrysafe.Record{}
	}
	return &st, nil
}
