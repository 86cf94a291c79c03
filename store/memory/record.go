package memory

import (
	"encoding/binary"
	"net/http"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/headercodec"
)

// How a record is kept. The store holds many completed records for as
// long as their TTL, and every garbage collection marks what they point
// to, so a record is kept in a few objects the collector need not look
// into: times as Unix nanoseconds (a time.Time holds a *time.Location),
// every string of the record and of its response's header in one string
// (the entry's text), and the body and the checkpoint's data as byte
// slices. A completed record is then its slot in the shard's map (the map
// key's strings are the entry's own, see Store.put) and two objects, the
// text and the body. Reads decode a fresh *retrysafe.Record from it.

// entry is one stored record, made once (by newEntry) and never changed.
// It is 128 bytes, small enough for the map to keep it in its own slots
// rather than in an object of its own (TestCompletedRecordObjects counts).
// Only its read and readOnce fields change after it is stored (shard.read).
type entry struct {
	text       string // see newText
	body       []byte // the response's body, nil for a nil body (completed records)
	checkpoint []byte // the checkpoint's data, nil for nil (when hasCheckpoint)

	// Unix nanoseconds, 0 for the zero time (see nanos).
	created, updated, leaseUntil, expires, checkpointAt int64

	status int // the response's status (completed records)
	// read is the completed record as its second read decoded it (see
	// shard.read), shared by the reads after it: records a store returns
	// are read-only. readOnce marks a record read once. A record read at
	// most once, as most are, keeps no decoded copy for the collector to
	// scan.
	read                                          *view
	attempt                                       int32
	completed, abandoned, hasCheckpoint, readOnce bool
}

// The strings of an entry's text, in this order.
const (
	fieldScope = iota
	fieldKey
	fieldFingerprint
	fieldToken
	fieldRoute
	fieldCheckpoint // the checkpoint's name
	numFields
)

// newEntry returns the entry that keeps rec, a processing record, with
// its checkpoint. It copies the checkpoint's data: the caller may reuse it
// once newEntry returns. Strings cannot change; their bytes are copied
// into the entry's text only to make it one object.
func newEntry(rec *retrysafe.Record) entry {
	e := entry{
		created:    nanos(rec.CreatedAt),
		updated:    nanos(rec.UpdatedAt),
		leaseUntil: nanos(rec.LeaseUntil),
		attempt:    int32(rec.Attempt),
		abandoned:  rec.Abandoned,
	}
	fields := [numFields]string{rec.Scope, rec.Key, rec.Fingerprint, rec.Token, rec.Route, ""}
	if cp := rec.Checkpoint; cp != nil {
		fields[fieldCheckpoint] = cp.Name
		e.setCheckpoint(cp)
	}
	e.text = newText(fields, nil)
	return e
}

// setCheckpoint sets e's checkpoint, but for its name (a field of the
// text), to a copy of cp.
func (e *entry) setCheckpoint(cp *retrysafe.Checkpoint) {
	e.hasCheckpoint = true
	e.checkpointAt = nanos(cp.At)
	e.checkpoint = nil
	if cp.Data != nil {
		e.checkpoint = append([]byte{}, cp.Data...)
	}
}

// newText returns an entry's text: each field (a uvarint length, then
// the bytes), then the response header in internal/headercodec's encoding
// (nothing for a nil header or a processing record).
func newText(fields [numFields]string, header http.Header) string {
	var buf [512]byte // most records fit: one allocation, the string
	b := buf[:0]
	for _, f := range fields {
		b = append(binary.AppendUvarint(b, uint64(len(f))), f...)
	}
	return string(headercodec.Append(b, header))
}

// text reads an entry's text from the start, in the order newText wrote
// it.
type text struct {
	s string
	i int // where the next read starts
}

// number reads a uvarint.
func (t *text) number() int {
	n := 0
	for shift := 0; ; shift += 7 {
		c := t.s[t.i]
		t.i++
		n |= int(c&0x7f) << shift
		if c < 0x80 {
			return n
		}
	}
}

