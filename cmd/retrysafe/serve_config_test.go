package main

import (
	"bufio"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestServeAllowEmptyConfig: with --allow-empty-config, a --config file
// without routes is accepted and serve starts with the flags' policy.
func TestServeAllowEmptyConfig(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "empty.yaml")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	var stderr lockedBuffer
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "off",
			"--upstream", "http://127.0.0.1:1", "--store", "memory:", "--config", path, "--allow-empty-config"}, pw, &stderr)
		pw.Close()
	}()
	started := false
	sc := bufio.NewScanner(pr)
	for !started && sc.Scan() {
		started = strings.Contains(sc.Text(), "listening on ")
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if !started {
		t.Fatalf("serve did not start; stderr:\n%s", &stderr)
	}
	cancel()
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("exit status %d; stderr:\n%s", c, &stderr)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not return after its context was cancelled")
	}
	if !strings.Contains(stderr.String(), `"routes":0`) {
		t.Errorf("the start line does not say routes 0:\n%s", &stderr)
	}
}
