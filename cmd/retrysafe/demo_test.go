package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"strings"
	"testing"
	"time"
)

// TestDemo plays every story of the demo in-process, on real sockets and a
// temporary SQLite file, and checks that it succeeds and states the
// invariant.
func TestDemo(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	err := runDemo(ctx, nil, &out, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatalf("demo failed: %v", err)
	}
	// Seven of the eight stories are payments that must be charged once;
	// the request without a key must not be charged at all.
	if !strings.Contains(out.String(), "invariant holds: charges made (7) = logical payments (7)") {
		t.Fatalf("the output does not state the invariant with 7 charges")
	}
	if strings.Contains(out.String(), "FAILED") {
		t.Fatalf("a story failed")
	}
}

// TestDemoInvariantBroken checks that the demo fails, and says so, when the
// charges made differ from the logical payments or a story failed.
func TestDemoInvariantBroken(t *testing.T) {
	t.Parallel()
	up, err := startDemoUpstream()
	if err != nil {
		t.Fatal(err)
	}
	defer up.close()
	for name, tc := range map[string]struct {
		wants map[string]int
		rows  []*demoRow
	}{
		"payment never charged": {wants: map[string]int{"order-1": 1}, rows: []*demoRow{{title: "x"}}},
		"story failed":          {wants: map[string]int{}, rows: []*demoRow{{title: "x", failures: []string{"boom"}}}},
	} {
		var out bytes.Buffer
		d := &demo{out: &out, upstream: up, wants: tc.wants}
		if err := d.summary(tc.rows); err == nil {
			t.Errorf("%s: summary succeeded", name)
		}
		if !strings.Contains(out.String(), "invariant BROKEN") {
			t.Errorf("%s: output does not say the invariant is broken:\n%s", name, out.String())
		}
	}
}

func TestDemoUsage(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	err := runDemo(context.Background(), []string{"--help"}, &out, &out)
	if !errors.Is(err, flag.ErrHelp) || !strings.Contains(out.String(), "Examples:") || !strings.Contains(out.String(), "--keep") {
		t.Errorf("--help: err %v, output:\n%s", err, out.String())
	}
	var ue *usageError
	if err := runDemo(context.Background(), []string{"extra"}, &out, &out); !errors.As(err, &ue) {
		t.Errorf("an extra argument: err %v, want a usage error", err)
	}
}
