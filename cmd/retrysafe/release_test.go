package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestReleaseBinary builds a binary with deploy/release.sh v0.1.0, as a
// release does, and runs it: "retrysafe version" prints v0.1.0 (not the
// pseudo-version the go command records for an untagged commit), and its
// help talks to a user of the binary, not to one in a source checkout.
func TestReleaseBinary(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds a release binary")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("release.sh needs git")
	}
	dist := t.TempDir()
	target := runtime.GOOS + "/" + runtime.GOARCH
	cmd := exec.Command("sh", filepath.Join("..", "..", "deploy", "release.sh"), "v0.1.0")
	cmd.Env = append(os.Environ(), "DIST="+dist, "TARGETS="+target)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("release.sh v0.1.0: %v\n%s", err, out)
	}
	bin := filepath.Join(dist, "retrysafe-v0.1.0-"+runtime.GOOS+"-"+runtime.GOARCH)
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s version: %v\n%s", bin, err, out)
	}
	if !strings.HasPrefix(string(out), "retrysafe v0.1.0 (revision ") {
		t.Errorf("retrysafe version printed %q, want it to start with \"retrysafe v0.1.0 (revision \"", out)
	}
	for _, args := range [][]string{{"--help"}, {"demo", "--help"}} {
		out, _ := exec.Command(bin, args...).CombinedOutput()
		if len(out) == 0 || strings.Contains(string(out), "go run") {
			t.Errorf("retrysafe %s says %q; a release binary's help names the binary, never \"go run\"", strings.Join(args, " "), out)
		}
	}
	sums, err := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
	if err != nil || !strings.Contains(string(sums), filepath.Base(bin)) {
		t.Errorf("SHA256SUMS = %q, %v: want a line for %s", sums, err, filepath.Base(bin))
	}
}
