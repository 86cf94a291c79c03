//go:build retrysafe_ablation

// The retrysafe_ablation build tag is for measurement only. It lets the
// middleware's cost benchmark (bench/peers, docs/performance.md) measure
// what each guarantee costs by switching it off through the environment:
//
//   - RETRYSAFE_ABLATE_FINGERPRINT: every request gets the same fingerprint,
//     so a key reused with a different request is replayed instead of
//     refused;
//   - RETRYSAFE_ABLATE_HEARTBEAT: the lease is not renewed while the handler
//     runs, so a handler that outlives it may run beside a takeover;
//   - RETRYSAFE_ABLATE_CANCEL: the handler runs on a context that a lost
//     lease does not cancel (implies RETRYSAFE_ABLATE_HEARTBEAT).
//
// A program built with the tag prints a warning at start. Never ship one.

package retrysafe

import (
	"fmt"
	"os"
)

var (
	ablateFingerprint = os.Getenv("RETRYSAFE_ABLATE_FINGERPRINT") != ""
	ablateCancel      = os.Getenv("RETRYSAFE_ABLATE_CANCEL") != ""
	ablateHeartbeat   = os.Getenv("RETRYSAFE_ABLATE_HEARTBEAT") != "" || ablateCancel
)

func init() {
	fmt.Fprintf(os.Stderr, "retrysafe: built with the retrysafe_ablation tag, for measurement only (fingerprint off: %t, heartbeat off: %t, cancellation off: %t)\n",
		ablateFingerprint, ablateHeartbeat, ablateCancel)
}
