package main

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/mod/modfile"
)

// TestNoReplace: no go.mod of the repository has a replace directive (a
// user's build ignores it, and go install …@version refuses it), and each
// requires its siblings at the version go.work replaces with their
// directories, the one the next release tags (docs/releasing.md).
func TestNoReplace(t *testing.T) {
	t.Parallel()
	root, err := repoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	mods, version, err := modules(root)
	if err != nil {
		t.Fatal(err)
	}
	if version == "" {
		t.Fatalf("go.work replaces no version of %s with its directory", mods[0].path)
	}
	ours := map[string]bool{}
	for _, m := range mods {
		ours[m.path] = true
	}
	for _, m := range mods {
		name := filepath.Join(root, filepath.FromSlash(m.dir), "go.mod")
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := modfile.Parse(name, data, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range f.Replace {
			t.Errorf("%s/go.mod replaces %s", m.dir, r.Old.Path)
		}
		for _, r := range f.Require {
			if ours[r.Mod.Path] && r.Mod.Version != version {
				t.Errorf("%s/go.mod requires %s %s, want %s (the version go.work replaces)", m.dir, r.Mod.Path, r.Mod.Version, version)
			}
		}
	}
}
