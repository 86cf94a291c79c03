package main

import (
	"fmt"
	"net"
	"os"

	"github.com/retrysafe/retrysafe/gateway"
)

const adminTokenUsage = "`file` of admin tokens for the operator page at /ui/ (one [NAME ]TOKEN a line, 16+ characters); required when the admin listener is not on loopback"

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

// requireTokenBeyondLoopback refuses to serve the operator page on a
// listener others can reach without tokens.
func requireTokenBeyondLoopback(flagName string, addr net.Addr, toks []gateway.AdminToken) error {
	if len(toks) > 0 || isLoopback(addr) {
		return nil
	}
	return usagef("%s %s is not a loopback address: the operator page (/ui/) would be reachable from other machines; give --admin-token-file (or listen on 127.0.0.1)", flagName, addr)
}

// describeAuth says how the operator page is protected, for the start-up line.
func describeAuth(toks []gateway.AdminToken) string {
	if len(toks) == 0 {
		return "no token (loopback only)"
	}
	return fmt.Sprintf("%d admin token(s)", len(toks))
}
