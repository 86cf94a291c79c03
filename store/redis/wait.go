package redis

import (
	"context"
	"fmt"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/retrysafe/retrysafe"
)

// ErrNotReplicated is matched (errors.Is) by a [*ReplicationError].
var ErrNotReplicated = fmt.Errorf("retrysafe/redis: write not acknowledged by enough replicas")

// ReplicationError reports that a write was acknowledged by fewer
// replicas than [Config.WaitReplicas] within [Config.WaitTimeout]. It
// matches [ErrNotReplicated]. Claim returns it wrapped by
// [retrysafe.Unavailable] (so it matches [retrysafe.ErrStoreUnavailable]),
// after releasing the claim; Complete returns it as is.
type ReplicationError struct {
	Op      string        // "claim" or "complete"
	Want    int           // Config.WaitReplicas
	Acked   int           // replicas that acknowledged in time
	Timeout time.Duration // Config.WaitTimeout
}

// Error describes the shortfall.
func (e *ReplicationError) Error() string {
	what := "nothing ran"
	if e.Op == "complete" {
		what = "the result is stored on the primary only, and a failover now could lose it"
	}
	return fmt.Sprintf("retrysafe/redis: %s: %d of %d replicas acknowledged within %s; %s", e.Op, e.Acked, e.Want, e.Timeout, what)
}

// Is reports whether target is [ErrNotReplicated].
func (e *ReplicationError) Is(target error) bool { return target == ErrNotReplicated }

// runWaited runs script on keys and then WAIT on the same connection, in
// one pipeline (one round trip), and returns the script's reply and the
// number of replicas that acknowledged. After NOSCRIPT it sends the
// pipeline again with EVAL.
//
// A pipeline that go-redis resends after a network error runs the script
// a second time on a new connection. WAIT waits for the replication offset
// the connection's last command left; Redis 7.0 records it after every
// command, but to be safe on a server that records it only after writes,
// the scripts recognise such a retry by its nonce and rewrite the nonce
// field, so the new connection has written and its WAIT covers the first
// run's write too.
func (s *Store) runWaited(ctx context.Context, script *goredis.Script, keys []string, args ...any) (*goredis.Cmd, int, error) {
	run := func(eval bool) (*goredis.Cmd, *goredis.Cmd) {
		var cmd *goredis.Cmd
		var wait *goredis.Cmd
		_, _ = s.waitClient.Pipelined(ctx, func(p goredis.Pipeliner) error {
			if eval {
				cmd = script.Eval(ctx, p, keys, args...)
			} else {
				cmd = script.EvalSha(ctx, p, keys, args...)
			}
			wait = p.Do(ctx, "wait", s.waitReplicas, pxMillis(s.waitTimeout))
			return nil
		})
		return cmd, wait
	}
	cmd, wait := run(false)
	if err := cmd.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		cmd, wait = run(true)
	}
	if err := cmd.Err(); err != nil {
		return cmd, 0, err
	}
	acked, err := wait.Int64()
	if err != nil {
		return cmd, 0, err
	}
	return cmd, int(acked), nil
}

// unreplicatedClaim handles a claim that too few replicas acknowledged
// and returns the error Claim reports. A new record (attempt 1) is
// released: the request never ran, so a retry may run it at once. A
// takeover (attempt > 1) is left to its lease instead, because releasing
// it would delete the record that tells the next claimant an earlier
// attempt may have had effects (it would start again at attempt 1). The
// release is not waited for: a replica that kept the claim only makes a
// retry wait for the lease.
func (s *Store) unreplicatedClaim(ctx context.Context, k, token string, attempt, acked int) error {
	rerr := &ReplicationError{Op: "claim", Want: s.waitReplicas, Acked: acked, Timeout: s.waitTimeout}
	if attempt > 1 {
		return retrysafe.Unavailable("claim", fmt.Errorf("%w (attempt %d kept until its lease ends)", rerr, attempt))
	}
	if _, err := releaseScript.Run(ctx, s.pipe, []string{k}, token, k).Int64(); err != nil {
		return retrysafe.Unavailable("claim", fmt.Errorf("%w (and its release failed, so the key waits for its lease: %v)", rerr, err))
	}
	return retrysafe.Unavailable("claim", rerr)
}
