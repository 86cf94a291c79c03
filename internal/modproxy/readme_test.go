package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadmeProgram: the program TestGoGet builds holds the README's
// example, with its ListenAndServe replaced, and a README whose example
// changed shape is an error rather than a program that tests nothing.
func TestReadmeProgram(t *testing.T) {
	t.Parallel()
	root, err := repoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	prog, err := readmeProgram(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"sqlite.Open(ctx,", "retrysafe.NewMiddleware(", "listenAndServe(protect(mux))"} {
		if !strings.Contains(prog, want) {
			t.Errorf("program lacks %q:\n%s", want, prog)
		}
	}
	if strings.Contains(prog, "http.ListenAndServe(") {
		t.Errorf("program still listens on :8080:\n%s", prog)
	}

	for name, readme := range map[string]string{
		"no section":      "# x\n\n```go\nhttp.ListenAndServe(\":8080\", h)\n```\n",
		"no serve call":   "# x\n\n## Use it as a library\n\n```go\nfmt.Println()\n```\n",
		"two serve calls": "# x\n\n## Use it as a library\n\n```go\nhttp.ListenAndServe(\":8080\", a)\nhttp.ListenAndServe(\":8080\", b)\n```\n",
	} {
		path := filepath.Join(t.TempDir(), "README.md")
		if err := os.WriteFile(path, []byte(readme), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := readmeProgram(path); err == nil {
			t.Errorf("%s: readmeProgram accepted it", name)
		}
	}
}
