package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/internal/testenv"
)

// browser is a client that keeps cookies per Host (as a browser keeps them
// per origin) and follows no redirects.
func browser() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// pageAs sends method base+path with the Host and Origin that a page
// served under host would send, and returns the status and body.
func pageAs(t *testing.T, c *http.Client, method, base, path, host string, form url.Values) (int, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, base+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	req.Host = host
	req.Header.Set("Origin", "http://"+host)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s (Host %s): %v", method, path, host, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

var csrfInput = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// rebindingAttack plays a DNS-rebinding page against the operator page at
// base: under the attacker's name (rebound to 127.0.0.1) it reads the
// record list and the delete form, then posts the delete. Every step must
// get 421, and the record must survive; under the loopback names the page
// works.
func rebindingAttack(t *testing.T, base, key string) {
	t.Helper()
	port := base[strings.LastIndex(base, ":"):]
	attacker := browser()
	for _, host := range []string{"rebind.attacker.example" + port, "rebind.attacker.example"} {
		code, body := pageAs(t, attacker, "GET", base, "/ui/records", host, nil)
		if code != http.StatusMisdirectedRequest || strings.Contains(body, key) || !strings.Contains(body, "misdirected-host") {
			t.Errorf("GET /ui/records with Host %s: %d %s, want 421 misdirected-host without the record", host, code, body)
		}
		_, confirm := pageAs(t, attacker, "GET", base, "/ui/delete?scope=&key="+url.QueryEscape(key), host, nil)
		csrf := ""
		if m := csrfInput.FindStringSubmatch(confirm); m != nil {
			csrf = m[1]
		}
		code, _ = pageAs(t, attacker, "POST", base, "/ui/delete", host, url.Values{"csrf": {csrf}, "scope": {""}, "key": {key}, "confirm": {"yes"}})
		if code != http.StatusMisdirectedRequest {
			t.Errorf("POST /ui/delete with Host %s: %d, want 421", host, code)
		}
	}
	operator := browser()
	for _, host := range []string{"127.0.0.1" + port, "localhost" + port} {
		if code, body := pageAs(t, operator, "GET", base, "/ui/records", host, nil); code != 200 || !strings.Contains(body, key) {
			t.Errorf("GET /ui/records with Host %s: %d, want 200 with the record %s (did the attack delete it?)", host, code, key)
		}
	}
}

// TestDNSRebindingEndToEnd runs the attack against the built binary:
// serve's admin listener and the standalone ui command. --admin-host adds
// a name.
func TestDNSRebindingEndToEnd(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	up := newChargeUpstream(t, nil)
	db := "sqlite:" + testenv.SQLitePath(t)
	gw := startServe(t, bin, "--upstream", up.URL, "--store", db, "--admin-host", "ops.example.test")
	if a, err := post(t.Context(), gw.url+"/payments", "card-4242", `{"card":"4242424242424242"}`); err != nil || a.status != 201 {
		t.Fatalf("POST: %v %+v", err, a)
	}
	rebindingAttack(t, gw.admin, "card-4242")
	port := gw.admin[strings.LastIndex(gw.admin, ":"):]
	if code, body := pageAs(t, browser(), "GET", gw.admin, "/ui/records", "ops.example.test"+port, nil); code != 200 || !strings.Contains(body, "card-4242") {
		t.Errorf("GET /ui/records with the --admin-host name: %d", code)
	}
	// Probes answer whatever the Host (the kubelet sends the pod IP).
	if code, _ := pageAs(t, browser(), "GET", gw.admin, "/readyz", "payments.svc.cluster.local"+port, nil); code != 200 {
		t.Errorf("/readyz with a service name as Host: %d", code)
	}

	// The standalone page on the same store.
	ui := startUI(t, bin, "--store", db)
	rebindingAttack(t, ui, "card-4242")
}

// startUI runs `retrysafe ui` on a free loopback port with args and
// returns its base URL.
func startUI(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"ui", "--listen", "127.0.0.1:0", "--log-format", "text"}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if _, rest, ok := strings.Cut(sc.Text(), "operator page on "); ok {
			go func() { _, _ = io.Copy(io.Discard, stdout) }()
			return strings.TrimSuffix(strings.Fields(rest)[0], "/ui/")
		}
	}
	t.Fatalf("ui printed no address; stderr:\n%s", stderr)
	return ""
}

// dockerfileCommand returns the image's default command: ENTRYPOINT's
// arguments after the binary, then CMD (both JSON arrays).
func dockerfileCommand(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(data), "\\\n", " ")
	var cmd []string
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(line, "CMD ")
		if !ok {
			continue
		}
		if err := json.Unmarshal([]byte(strings.TrimSpace(rest)), &cmd); err != nil {
			t.Fatalf("Dockerfile CMD %s: %v", rest, err)
		}
	}
	if len(cmd) == 0 || cmd[0] != "serve" {
		t.Fatalf("Dockerfile CMD %q: want serve first", cmd)
	}
	return cmd
}

