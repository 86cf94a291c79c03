package mysql_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/store/mysql"
)

func TestDurabilityWarnings(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		flush, syncBinlog, logBin string
		want                      []string
	}{
		"durable":                 {"1", "1", "1", nil},
		"no binary log":           {"1", "0", "0", nil},
		"flush every second":      {"2", "1", "1", []string{"innodb_flush_log_at_trx_commit"}},
		"flush never":             {"0", "1", "0", []string{"innodb_flush_log_at_trx_commit"}},
		"binary log not synced":   {"1", "0", "1", []string{"sync_binlog"}},
		"binary log synced by OS": {"1", "100", "ON", []string{"sync_binlog"}},
		"both":                    {"2", "0", "1", []string{"innodb_flush_log_at_trx_commit", "sync_binlog"}},
	} {
		var got []string
		for _, w := range mysql.DurabilityWarnings(tc.flush, tc.syncBinlog, tc.logBin) {
			got = append(got, w.Setting)
			if w.Risk == "" {
				t.Errorf("%s: %s has no risk", name, w.Setting)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: warnings %q, want %q", name, got, tc.want)
		}
	}
}

// TestCheckDurability reads the local server's settings: the store warns
// exactly as the settings, read here on their own, say it must.
func TestCheckDurability(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	db := newDB(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var flush, syncBinlog, logBin string
	if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.innodb_flush_log_at_trx_commit, @@GLOBAL.sync_binlog, @@GLOBAL.log_bin").Scan(&flush, &syncBinlog, &logBin); err != nil {
		t.Fatal(err)
	}
	got, err := s.CheckDurability(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := mysql.DurabilityWarnings(flush, syncBinlog, logBin); !slices.Equal(got, want) {
		t.Errorf("innodb_flush_log_at_trx_commit=%s sync_binlog=%s log_bin=%s: warnings %+v, want %+v", flush, syncBinlog, logBin, got, want)
	}
	t.Logf("local server: innodb_flush_log_at_trx_commit=%s sync_binlog=%s log_bin=%s: %d warnings", flush, syncBinlog, logBin, len(got))
	var _ admin.DurabilityChecker = s
}
