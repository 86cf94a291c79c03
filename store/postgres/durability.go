package postgres

import (
	"context"

	"github.com/retrysafe/retrysafe/admin"
)

var _ admin.DurabilityChecker = (*Store)(nil)

// CheckDurability implements [admin.DurabilityChecker]: with fsync off
// a crash of the server can lose or corrupt committed records; with
// synchronous_commit off it can lose the last ones the store was told
// were committed. Both are read as the store's own sessions see them (a
// role, a database or the URL's options can set synchronous_commit).
func (s *Store) CheckDurability(ctx context.Context) ([]admin.DurabilityWarning, error) {
	var fsync, syncCommit string
	err := s.pool.QueryRow(ctx, "SELECT current_setting('fsync'), current_setting('synchronous_commit')").Scan(&fsync, &syncCommit)
	if err != nil {
		return nil, s.wrap(ctx, "check durability", err)
	}
	var out []admin.DurabilityWarning
	if fsync == "off" {
		out = append(out, admin.DurabilityWarning{Setting: "fsync", Value: fsync,
			Risk: "PostgreSQL does not flush to disk: a crash of the server or the machine can lose or corrupt committed records, and retries of completed operations run again"})
	}
	if syncCommit == "off" {
		out = append(out, admin.DurabilityWarning{Setting: "synchronous_commit", Value: syncCommit,
			Risk: "PostgreSQL acknowledges commits before they reach disk: a crash of the server loses the last records (up to three times wal_writer_delay), and their retries run again"})
	}
	return out, nil
}