var listenArg = regexp.MustCompile(`^(--(?:admin-)?listen[= ]?|RETRYSAFE_ADMIN_LISTEN=)?([0-9.]+|\[[0-9a-f:]*\]):([0-9]+)$`)

// onFreePorts keeps each address's host but gives it port 0, so that the
// command can run next to others on this machine.
func onFreePorts(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		if m := listenArg.FindStringSubmatch(a); m != nil && (m[1] != "" || (i > 0 && strings.HasSuffix(args[i-1], "listen"))) {
			out[i] = m[1] + m[2] + ":0"
		}
	}
	return out
}

// startExact runs the binary with exactly args (serve first), and env
// (NAME=VALUE) added to the environment, and waits for /readyz to answer
// 200 on the admin address it prints; it returns the admin port.
func startExact(t *testing.T, bin string, args []string, env ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var waitErr error
	exited := make(chan struct{})
	lines := make(chan string, 10)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		waitErr = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		for range lines {
		}
		<-exited
	})
	port := ""
	deadline := time.After(30 * time.Second)
	for port == "" {
		select {
		case line, ok := <-lines:
			if !ok {
				<-exited
				t.Fatalf("retrysafe %q exited before it listened: %v\nstderr:\n%s", args, waitErr, stderr)
			}
			if _, rest, ok := strings.Cut(line, "admin on http://"); ok {
				addr := strings.Fields(rest)[0]
				port = addr[strings.LastIndex(addr, ":")+1:]
			}
		case <-deadline:
			t.Fatalf("retrysafe %q printed no admin address; stderr:\n%s", args, stderr)
		}
	}
	go func() {
		for range lines {
		}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := checkReady(ctx, "http://127.0.0.1:"+port+"/readyz", 2*time.Second); err != nil {
		for ctx.Err() == nil && err != nil {
			time.Sleep(100 * time.Millisecond)
			err = checkReady(ctx, "http://127.0.0.1:"+port+"/readyz", 2*time.Second)
		}
		if err != nil {
			t.Fatalf("retrysafe %q: %v\nstderr:\n%s", args, err, stderr)
		}
	}
	return port
}

// nonLoopbackIP returns an address of this machine that is not loopback,
// or "" when it has none.
func nonLoopbackIP() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	return ""
}

// checkShippedAdmin checks what the shipped commands promise on the admin
// port: probes and /metrics for everyone, the operator page for loopback
// peers only.
func checkShippedAdmin(t *testing.T, what, port string) {
	t.Helper()
	get := func(host, path string) int {
		res, err := testenv.HTTPClient.Get("http://" + net.JoinHostPort(host, port) + path)
		if err != nil {
			t.Fatalf("%s: GET %s: %v", what, path, err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if code := get("127.0.0.1", "/ui/"); code != 200 {
		t.Errorf("%s: /ui/ from loopback: %d, want 200", what, code)
	}
	ip := nonLoopbackIP()
	if ip == "" {
		t.Logf("%s: this machine has no non-loopback address: the remote-peer check is left out", what)
		return
	}
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/metrics": 200, "/ui/": 403} {
		if code := get(ip, path); code != want {
			t.Errorf("%s: GET %s from %s (not loopback): %d, want %d", what, path, ip, code, want)
		}
	}
}

// TestShippedCommandsStart starts the binary with the Dockerfile's CMD and
// the Kubernetes Deployment's exact args (only the ports are made free and
// the mounted files and the Secret's store URL replaced by local ones):
// both listen on 0.0.0.0 without a token file, must start and answer
// /readyz, and serve /ui/ to loopback peers only.
func TestShippedCommandsStart(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	dir := t.TempDir()

	cmd := onFreePorts(dockerfileCommand(t))
	for i, a := range cmd {
		cmd[i] = strings.Replace(a, "sqlite:/data/", "sqlite:"+dir+"/", 1)
	}
	checkShippedAdmin(t, "Dockerfile CMD", startExact(t, bin, cmd, onFreePorts(dockerfileEnv(t))...))

	objs := loadManifests(t, map[string]*k8sService{})
	dep, cm := objs["Deployment/payments"], objs["ConfigMap/payments-retrysafe"]
	var args []string
	for _, c := range dep.Spec.Template.Spec.Containers {
		if c.Name == "retrysafe" {
			args = c.Args
		}
	}
	if len(args) == 0 {
		t.Fatal("the Deployment has no retrysafe container args")
	}
	args = onFreePorts(args)
	for i, a := range args {
		switch {
		case strings.Contains(a, "$(RETRYSAFE_STORE)"):
			args[i] = strings.Replace(a, "$(RETRYSAFE_STORE)", "sqlite:"+filepath.Join(dir, "k8s.db"), 1)
		case strings.HasPrefix(a, "--config="):
			file := filepath.Join(dir, filepath.Base(strings.TrimPrefix(a, "--config=")))
			if err := os.WriteFile(file, []byte(cm.Data[filepath.Base(file)]), 0o600); err != nil {
				t.Fatal(err)
			}
			args[i] = "--config=" + file
		}
	}
	checkShippedAdmin(t, "Deployment args", startExact(t, bin, args))
}
