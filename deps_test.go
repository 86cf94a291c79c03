package retrysafe_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestCoreImportsOnlyStdlib fails if the root package depends on anything
// outside the standard library: drivers, clients and metrics libraries
// belong in subpackages.
func TestCoreImportsOnlyStdlib(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep != "github.com/retrysafe/retrysafe" {
			t.Errorf("core package depends on non-standard package %s", dep)
		}
	}
}
