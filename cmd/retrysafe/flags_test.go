package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestUnknownFlagIsShort: a mistyped flag prints its error first, then one
// line pointing to --help, and nothing else: no help text on either
// stream. --help still prints the whole help.
func TestUnknownFlagIsShort(t *testing.T) {
	t.Parallel()
	for _, c := range commands {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			args := []string{c.name, "--no-such-flag"}
			if c.name == "keys" {
				args = []string{c.name, "list", "--no-such-flag"}
			}
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), args, &stdout, &stderr)
			if code != 2 {
				t.Errorf("exit status %d, want 2", code)
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout is not empty:\n%s", &stdout)
			}
			lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
			if len(lines) != 2 {
				t.Fatalf("stderr has %d lines, want 2 (the error, then a pointer to --help):\n%s", len(lines), &stderr)
			}
			if want := "retrysafe " + c.name + ": flag provided but not defined: -no-such-flag"; lines[0] != want {
				t.Errorf("first line %q, want %q", lines[0], want)
			}
			if want := "Run 'retrysafe " + c.name + " --help' for usage."; lines[1] != want {
				t.Errorf("second line %q, want %q", lines[1], want)
			}

			stdout.Reset()
			stderr.Reset()
			if code := run(context.Background(), []string{c.name, "--help"}, &stdout, &stderr); code != 0 {
				t.Fatalf("--help: exit status %d; stderr:\n%s", code, &stderr)
			}
			if !strings.Contains(stdout.String(), "Usage:\n  retrysafe "+c.name) || !strings.Contains(stdout.String(), "Flags:") {
				t.Errorf("--help does not print the help:\n%s", &stdout)
			}
		})
	}
}
