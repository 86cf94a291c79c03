// Package sweep is what the SQL stores' Sweep methods share: the bounds a
// sweep deletes by, checked and in Unix nanoseconds (the stores' time
// columns), and the loop that deletes in batches until a batch comes up
// short. The statements, and how each batch commits, are the store's.
package sweep

import (
	"errors"
	"fmt"
	"time"

	"github.com/retrysafe/retrysafe/admin"
)

// The times a BIGINT of Unix nanoseconds holds: 1677 to 2262.
var (
	minTime = time.Unix(0, -1<<63)
	maxTime = time.Unix(0, 1<<63-1)
)

// Plan is one sweep: first the completed records whose result expired by
// Expired, then the processing records whose lease ran out by Abandoned
// (both Unix nanoseconds), at most Batch records a statement.
type Plan struct {
	Expired, Abandoned int64
	Batch              int
}

// New checks p and returns its plan. Abandoned is p.Now minus p's
// processing retention, clamped to the earliest storable time (a bound
// before 1677 retires nothing that a later one would not); Batch is
// p.BatchSize, or defaultBatch when that is not positive.
func New(p *admin.SweepParams, defaultBatch int) (Plan, error) {
	if p == nil {
		return Plan{}, errors.New("sweep: nil params")
	}
	retention, err := p.Retention()
	if err != nil {
		return Plan{}, err
	}
	if p.Now.Before(minTime) || p.Now.After(maxTime) {
		return Plan{}, fmt.Errorf("sweep: params.Now %s out of the storable range (1677-2262)", p.Now.UTC().Format(time.RFC3339))
	}
	abandoned := p.Now.Add(-retention)
	if abandoned.Before(minTime) {
		abandoned = minTime
	}
	batch := p.BatchSize
	if batch <= 0 {
		batch = defaultBatch
	}
	return Plan{Expired: p.Now.UnixNano(), Abandoned: abandoned.UnixNano(), Batch: batch}, nil
}

// Run runs the plan: it calls del(false, Expired), then del(true,
// Abandoned), each again until it deletes fewer than Batch records, and
// returns how many were deleted in all. del deletes one batch of at most
// Batch records (the expired ones, or with retire the abandoned ones)
// whose time is at most bound, and returns how many; Run stops at its
// first error, returning the count so far with it.
func (pl Plan) Run(del func(retire bool, bound int64) (int, error)) (int, error) {
	total := 0
	for _, retire := range []bool{false, true} {
		bound := pl.Expired
		if retire {
			bound = pl.Abandoned
		}
		for {
			n, err := del(retire, bound)
			total += n
			if err != nil {
				return total, err
			}
			if n < pl.Batch {
				break
			}
		}
	}
	return total, nil
}
