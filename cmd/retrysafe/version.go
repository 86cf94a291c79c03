package main

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"
)

// runVersion prints the module version and the VCS revision the binary was
// built from (from its build information), and the Go version.
func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", "", "Print the module version and the VCS revision of this binary.", "  retrysafe version\n  retrysafe --version", stdout, stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	info, ok := debug.ReadBuildInfo()
	fmt.Fprintln(stdout, versionLine(stamped(info, ok, buildVersion, buildRevision)))
	return nil
}

// buildVersion and buildRevision are set by release builds
// (deploy/release.sh, deploy/build-image.sh) with
// -ldflags "-X main.buildVersion=v1.2.3 -X main.buildRevision=COMMIT":
// the go command records no VCS information in a build from a git worktree
// or in workspace mode, "(devel)" as the version of a local build, and a
// pseudo-version for a commit that has no tag of the module yet (a release
// is built before its tags are pushed). A binary installed with
// "go install …/cmd/retrysafe@v0.1.0" has its version in the build
// information and nothing stamped.
var buildVersion, buildRevision string

// stamped returns info with the stamped version, which a release build sets
// on purpose and so wins, and the stamped revision where the build
// information has none. It does not change info.
func stamped(info *debug.BuildInfo, ok bool, version, revision string) (*debug.BuildInfo, bool) {
	if !ok || (version == "" && revision == "") {
		return info, ok
	}
	c := *info
	if version != "" {
		c.Main.Version = version
	}
	if revision != "" {
		for _, s := range c.Settings {
			if s.Key == "vcs.revision" {
				return &c, ok
			}
		}
		c.Settings = append(append([]debug.BuildSetting(nil), c.Settings...), debug.BuildSetting{Key: "vcs.revision", Value: revision})
	}
	return &c, ok
}

// versionLine describes a build: "retrysafe VERSION (revision REV[, modified], TIME) GO".
func versionLine(info *debug.BuildInfo, ok bool) string {
	if !ok {
		return "retrysafe (no build information)"
	}
	version := info.Main.Version
	if version == "" {
		version = "(devel)"
	}
	var rev, when, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			when = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = ", modified"
			}
		}
	}
	line := "retrysafe " + version
	if rev != "" {
		line += " (revision " + rev + modified
		if when != "" {
			line += ", " + when
		}
		line += ")"
	}
	return line + " " + info.GoVersion
}
