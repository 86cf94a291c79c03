package main

import (
	"bufio"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSignalRemovesTempDatabase runs the built command: on SIGTERM or
// SIGINT it exits 0 and removes the temporary directory of its SQLite
// database; a database given with --db is kept.
func TestSignalRemovesTempDatabase(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command")
	}
	if runtime.GOOS == "windows" {
		t.Skip("sends SIGTERM")
	}
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "payments")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			tmp := t.TempDir() // the command's $TMPDIR
			db := startPayments(t, bin, tmp, sig)
			dir := filepath.Dir(db)
			if filepath.Dir(dir) != tmp || !strings.HasPrefix(filepath.Base(dir), "retrysafe-payments-") {
				t.Fatalf("database %s is not in a retrysafe-payments-* directory under %s", db, tmp)
			}
			if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("after %s, %s is still there (%v)", sig, dir, err)
			}
		})
	}
	t.Run("--db", func(t *testing.T) {
		t.Parallel()
		keep := filepath.Join(t.TempDir(), "kept.db")
		db := startPayments(t, bin, t.TempDir(), syscall.SIGTERM, "--db", keep)
		if db != keep {
			t.Fatalf("database %s, want %s", db, keep)
		}
		if _, err := os.Stat(keep); err != nil {
			t.Fatalf("--db %s was not kept: %v", keep, err)
		}
	})
}

// startPayments runs the command with free ports and tmpdir as $TMPDIR,
// waits until it prints its database, checks that the file exists, sends
// sig and waits for exit status 0. It returns the database path.
func startPayments(t *testing.T, bin, tmpdir string, sig syscall.Signal, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"--listen", "127.0.0.1:0", "--provider-listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), "TMPDIR="+tmpdir, "PAYMENTS_POSTGRES_URL=")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
	})
	var db string
	timeout := time.After(60 * time.Second)
	for db == "" {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("exited before printing its database: %v\n%s", <-done, stderr.String())
			}
			if _, rest, ok := strings.Cut(line, "database"); ok {
				db = strings.TrimPrefix(strings.TrimSpace(rest), "SQLite ")
			}
		case <-timeout:
			t.Fatal("no database line")
		}
	}
	go func() {
		for range lines {
		}
	}()
	if _, err := os.Stat(db); err != nil {
		t.Fatalf("database %s: %v", db, err)
	}
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("after %s: %v\n%s", sig, err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("still running 30s after %s", sig)
	}
	return db
}
