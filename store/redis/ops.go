package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/retrysafe/retrysafe"
)

// Claim claims (params.Scope, params.Key). See [retrysafe.Store] for the
// rules.
//
// It first reads the record with one plain HGETALL. When that record
// blocks the claim (completed and unexpired, processing with a live lease,
// or processing with an expired lease and another fingerprint or a
// takeover that params.NoTakeover or params.TakeoverToken forbids) Claim
// returns it without a write: a replay or an in-flight answer is one cheap
// round trip. A blocking outcome writes nothing, so it is exactly what the
// claim script would have answered at the moment of the read. Otherwise
// the claim script decides: it checks everything atomically, so the read
// is only a shortcut, and a record that changed since cannot make it
// claim wrongly. The loser of the script gets the blocking record in the
// same reply.
func (s *Store) Claim(ctx context.Context, params *retrysafe.ClaimParams) (*retrysafe.ClaimResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now, err := encodeTime(params.Now)
	if err != nil {
		return nil, err
	}
	leaseUntil := params.Now.Add(params.Lease)
	lease, err := encodeTime(leaseUntil)
	if err != nil {
		return nil, err
	}
	k := s.recordKey(params.Scope, params.Key)
	h, err := s.pipe.HGetAll(ctx, k).Result()
	if err != nil && !errors.Is(err, goredis.Nil) {
		return nil, s.fail(ctx, "claim", err)
	}
	if len(h) > 0 {
		rec, err := decodeRecord(h)
		if err != nil {
			return nil, retrysafe.Unavailable("claim", err)
		}
		if blocksClaim(rec, params) {
			return &retrysafe.ClaimResult{Record: rec}, nil
		}
	}
	if s.afterRead != nil {
		s.afterRead()
	}
	px := pxMillis(params.Lease) + pxMillis(s.retention)
	noTakeover := ""
	if params.NoTakeover {
		noTakeover = "1"
	}
	args := []any{params.Scope, params.Key, params.Fingerprint, params.Token, now, lease, px, newNonce(), params.Route,
		noTakeover, params.TakeoverToken}
	var reply []any
	acked := 0
	if s.waitReplicas == 0 {
		reply, err = claimScript.Run(ctx, s.pipe, []string{k}, args...).Slice()
	} else {
		var cmd *goredis.Cmd
		cmd, acked, err = s.runWaited(ctx, claimScript, []string{k}, args...)
		if err == nil {
			reply, err = cmd.Slice()
		}
	}
	if err != nil {
		return nil, s.fail(ctx, "claim", err)
	}
	if len(reply) < 1 {
		return nil, retrysafe.Unavailable("claim", fmt.Errorf("%w: short script reply", errCorrupt))
	}
	if won, _ := reply[0].(int64); won == 0 {
		if len(reply) != 2 {
			return nil, retrysafe.Unavailable("claim", fmt.Errorf("%w: short script reply", errCorrupt))
		}
		flat, _ := reply[1].([]any)
		h, err := flatToMap(flat)
		if err != nil {
			return nil, retrysafe.Unavailable("claim", err)
		}
		rec, err := decodeRecord(h)
		if err != nil {
			return nil, retrysafe.Unavailable("claim", err)
		}
		return &retrysafe.ClaimResult{Record: rec}, nil
	}
	// {1}: a fresh record, attempt 1 created now; {1, attempt, created}
	// and the checkpoint, if any: a takeover or a retry of this very call.
	attempt, created := 1, exactTime(params.Now)
	var cp *retrysafe.Checkpoint
	if len(reply) != 1 {
		if attempt, created, cp, err = decodeClaimed(reply); err != nil {
			return nil, retrysafe.Unavailable("claim", err)
		}
	}
	if acked < s.waitReplicas {
		return nil, s.unreplicatedClaim(ctx, k, params.Token, attempt, acked)
	}
	rec := params.ProcessingRecord(attempt, created, exactTime(params.Now), exactTime(leaseUntil))
	rec.Checkpoint = cp
	return &retrysafe.ClaimResult{Claimed: true, Record: rec}, nil
}

// decodeClaimed reads the claim script's {1, attempt, created} reply,
// followed by the kept checkpoint's name, time and data, when it has them.
func decodeClaimed(reply []any) (attempt int, created time.Time, cp *retrysafe.Checkpoint, err error) {
	if len(reply) != 3 && len(reply) != 5 && len(reply) != 6 {
		return 0, time.Time{}, nil, fmt.Errorf("%w: script reply of %d values", errCorrupt, len(reply))
	}
	str := make([]string, len(reply))
	for i, v := range reply[1:] {
		var ok bool
		if str[i+1], ok = v.(string); !ok {
			return 0, time.Time{}, nil, fmt.Errorf("%w: script reply value %d is %T", errCorrupt, i+1, v)
		}
	}
	if attempt, err = strconv.Atoi(str[1]); err != nil {
		return 0, time.Time{}, nil, fmt.Errorf("%w: attempt %q", errCorrupt, str[1])
	}
	if created, err = decodeTime(str[2]); err != nil {
		return 0, time.Time{}, nil, fmt.Errorf("%w: created: %v", errCorrupt, err)
	}
	if len(reply) == 3 {
		return attempt, created, nil, nil
	}
	h := map[string]string{fCPName: str[3], fCPAt: str[4]}
	if len(reply) == 6 {
		h[fCPData] = str[5]
	}
	if cp, err = decodeCheckpoint(h); err != nil {
		return 0, time.Time{}, nil, err
	}
	return attempt, created, cp, nil
}

