package mysql

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
