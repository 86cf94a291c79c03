package retrysafegrpc_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps fails if package retrysafegrpc links more than grpc-go,
// protobuf, the googleapis status types and the root module: no store
// driver, no HTTP framework.
func TestDeps(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 2 {
		t.Fatalf("go list -deps listed %q", deps)
	}
	allowed := []string{"github.com/retrysafe/retrysafe", "google.golang.org/grpc", "google.golang.org/protobuf",
		"google.golang.org/genproto/googleapis/rpc", "golang.org/x/net", "golang.org/x/sys", "golang.org/x/text"}
	for _, dep := range deps {
		ok := !strings.Contains(dep, "retrysafe/retrysafe/store/")
		if ok {
			ok = false
			for _, a := range allowed {
				ok = ok || strings.HasPrefix(dep, a)
			}
		}
		if !ok {
			t.Errorf("retrysafegrpc depends on %s", dep)
		}
	}
}
