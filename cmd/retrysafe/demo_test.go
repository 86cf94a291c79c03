package main

import (
	"bytes"
	"context"
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
