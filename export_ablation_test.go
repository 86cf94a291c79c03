//go:build retrysafe_ablation

package retrysafe

// SetAblation sets the measurement switches of ablation.go for a test and
// returns a function that restores them.
func SetAblation(fingerprint, heartbeat, cancel bool) (restore func()) {
	fp, hb, c := ablateFingerprint, ablateHeartbeat, ablateCancel
	ablateFingerprint, ablateHeartbeat, ablateCancel = fingerprint, heartbeat || cancel, cancel
	return func() { ablateFingerprint, ablateHeartbeat, ablateCancel = fp, hb, c }
}
