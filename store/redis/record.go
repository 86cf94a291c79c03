package redis

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/headercodec"
)

// Hash field names of a record.
const (
	fScope   = "scope"
	fKey     = "key"
	fFP      = "fp"
	fState   = "state"
	fToken   = "token"
	fAttempt = "attempt"
	fCreated = "created"
	fUpdated = "updated"
	fLease   = "lease"
	fExpires = "expires"
	fStatus  = "status"
	fHeader  = "header"
	fBody    = "body"
	fRoute   = "route" // absent when empty
	fNonce   = "nonce" // of the call that claimed (a retry recognises itself)

	fAbandoned = "abandoned" // "1" when the owner abandoned the attempt; absent otherwise
	fCPName    = "cpname"    // the checkpoint's name; absent without a checkpoint
	fCPAt      = "cpat"      // when the checkpoint was written
	fCPData    = "cpdata"    // its data; absent when the data is nil
)

// recordFields are the fields List reads; listFieldsNoBody omits the body.
var (
	recordFields = []string{fScope, fKey, fFP, fState, fToken, fAttempt,
		fCreated, fUpdated, fLease, fExpires, fStatus, fRoute, fAbandoned,
		fCPName, fCPAt, fCPData, fHeader, fBody}
	listFieldsNoBody = recordFields[:len(recordFields)-1]
)

// year1Unix is -time.Time{}.Unix(): seconds from 0001-01-01 to 1970-01-01.
const year1Unix = 62135596800

// maxEncodedSec bounds the 12-digit seconds field (about year 31690).
const maxEncodedSec = 999_999_999_999

// encodeTime returns t as 21 decimal digits: 12 of seconds since
// 0001-01-01 UTC and 9 of nanoseconds. Fixed width keeps the field exact
// (Lua numbers are doubles) and comparable in the scripts.
func encodeTime(t time.Time) (string, error) {
	sec := t.Unix() + year1Unix
	if sec < 0 || sec > maxEncodedSec {
		return "", fmt.Errorf("retrysafe/redis: time %s out of range", t)
	}
	var b [21]byte
	putDigits(b[:12], uint64(sec))
	putDigits(b[12:], uint64(t.Nanosecond()))
	return string(b[:]), nil
}

// putDigits writes v into b as len(b) decimal digits, zero-padded; v must
// fit.
func putDigits(b []byte, v uint64) {
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = byte('0' + v%10)
		v /= 10
	}
}

// exactTime returns t as decodeTime(encodeTime(t)) does: in UTC, without a
// monotonic reading, for a t that encodeTime accepts.
func exactTime(t time.Time) time.Time {
	return time.Unix(t.Unix(), int64(t.Nanosecond())).UTC()
}

// decodeTime parses what encodeTime wrote. The result is in UTC.
func decodeTime(s string) (time.Time, error) {
	if len(s) != 21 {
		return time.Time{}, fmt.Errorf("bad time %q", s)
	}
	sec, err1 := strconv.ParseInt(s[:12], 10, 64)
	nsec, err2 := strconv.ParseInt(s[12:], 10, 64)
	if err1 != nil || err2 != nil {
		return time.Time{}, fmt.Errorf("bad time %q", s)
	}
	return time.Unix(sec-year1Unix, nsec).UTC(), nil
}

