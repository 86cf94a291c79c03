package sqlite

import "time"

// BatchStats returns how many batches this Store's writer has run (with at
// least one write started) and how many writes they started.
func (s *Store) BatchStats() (batches, ops int64) {
	st := s.committer.Stats()
	return st.Batches, st.Items
}

// QueuedWrites returns how many writes are queued, not yet taken into a
// batch by the writer.
func (s *Store) QueuedWrites() int { return s.committer.Queued() }

// SetWriterLinger replaces this Store's committer, before its first write,
// with one whose idle writer waits d for more writes before it exits.
func (s *Store) SetWriterLinger(d time.Duration) { s.committer = s.newCommitter(d) }
