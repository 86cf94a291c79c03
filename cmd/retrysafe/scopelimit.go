package main

import (
	"flag"
	"strings"

	"github.com/retrysafe/retrysafe/gateway"
)

// scopeLimitFlags are serve's per-scope limits on new keys (the defaults
// of every route; a route's scope_rate, scope_burst and scope_max_live
// override them).
type scopeLimitFlags struct {
	rate    string
	burst   int
	maxLive int
}

func (f *scopeLimitFlags) define(fs *flag.FlagSet) {
	fs.StringVar(&f.rate, "scope-rate", "", "new keys each caller (scope) may start, as a `rate` such as 10/s, 600/m or 1000/h, per gateway instance; beyond it 429 scope-limit (default: no limit)")
	fs.IntVar(&f.burst, "scope-burst", 0, "new keys a caller may start at once under --scope-rate (default: the rate per second, rounded up)")
	fs.IntVar(&f.maxLive, "scope-max-live", 0, "new keys a caller may have started within the TTL, counted by each gateway instance on its own; beyond it 429 scope-limit (default: no limit)")
}

// apply sets p's scope limits, or returns a usage error naming the flag.
func (f *scopeLimitFlags) apply(p *gateway.Policy) error {
	if v := strings.TrimSpace(f.rate); v != "" {
		rate, err := gateway.ParseScopeRate(v)
		if err != nil {
			return usagef("--scope-rate: %v", err)
		}
		p.ScopeLimits.Rate = rate
	}
	switch {
	case f.burst < 0:
		return usagef("--scope-burst must not be negative (got %d)", f.burst)
	case f.burst > 0 && p.ScopeLimits.Rate == 0:
		return usagef("--scope-burst needs --scope-rate")
	case f.maxLive < 0:
		return usagef("--scope-max-live must not be negative (got %d)", f.maxLive)
	}
	p.ScopeLimits.Burst, p.ScopeLimits.MaxLive = f.burst, f.maxLive
	return nil
}