// pxMillis returns d in whole milliseconds, rounded up, at least 1: a valid
// PX argument.
func pxMillis(d time.Duration) int64 {
	if d <= 0 {
		return 1
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// errCorrupt marks a hash that is not a record this store wrote.
var errCorrupt = errors.New("retrysafe/redis: corrupt record")

// decodeRecord builds a Record from a hash's fields; a field missing from h
// is absent from the hash (a zero time, no response, or a nil body).
func decodeRecord(h map[string]string) (*retrysafe.Record, error) {
	rec := &retrysafe.Record{
		Scope:       h[fScope],
		Key:         h[fKey],
		Fingerprint: h[fFP],
		State:       retrysafe.State(h[fState]),
		Token:       h[fToken],
		Route:       h[fRoute],
	}
	if rec.State != retrysafe.StateProcessing && rec.State != retrysafe.StateCompleted {
		return nil, fmt.Errorf("%w: state %q", errCorrupt, h[fState])
	}
	var err error
	if rec.Attempt, err = strconv.Atoi(h[fAttempt]); err != nil {
		return nil, fmt.Errorf("%w: attempt: %v", errCorrupt, err)
	}
	for _, f := range []struct {
		name string
		dst  *time.Time
	}{
		{fCreated, &rec.CreatedAt},
		{fUpdated, &rec.UpdatedAt},
		{fLease, &rec.LeaseUntil},
		{fExpires, &rec.ExpiresAt},
	} {
		v, ok := h[f.name]
		if !ok {
			continue
		}
		if *f.dst, err = decodeTime(v); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", errCorrupt, f.name, err)
		}
	}
	switch v, ok := h[fAbandoned]; {
	case ok && v != "1":
		return nil, fmt.Errorf("%w: abandoned %q", errCorrupt, v)
	case ok:
		rec.Abandoned = true
	}
	if rec.Checkpoint, err = decodeCheckpoint(h); err != nil {
		return nil, err
	}
	if rec.State == retrysafe.StateCompleted {
		if _, ok := h[fExpires]; !ok {
			return nil, fmt.Errorf("%w: completed without expiry", errCorrupt)
		}
		if status, ok := h[fStatus]; ok {
			resp := &retrysafe.Response{}
			if resp.Status, err = strconv.Atoi(status); err != nil {
				return nil, fmt.Errorf("%w: status: %v", errCorrupt, err)
			}
			if resp.Header, err = decodeHeader(h[fHeader]); err != nil {
				return nil, fmt.Errorf("%w: header: %v", errCorrupt, err)
			}
			if body, ok := h[fBody]; ok {
				resp.Body = []byte(body)
			}
			rec.Response = resp
		}
	}
	return rec, nil
}

// decodeCheckpoint returns the checkpoint of a record's fields, nil when
// it has none.
func decodeCheckpoint(h map[string]string) (*retrysafe.Checkpoint, error) {
	name, ok := h[fCPName]
	if !ok {
		return nil, nil
	}
	cp := &retrysafe.Checkpoint{Name: name}
	at, ok := h[fCPAt]
	if !ok {
		return nil, fmt.Errorf("%w: checkpoint without its time", errCorrupt)
	}
	var err error
	if cp.At, err = decodeTime(at); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", errCorrupt, fCPAt, err)
	}
	if data, ok := h[fCPData]; ok {
		cp.Data = []byte(data)
	}
	return cp, nil
}

// checkpointArgs returns the script arguments that store cp written at
// now: name and time, and the data unless it is nil (so that a nil Data
// reads back nil and an empty one empty).
func checkpointArgs(cp *retrysafe.Checkpoint, now string) []any {
	if cp.Data == nil {
		return []any{cp.Name, now}
	}
	return []any{cp.Name, now, cp.Data}
}

// encodeHeader returns the header field of h: the binary encoding of
// internal/headercodec, which keeps every byte of names and values, or ""
// for a nil header.
func encodeHeader(h http.Header) string {
	return string(headercodec.Encode(h))
}

// decodeHeader reads a header field: "" is a nil header, anything else
// the binary encoding of internal/headercodec.
func decodeHeader(field string) (http.Header, error) {
	if field == "" {
		return nil, nil
	}
	return headercodec.DecodeString(field)
}

// flatToMap turns a flat [field, value, …] reply into a map.
func flatToMap(flat []any) (map[string]string, error) {
	if len(flat)%2 != 0 {
		return nil, fmt.Errorf("%w: odd field list", errCorrupt)
	}
	h := make(map[string]string, len(flat)/2)
	for i := 0; i < len(flat); i += 2 {
		k, ok1 := flat[i].(string)
		v, ok2 := flat[i+1].(string)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("%w: non-string field", errCorrupt)
		}
		h[k] = v
	}
	return h, nil
}
