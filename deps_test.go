package retrysafe_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe/internal/testenv"
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

// TestModuleRequiresNothing fails if the root module requires any module:
// `go get github.com/retrysafe/retrysafe` must pull only the standard
// library. Drivers, clients and metrics libraries belong in the modules of
// store/sqlite, store/postgres, store/redis, gateway and the rest (go.work).
func TestModuleRequiresNothing(t *testing.T) {
	t.Parallel()
	graph := testenv.ModuleGraph(t)
	if want := []string{"github.com/retrysafe/retrysafe"}; !slices.Equal(graph, want) {
		t.Errorf("GOWORK=off go list -m all = %q, want only %q", graph, want)
	}
}
