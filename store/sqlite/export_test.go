package sqlite

import (
	"time"

	"github.com/retrysafe/retrysafe/internal/groupcommit"
)

// BatchCounts returns how many batches this Store's writer has run (with
// at least one write started) and how many writes they started.
func (s *Store) BatchCounts() (batches, ops int64) {
	st := s.BatchStats()
	return st.Batches, st.Items
}

// QueuedWrites returns how many writes are queued, not yet taken into a
// batch by the writer.
func (s *Store) QueuedWrites() int { return s.committer.Queued() }

// SetWriter replaces this Store's committer, before its first write, with
// one whose idle writer waits linger for more writes before it exits and
// which calls onExit (if not nil) after the Store's own Exit hook, each
// time a writer exits.
func (s *Store) SetWriter(linger time.Duration, onExit func()) {
	cfg := s.committerConfig(linger)
	if onExit != nil {
		exit := cfg.Exit
		cfg.Exit = func() { exit(); onExit() }
	}
	s.committer = groupcommit.New(cfg, s.runBatch)
}
