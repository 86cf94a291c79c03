package postgres

// QueuedOps returns the number of operations waiting for the next batch.
func (s *Store) QueuedOps() int { return s.committer.Queued() }
