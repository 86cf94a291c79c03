package sqlite

import "time"

// BatchStats returns how many batches this Store has committed and how
// many writes they held.
func (s *Store) BatchStats() (batches, ops int64) {
	return s.writer.batches.Load(), s.writer.ops.Load()
}

// WriteQueue returns how many writes are queued (not yet taken by the
// writer) and whether the writer goroutine is in a batch.
func (s *Store) WriteQueue() (queued int, busy bool) {
	s.writer.mu.Lock()
	defer s.writer.mu.Unlock()
	return len(s.writer.queue), s.writer.busy
}

// SetWriterLinger sets how long this Store's idle writer goroutine waits
// for more writes before it exits (before its first write).
func (s *Store) SetWriterLinger(d time.Duration) {
	s.writer.mu.Lock()
	defer s.writer.mu.Unlock()
	s.writer.linger = d
}
