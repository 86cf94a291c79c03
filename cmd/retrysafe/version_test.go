package main

import (
	"bytes"
	"context"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionLine(t *testing.T) {
	t.Parallel()
	info := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.time", Value: "2026-11-30T20:00:00Z"}, {Key: "vcs.modified", Value: "true"},
	}}
	for name, tc := range map[string]struct {
		info *debug.BuildInfo
		ok   bool
		want string
	}{
		"release": {info, true, "retrysafe v1.2.3 (revision abc123, modified, 2026-11-30T20:00:00Z) go1.26.8"},
		"devel":   {&debug.BuildInfo{GoVersion: "go1.26.8"}, true, "retrysafe (devel) go1.26.8"},
		"no info": {nil, false, "retrysafe (no build information)"},
	} {
		if got := versionLine(tc.info, tc.ok); got != tc.want {
			t.Errorf("%s: got %q, want %q", name, got, tc.want)
		}
	}
}

func TestVersionCommand(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), args, &stdout, &stderr); code != 0 || !strings.HasPrefix(stdout.String(), "retrysafe ") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, stdout.String(), stderr.String())
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"version", "extra"}, &stdout, &stderr); code != 2 {
		t.Errorf("version extra: exit %d, want 2", code)
	}
}

func TestVersionStamped(t *testing.T) {
	t.Parallel()
	devel := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}
	vcs := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}}}
	// What the go command records for a build from a checkout whose commit
	// has no tag of the module (yet) when it reads VCS information.
	pseudo := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-20261201120000-abc123abc123"}, Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}}}
	for name, tc := range map[string]struct {
		info     *debug.BuildInfo
		ok       bool
		ver, rev string
		want     string
	}{
		"stamped local build": {devel, true, "v0.4.0-3-gdeadbee", "deadbeef", "retrysafe v0.4.0-3-gdeadbee (revision deadbeef) go1.26.8"},
		"not stamped":         {devel, true, "", "", "retrysafe (devel) go1.26.8"},
		"stamped release over a VCS pseudo-version": {pseudo, true, "v0.1.0", "abc123", "retrysafe v0.1.0 (revision abc123) go1.26.8"},
		"revision of the build info wins":           {vcs, true, "", "fff", "retrysafe v1.2.3 (revision abc123) go1.26.8"},
		"no info":                                   {nil, false, "v9", "fff", "retrysafe (no build information)"},
	} {
		if got := versionLine(stamped(tc.info, tc.ok, tc.ver, tc.rev)); got != tc.want {
			t.Errorf("%s: got %q, want %q", name, got, tc.want)
		}
	}
	if devel.Main.Version != "(devel)" || len(devel.Settings) != 0 {
		t.Errorf("stamped changed its argument: %+v", devel)
	}
}
