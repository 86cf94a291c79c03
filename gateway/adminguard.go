package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/retrysafe/retrysafe"
)

// Problem type slugs of the admin listener's refusals.
const (
	// ProblemMisdirectedHost (421): the request's Host is not a name the
	// operator page answers to (see [UIConfig.Hosts]); nothing was done.
	ProblemMisdirectedHost = "misdirected-host"
	// ProblemUILoopbackOnly (403): the operator page is served to loopback
	// peers only ([UILoopback]).
	ProblemUILoopbackOnly = "ui-loopback-only"
	// ProblemUIOff (404): the operator page is off ([UIOff]).
	ProblemUIOff = "ui-off"
	// ProblemTooManyWrongTokens (429): this address sent too many wrong
	// admin tokens; Retry-After says when it may try again.
	ProblemTooManyWrongTokens = "too-many-wrong-tokens"
)

// UIMode says to whom the admin listener serves the operator page
// (`--ui`). The probes and /metrics are served to everyone in every mode.
type UIMode string

// The UI modes. The zero value means UILoopback.
const (
	UIOff      UIMode = "off"      // no operator page
	UILoopback UIMode = "loopback" // only to peers on this machine (127.0.0.0/8, ::1)
	UIOn       UIMode = "on"       // to every peer that has a token (when tokens are set)
)

// ParseUIMode reads a `--ui` value.
func ParseUIMode(s string) (UIMode, error) {
	switch m := UIMode(s); m {
	case UIOff, UILoopback, UIOn:
		return m, nil
	}
	return "", fmt.Errorf("%q: want off, loopback or on", s)
}

func adminProblem(w http.ResponseWriter, status int, slug, title, detail string, retryAfter time.Duration) {
	retrysafe.WriteProblem(w, &retrysafe.Problem{Type: retrysafe.DefaultProblemBase + slug, Title: title, Status: status, Detail: detail}, retryAfter)
}

// hostAllowed reports whether the Host of r names this machine's loopback
// interface (localhost, *.localhost, 127.0.0.0/8, ::1), the address the
// connection arrived on, or one of names; a port is ignored.
//
// A page that an attacker's name rebinds to 127.0.0.1 is same-origin with
// the operator page in the victim's browser, but its requests carry the
// attacker's name in Host: refusing unknown names is what defeats DNS
// rebinding. An IP literal is never such a name, so the address the
// connection arrived on is safe to accept (http://POD_IP:9090/ui/).
func hostAllowed(r *http.Request, names []string) bool {
	host := strings.ToLower(r.Host)
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"), ".")
	if host == "" {
		return false
	}
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		ip = ip.Unmap()
		if ip.IsLoopback() {
			return true
		}
		if tcp, ok := r.Context().Value(http.LocalAddrContextKey).(*net.TCPAddr); ok && !ip.IsUnspecified() {
			local, ok := netip.AddrFromSlice(tcp.IP)
			return ok && local.Unmap() == ip
		}
		return false
	}
	for _, n := range names {
		if strings.EqualFold(strings.TrimSuffix(n, "."), host) {
			return true
		}
	}
	return false
}

// loopbackPeer reports whether r came from this machine.
func loopbackPeer(r *http.Request) bool {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	return err == nil && ap.Addr().Unmap().IsLoopback()
}

// clientAddr is the address a request came from, without the port.
func clientAddr(r *http.Request) string {
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		return ap.Addr().Unmap().String()
	}
	return r.RemoteAddr
}

// Limits on wrong admin tokens.
const (
	// MaxWrongAdminTokens is how many wrong tokens one address may send
	// in [WrongTokenWindow]; after that it gets 429 until the window ends.
	MaxWrongAdminTokens = 10
	// WrongTokenWindow is the window of [MaxWrongAdminTokens].
	WrongTokenWindow = time.Minute
	// maxGuardedAddrs bounds the addresses tracked in one window; beyond
	// it, new addresses share one count (a flood from many addresses locks
	// them out together rather than growing the map).
	maxGuardedAddrs = 4096
)

// tokenGuard counts wrong admin tokens per address in fixed windows.
type tokenGuard struct {
	mu     sync.Mutex
	start  time.Time
	counts map[string]int
}

// roll starts a new window when the current one has ended. Callers hold mu.
func (g *tokenGuard) roll(now time.Time) {
	if g.counts == nil || now.Sub(g.start) >= WrongTokenWindow || now.Before(g.start) {
		g.start, g.counts = now, map[string]int{}
	}
}

func (g *tokenGuard) slot(addr string) string {
	if _, ok := g.counts[addr]; !ok && len(g.counts) >= maxGuardedAddrs {
		return "*"
	}
	return addr
}

// blocked returns how long addr must wait, or 0 when it may try a token.
func (g *tokenGuard) blocked(addr string, now time.Time) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.roll(now)
	if g.counts[g.slot(addr)] >= MaxWrongAdminTokens {
		return g.start.Add(WrongTokenWindow).Sub(now)
	}
	return 0
}

// failed counts a wrong token from addr; it reports false when addr had
// already used up its attempts (the caller answers 429 instead of 403).
func (g *tokenGuard) failed(addr string, now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.roll(now)
	s := g.slot(addr)
	if g.counts[s] >= MaxWrongAdminTokens {
		return false
	}
	g.counts[s]++
	return true
}

// warnLimiter writes a warning at most once per interval; the next one
// says how many were left out in between.
type warnLimiter struct {
	every   time.Duration
	mu      sync.Mutex
	last    time.Time
	skipped int
}

func (l *warnLimiter) warn(ctx context.Context, logger *slog.Logger, now time.Time, msg string, args ...any) {
	l.mu.Lock()
	if !l.last.IsZero() && now.Sub(l.last) < l.every && !now.Before(l.last) {
		l.skipped++
		l.mu.Unlock()
		return
	}
	if l.skipped > 0 {
		args = append(args, "repeats_not_logged", l.skipped, "since", l.last.UTC().Format(time.RFC3339))
	}
	l.last, l.skipped = now, 0
	l.mu.Unlock()
	logger.WarnContext(ctx, msg, args...)
}
