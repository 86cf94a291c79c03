package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
)

func sweepCmdForTest(open storeOpener) func(context.Context, []string, *bytes.Buffer, *bytes.Buffer) error {
	return func(ctx context.Context, args []string, stdout, stderr *bytes.Buffer) error {
		return runSweep(ctx, args, stdout, stderr, open)
	}
}

func TestSweep(t *testing.T) {
	t.Parallel()
	for _, b := range cliBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			now := time.Now()
			cliArrange(t, b.store,
				cliRecord{scope: aliceScope, key: "expired-1", status: 201, at: now.Add(-2 * time.Hour), ttl: time.Hour},
				cliRecord{scope: aliceScope, key: "expired-2", status: 500, at: now.Add(-3 * time.Hour), ttl: time.Hour},
				cliRecord{scope: bobScope, key: "expired-3", status: 201, at: now.Add(-2 * time.Hour), ttl: time.Hour},
				cliRecord{scope: aliceScope, key: "live", status: 201, at: now, ttl: time.Hour},
				cliRecord{scope: bobScope, key: "processing", at: now.Add(-2 * time.Hour)},
				// Lease (1m) ran out 3h59m ago: retired with a 3h retention.
				cliRecord{scope: bobScope, key: "abandoned", at: now.Add(-4 * time.Hour)},
			)
			out, _, err := cliRun(t, b, sweepCmdForTest, "--store", b.url, "--batch", "2", "--processing-retention", "3h", "--json")
			if err != nil {
				t.Fatal(err)
			}
			var res struct {
				Deleted int    `json:"deleted"`
				Native  bool   `json:"nativeExpiry"`
				Note    string `json:"note"`
			}
			if err := json.Unmarshal([]byte(out), &res); err != nil {
				t.Fatalf("not JSON: %v\n%s", err, out)
			}
			if _, ok := b.store.(admin.Sweeper); !ok {
				if !res.Native || !strings.Contains(res.Note, "natively") {
					t.Errorf("a store without a sweeper: %s", out)
				}
				text, _, err := cliRun(t, b, sweepCmdForTest, "--store", b.url)
				if err != nil || !strings.Contains(text, "nothing to sweep") {
					t.Errorf("text output for a store without a sweeper: %v %q", err, text)
				}
				return
			}
			if res.Deleted != 4 {
				t.Errorf("deleted %d records, want the 3 expired ones and the abandoned one: %s", res.Deleted, out)
			}
			ctx := context.Background()
			for _, k := range []struct{ scope, key string }{{aliceScope, "live"}, {bobScope, "processing"}} {
				if _, err := b.store.Get(ctx, &retrysafe.GetParams{Scope: k.scope, Key: k.key, Now: now}); err != nil {
					t.Errorf("%s was swept: %v", k.key, err)
				}
			}
			recs, err := b.store.(admin.Admin).List(ctx, &admin.ListParams{Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) != 2 {
				t.Errorf("%d records left, want 2", len(recs))
			}
			text, _, err := cliRun(t, b, sweepCmdForTest, "--store", b.url)
			if err != nil || !strings.Contains(text, "Deleted 0 expired or retired record(s)") {
				t.Errorf("second sweep: %v %q", err, text)
			}
		})
	}
}

func TestSweepUsage(t *testing.T) {
	t.Parallel()
	b := memoryBackend(t)
	for name, args := range map[string][]string{
		"negative batch": {"--batch", "-1"},
		"zero retention": {"--processing-retention", "0s"},
		"argument":       {"extra"},
		"unknown flag":   {"--nope"},
	} {
		_, _, err := cliRun(t, b, sweepCmdForTest, args...)
		var ue *usageError
		if !errors.As(err, &ue) {
			t.Errorf("%s: err = %v, want a usage error", name, err)
		}
	}
}
