package retrysafe_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe/internal/testenv"
)

// TestCoreImportsOnlyStdlib fails if the root package (or package webhook,
// which promises the same) depends on anything
// outside the standard library and the root module's own packages
// (internal/canonicaljson, internal/scopehash and the like): drivers, clients and
// metrics libraries belong in subpackages.
func TestCoreImportsOnlyStdlib(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}} {{.Module.Path}}{{end}}", ".", "./webhook").CombinedOutput()
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

// TestNoUnsafeInProduction fails if a Go file outside tests, in any module
// of the repository, imports "unsafe": whether memory stays valid must
// never rest on a comment. It reads the files themselves rather than asking
// go list, so that files behind build tags count too. Generated files
// count like any other.
func TestNoUnsafeInProduction(t *testing.T) {
	t.Parallel()
	files := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != "." && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir // what the go command ignores too
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		files++
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == "unsafe" {
				t.Errorf("%s imports unsafe", path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("read only %d Go files: is the test running from the repository root?", files)
	}
}

// TestTestsUseOwnTransport fails if a test or a package under internal/,
// in any module of the repository, sends requests through
// http.DefaultTransport: with
// http.DefaultClient, http.Get, http.Head, http.Post or http.PostForm, or
// the transport itself. httptest.Server.Close closes that transport's
// idle connections, which fails a request that a parallel test is just
// sending through it ("http: CloseIdleConnections called"): tests use
// testenv.HTTPClient, or a transport of their own (a Clone of the default
// is fine). Runnable examples may: they show what users write, and run
// after the package's parallel tests.
func TestTestsUseOwnTransport(t *testing.T) {
	t.Parallel()
	shared := map[string]bool{"DefaultClient": true, "DefaultTransport": true, "Get": true, "Head": true, "Post": true, "PostForm": true}
	files := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != "." && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		// Tests, and the test-support packages under internal/ (the
		// torture harness, the adapters' black-box suite, …).
		if !strings.HasSuffix(path, "_test.go") && !(strings.HasPrefix(path, "internal/") && strings.HasSuffix(path, ".go")) {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		files++
		httpName := "" // the name net/http is imported under
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == "net/http" {
				httpName = "http"
				if imp.Name != nil {
					httpName = imp.Name.Name
				}
			}
		}
		if httpName == "" {
			return nil
		}
		for _, decl := range f.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && strings.HasPrefix(fn.Name.Name, "Example") {
				continue
			}
			ast.Inspect(decl, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.SelectorExpr:
					if x, ok := n.X.(*ast.Ident); ok && x.Name == httpName && shared[n.Sel.Name] {
						t.Errorf("%s: http.%s: send tests' requests with testenv.HTTPClient (see this test's comment)", fset.Position(n.Pos()), n.Sel.Name)
					}
				case *ast.CallExpr:
					// http.DefaultTransport.(*http.Transport).Clone() is a
					// transport of the test's own: skip its operand.
					if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Clone" {
						if ta, ok := sel.X.(*ast.TypeAssertExpr); ok {
							if inner, ok := ta.X.(*ast.SelectorExpr); ok && inner.Sel.Name == "DefaultTransport" {
								return false
							}
						}
					}
				}
				return true
			})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("read only %d test files: is the test running from the repository root?", files)
	}
}
