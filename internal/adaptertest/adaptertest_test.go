package adaptertest_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/adaptertest"
)

// middleware is the net/http middleware as an Adapter; mutate, when set,
// changes its Config first (to make a broken adapter of it).
type middleware struct {
	mutate func(*retrysafe.Config)
	bare   bool // no middleware at all: the handler alone
}

func (m middleware) Start(t *testing.T, cfg retrysafe.Config, h adaptertest.Handler) adaptertest.Client {
	var handler http.Handler = adaptertest.HTTPHandler(h)
	if !m.bare {
		if m.mutate != nil {
			m.mutate(&cfg)
		}
		mw, err := retrysafe.NewMiddleware(cfg)
		if err != nil {
			t.Fatal(err)
		}
		handler = mw(handler)
	}
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	return &adaptertest.HTTPClient{URL: srv.URL + "/payments", Client: srv.Client()}
}

// TestMiddleware: the net/http middleware, the adapter every other one is
// measured against, passes the suite.
func TestMiddleware(t *testing.T) {
	t.Parallel()
	adaptertest.Run(t, middleware{})
}

// mutants are broken adapters, run by TestMutant in a process of its own
// (the suite is meant to fail them); the name is ADAPTERTEST_MUTANT's
// value.
var mutants = map[string]adaptertest.Adapter{
	// The scope is dropped: every tenant shares one key space.
	"dropscope": middleware{mutate: func(c *retrysafe.Config) {
		c.Scope = func(*http.Request) (string, error) { return "", nil }
	}},
	// No idempotency at all.
	"bare": middleware{bare: true},
	// Stored responses lose their headers.
	"noheaders": middleware{mutate: func(c *retrysafe.Config) {
		c.StoreHeader = func(string) bool { return false }
	}},
}

// TestMutant runs the suite against the mutant ADAPTERTEST_MUTANT names;
// without it, it is skipped. TestSuiteFailsMutants runs it.
func TestMutant(t *testing.T) {
	name := os.Getenv("ADAPTERTEST_MUTANT")
	if name == "" {
		t.Skip("run by TestSuiteFailsMutants")
	}
	adaptertest.Run(t, mutants[name])
}

// TestSuiteFailsMutants: the suite fails each broken adapter in the
// scenarios that catch its defect, and passes the others (so a failure is
// the defect's, not the suite's).
func TestSuiteFailsMutants(t *testing.T) {
	t.Parallel()
	for name, fails := range map[string][]string{
		"dropscope": {"tenant_scope"},
		"bare":      {"replay", "mismatch", "in_flight", "required_key", "tenant_scope", "concurrency", "client_gone"},
		"noheaders": {"replay", "mismatch", "in_flight", "tenant_scope", "concurrency", "client_gone"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestMutant$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), "ADAPTERTEST_MUTANT="+name)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed mutant %s:\n%s", name, out)
			}
			for _, sc := range []string{"replay", "mismatch", "in_flight", "required_key", "tenant_scope", "concurrency", "client_gone"} {
				failed := strings.Contains(string(out), "--- FAIL: TestMutant/"+sc+" ")
				want := false
				for _, f := range fails {
					want = want || f == sc
				}
				if failed != want {
					t.Errorf("mutant %s: scenario %s failed = %v, want %v", name, sc, failed, want)
				}
			}
			if t.Failed() {
				t.Logf("output:\n%s", out)
			}
		})
	}
}
