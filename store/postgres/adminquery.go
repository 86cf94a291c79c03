package postgres

import (
	"context"
	"strconv"
	"strings"

	"github.com/retrysafe/retrysafe/admin"
)

// listQuery builds List's keyset query: the cursor, the scope and each
// filter set become a WHERE clause, so that with one scope selected the
// primary key (scope, key) bounds the scan. (pgx prepares and caches each
// shape of it.)
func (s *Store) listQuery(p *admin.ListParams) (string, []any, error) {
	var b strings.Builder
	args := []any{p.AfterScope, p.AfterKey}
	b.WriteString("SELECT " + selectColumns(p.WithBodies) + " FROM " + s.table + " WHERE (scope, key) > ($1, $2)")
	add := func(clause string, a any) {
		args = append(args, a)
		b.WriteString(" AND " + strings.ReplaceAll(clause, "$", "$"+strconv.Itoa(len(args))))
	}
	if p.OneScope() {
		add("scope = $", p.Scope)
	}
	if p.State != "" {
		add("state = $", string(p.State))
	}
	if p.KeyPrefix != "" {
		add("starts_with(key, $)", p.KeyPrefix)
		add("key >= $", p.KeyPrefix)
		if end, ok := p.KeyPrefixEnd(); ok {
			add("key < $", end)
		}
	}
	if !p.UpdatedFrom.IsZero() {
		n, err := mustNanos(p.UpdatedFrom)
		if err != nil {
			return "", nil, err
		}
		add("updated_at_ns >= $", n)
	}
	if !p.UpdatedTo.IsZero() {
		n, err := mustNanos(p.UpdatedTo)
		if err != nil {
			return "", nil, err
		}
		add("updated_at_ns < $", n)
	}
	if !p.LeaseExpiredBy.IsZero() {
		n, err := mustNanos(p.LeaseExpiredBy)
		if err != nil {
			return "", nil, err
		}
		add("state = 'processing' AND (lease_until_ns <= $ OR abandoned)", n)
	}
	if p.Route != "" {
		add("route = $", p.Route)
	}
	args = append(args, p.PageSize())
	b.WriteString(" ORDER BY scope, key LIMIT $" + strconv.Itoa(len(args)))
	return b.String(), args, nil
}

// Stats implements [admin.Admin.Stats]: one pass over the table for
// the counts, and two queries over the processing rows (found through the
// partial index on lease_until_ns) for the oldest in flight and the
// unknown outcomes ([admin.StatusUnknown]: a lease that ran out, or an
// owner that abandoned its attempt).
func (s *Store) Stats(ctx context.Context, p *admin.StatsParams) (*admin.Stats, error) {
	now, err := mustNanos(p.Now)
	if err != nil {
		return nil, err
	}
	var st admin.Stats
	err = s.pool.QueryRow(ctx, `SELECT
	count(*) FILTER (WHERE state = 'processing'),
	count(*) FILTER (WHERE state = 'completed'),
	count(*) FILTER (WHERE state = 'processing' AND (lease_until_ns <= $1 OR abandoned)),
	count(*) FILTER (WHERE state = 'completed' AND status >= 400 AND expires_at_ns > $1),
	count(*) FILTER (WHERE state = 'completed' AND expires_at_ns <= $1)
FROM `+s.table, now).Scan(&st.Processing, &st.Completed, &st.LeaseExpired, &st.Failed, &st.Expired)
	if err != nil {
		return nil, s.wrap(ctx, "stats", err)
	}
	cols := selectColumns(false)
	oldest, err := s.query(ctx, "stats", "SELECT "+cols+" FROM "+s.table+
		" WHERE state = 'processing' AND lease_until_ns > $1 AND NOT abandoned ORDER BY created_at_ns, scope, key LIMIT 1", now)
	if err != nil {
		return nil, err
	}
	if len(oldest) > 0 {
		st.OldestInFlight = oldest[0]
	}
	st.Unknown, err = s.query(ctx, "stats", "SELECT "+cols+" FROM "+s.table+
		" WHERE state = 'processing' AND (lease_until_ns <= $1 OR abandoned) ORDER BY lease_until_ns, scope, key LIMIT $2", now, p.UnknownLimit())
	if err != nil {
		return nil, err
	}
	return &st, nil
}
