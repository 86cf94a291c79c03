package retrysafeconnect_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestStdlibOnly fails if package retrysafeconnect depends on anything but
// the standard library and the root module: a Connect service pulls
// connect-go itself, and nothing more should come through this package.
func TestStdlibOnly(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 2 {
		t.Fatalf("go list -deps listed %q", deps)
	}
	for _, dep := range deps {
		if !strings.HasPrefix(dep, "github.com/retrysafe/retrysafe") || strings.Contains(dep, "/store/") {
			t.Errorf("retrysafeconnect depends on %s", dep)
		}
	}
}
