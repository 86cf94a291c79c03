package torture

import (
	"os"
	"path/filepath"
	"testing"
)

func TestReadGatewayLog(t *testing.T) {
	t.Parallel()
	log := `{"time":"2026-11-30T19:49:13.507501608Z","level":"WARN","msg":"upstream unreachable; nothing was sent","err":"dial tcp 127.0.0.1:44757: connect: connection refused"}
{"time":"2026-11-30T19:49:13.6Z","level":"WARN","msg":"upstream outcome unknown","err":"context deadline exceeded","status":504}
not json: a panic's stack, say
{"time":"2026-11-30T19:49:14Z","level":"ERROR","msg":"retrysafe: result not stored; the key stays blocked until its lease runs out","err":"store unavailable"}
{"time":"2026-11-30T19:49:15Z","level":"WARN","msg":"retrysafe: result not stored: the lease was taken over by another request"}
{"time":"2026-11-30T19:49:16Z","level":"WARN","msg":"retrysafe: lease lost while the operation ran; another claimant took it over"}
{"time":"2026-11-30T19:49:17Z","level":"WARN","msg":"retrysafe: lease renewal failed; will retry","err":"timeout"}
{"time":"2026-11-30T19:49:18Z","level":"ERROR","msg":"retrysafe: store unavailable","err":"dial error"}
`
	path := filepath.Join(t.TempDir(), "gateway.log")
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	events, err := readGatewayLog(path, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{ReportedOutcomeUnknown, ReportedNotStored, ReportedLeaseLost, ReportedLeaseLost, ReportedRenewalFailed}
	if len(events) != len(want) {
		t.Fatalf("got %d events, want %d: %+v", len(events), len(want), events)
	}
	for i, e := range events {
		if e.Kind != want[i] || e.Link != LinkReported || e.Gateway != 2 || e.Start.IsZero() {
			t.Errorf("event %d: %+v, want kind %s on gateway 2", i, e, want[i])
		}
	}
}