// blocksClaim reports whether rec, read at params.Now, makes a claim with
// params fail without writing: the claim script's {0, record} answers for a
// call that is not a retry of itself.
func blocksClaim(rec *retrysafe.Record, params *retrysafe.ClaimParams) bool {
	switch rec.State {
	case retrysafe.StateCompleted:
		return !rec.Expired(params.Now)
	case retrysafe.StateProcessing:
		return !rec.LeaseExpired(params.Now) || rec.Fingerprint != params.Fingerprint ||
			params.NoTakeover || (params.TakeoverToken != "" && rec.Token != params.TakeoverToken)
	}
	return false
}

// Get returns the record of (params.Scope, params.Key) with one HGETALL, or
// [retrysafe.ErrNotFound] when it is absent or completed with
// ExpiresAt <= params.Now.
func (s *Store) Get(ctx context.Context, params *retrysafe.GetParams) (*retrysafe.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	h, err := s.pipe.HGetAll(ctx, s.recordKey(params.Scope, params.Key)).Result()
	if errors.Is(err, goredis.Nil) || (err == nil && len(h) == 0) {
		return nil, retrysafe.ErrNotFound
	}
	if err != nil {
		return nil, s.fail(ctx, "get", err)
	}
	rec, err := decodeRecord(h)
	if err != nil {
		return nil, retrysafe.Unavailable("get", err)
	}
	if rec.Expired(params.Now) {
		return nil, retrysafe.ErrNotFound
	}
	return rec, nil
}

// Extend moves the lease to params.Now + params.Lease, or with
// params.Abandon marks the attempt abandoned and leaves the lease as it
// is, and stores params.Checkpoint (written at params.Now) if it is not
// nil, if params.Token still owns the processing record, in one round
// trip; otherwise it returns [retrysafe.ErrLeaseLost].
func (s *Store) Extend(ctx context.Context, params *retrysafe.ExtendParams) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now, err := encodeTime(params.Now)
	if err != nil {
		return err
	}
	lease, err := encodeTime(params.Now.Add(params.Lease))
	if err != nil {
		return err
	}
	px := pxMillis(params.Lease) + pxMillis(s.retention)
	abandon := ""
	if params.Abandon {
		abandon = "1"
	}
	args := []any{params.Token, now, lease, px, abandon}
	if params.Checkpoint != nil {
		args = append(args, checkpointArgs(params.Checkpoint, now)...)
	}
	n, err := extendScript.Run(ctx, s.pipe, []string{s.recordKey(params.Scope, params.Key)}, args...).Int64()
	if err != nil {
		return s.fail(ctx, "extend", err)
	}
	if n != 1 {
		return retrysafe.ErrLeaseLost
	}
	return nil
}

// Complete stores params.Response if params.Token still owns the processing
// record, sets ExpiresAt = Now + TTL (and Redis PX = TTL), and notifies
// subscribers if a waiter marked the record (see [Store.Subscribe]), in one
// round trip; otherwise it returns [retrysafe.ErrLeaseLost].
func (s *Store) Complete(ctx context.Context, params *retrysafe.CompleteParams) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now, err := encodeTime(params.Now)
	if err != nil {
		return err
	}
	expires, err := encodeTime(params.Now.Add(params.TTL))
	if err != nil {
		return err
	}
	k := s.recordKey(params.Scope, params.Key)
	var args []any
	switch resp := params.Response; {
	case resp == nil:
		args = []any{params.Token, now, expires, pxMillis(params.TTL), newNonce()}
	case resp.Body == nil:
		args = []any{params.Token, now, expires, pxMillis(params.TTL), newNonce(), resp.Status, encodeHeader(resp.Header)}
	default:
		args = []any{params.Token, now, expires, pxMillis(params.TTL), newNonce(), resp.Status, encodeHeader(resp.Header), resp.Body}
	}
	if s.waitReplicas > 0 {
		return s.completeWaited(ctx, k, args)
	}
	n, err := completeScript.Run(ctx, s.pipe, []string{k}, args...).Int64()
	if err != nil {
		return s.fail(ctx, "complete", err)
	}
	if n != 1 {
		return retrysafe.ErrLeaseLost
	}
	return nil
}

// completeWaited is Complete's script followed by WAIT.
func (s *Store) completeWaited(ctx context.Context, k string, args []any) error {
	cmd, acked, err := s.runWaited(ctx, completeScript, []string{k}, args...)
	if err != nil {
		return s.fail(ctx, "complete", err)
	}
	n, err := cmd.Int64()
	if err != nil {
		return s.fail(ctx, "complete", err)
	}
	if n != 1 {
		return retrysafe.ErrLeaseLost
	}
	if acked < s.waitReplicas {
		return &ReplicationError{Op: "complete", Want: s.waitReplicas, Acked: acked, Timeout: s.waitTimeout}
	}
	return nil
}

// Release deletes the processing record if params.Token owns it and
// notifies subscribers, in one round trip; otherwise it returns
// [retrysafe.ErrLeaseLost].
func (s *Store) Release(ctx context.Context, params *retrysafe.ReleaseParams) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	k := s.recordKey(params.Scope, params.Key)
	n, err := releaseScript.Run(ctx, s.pipe, []string{k}, params.Token, k).Int64()
	if err != nil {
		return s.fail(ctx, "release", err)
	}
	if n != 1 {
		return retrysafe.ErrLeaseLost
	}
	return nil
}

// newNonce returns a random per-call value that lets a script recognise a
// go-redis retry of a call it already executed.
func newNonce() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}
