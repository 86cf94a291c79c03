package mysql

import (
	"context"

	"github.com/retrysafe/retrysafe/admin"
)

var _ admin.DurabilityChecker = (*Store)(nil)

// CheckDurability implements [admin.DurabilityChecker]: with
// innodb_flush_log_at_trx_commit other than 1 a crash can lose the last
// transactions InnoDB reported committed; with the binary log on and
// sync_binlog other than 1, a crash can lose them from the binary log,
// which replicas and a failover then lack.
func (s *Store) CheckDurability(ctx context.Context) ([]admin.DurabilityWarning, error) {
	if err := s.open(); err != nil {
		return nil, s.wrap(ctx, "check durability", err)
	}
	var flush, syncBinlog, logBin string
	err := s.db.QueryRowContext(ctx, "SELECT @@GLOBAL.innodb_flush_log_at_trx_commit, @@GLOBAL.sync_binlog, @@GLOBAL.log_bin").Scan(&flush, &syncBinlog, &logBin)
	if err != nil {
		return nil, s.wrap(ctx, "check durability", err)
	}
	return durabilityWarnings(flush, syncBinlog, logBin), nil
}

// durabilityWarnings judges the three settings as the server reports them.
func durabilityWarnings(flush, syncBinlog, logBin string) []admin.DurabilityWarning {
	var out []admin.DurabilityWarning
	if flush != "1" {
		out = append(out, admin.DurabilityWarning{Setting: "innodb_flush_log_at_trx_commit", Value: flush,
			Risk: "InnoDB does not flush its log at each commit: a crash of the server (2) or of the machine (0 and 2) loses up to a second of records, and their retries run again"})
	}
	if (logBin == "1" || logBin == "ON") && syncBinlog != "1" {
		out = append(out, admin.DurabilityWarning{Setting: "sync_binlog", Value: syncBinlog,
			Risk: "the binary log is not synced at each commit: after a crash of the machine, replicas (and a failover to one) can lack records the store acknowledged, and their retries run again"})
	}
	return out
}
