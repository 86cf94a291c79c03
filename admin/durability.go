package admin

import "context"

// DurabilityWarning is a setting of a store's server under which the
// server can acknowledge a write and then lose it (on a crash, a restart
// or a power loss). A lost completed record makes the retry of an
// operation run again; a lost claim lets a duplicate run next to the
// original. The gateway logs each warning once at start.
type DurabilityWarning struct {
	// Setting is the server's name for it, such as "appendonly" or
	// "synchronous_commit": the label of the gateway's
	// retrysafe_store_durability_warning metric, and the name an
	// operator accepts it by.
	Setting string
	// Value is its value now, as the server reports it.
	Value string
	// Risk says in one sentence what the setting risks.
	Risk string
}

// DurabilityChecker is implemented by stores that can read their server's
// durability settings. CheckDurability returns one warning per setting that
// weakens the store's guarantees; none when all is well, and none either
// when the server refuses to show a setting (a managed service that blocks
// CONFIG, a user without the right): that is not an error. It returns an
// error only when the server could not be asked at all.
type DurabilityChecker interface {
	CheckDurability(ctx context.Context) ([]DurabilityWarning, error)
}
