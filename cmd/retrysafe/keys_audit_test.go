package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/gateway"
	"github.com/retrysafe/retrysafe/internal/scopehash"
)

// TestKeysDeleteAudited: "keys delete" writes one JSON audit line on
// stderr with who, what, the scope, a digest of the key (never the key)
// and the record's state before; a delete that finds nothing writes none
// (nothing was done) and fails.
func TestKeysDeleteAudited(t *testing.T) {
	t.Parallel()
	b := memoryBackend(t)
	now := time.Now()
	cliArrange(t, b.store,
		cliRecord{scope: aliceScope, key: "pay-audit-done", status: 201, at: now, ttl: time.Hour},
		cliRecord{scope: aliceScope, key: "pay-audit-unknown", at: now.Add(-time.Hour)},
	)
	for key, want := range map[string]map[string]any{
		"pay-audit-done":    {"state_before": "completed", "status_before": float64(201), "attempt": float64(1)},
		"pay-audit-unknown": {"state_before": string(admin.StatusUnknown), "attempt": float64(1)},
	} {
		_, stderr, err := cliRun(t, b, keysCmdForTest, "delete", "--scope", aliceScope, key)
		if err != nil {
			t.Fatalf("delete %s: %v", key, err)
		}
		lines := strings.Split(strings.TrimSpace(stderr), "\n")
		if len(lines) != 1 {
			t.Fatalf("delete %s: stderr has %d lines, want one audit line:\n%s", key, len(lines), stderr)
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
			t.Fatalf("delete %s: the audit line is not JSON: %v\n%s", key, err, lines[0])
		}
		want["msg"] = gateway.AuditPrefix + "record deleted"
		want["audit"] = true
		want["via"] = "cli"
		want["scope"] = aliceScope
		want["key_sha256"] = scopehash.Sum(key)[:16]
		want["result"] = "done"
		want["level"] = "INFO"
		for k, v := range want {
			if rec[k] != v {
				t.Errorf("delete %s: audit %s = %v, want %v (line %s)", key, k, rec[k], v, lines[0])
			}
		}
		if actor, _ := rec["actor"].(string); actor == "" || actor == "unknown" {
			t.Errorf("delete %s: audit actor %q, want the OS user", key, rec["actor"])
		}
		if strings.Contains(lines[0], key) {
			t.Errorf("delete %s: the audit line holds the key itself: %s", key, lines[0])
		}
	}
	if _, stderr, err := cliRun(t, b, keysCmdForTest, "delete", "--scope", aliceScope, "pay-audit-done"); err == nil || strings.Contains(stderr, "audit") {
		t.Errorf("a delete of an absent key: err %v, stderr %q; want an error and no audit line", err, stderr)
	}
}
