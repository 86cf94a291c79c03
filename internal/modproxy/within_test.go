package main

import "testing"

// TestWithin: a module's zip holds its own files and none of a module
// nested in it, as the public proxy's zip of a tag would.
func TestWithin(t *testing.T) {
	t.Parallel()
	moduleDirs := map[string]bool{".": true, "store/sqlite": true, "bench": true, "bench/peers": true, "x/testdata/mod": true}
	for name, tc := range map[string]struct {
		file, dir, rel string
		ok             bool
	}{
		"root file":                 {"go.mod", ".", "go.mod", true},
		"root package":              {"store/memory/memory.go", ".", "store/memory/memory.go", true},
		"nested module, from root":  {"store/sqlite/store.go", ".", "", false},
		"nested module, own":        {"store/sqlite/store.go", "store/sqlite", "store.go", true},
		"nested module's subdir":    {"store/sqlite/migrations/0001.sql", "store/sqlite", "migrations/0001.sql", true},
		"module nested in a nested": {"bench/peers/peers.go", "bench", "", false},
		"a go.mod under testdata":   {"x/testdata/mod/a.go", ".", "", false},
		"another module's prefix":   {"store/sqlitex/a.go", "store/sqlite", "", false},
	} {
		rel, ok := within(tc.file, tc.dir, moduleDirs)
		if rel != tc.rel || ok != tc.ok {
			t.Errorf("%s: within(%q, %q) = %q, %v; want %q, %v", name, tc.file, tc.dir, rel, ok, tc.rel, tc.ok)
		}
	}
}
