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
	fmt.Fprintln(stdout, versionLine(debug.ReadBuildInfo()))
	return nil
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
