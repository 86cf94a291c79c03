package sqlite

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
