// Package fencedtx holds the argument checks that the SQL stores'
// transactional calls share (store/sqlite, store/mysql and
// store/postgres's CheckpointTx), so that every store refuses the same
// calls with the same words.
package fencedtx

import (
	"errors"

	"github.com/retrysafe/retrysafe"
)

// CheckpointParams checks the params of a CheckpointTx call of the store
// named store ("sqlite", say): a checkpoint to write, and a positive lease
// unless the call abandons the record. The store checks its own
// transaction argument, whose type is its driver's.
func CheckpointParams(store string, p *retrysafe.ExtendParams) error {
	if p == nil || p.Checkpoint == nil {
		return errors.New(store + ": checkpoint: params.Checkpoint is nil")
	}
	if p.Lease <= 0 && !p.Abandon {
		return errors.New(store + ": checkpoint: params.Lease must be positive (the lease is renewed as by Extend)")
	}
	return nil
}
