// Command modproxy writes a file-based Go module proxy that serves every
// module of this repository's go.work, as the working tree has it, at one
// version:
//
//	go run ./internal/modproxy [-version VERSION] DIR
//
// The version is, unless -version says another, the one go.work's replace
// directives give the repository's modules: the version that every go.mod
// requires of its siblings, which the next release tags (deploy/release.sh).
// With GOPROXY=file://DIR,… the go command then fetches the repository's
// modules at that version from DIR, as it would fetch a release from the
// public proxy, and everything else from the proxies after it. .ci/run checks
// each module on its own (GOWORK=off) against such a proxy, and the test in
// this package installs the command and builds the README's example from one,
// in a module outside the repository (docs/releasing.md).
//
// A module's zip holds the files that git lists in its directory (tracked,
// and untracked ones that .gitignore does not ignore), minus those of the
// modules nested in it, as a tag's zip on the public proxy would.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

func main() {
	version := flag.String("version", "", "the version to serve every module at (default: the one go.work replaces them at)")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: modproxy [-version VERSION] DIR\n\nWrites a file-based module proxy of every module of the repository's go.work to DIR.")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	root, err := repoRoot(".")
	if err == nil {
		_, err = write(flag.Arg(0), root, *version)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "modproxy:", err)
		os.Exit(1)
	}
}

// repoRoot returns the directory of the go.work that holds dir.
func repoRoot(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.work")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.work in %s or above it", dir)
		}
	}
}

// mod is one module of the workspace: its path and its directory relative
// to the repository's root ("." for the root module), slash-separated.
type mod struct {
	path, dir string
}

// modules lists the modules of root's go.work, and the version at which
// go.work replaces the first of them (the root module) with its directory.
func modules(root string) (mods []mod, version string, err error) {
	data, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		return nil, "", err
	}
	work, err := modfile.ParseWork("go.work", data, nil)
	if err != nil {
		return nil, "", err
	}
	for _, u := range work.Use {
		dir := path.Clean(filepath.ToSlash(u.Path))
		gomod, err := os.ReadFile(filepath.Join(root, dir, "go.mod"))
		if err != nil {
			return nil, "", err
		}
		p := modfile.ModulePath(gomod)
		if p == "" {
			return nil, "", fmt.Errorf("%s/go.mod names no module", dir)
		}
		mods = append(mods, mod{path: p, dir: dir})
	}
	if len(mods) == 0 {
		return nil, "", fmt.Errorf("go.work in %s uses no module", root)
	}
	for _, r := range work.Replace {
		if r.Old.Path == mods[0].path && r.Old.Version != "" {
			version = r.Old.Version
		}
	}
	return mods, version, nil
}

// gitFiles lists the files of root's working tree that a commit of it would
// hold: tracked ones that still exist and untracked ones not ignored.
func gitFiles(root string) ([]string, error) {
	cmd := exec.Command("git", "ls-files", "--cached", "--others", "--exclude-standard", "-z")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files in %s (the proxy is built from a git checkout): %v: %s", root, err, stderr.Bytes())
	}
	var files []string
	for _, f := range strings.Split(string(out), "\x00") {
		if f == "" {
			continue
		}
		if fi, err := os.Lstat(filepath.Join(root, f)); err != nil || !fi.Mode().IsRegular() {
			continue // deleted in the working tree, or a symbolic link (not allowed in a module zip)
		}
		files = append(files, f)
	}
	return files, nil
}

// write writes a file-based module proxy to out that serves every module of
// root's go.work at version, or at the version go.work replaces them at if
// version is empty, and returns that version.
func write(out, root, version string) (string, error) {
	mods, replaced, err := modules(root)
	if err != nil {
		return "", err
	}
	if version == "" {
		version = replaced
	}
	if version == "" {
		return "", fmt.Errorf("go.work in %s replaces no version of %s; say one with -version", root, mods[0].path)
	}
	files, err := gitFiles(root)
	if err != nil {
		return "", err
	}
	// Every directory with a go.mod starts a module of its own, whose files
	// no enclosing module holds (listed in go.work or not, e.g. testdata).
	moduleDirs := map[string]bool{}
	for _, f := range files {
		if path.Base(f) == "go.mod" {
			moduleDirs[path.Dir(f)] = true
		}
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		return "", err
	}
	for _, m := range mods {
		var zf []zip.File
		for _, f := range files {
			if rel, ok := within(f, m.dir, moduleDirs); ok {
				zf = append(zf, file{abs: filepath.Join(root, filepath.FromSlash(f)), rel: rel})
			}
		}
		escaped, err := module.EscapePath(m.path)
		if err != nil {
			return "", err
		}
		dir := filepath.Join(out, filepath.FromSlash(escaped), "@v")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", err
		}
		var z bytes.Buffer
		if err := zip.Create(&z, module.Version{Path: m.path, Version: version}, zf); err != nil {
			return "", err
		}
		gomod, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(m.dir), "go.mod"))
		if err != nil {
			return "", err
		}
		for name, data := range map[string][]byte{
			"list":            []byte(version + "\n"),
			version + ".info": info,
			version + ".mod":  gomod,
			version + ".zip":  z.Bytes(),
		} {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
				return "", err
			}
		}
	}
	return version, nil
}

// within reports whether the repository file f belongs to the module in
// directory dir, and f's path relative to dir: f is under dir and under no
// module directory nested in dir.
func within(f, dir string, moduleDirs map[string]bool) (string, bool) {
	rel := f
	if dir != "." {
		var ok bool
		if rel, ok = strings.CutPrefix(f, dir+"/"); !ok {
			return "", false
		}
	}
	for d := path.Dir(f); d != dir && d != "."; d = path.Dir(d) {
		if moduleDirs[d] {
			return "", false
		}
	}
	return rel, true
}

// file is a file of the working tree as zip.Create reads it.
type file struct {
	abs, rel string
}

func (f file) Path() string                 { return f.rel }
func (f file) Lstat() (os.FileInfo, error)  { return os.Lstat(f.abs) }
func (f file) Open() (io.ReadCloser, error) { return os.Open(f.abs) }
