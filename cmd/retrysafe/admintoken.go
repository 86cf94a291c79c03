package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/retrysafe/retrysafe/gateway"
)

const adminTokenUsage = "`file` of admin tokens for the operator page at /ui/ (one [NAME ]TOKEN a line, 16+ characters); required with --ui on when the admin listener is not on loopback"

const (
	uiModeUsage    = "`mode` of the operator page /ui/: loopback (served only to peers on this machine, as through kubectl port-forward or an SSH tunnel), on (to every peer; beyond loopback it needs --admin-token-file) or off; /healthz, /readyz and /metrics are served to all in every mode"
	adminHostUsage = "a `name` the operator page answers to besides localhost, *.localhost and IP addresses of this listener (repeatable); a request with another Host gets 421, which defeats DNS rebinding"
)

// hostList is a repeatable flag of Host names.
type hostList []string

func (h *hostList) String() string { return strings.Join(*h, ",") }

func (h *hostList) Set(s string) error {
	s = strings.TrimSpace(s)
	if s == "" || strings.ContainsAny(s, "/ \t") {
		return fmt.Errorf("%q: want a host name such as ops.example.com", s)
	}
	if host, _, err := net.SplitHostPort(s); err == nil {
		s = host // a port is ignored: the check compares names
	}
	*h = append(*h, s)
	return nil
}

// adminFlags are the operator page's flags, shared by serve and ui.
type adminFlags struct {
	tokenFile string
	hosts     hostList
}

func (a *adminFlags) define(fs *flag.FlagSet) {
	fs.StringVar(&a.tokenFile, "admin-token-file", "", adminTokenUsage)
	fs.Var(&a.hosts, "admin-host", adminHostUsage)
}

// loadAdminTokens reads --admin-token-file; an empty path means none.
func loadAdminTokens(path string) ([]gateway.AdminToken, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, usagef("--admin-token-file: %v", err)
	}
	defer f.Close()
	toks, err := gateway.ParseAdminTokens(f)
	if err != nil {
		return nil, usagef("--admin-token-file %s: %v", path, err)
	}
	return toks, nil
}

// isLoopback reports whether a listener's address is reachable only from
// this machine (127.0.0.0/8 or ::1). A wildcard address (":9090",
// "0.0.0.0") is not.
func isLoopback(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// requireTokenBeyondLoopback refuses to serve the operator page to other
// machines without tokens.
func requireTokenBeyondLoopback(flagName string, addr net.Addr, toks []gateway.AdminToken) error {
	if len(toks) > 0 || isLoopback(addr) {
		return nil
	}
	return usagef("%s %s is not a loopback address: the operator page (/ui/) would be reachable from other machines; give --admin-token-file, or listen on 127.0.0.1 (serve: or --ui loopback, which serves the page to this machine only)", flagName, addr)
}

// describeAuth says how the operator page is protected, for the start-up line.
func describeAuth(toks []gateway.AdminToken) string {
	if len(toks) == 0 {
		return "no token (loopback only)"
	}
	return fmt.Sprintf("%d admin token(s)", len(toks))
}

// describeUI says to whom the operator page is served, for serve's
// start-up line.
func describeUI(mode gateway.UIMode, toks []gateway.AdminToken) string {
	switch mode {
	case gateway.UIOff:
		return "operator page off"
	case gateway.UIOn:
		return "operator page /ui/, " + describeAuth(toks)
	}
	auth := "no token"
	if len(toks) > 0 {
		auth = fmt.Sprintf("%d admin token(s)", len(toks))
	}
	return "operator page /ui/ for loopback peers only, " + auth
}
