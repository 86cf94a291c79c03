package main

import (
	"context"
	"flag"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// documentedSecret is the Secret that deployment.yaml's header says to
// create with kubectl create secret generic NAME --from-literal=KEY=....
type secretStep struct {
	name string
	keys map[string]bool
}

func documentedSecret(t *testing.T) secretStep {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "kubernetes", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The comment's lines, joined where they continue with a backslash.
	var cmd strings.Builder
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "#"); ok {
			cmd.WriteString(strings.TrimSuffix(strings.TrimSpace(rest), "\\") + " ")
		}
	}
	m := regexp.MustCompile(`kubectl create secret generic ([a-z0-9-]+)((?:\s+--from-(?:literal|file)=[a-z0-9-]+=(?:'[^']*'|"[^"]*"|\S+))+)`).FindStringSubmatch(cmd.String())
	if m == nil {
		t.Fatal("deploy/kubernetes/deployment.yaml's header has no \"kubectl create secret generic NAME --from-literal=KEY=...\" step")
	}
	s := secretStep{name: m[1], keys: map[string]bool{}}
	for _, k := range regexp.MustCompile(`--from-(?:literal|file)=([a-z0-9-]+)=`).FindAllStringSubmatch(m[2], -1) {
		s.keys[k[1]] = true
	}
	return s
}

// TestSystemdArgs: the unit's ExecStart, expanded as systemd does with the
// shipped environment file (${VAR} one word, $VAR split at spaces), is a
// valid serve command line, and RETRYSAFE_ARGS carries any other flag
// (--config among them).
func TestSystemdArgs(t *testing.T) {
	t.Parallel()
	unit, err := os.ReadFile(filepath.Join("..", "..", "deploy", "retrysafe.service"))
	if err != nil {
		t.Fatal(err)
	}
	envFile, err := os.ReadFile(filepath.Join("..", "..", "deploy", "retrysafe.env"))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(string(envFile), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			env[k] = v
		}
	}
	if _, ok := env["RETRYSAFE_ARGS"]; !ok {
		t.Fatal("deploy/retrysafe.env does not set RETRYSAFE_ARGS")
	}
	execStart := ""
	for _, line := range strings.Split(strings.ReplaceAll(string(unit), "\\\n", " "), "\n") {
		if rest, ok := strings.CutPrefix(line, "ExecStart="); ok {
			execStart = rest
		}
	}
	words := strings.Fields(execStart)
	if len(words) < 2 || words[1] != "serve" {
		t.Fatalf("ExecStart=%s: want retrysafe serve", execStart)
	}
	for name, tc := range map[string]struct {
		args       string
		wantConfig string
		wantKey    bool
	}{
		"as shipped":   {env["RETRYSAFE_ARGS"], "", false},
		"more flags":   {"--config /etc/retrysafe/routes.yaml --require-key", "/etc/retrysafe/routes.yaml", true},
		"flag=value":   {"--config=/etc/retrysafe/routes.yaml", "/etc/retrysafe/routes.yaml", false},
		"extra spaces": {"  --require-key   ", "", true},
	} {
		env := maps(env, "RETRYSAFE_ARGS", tc.args)
		var args []string
		for _, w := range words[2:] {
			switch {
			case strings.HasPrefix(w, "${") && strings.HasSuffix(w, "}"):
				args = append(args, env[w[2:len(w)-1]]) // one word, even empty
			case strings.HasPrefix(w, "$"):
				args = append(args, strings.Fields(env[w[1:]])...)
			default:
				args = append(args, w)
			}
		}
		var o serveOptions
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		o.flags(fs)
		if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
			t.Errorf("%s: serve %q: %v (extra %q)", name, args, err, fs.Args())
			continue
		}
		if o.config != tc.wantConfig || o.requireKey != tc.wantKey || o.store != env["RETRYSAFE_STORE"] || o.upstream != env["RETRYSAFE_UPSTREAM"] {
			t.Errorf("%s: serve %q: config %q, require-key %v, store %q, upstream %q", name, args, o.config, o.requireKey, o.store, o.upstream)
		}
	}
}

// maps returns a copy of m with k set to v.
func maps(m map[string]string, k, v string) map[string]string {
	c := make(map[string]string, len(m)+1)
	for k, v := range m {
		c[k] = v
	}
	c[k] = v
	return c
}

// dockerfileEnv returns the ENV settings of deploy/Dockerfile, as
// NAME=VALUE.
func dockerfileEnv(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "ENV "); ok {
			env = append(env, strings.Fields(rest)...)
		}
	}
	return env
}

// dockerfileHealthcheck returns the HEALTHCHECK's exec form.
func dockerfileHealthcheck(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^HEALTHCHECK [^\n]*?CMD (\[.*\])$`).FindStringSubmatch(strings.ReplaceAll(string(data), "\\\n", " "))
	if m == nil {
		t.Fatal("deploy/Dockerfile has no HEALTHCHECK ... CMD [...]")
	}
	var hc []string
	for _, w := range regexp.MustCompile(`"([^"]*)"`).FindAllStringSubmatch(m[1], -1) {
		hc = append(hc, w[1])
	}
	if len(hc) < 2 || hc[0] != "/retrysafe" || hc[1] != "health" {
		t.Fatalf("HEALTHCHECK %q: want /retrysafe health", hc)
	}
	return hc[1:]
}

// TestHealthcheckFollowsAdminAddress starts the binary with the
// Dockerfile's CMD and ENV, its admin address moved by
// RETRYSAFE_ADMIN_LISTEN as a user would (docker run -e), and runs the
// Dockerfile's HEALTHCHECK with the same environment: it asks the moved
// port and passes.
func TestHealthcheckFollowsAdminAddress(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	env := dockerfileEnv(t)
	if !strings.Contains(strings.Join(env, " "), adminListenEnv+"=") {
		t.Fatalf("Dockerfile ENV %q does not set %s", env, adminListenEnv)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	admin := ln.Addr().String()
	ln.Close()
	env = append(env, adminListenEnv+"="+admin) // the later one wins, as with docker run -e

	cmd := onFreePorts(dockerfileCommand(t))
	for i, a := range cmd {
		cmd[i] = strings.Replace(a, "sqlite:/data/", "sqlite:"+t.TempDir()+"/", 1)
	}
	if port := startExact(t, bin, cmd, env...); port != admin[strings.LastIndex(admin, ":")+1:] {
		t.Fatalf("serve's admin listener is on port %s, want %s from %s", port, admin, adminListenEnv)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hc := exec.CommandContext(ctx, bin, dockerfileHealthcheck(t)...)
	hc.Env = append(os.Environ(), env...)
	if out, err := hc.CombinedOutput(); err != nil {
		t.Fatalf("HEALTHCHECK %q with %s=%s: %v\n%s", hc.Args, adminListenEnv, admin, err, out)
	}
}

func TestAdminURLOf(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"0.0.0.0:9090":   "http://127.0.0.1:9090",
		":9191":          "http://127.0.0.1:9191",
		"[::]:9090":      "http://[::1]:9090",
		"127.0.0.1:9090": "http://127.0.0.1:9090",
		"10.1.2.3:9090":  "http://10.1.2.3:9090",
		"off":            "",
		"0.0.0.0:0":      "",
		"9090":           "",
	} {
		got, err := adminURLOf(in)
		if got != want || (want == "") != (err != nil) {
			t.Errorf("adminURLOf(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}
