package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestGoGet is what a user of a release does, against a module proxy written
// from this working tree: in a new module outside the repository, go get a
// store, build and run the README's library example, and go install the
// command. Our modules come from that proxy only (a module cache of the
// test's own), everything else from the machine's module cache or the usual
// proxy. No module of ours may carry a replace (go install refuses one), and
// every requirement between them must be one that the release provides.
func TestGoGet(t *testing.T) {
	if testing.Short() && os.Getenv("CI") != "true" {
		t.Skip("builds the command from module zips (about a minute); -short")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	root, err := repoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	version, err := write(filepath.Join(tmp, "proxy"), root, "")
	if err != nil {
		t.Fatal(err)
	}
	goenv := func(name string) string {
		out, err := exec.Command("go", "env", name).Output()
		if err != nil {
			t.Fatalf("go env %s: %v", name, err)
		}
		return strings.TrimSpace(string(out))
	}
	env := append(os.Environ(),
		"GOWORK=off",
		// -trimpath: the build cache keys a package built without it by
		// its directory, which is in this test's own module cache. With
		// CGO_ENABLED=0 as well, the packages are those that
		// deploy/release.sh and deploy/build-image.sh compile, so that one
		// warm build cache serves all three.
		"GOFLAGS=-mod=mod -modcacherw -trimpath",
		"CGO_ENABLED=0",
		"GOMODCACHE="+filepath.Join(tmp, "modcache"),
		"GONOSUMDB=github.com/retrysafe",
		"GOPROXY=file://"+filepath.ToSlash(filepath.Join(tmp, "proxy"))+
			",file://"+filepath.ToSlash(filepath.Join(goenv("GOMODCACHE"), "cache", "download"))+
			","+goenv("GOPROXY"),
		"GOBIN="+filepath.Join(tmp, "bin"),
		"GOTOOLCHAIN=local",
	)
	work := filepath.Join(tmp, "app")
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(dir string, name string, args ...string) string {
		t.Helper()
		start := time.Now()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir, cmd.Env = dir, env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, stdout.Bytes(), stderr.Bytes())
		}
		t.Logf("%s %s (%v)", name, strings.Join(args, " "), time.Since(start).Round(100*time.Millisecond))
		return stdout.String()
	}

	program, err := readmeProgram(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "main.go"), []byte(program), 0o644); err != nil {
		t.Fatal(err)
	}
	run(work, "go", "mod", "init", "example.com/app")
	run(work, "go", "get", "github.com/retrysafe/retrysafe/store/sqlite@"+version)
	run(work, "go", "build", "-o", "app", ".")
	out := run(work, filepath.Join(work, "app"))
	want := []string{
		`201 replayed="" {"charge":1}`,
		`201 replayed="true" {"charge":1}`,
		`400 without a key`,
		`charges=1`,
	}
	if got := strings.Split(strings.TrimSpace(out), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("README example printed\n%s\nwant\n%s", out, strings.Join(want, "\n"))
	}
	list := run(work, "go", "list", "-m", "all")
	if !strings.Contains(list, "github.com/retrysafe/retrysafe "+version+"\n") {
		t.Errorf("go list -m all in the new module does not hold github.com/retrysafe/retrysafe %s:\n%s", version, list)
	}

	run(work, "go", "install", "github.com/retrysafe/retrysafe/cmd/retrysafe@"+version)
	if v := run(work, filepath.Join(tmp, "bin", "retrysafe"), "version"); !strings.HasPrefix(v, "retrysafe "+version+" ") {
		t.Errorf("retrysafe version of the installed command = %q, want it to start with %q", v, "retrysafe "+version+" ")
	}
}

// readmeProgram returns a program made of the README's library example (the
// first Go block under "## Use it as a library"), so that the example cannot
// drift from what builds: a main function holds the example, with the ctx
// and createPayment it assumes, and its http.ListenAndServe serves a test
// server instead, sends a request twice with one key and once without, and
// prints what came back.
func readmeProgram(readme string) (string, error) {
	data, err := os.ReadFile(readme)
	if err != nil {
		return "", err
	}
	m := regexp.MustCompile("(?s)\n## Use it as a library\n.*?```go\n(.*?)```").FindSubmatch(data)
	if m == nil {
		return "", fmt.Errorf("%s: no ```go block under \"## Use it as a library\"", readme)
	}
	const serve = `http.ListenAndServe(":8080", `
	example := string(m[1])
	if strings.Count(example, serve) != 1 {
		return "", fmt.Errorf("%s: the library example calls %s) not exactly once", readme, serve)
	}
	example = strings.Replace(example, serve, `listenAndServe(`, 1)
	return `package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/sqlite"
)

var charges atomic.Int64

func createPayment(w http.ResponseWriter, r *http.Request) {
	n := charges.Add(1)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, ` + "`" + `{"charge":%d}` + "`" + `, n)
}

func listenAndServe(h http.Handler) error {
	srv := httptest.NewServer(h)
	defer srv.Close()
	for _, key := range []string{"k1", "k1", ""} {
		req, err := http.NewRequest("POST", srv.URL+"/payments", strings.NewReader(` + "`" + `{"amount":100}` + "`" + `))
		if err != nil {
			return err
		}
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		if key == "" {
			fmt.Printf("%d without a key\n", resp.StatusCode)
			continue
		}
		fmt.Printf("%d replayed=%q %s\n", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), body)
	}
	fmt.Printf("charges=%d\n", charges.Load())
	os.Exit(0)
	return nil
}

var _ = time.Second

func main() {
	ctx := context.Background()
` + example + `}
`, nil
}