// fields reads the fields.
func (t *text) fields() [numFields]string {
	var f [numFields]string
	for k := range f {
		f[k] = t.string()
	}
	return f
}

// string reads a string: it shares the text's bytes.
func (t *text) string() string {
	n := t.number()
	t.i += n
	return t.s[t.i-n : t.i]
}

// header reads the rest of the text as a header (nil when there is
// none): its names and values share the text's bytes (see
// headercodec.DecodeString).
func (t *text) header() http.Header {
	if t.i == len(t.s) {
		return nil
	}
	h, err := headercodec.DecodeString(t.s[t.i:])
	if err != nil {
		panic("memory: an entry's header does not decode: " + err.Error()) // newText wrote it
	}
	return h
}

// fields returns the fields of e's text.
func (e *entry) fields() [numFields]string {
	t := text{s: e.text}
	return t.fields()
}

// id returns the scope and key of e, which share e's text.
func (e *entry) id() id {
	t := text{s: e.text}
	return id{scope: t.string(), key: t.string()}
}

// token returns the owner token of e.
func (e *entry) token() string { return e.fields()[fieldToken] }

// view is a record decoded from an entry, as a read returns it: the
// record, its response, and the claim result that carries it, in one
// allocation.
type view struct {
	res  retrysafe.ClaimResult
	rec  retrysafe.Record
	resp retrysafe.Response
}

// decode returns the record e keeps, fresh, in a claim result that did
// not claim it. Its strings share e's text, and its body and the
// checkpoint's data share e's bytes, which are never modified: records a
// store returns are read-only. Without withHeader, a completed record's
// response carries no header (Stats needs none).
func (e *entry) decode(withHeader bool) *view {
	t := text{s: e.text}
	f := t.fields()
	state, resp := retrysafe.StateProcessing, retrysafe.Response{}
	if e.completed {
		state, resp = retrysafe.StateCompleted, retrysafe.Response{Status: e.status, Body: e.body}
		if withHeader {
			resp.Header = t.header()
		}
	}
	var cp *retrysafe.Checkpoint
	if e.hasCheckpoint {
		cp = &retrysafe.Checkpoint{Name: f[fieldCheckpoint], Data: e.checkpoint, At: at(e.checkpointAt)}
	}
	v := &view{
		rec: retrysafe.Record{
			Scope:       f[fieldScope],
			Key:         f[fieldKey],
			Fingerprint: f[fieldFingerprint],
			State:       state,
			Token:       f[fieldToken],
			Attempt:     int(e.attempt),
			Route:       f[fieldRoute],
			CreatedAt:   at(e.created),
			UpdatedAt:   at(e.updated),
			LeaseUntil:  at(e.leaseUntil),
			ExpiresAt:   at(e.expires),
			Abandoned:   e.abandoned,
			Checkpoint:  cp,
		},
		resp: resp,
	}
	if e.completed {
		v.rec.Response = &v.resp
	}
	v.res.Record = &v.rec
	return v
}

// claimed returns the result of a claim that stored rec, in one
// allocation, leaving rec itself unchanged.
func claimed(rec *retrysafe.Record) *retrysafe.ClaimResult {
	v := &view{rec: *rec}
	v.res = retrysafe.ClaimResult{Claimed: true, Record: &v.rec}
	return &v.res
}

// expired reports whether e is a completed record whose result has
// expired at now ([retrysafe.Record.Expired]).
func (e *entry) expired(now time.Time) bool {
	return e.completed && !now.Before(at(e.expires))
}

// nanos returns t in Unix nanoseconds, 0 for the zero time. Times from
// 1678 to 2262 are kept exactly, as in the SQL stores; the location and
// the monotonic clock reading are not kept.
func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// at reverses nanos, in UTC.
func at(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}
