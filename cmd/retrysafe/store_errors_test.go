package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runCLI runs the command line args in-process and returns the exit
// status, stdout and stderr.
func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// TestCommandsDoNotCreateAStore: keys, sweep and migrate given a SQLite
// path that does not exist (a typo) say so and create nothing; migrate
// creates the file with --create.
func TestCommandsDoNotCreateAStore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "typo.db")
	store := "sqlite:" + path
	for _, args := range [][]string{
		{"keys", "list", "--store", store},
		{"keys", "list", "--store", store, "--json"},
		{"keys", "show", "--store", store, "k"},
		{"keys", "delete", "--store", store, "k"},
		{"sweep", "--store", store},
		{"migrate", "--store", store},
	} {
		code, stdout, stderr := runCLI(t, args...)
		if code != 1 || !strings.Contains(stderr, "SQLite file "+path+" does not exist") {
			t.Errorf("%q: exit status %d, stderr %q; want 1 and that the file does not exist", args, code, stderr)
		}
		if strings.Contains(stdout, "no records") {
			t.Errorf("%q printed %q", args, stdout)
		}
		if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%q created %s (%v)", args, path, err)
		}
	}
	if _, _, stderr := runCLI(t, "migrate", "--store", store); !strings.Contains(stderr, "--create") {
		t.Errorf("migrate does not point to --create: %q", stderr)
	}

	code, stdout, stderr := runCLI(t, "migrate", "--store", store, "--create")
	if code != 0 || !strings.Contains(stdout, "Schema up to date") {
		t.Fatalf("migrate --create: exit status %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("migrate --create made no file: %v", err)
	}
	// Now that it exists, the read-only commands open it.
	if code, stdout, stderr := runCLI(t, "keys", "list", "--store", store); code != 0 || !strings.Contains(stdout, "no records") {
		t.Fatalf("keys list on the new file: exit status %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	if code, _, stderr := runCLI(t, "sweep", "--store", store); code != 0 {
		t.Fatalf("sweep on the new file: exit status %d\nstderr: %s", code, stderr)
	}
}

// TestStoreErrorsNameThePath: a SQLite path in a directory that does not
// exist is reported with the directory, by every command and by serve.
func TestStoreErrorsNameThePath(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "nonexistent", "dir")
	store := "sqlite:" + filepath.Join(missing, "x.db")
	want := "directory " + missing + " does not exist"
	for _, args := range [][]string{
		{"keys", "list", "--store", store},
		{"sweep", "--store", store},
		{"migrate", "--store", store, "--create"},
		{"serve", "--upstream", "http://127.0.0.1:1", "--listen", "127.0.0.1:0", "--admin-listen", "off", "--store", store},
	} {
		code, _, stderr := runCLI(t, args...)
		if code != 1 || !strings.Contains(stderr, want) || strings.Contains(stderr, "(14)") {
			t.Errorf("%q: exit status %d, stderr %q; want 1 and %q", args, code, stderr, want)
		}
	}
}

// TestPostgresDialErrorOnce: a PostgreSQL server that is down is reported
// once, not once per connection attempt of sslmode=prefer.
func TestPostgresDialErrorOnce(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	code, _, stderr := runCLI(t, "keys", "list", "--store", fmt.Sprintf("postgres://postgres@%s/test", addr))
	if code != 1 || strings.Count(stderr, "connection refused") != 1 || strings.Count(stderr, "\n") != 1 {
		t.Fatalf("exit status %d, stderr:\n%s\nwant 1 and the dial error once, on one line", code, stderr)
	}
}

// TestMemoryStoreNote: keys and sweep on a memory: store say that it lives
// inside one process (keys on stderr, so that --json output stays JSON).
func TestMemoryStoreNote(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"keys", "list", "--store", "memory:"},
		{"keys", "list", "--store", "memory:", "--json"},
		{"keys", "show", "--store", "memory:", "k"},
		{"sweep", "--store", "memory:"},
	} {
		_, stdout, stderr := runCLI(t, args...)
		if !strings.Contains(stdout+stderr, "the memory store lives inside one process") {
			t.Errorf("%q: no note\nstdout: %s\nstderr: %s", args, stdout, stderr)
		}
		if args[len(args)-1] == "--json" && !strings.HasPrefix(strings.TrimSpace(stdout), "{") {
			t.Errorf("%q: stdout is not JSON: %s", args, stdout)
		}
	}
}
