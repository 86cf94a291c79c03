package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDocsShowTheRealCode: every Go block of docs/unknown-outcomes.md is
// a verbatim excerpt of this example's source, so the page cannot drift
// from the code it explains.
func TestDocsShowTheRealCode(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile(filepath.Join("..", "..", "docs", "unknown-outcomes.md"))
	if err != nil {
		t.Fatal(err)
	}
	var src strings.Builder
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		src.Write(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	blocks := goBlocks(string(page))
	if len(blocks) < 5 {
		t.Fatalf("found %d Go blocks in the page, want the five it shows", len(blocks))
	}
	for _, b := range blocks {
		if !strings.Contains(src.String(), b) {
			t.Errorf("docs/unknown-outcomes.md shows code that is not in examples/payments:\n%s", b)
		}
	}
}

// goBlocks returns the contents of the page's ```go blocks.
func goBlocks(page string) []string {
	var out []string
	for {
		_, rest, ok := strings.Cut(page, "```go\n")
		if !ok {
			return out
		}
		block, after, ok := strings.Cut(rest, "\n```")
		if !ok {
			return out
		}
		out = append(out, block)
		page = after
	}
}

// TestGoBlocks: the extraction finds blocks, and a changed line fails.
func TestGoBlocks(t *testing.T) {
	t.Parallel()
	got := goBlocks("a\n```go\nx := 1\n```\nb\n```sh\nls\n```\n```go\ny\n```\n")
	if len(got) != 2 || got[0] != "x := 1" || got[1] != "y" {
		t.Fatalf("goBlocks = %q", got)
	}
}
