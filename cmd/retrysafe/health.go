package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

const healthDescription = `
Asks a running gateway's admin listener whether it is ready: GET
ADMIN/readyz. Exits 0 when it answers 200 within --timeout, 1 otherwise
(with a one-line reason on stderr), 2 on wrong arguments. It needs no
shell, so it fits a FROM-scratch container's HEALTHCHECK or a probe.

Without --admin it asks the address in RETRYSAFE_ADMIN_LISTEN, the variable
serve takes its --admin-listen default from (0.0.0.0 and :: are asked on
loopback): set the admin address there, and the image's HEALTHCHECK follows.`

const healthExamples = `  retrysafe health --admin http://127.0.0.1:9090
  retrysafe health --admin http://127.0.0.1:9090 --timeout 5s

  # Dockerfile (serve and health both read the admin address from it):
  ENV RETRYSAFE_ADMIN_LISTEN=0.0.0.0:9090
  HEALTHCHECK CMD ["/retrysafe", "health"]`

// defaultHealthTimeout bounds the whole /readyz exchange.
const defaultHealthTimeout = 2 * time.Second

// runHealth is the "health" command.
func runHealth(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("health", "--admin URL [--timeout D]", healthDescription, healthExamples, stdout, stderr)
	admin := fs.String("admin", "", "`URL` of the gateway's admin listener, e.g. http://127.0.0.1:9090 (default: from "+adminListenEnv+")")
	timeout := fs.Duration("timeout", defaultHealthTimeout, "bound on the whole /readyz exchange")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	if *admin == "" {
		listen := os.Getenv(adminListenEnv)
		if listen == "" {
			return usagef("--admin is required (or %s, as serve reads it), e.g. --admin http://127.0.0.1:9090", adminListenEnv)
		}
		u, err := adminURLOf(listen)
		if err != nil {
			return usagef("%s: %v", adminListenEnv, err)
		}
		*admin = u
	}
	if *timeout <= 0 {
		return usagef("--timeout must be positive, got %v", *timeout)
	}
	readyz, err := readyzURL(*admin)
	if err != nil {
		return usagef("--admin: %v", err)
	}
	return checkReady(ctx, readyz, *timeout)
}

// adminURLOf returns the URL at which this machine reaches an admin
// listener on listen (serve's --admin-listen): a wildcard host (0.0.0.0,
// ::, none) is asked on loopback.
func adminURLOf(listen string) (string, error) {
	if listen == "off" {
		return "", errors.New(`"off": the admin listener is off, there is nothing to ask`)
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil || port == "" || port == "0" {
		return "", fmt.Errorf("%q: want HOST:PORT with a fixed port, e.g. 0.0.0.0:9090", listen)
	}
	switch ip := net.ParseIP(host); {
	case host == "" || (ip != nil && ip.IsUnspecified() && ip.To4() != nil):
		host = "127.0.0.1"
	case ip != nil && ip.IsUnspecified():
		host = "::1"
	}
	return "http://" + net.JoinHostPort(host, port), nil
}

// readyzURL returns ADMIN/readyz for an http(s) admin URL.
func readyzURL(admin string) (string, error) {
	u, err := url.Parse(admin)
	if err != nil {
		return "", fmt.Errorf("%q is not a URL: %v", admin, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("%q: want an http:// or https:// URL, e.g. http://127.0.0.1:9090", admin)
	}
	if u.Host == "" {
		return "", fmt.Errorf("%q has no host, e.g. http://127.0.0.1:9090", admin)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("%q: give the admin listener's base URL, without a query or fragment", admin)
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/readyz"
	u.RawPath = ""
	return u.String(), nil
}

// checkReady returns nil when GET readyz answers 200 within timeout.
func checkReady(ctx context.Context, readyz string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, readyz, nil)
	if err != nil {
		return err
	}
	// No proxy from the environment: the admin listener is local.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("not ready: GET %s: no answer within %v", readyz, timeout)
		}
		return fmt.Errorf("not ready: GET %s: %v", readyz, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
	if resp.StatusCode != http.StatusOK {
		reason := strings.Join(strings.Fields(string(body)), " ")
		if reason != "" {
			reason = ": " + reason
		}
		return fmt.Errorf("not ready: GET %s answered %s%s", readyz, resp.Status, reason)
	}
	return nil
}
