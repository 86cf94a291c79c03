package retrysafe_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe/internal/testenv"
)

// TestCoreImportsOnlyStdlib fails if the root package depends on anything
// outside the standard library and the root module's own packages
// (internal/canonicaljson): drivers, clients and metrics libraries belong
// in subpackages.
func TestCoreImportsOnlyStdlib(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}} {{.Module.Path}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for line := range strings.Lines(string(out)) {
		dep, module, _ := strings.Cut(strings.TrimSpace(line), " ")
		if module != "github.com/retrysafe/retrysafe" {
			t.Errorf("core package depends on %s, of module %q", dep, module)
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
