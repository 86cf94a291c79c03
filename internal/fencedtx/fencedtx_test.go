package fencedtx_test

import (
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/fencedtx"
)

func TestCheckpointParams(t *testing.T) {
	t.Parallel()
	cp := &retrysafe.Checkpoint{Name: "charge requested"}
	for name, tc := range map[string]struct {
		p    *retrysafe.ExtendParams
		want string // "" for accepted
	}{
		"nil params":    {nil, "sqlite: checkpoint: params.Checkpoint is nil"},
		"no checkpoint": {&retrysafe.ExtendParams{Lease: time.Second}, "sqlite: checkpoint: params.Checkpoint is nil"},
		"no lease":      {&retrysafe.ExtendParams{Checkpoint: cp}, "sqlite: checkpoint: params.Lease must be positive (the lease is renewed as by Extend)"},
		"negative":      {&retrysafe.ExtendParams{Checkpoint: cp, Lease: -time.Second}, "sqlite: checkpoint: params.Lease must be positive (the lease is renewed as by Extend)"},
		"abandon":       {&retrysafe.ExtendParams{Checkpoint: cp, Abandon: true}, ""},
		"lease":         {&retrysafe.ExtendParams{Checkpoint: cp, Lease: time.Second}, ""},
	} {
		err := fencedtx.CheckpointParams("sqlite", tc.p)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want accepted", name, err)
		case tc.want != "" && (err == nil || err.Error() != tc.want):
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}
