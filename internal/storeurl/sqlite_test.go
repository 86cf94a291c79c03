package storeurl_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe/internal/storeurl"
)

// TestOpenSQLiteMustExist: with MustExist a missing SQLite file is an
// error matching fs.ErrNotExist that names the path, and no file is
// created; without it the file is created.
func TestOpenSQLiteMustExist(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "typo.db")
	_, _, err := storeurl.OpenWith(context.Background(), "sqlite:"+path, storeurl.Options{MustExist: true})
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), path+" does not exist") {
		t.Fatalf("err = %v, want one saying %s does not exist", err, path)
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the file was created: %v", err)
	}
	s, closeFn, err := storeurl.OpenWith(context.Background(), "sqlite:"+path, storeurl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, s)
	closeFn()
	// Now it exists: MustExist opens it.
	s, closeFn, err = storeurl.OpenWith(context.Background(), "sqlite:"+path, storeurl.Options{MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, s)
	closeFn()
}

// TestOpenSQLiteBadPath: a path SQLite cannot open is reported with the
// path and the reason, not as "unable to open database file (14)", and
// nothing is created.
func TestOpenSQLiteBadPath(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		path string
		want string
	}{
		"missing directory":   {filepath.Join(dir, "no", "such", "x.db"), "directory " + filepath.Join(dir, "no", "such") + " does not exist"},
		"file as a directory": {filepath.Join(file, "x.db"), file + " is not a directory"},
		"a directory":         {dir, dir + " is a directory, not an SQLite file"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, mustExist := range []bool{false, true} {
				_, _, err := storeurl.OpenWith(context.Background(), "sqlite:"+tc.path, storeurl.Options{MustExist: mustExist})
				if err == nil {
					t.Fatal("Open succeeded")
				}
				if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "(14)") {
					t.Errorf("MustExist %v: error %q, want it to say %q", mustExist, err, tc.want)
				}
			}
			if _, err := os.Stat(filepath.Join(dir, "no")); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("a directory was created: %v", err)
			}
		})
	}
}

// TestOpenSQLiteRelativePathShown: a relative path is shown with its
// absolute form, since it depends on the working directory.
func TestOpenSQLiteRelativePathShown(t *testing.T) {
	// Not parallel: changes the working directory.
	dir := t.TempDir()
	t.Chdir(dir)
	_, _, err := storeurl.OpenWith(context.Background(), "sqlite:typo.db", storeurl.Options{MustExist: true})
	if err == nil || !strings.Contains(err.Error(), "typo.db ("+filepath.Join(dir, "typo.db")+")") {
		t.Fatalf("err = %v, want the relative path and its absolute form", err)
	}
}
