package torture

import (
	"context"
	"fmt"
	"strings"
	"sync"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// links holds the Toxiproxy proxies of a run, run in-process: one per
// gateway on each link.
type links struct {
	server *toxiproxy.ApiServer
	mu     sync.Mutex
	all    []*toxiproxy.Proxy
}

func newLinks() *links {
	// Some toxics log through zerolog's global logger; keep the test
	// output for the report.
	zerolog.SetGlobalLevel(zerolog.Disabled)
	return &links{server: toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())}
}

// proxy starts a proxy on a free port of 127.0.0.1 in front of target.
func (l *links) proxy(name, target string) (*toxiproxy.Proxy, error) {
	p := toxiproxy.NewProxy(l.server, name, "127.0.0.1:0", target)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("toxiproxy %s: %w", name, err)
	}
	l.mu.Lock()
	l.all = append(l.all, p)
	l.mu.Unlock()
	return p, nil
}

func (l *links) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.all {
		p.Stop()
	}
}

// addToxic adds a toxic given as Toxiproxy's JSON and returns a function
// that removes it.
func addToxic(p *toxiproxy.Proxy, json string) (func(), error) {
	t, err := p.Toxics.AddToxicJson(strings.NewReader(json))
	if err != nil {
		return nil, fmt.Errorf("toxic %s on %s: %w", json, p.Name, err)
	}
	name := t.Name
	return func() { _ = p.Toxics.RemoveToxic(context.Background(), name) }, nil
}

// disable closes the proxy's listener and its open connections; the
// returned function listens again on the same address.
func disable(p *toxiproxy.Proxy) func() error {
	p.Stop()
	return p.Start
}
