package admin_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportsOnlyRoot fails if package admin depends on anything but the
// standard library, the root package and what the root itself depends on:
// stores import it, so it must bring them nothing the root does not.
func TestImportsOnlyRoot(t *testing.T) {
	t.Parallel()
	deps := func(pkg string) []string {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", pkg, err, out)
		}
		return strings.Fields(string(out))
	}
	allowed := map[string]bool{"github.com/retrysafe/retrysafe/admin": true}
	for _, d := range deps("github.com/retrysafe/retrysafe") {
		allowed[d] = true
	}
	for _, d := range deps(".") {
		if !allowed[d] {
			t.Errorf("package admin depends on %s, which the root does not", d)
		}
	}
}
