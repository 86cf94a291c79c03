package mysql

import (
	"context"

	"github.com/retrysafe/retrysafe"
)

// DeadlockRetries returns how many times the store ran a claim or a sweep
// batch again after InnoDB chose it as a deadlock victim.
func (s *Store) DeadlockRetries() int64 { return s.deadlocks.Load() }

// DurabilityWarnings judges the durability settings as the server reports them.
var DurabilityWarnings = durabilityWarnings

// QueuedOps returns the number of operations waiting for the next batch.
func (s *Store) QueuedOps() int { return s.committer.Queued() }

// SweepQueries returns the DELETE statements of Sweep: expired completed
// records, then abandoned processing records.
func (s *Store) SweepQueries() (sweep, retire string) { return s.q.sweep, s.q.retire }

// ClaimAsAbsent runs p as a lone claim of a key that the plain read found
// absent, without the read: a record that appeared since is what the
// claim's INSERT then meets.
func (s *Store) ClaimAsAbsent(ctx context.Context, p *retrysafe.ClaimParams) (*retrysafe.ClaimResult, error) {
	res, err := s.runOne(ctx, &batchOp{kind: opClaim, scope: p.Scope, key: p.Key, token: p.Token,
		now: p.Now.UnixNano(), until: p.Now.Add(p.Lease).UnixNano(), claim: p, absent: true})
	return res.claim, err
}

// ReadStats returns the read committer's counts: batches of plain reads
// sent, and the reads they held.
func (s *Store) ReadStats() (batches, items int64) {
	st := s.reads.Stats()
	return st.Batches, st.Items
}
