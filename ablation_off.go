//go:build !retrysafe_ablation

package retrysafe

// Every guarantee is on: without the retrysafe_ablation build tag these
// switches are constants, and the compiler drops the code they guard (see
// ablation.go).
const (
	ablateFingerprint = false
	ablateHeartbeat   = false
	ablateCancel      = false
)
