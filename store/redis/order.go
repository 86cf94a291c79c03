package redis

import "sync/atomic"

// claimOrder chooses which path a Claim takes first: the plain read (a
// replay or an in-flight answer then costs one HGETALL and no write) or the
// write (a new key then costs one RESTORE instead of a read and a RESTORE;
// a replay costs a RESTORE that finds the key and the claim script). Both
// paths give the same answer for every record state; only the cost
// differs. The order follows a running estimate of how often a recent
// claim met a record that blocked it: the read pays while those dominate,
// the write while new keys do. Each path observes the outcome (the read
// sees the blocking record; the script returns it), so the estimate keeps
// moving whichever path runs.
type claimOrder struct {
	// force, set only by tests before the first Claim, fixes the path.
	force int
	// blocked estimates the share of recent claims that met a blocking
	// record, in units of 1/blockedOne: an exponentially weighted moving
	// average that gives each claim the weight 1/2^blockedShift.
	blocked atomic.Int32
}

const (
	orderAdaptive = iota
	orderReadFirst
	orderWriteFirst

	blockedOne   = 1 << 16
	blockedShift = 4 // about the last 16 claims count
	// readFirstFrom is the share of blocked claims from which the plain
	// read goes first. With share p of blocked claims, reading first costs
	// a read on every claim and saves a RESTORE and a script on share p;
	// a read costs about a third of those (docs/performance-redis.md).
	readFirstFrom = blockedOne / 3
)

// init starts the estimate at "all blocked": a store begins with the plain
// read, as before claimOrder, and moves to the write after a few new keys.
func (o *claimOrder) init() { o.blocked.Store(blockedOne) }

// readFirst reports whether a Claim should read the record first.
func (o *claimOrder) readFirst() bool {
	switch o.force {
	case orderReadFirst:
		return true
	case orderWriteFirst:
		return false
	}
	return o.blocked.Load() >= readFirstFrom
}

// observe records whether a claim met a record that blocked it. Concurrent
// claims may drop each other's sample (one CompareAndSwap, no retry): the
// estimate only needs to follow the trend.
func (o *claimOrder) observe(blocked bool) {
	old := o.blocked.Load()
	var x int32
	if blocked {
		x = blockedOne
	}
	if next := old + (x-old)>>blockedShift; next != old {
		o.blocked.CompareAndSwap(old, next)
	}
	// else the estimate is settled (every recent claim alike): no write,
	// so steady replays share the cache line without bouncing it.
}
