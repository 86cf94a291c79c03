package sealed

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/retrysafe/retrysafe"
)

// The check record: a completed record that a wrapper with a ring leaves
// in the store it wraps, holding a digest of the ring's HMAC key, so that
// an instance without the ring, or with another HMAC key, refuses to
// start instead of missing every stored record. (Scopes are kept under
// the HMAC, so such an instance would not find them, and every retry of a
// request stored before would run again.)
const (
	// CheckScope and CheckKey name the check record. The scope is not a
	// hex digest, so it is no caller's scope.
	CheckScope = "retrysafe:encryption"
	CheckKey   = "hmac-check"
	checkTTL   = 50 * 365 * 24 * time.Hour
)

// checkValue is what the check record of a ring holds: 16 hex digits of
// an HMAC of a constant, which tells two HMAC keys apart and reveals
// nothing of them.
func (r *KeyRing) checkValue() string {
	m := hmac.New(sha256.New, r.index.scopeKey)
	m.Write([]byte("retrysafe check v1"))
	return hex.EncodeToString(m.Sum(nil))[:16]
}

// Check makes sure that s, a Store that [New] returned, and the store it
// wraps agree on the HMAC key. With a ring it writes the check record when
// there is none and fails when the record holds another key's digest.
// Without a ring it fails when the record is there: the store holds
// records kept under the HMAC, which this instance would not find. Call
// it once at start (retrysafe serve does).
//
// To turn encryption off for good, let the records stored with it expire,
// then delete the check record (retrysafe keys delete --scope
// retrysafe:encryption hmac-check).
func Check(ctx context.Context, s retrysafe.Store) error {
	w, ok := retrysafe.As[*store](s)
	if !ok {
		return errors.New("sealed: Check needs a store that sealed.New returned")
	}
	for range 3 { // a concurrent first start may win the claim
		rec, err := w.inner.Get(ctx, &retrysafe.GetParams{Scope: CheckScope, Key: CheckKey, Now: time.Now()})
		switch {
		case err == nil && w.ring == nil:
			return fmt.Errorf("sealed: the store holds records encrypted at rest (its %s/%s record is there) and no key ring is configured: give the key ring (retrysafe serve: --encryption-keys-file or RETRYSAFE_ENCRYPTION_KEYS); without it no stored record would be found and retries would run again", CheckScope, CheckKey)
		case err == nil && rec.State == retrysafe.StateProcessing:
			// Being written (or its writer died): claim it below, which
			// waits for a live lease and takes an expired one over.
		case err == nil && (rec.Response == nil || string(rec.Response.Body) != w.ring.checkValue()):
			return fmt.Errorf("sealed: the store's records are kept under another %s key than this key ring's: every instance sharing a store needs the same %s entry (with another one no stored record would be found, and retries would run again)", HMACKeyID, HMACKeyID)
		case err == nil:
			return nil
		case !errors.Is(err, retrysafe.ErrNotFound):
			return err
		case w.ring == nil:
			return nil
		}
		now := time.Now()
		p := &retrysafe.ClaimParams{Scope: CheckScope, Key: CheckKey, Fingerprint: CheckKey, Token: retrysafe.NewToken(), Now: now, Lease: time.Minute}
		res, err := w.inner.Claim(ctx, p)
		if err != nil {
			return err
		}
		if !res.Claimed {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		err = w.inner.Complete(ctx, &retrysafe.CompleteParams{Scope: CheckScope, Key: CheckKey, Token: p.Token, Now: now, TTL: checkTTL,
			Response: &retrysafe.Response{Status: 200, Body: []byte(w.ring.checkValue())}})
		if err != nil {
			return err
		}
		return nil
	}
	return errors.New("sealed: the check record keeps changing: another instance is writing it")
}
