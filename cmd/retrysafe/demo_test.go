package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
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
	// The wording: each story line is "title: what happens" (one colon);
	// the header says what the lease does; the status check of the last
	// story says what it found.
	for line := range strings.SplitSeq(out.String(), "\n") {
		if _, story, ok := strings.Cut(line, "/8] "); ok && strings.HasPrefix(line, "[") {
			if n := strings.Count(story, ":"); n != 1 {
				t.Errorf("story line with %d colons, want 1: %q", n, line)
			}
		}
	}
	for _, want := range []string{
		"lease             3s: when the gateway cannot know whether a payment ran (story 8),\n" +
			"                    its key stays locked this long, so no retry charges it twice",
		"retry: 409 outcome unknown, status check: 1 charge found",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the output lacks %q", want)
		}
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

// TestDemoNoTempDir checks that the demo, where the system's temporary
// directory does not exist (a FROM-scratch container without /tmp), fails
// with a message that says what to do, and that --dir makes it work.
func TestDemoNoTempDir(t *testing.T) {
	parent := t.TempDir()
	missing := filepath.Join(parent, "missing")
	t.Setenv("TMPDIR", missing)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var out bytes.Buffer
	err := runDemo(ctx, nil, &out, &out)
	if err == nil || !strings.Contains(err.Error(), missing+" does not exist") ||
		!strings.Contains(err.Error(), "set TMPDIR") || !strings.Contains(err.Error(), "--dir") {
		t.Fatalf("demo with a missing TMPDIR: %v; want an error naming %s, TMPDIR and --dir", err, missing)
	}
	if out.Len() != 0 {
		t.Errorf("demo ran anyway:\n%s", out.String())
	}

	err = runDemo(ctx, []string{"--dir", filepath.Join(parent, "also-missing")}, &out, &out)
	if err == nil || !strings.Contains(err.Error(), "--dir") {
		t.Fatalf("demo --dir MISSING: %v; want an error naming --dir", err)
	}

	work := filepath.Join(parent, "work")
	if err := os.Mkdir(work, 0o700); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := runDemo(ctx, []string{"--dir", work, "--keep"}, &out, &out); err != nil {
		t.Fatalf("demo --dir: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "Kept "+work+string(filepath.Separator)+"retrysafe-demo-") {
		t.Errorf("demo --dir --keep did not work in %s:\n%s", work, out.String())
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the demo made TMPDIR %s: %v", missing, err)
	}
}
