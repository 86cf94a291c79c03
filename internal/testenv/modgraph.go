package testenv

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// ModuleGraph returns the module paths of `go list -m all` run with
// GOWORK=off for the module of the test's directory: the module graph that a
// program requiring only that module sees (the repository's go.work and the
// sibling modules it lists do not count). Tests use it to prove which drivers
// a module does not pull.
//
// The siblings are required at the version of the next release, which no
// public proxy serves yet: their go.mod files come, at that version, from a
// module proxy written into the test's temporary directory from the working
// tree (go.mod files are all that a module graph needs), into a module cache
// of the test's own, and with copies of go.mod and go.sum, so that nothing
// of the machine's module cache or of the tree changes (docs/releasing.md).
func ModuleGraph(t testing.TB) []string {
	t.Helper()
	type module struct{ Path, GoMod string }
	var mods []module
	dec := json.NewDecoder(bytes.NewReader(goOutput(t, nil, "list", "-m", "-json")))
	for dec.More() {
		var m module
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("go list -m -json: %v", err)
		}
		mods = append(mods, m)
	}
	var work struct {
		Replace []struct {
			Old struct{ Path, Version string }
		}
	}
	if err := json.Unmarshal(goOutput(t, nil, "work", "edit", "-json"), &work); err != nil {
		t.Fatalf("go work edit -json: %v", err)
	}
	versions := map[string]string{}
	for _, r := range work.Replace {
		if r.Old.Version != "" {
			versions[r.Old.Path] = r.Old.Version
		}
	}

	tmp := t.TempDir()
	proxy := filepath.Join(tmp, "proxy")
	for _, m := range mods {
		v, ok := versions[m.Path]
		if !ok {
			continue
		}
		gomod, err := os.ReadFile(m.GoMod)
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(proxy, filepath.FromSlash(m.Path), "@v")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, data := range map[string]string{
			"list":      v + "\n",
			v + ".info": `{"Version":"` + v + `"}`,
			v + ".mod":  string(gomod),
		} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}

	// The module of the test's directory, with copies of its go.mod and
	// go.sum that the go command may complete.
	here := strings.TrimSpace(string(goOutput(t, []string{"GOWORK=off"}, "env", "GOMOD")))
	modfile := filepath.Join(tmp, "go.mod")
	for _, ext := range []string{".mod", ".sum"} {
		data, err := os.ReadFile(strings.TrimSuffix(here, ".mod") + ext)
		if err != nil && !(ext == ".sum" && os.IsNotExist(err)) {
			t.Fatal(err)
		}
		if err := os.WriteFile(strings.TrimSuffix(modfile, ".mod")+ext, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cache := strings.TrimSpace(string(goOutput(t, nil, "env", "GOMODCACHE")))
	upstream := strings.TrimSpace(string(goOutput(t, nil, "env", "GOPROXY")))
	out := goOutput(t, []string{
		"GOWORK=off", "GOFLAGS=-modcacherw", "GOMODCACHE=" + filepath.Join(tmp, "modcache"),
		"GONOSUMDB=github.com/retrysafe",
		"GOPROXY=file://" + filepath.ToSlash(proxy) + ",file://" + filepath.ToSlash(filepath.Join(cache, "cache", "download")) + "," + upstream,
	}, "list", "-m", "-mod=mod", "-modfile="+modfile, "-f", "{{.Path}}", "all")
	return strings.Fields(string(out))
}

// goOutput runs the go command with args and env added to the test's
// environment, and returns its standard output; it fails t if the command
// fails.
func goOutput(t testing.TB, env []string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s go %s: %v\n%s", strings.Join(env, " "), strings.Join(args, " "), err, stderr.Bytes())
	}
	return out
}
