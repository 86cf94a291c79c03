package memory

import (
	"encoding/binary"
	"math"
	"net/http"
	"slices"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/headercodec"
)

// entry is what the store keeps for one key, behind a slot of its shard's
// table. Entries are the store's own and change in place under the
// shard's mutex; the records they hand out never change.
//
// A processing record is kept as the *Record that Claim returned (the
// entry lives in the same allocation). A completed record, kept until it
// expires and so most of what the store holds, is kept packed (see
// [completed]): its times as Unix nanoseconds, its strings (scope and key
// included, in their compact forms, see form), header and body encoded
// back to back, in memory without a pointer cut from the table's arena
// (see arena), which the table's slots refer to without a pointer (see
// ref). The garbage collector marks what is reachable on every cycle, and
// memory without pointers is only marked, never scanned: a *Record with
// its Response, scope, key, fingerprint, token, header and body is eight
// or more objects with about fifteen pointers to follow; a packed record
// is a piece of a chunk with none, which the collector does not even
// reach through its slot, and nothing of the request's (its key and scope
// strings, its header map) is kept alive by it.
//
// A packed entry's rec and next are nil, and stay nil: the collector
// would not see what they point to. Where the store needs them (the
// *Record that Claim and Get return, made for the first caller only and
// kept from the second on, see table.replayAt; a chain of entries whose
// ids share a hash), it puts an unpacked copy in the entry's place (see
// unpacked and table.unpackAt). So rec is nil exactly when the entry is
// packed.
type entry struct {
	// rec is the record Claim and Get return: the processing record, or
	// the completed one (nil while the entry is packed).
	rec  *retrysafe.Record
	next *entry // the next entry whose id has the same hash (see table)
	// completed: e is the first field of a completed (see done).
	completed bool
	// replayed: the packed record was returned once, made for that call
	// only (see table.replayAt).
	replayed bool
	// chunk is, for a packed entry cut from the arena, the id + 1 of its
	// chunk (see arena.ref); 0 for any other entry.
	chunk uint32
}

// done returns the completed record e is part of, or nil while e holds a
// processing record.
func (e *entry) done() *completed {
	if !e.completed {
		return nil
	}
	return (*completed)(unsafe.Pointer(e)) // e is completed's first field
}

// id returns the scope and key of e's record. For a packed e whose
// scope or key is stored in a compact form (see form), it makes them.
func (e *entry) id() id {
	if e.rec != nil {
		return id{e.rec.Scope, e.rec.Key}
	}
	c := e.done()
	scope, key, _, _, _, _, _ := c.fields()
	if c.forms&(1<<(2*formBits)-1) != 0 {
		scope, key, _, _ = c.texts(scope, key, "", "")
	}
	return id{scope, key}
}

// is reports whether e holds the record of i.
func (e *entry) is(i id) bool {
	if e.rec != nil {
		return e.rec.Key == i.key && e.rec.Scope == i.scope
	}
	c := e.done()
	scope, key, _, _, _, _, _ := c.fields()
	return equalText(key, c.form(formKey), i.key) && equalText(scope, c.form(formScope), i.scope)
}

// completed is a completed record, with the entry that points to it:
// packed (rec is nil) with its data right after it (see data), or
// unpacked, its record in rec.
type completed struct {
	entry // first: see entry.done
	head
}

// head is a completed record's own fields, without a pointer (so that
// copying one needs no write barrier).
type head struct {
	// times are CreatedAt, UpdatedAt, LeaseUntil and ExpiresAt, as Unix
	// nanoseconds (see packTime).
	times [4]int64
	// attempt and status are the record's Attempt and the response's
	// Status; scopeLen, keyLen, fpLen, tokLen, routeLen and headerLen the
	// stored lengths of the strings (see forms) and the encoded header
	// (see appendHeader) at the start of data, which the body ends.
	attempt, status                 int32
	routeLen, headerLen             uint32
	dataLen                         uint32 // see data
	scopeLen, keyLen, fpLen, tokLen uint16
	// forms are the forms scope, key, fingerprint and token are stored
	// in, formBits each from the lowest (see form).
	forms     uint8
	loc       zone // the times' location
	nilBody   bool // the stored body was nil (not empty)
	nilHeader bool // the stored header was nil (not empty)
}

// The strings of completed.forms, by their place in it.
const (
	formScope = iota
	formKey
	formFP
	formToken
)

// form returns the form of c's n-th string (formScope …).
func (c *completed) form(n int) form { return form(c.forms>>(n*formBits)) & (1<<formBits - 1) }

// texts returns c's scope, key, fingerprint and token, given as stored
// (see fields), as strings: those stored in a compact form are made, in
// one allocation.
func (c *completed) texts(scope, key, fp, token string) (string, string, string, string) {
	return c.textsIn(nil, scope, key, fp, token)
}

// textsIn is texts, making the strings in buf when they fit in its
// capacity. buf must not be used for anything else.
func (c *completed) textsIn(buf []byte, scope, key, fp, token string) (string, string, string, string) {
	parts := [4]*string{&scope, &key, &fp, &token}
	n := 0
	for k, p := range parts {
		n += textLen(*p, c.form(k))
	}
	b := buf[:0]
	if cap(b) < n {
		b = make([]byte, 0, n)
	}
	for k, p := range parts {
		if f := c.form(k); f != formRaw {
			start := len(b)
			b = appendText(b, *p, f)
			*p = unsafe.String(unsafe.SliceData(b[start:]), len(b)-start) // b never changes again
		}
	}
	return scope, key, fp, token
}

// zone is the location of a packed record's times: one of two, so that
// the record holds no pointer (a record whose times are elsewhere is kept
// unpacked).
type zone uint8

const (
	zoneUTC zone = iota
	zoneLocal
)

// zoneOf returns the zone of loc, and false when it is neither.
func zoneOf(loc *time.Location) (zone, bool) {
	switch loc {
	case time.UTC:
		return zoneUTC, true
	case time.Local:
		return zoneLocal, true
	}
	return 0, false
}

// location returns the location of z.
func (z zone) location() *time.Location {
	if z == zoneLocal {
		return time.Local
	}
	return time.UTC
}

// data returns a packed record's strings, encoded header and body, back
// to back: scope, key, fingerprint, token, route, header, body. They are
// stored right after c, in the same allocation (see completedEntry), and
// never change.
func (c *completed) data() string {
	if c.dataLen == 0 {
		return ""
	}
	return unsafe.String((*byte)(unsafe.Add(unsafe.Pointer(c), unsafe.Sizeof(*c))), int(c.dataLen))
}

// fields returns the parts of c's data.
func (c *completed) fields() (scope, key, fp, token, route, header, body string) {
	d := c.data()
	next := func(n uint32) string {
		s := d[:n]
		d = d[n:]
		return s
	}
	scope, key = next(uint32(c.scopeLen)), next(uint32(c.keyLen))
	fp, token = next(uint32(c.fpLen)), next(uint32(c.tokLen))
	route, header = next(c.routeLen), next(c.headerLen)
	return scope, key, fp, token, route, header, d
}

// Indexes into completed.times.
const (
	createdAt = iota
	updatedAt
	leaseUntil
	expiresAt
)

// time returns the n-th time, in UTC: enough for comparisons.
func (c *completed) time(n int) time.Time {
	if c.times[n] == zeroTime {
		return time.Time{}
	}
	return time.Unix(0, c.times[n])
}

// zeroTime stands for the zero time.Time in completed.times.
const zeroTime = math.MinInt64

// The seconds of the times completed.times holds exactly: Unix
// nanoseconds in an int64 (about the years 1678 to 2262).
const (
	minSec = math.MinInt64/int64(time.Second) + 1
	maxSec = math.MaxInt64/int64(time.Second) - 1
)

// packTime returns t as completed.times keeps it, and whether that is
// exact: t is the zero time or its Unix seconds are within minSec and
// maxSec. A time outside is clamped, which keeps comparisons with times
// within right (an unpacked record's times only answer those).
func packTime(t time.Time) (int64, bool) {
	if t.IsZero() {
		return zeroTime, true
	}
	switch sec := t.Unix(); {
	case sec < minSec:
		return zeroTime + 1, false
	case sec > maxSec:
		return math.MaxInt64, false
	default:
		return sec*1e9 + int64(t.Nanosecond()), true
	}
}

// expired reports whether e holds a completed record that expired at now.
func (e *entry) expired(now time.Time) bool {
	c := e.done()
	return c != nil && !now.Before(e.expiresAt())
}

// expiresAt returns the expiry of the completed record e holds: exact,
// from its record when it has one (an unpacked record's times may be
// beyond what completed.times holds).
func (e *entry) expiresAt() time.Time {
	if e.rec != nil {
		return e.rec.ExpiresAt
	}
	return e.done().time(expiresAt)
}

// view returns the record e holds, without an allocation: a packed one
// without its response, its strings sharing e's memory. For filters.
func (e *entry) view() retrysafe.Record { return e.viewIn(nil) }

// viewIn is view, making the strings stored in a compact form in buf when
// they fit (see textsIn).
func (e *entry) viewIn(buf []byte) retrysafe.Record {
	if e.rec != nil {
		return *e.rec
	}
	c := e.done()
	scope, key, fp, token, route, _, _ := c.fields()
	if c.forms != 0 {
		scope, key, fp, token = c.textsIn(buf, scope, key, fp, token)
	}
	loc := c.loc.location()
	return retrysafe.Record{
		Scope:       scope,
		Key:         key,
		Fingerprint: fp,
		State:       retrysafe.StateCompleted,
		Token:       token,
		Attempt:     int(c.attempt),
		Route:       route,
		CreatedAt:   c.time(createdAt).In(loc),
		UpdatedAt:   c.time(updatedAt).In(loc),
		LeaseUntil:  c.time(leaseUntil).In(loc),
		ExpiresAt:   c.time(expiresAt).In(loc),
	}
}

// decoded is a completed record as Claim and Get return it: the Record,
// its Response and the ClaimResult a replay's Claim returns, in one
// allocation. A completed entry's rec is always the rec of a decoded (see
// table.replayAt).
type decoded struct {
	rec  retrysafe.Record // first: see table.replayAt
	resp retrysafe.Response
	res  retrysafe.ClaimResult // {Record: &rec}
}

// fill makes d the record the packed entry e holds. Its strings, header
// values and body share the memory of e's data, which never changes: the
// Record and Response are read-only, like every record the store hands
// out. With a non-nil hc, a header equal to the one hc decoded last is
// that same map.
func (e *entry) fill(d *decoded, hc *headerCache, text []byte) {
	c := e.done()
	_, _, _, _, _, header, body := c.fields()
	d.rec, d.resp = e.viewIn(text), retrysafe.Response{Status: int(c.status)}
	d.rec.Response, d.res.Record = &d.resp, &d.rec
	switch {
	case c.nilHeader:
	case hc != nil:
		d.resp.Header = hc.decode(header)
	default:
		d.resp.Header = decodeHeader(header)
	}
	switch {
	case c.nilBody:
	case body == "":
		d.resp.Body = []byte{}
	default:
		d.resp.Body = unsafe.Slice(unsafe.StringData(body), len(body))
	}
}

// unpacked returns the entry for the record the packed entry e holds,
// unpacked: a new entry (with pointers) whose rec is the decoded record,
// made in the same allocation, keeping e's data alive through it. e's own
// next is nil (see entry). hc is as for fill.
//
// The strings stored in a compact form (see form) are made in the same
// allocation too, when they fit in unpackedText bytes.
func (e *entry) unpacked(hc *headerCache) *entry {
	var c *completed
	var d *decoded
	var text []byte
	if e.done().forms == 0 { // nothing to make: the smaller size class
		u := new(struct {
			c completed
			d decoded
		})
		c, d = &u.c, &u.d
	} else {
		u := new(struct {
			c    completed
			d    decoded
			text [unpackedText]byte // for fill; never written again
		})
		c, d, text = &u.c, &u.d, u.text[:]
	}
	c.completed = true
	c.head = e.done().head // the times, attempt and status (see expired, Stats)
	c.dataLen = 0          // c has no data after it
	e.fill(d, hc, text)
	c.rec = &d.rec
	return &c.entry
}

// decodedOnce returns the record the packed entry e holds, made for one
// caller and not kept: the record, response and claim result, with room
// for the strings in compact form, in one allocation that nothing of the
// store's points to. hc is as for fill.
func (e *entry) decodedOnce(hc *headerCache) *decoded {
	if e.done().forms == 0 {
		d := new(decoded)
		e.fill(d, hc, nil)
		return d
	}
	u := new(struct {
		d    decoded
		text [unpackedText]byte
	})
	e.fill(&u.d, hc, u.text[:])
	return &u.d
}

// unpackedText is room for a UUID key, a fingerprint and a token in their
// text (36+64+32 bytes) and a short scope: the unpacked entry is then 512
// bytes, a size class of its own.
const unpackedText = 160

// headerCache keeps the last header map decoded, with its encoding, and
// the last one encoded. Most responses of an API carry the same few
// headers: records unpacked one after another then share one read-only
// map, as the middleware's stored responses do (one map less per replayed
// record, and less for the collector), and the middleware's one map is
// encoded once, not per record. Safe for concurrent use: the store's
// shards share one, each entry an immutable pair behind an atomic
// pointer.
type headerCache struct {
	dec atomic.Pointer[decodedHeader] // the last header decoded
	enc atomic.Pointer[encodedHeader] // the last header encoded
}

// decodedHeader is a header map and the encoding it was decoded from.
type decodedHeader struct {
	enc string // in the data of a packed record; nothing writes it
	h   http.Header
}

// encodedHeader is a header map and its encoding.
type encodedHeader struct {
	src http.Header
	enc string
}

// encode returns the encoding of h (not nil), made once for the same map
// given again.
func (hc *headerCache) encode(h http.Header) string {
	if c := hc.enc.Load(); c != nil && mapPointer(h) == mapPointer(c.src) {
		return c.enc
	}
	c := &encodedHeader{src: h, enc: string(appendHeader(make([]byte, 0, headerLen(h)), h))}
	hc.enc.Store(c)
	return c.enc
}

// mapPointer returns h's identity: two headers are the same map when
// their pointers are equal.
func mapPointer(h http.Header) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&h)) }

// decode returns decodeHeader(enc), or the same map as the last call when
// enc is equal.
func (hc *headerCache) decode(enc string) http.Header {
	if c := hc.dec.Load(); c != nil && c.enc == enc {
		return c.h
	}
	c := &decodedHeader{enc: enc, h: decodeHeader(enc)}
	hc.dec.Store(c)
	return c.h
}

// maxPacked bounds a packed record's data: its lengths are uint32s, and
// a larger response is kept as its *Record.
const maxPacked = 1 << 30

// completedEntry returns the entry for the record rec completed with resp
// (nil means an empty response) at now, expiring at exp. It copies resp:
// its body and its header, which it encodes (see appendHeader), so it
// keeps nothing of resp's.
//
// The entry is packed (see entry): the entry and its data are bytes cut
// from a (nil: allocated on their own), which the collector never scans.
// The rare record that cannot be packed (times in a location other than
// UTC and Local, or in different locations, or outside what
// completed.times holds; an attempt or a status beyond int32; more than
// maxPacked bytes of data) keeps its *Record, as Claim and Get return it,
// and resp's header map.
//
// With a non-nil hc, a header map equal (the same map) to the one hc
// encoded last is not encoded again: the caller of Complete must not
// modify the response after the call (see [retrysafe.CompleteParams]),
// and the middleware stores one map for most responses of an API.
func completedEntry(rec *retrysafe.Record, resp *retrysafe.Response, now, exp time.Time, hc *headerCache, a *arena) *entry {
	var r retrysafe.Response // resp's fields; zero for a nil resp
	if resp != nil {
		r = *resp
	}
	times := [4]time.Time{rec.CreatedAt, now, rec.LeaseUntil, exp}
	loc := times[0].Location()
	z, pack := zoneOf(loc)
	var packed [4]int64
	for k, t := range times {
		var ok bool
		packed[k], ok = packTime(t)
		pack = pack && ok && t.Location() == loc
	}
	// The scope, key, fingerprint and token in their compact forms, one
	// after the other (see form), made before the record's size is known.
	var scratch [256]byte
	compact := scratch[:0]
	var forms form // formBits each, as completed.forms
	var lens [4]int
	for k, s := range [4]string{formScope: rec.Scope, formKey: rec.Key, formFP: rec.Fingerprint, formToken: rec.Token} {
		n := len(compact)
		var f form
		compact, f = appendCompact(compact, s)
		forms |= f << (k * formBits)
		lens[k] = len(compact) - n
		pack = pack && lens[k] <= math.MaxUint16
	}
	var enc string // r.Header's encoding, when hc has it
	hlen := 0
	switch {
	case hc != nil && r.Header != nil:
		enc = hc.encode(r.Header)
		hlen = len(enc)
	default:
		hlen = headerLen(r.Header)
	}
	n := len(compact) + len(rec.Route) + hlen + len(r.Body)
	pack = pack && n <= maxPacked && rec.Attempt == int(int32(rec.Attempt)) && r.Status == int(int32(r.Status))

	var c *completed
	if !pack {
		c = new(completed)
		done := *rec
		done.State = retrysafe.StateCompleted
		done.UpdatedAt, done.ExpiresAt = now, exp
		// A copy, as in the packed form: the caller may reuse the body
		// (see Store.CopiesResponse). The header map is kept.
		d := &decoded{rec: done, resp: retrysafe.Response{Status: r.Status, Header: r.Header, Body: slices.Clone(r.Body)}}
		d.rec.Response, d.res.Record = &d.resp, &d.rec
		c.rec = &d.rec
	} else {
		// Bytes, so that the allocation has no pointers; c's pointer
		// fields (rec, next) are nil and stay nil.
		raw, chunk := a.alloc(int(unsafe.Sizeof(completed{})) + n)
		c = (*completed)(unsafe.Pointer(unsafe.SliceData(raw)))
		c.chunk = chunk
		c.loc = z
		c.scopeLen, c.keyLen, c.fpLen, c.tokLen = uint16(lens[0]), uint16(lens[1]), uint16(lens[2]), uint16(lens[3])
		c.routeLen, c.headerLen = uint32(len(rec.Route)), uint32(hlen)
		c.nilBody, c.nilHeader = r.Body == nil, r.Header == nil
		c.forms = uint8(forms)
		buf := raw[unsafe.Sizeof(completed{}):][:0]
		buf = append(buf, compact...)
		buf = append(buf, rec.Route...)
		if enc != "" {
			buf = append(buf, enc...)
		} else {
			buf = appendHeader(buf, r.Header)
		}
		buf = append(buf, r.Body...)
		if len(buf) != n {
			// Only a header map changed while it was encoded (the
			// caller's bug) could do this; c.data would then read past
			// the allocation.
			panic("memory: a response's header changed while Complete stored it")
		}
		// buf is the data right after c (see completed.data); nothing
		// writes it again.
		c.dataLen = uint32(len(buf))
	}
	c.completed = true
	c.times = packed // exact when packed; for an unpacked c, they answer expired and Stats
	c.attempt, c.status = int32(rec.Attempt), int32(r.Status)
	return &c.entry
}

// A packed record's header is encoded as the number of names, then each
// field as internal/headercodec encodes it (AppendField). Unlike the
// stores' stored form, there is no version byte and names are in the
// map's order: the encoding never leaves the process.

// headerLen returns the length of h's encoding (0 for nil).
func headerLen(h http.Header) int {
	if h == nil {
		return 0
	}
	var count [binary.MaxVarintLen64]byte
	n := len(binary.AppendUvarint(count[:0], uint64(len(h))))
	for k, vs := range h {
		n += headercodec.FieldLen(k, vs)
	}
	return n
}

// appendHeader appends the encoding of h to b (nothing for nil).
func appendHeader(b []byte, h http.Header) []byte {
	if h == nil {
		return b
	}
	b = binary.AppendUvarint(b, uint64(len(h)))
	for k, vs := range h {
		b = headercodec.AppendField(b, k, vs)
	}
	return b
}

// decodeHeader reverses appendHeader: names and values share enc's
// memory. enc is one that appendHeader made.
func decodeHeader(enc string) http.Header {
	num := func() int {
		n, k := binary.Uvarint(unsafe.Slice(unsafe.StringData(enc), len(enc)))
		enc = enc[k:]
		return int(n)
	}
	str := func() string {
		n := num()
		s := enc[:n]
		enc = enc[n:]
		return s
	}
	names := num()
	h := make(http.Header, names)
	for range names {
		k := str()
		nv := num()
		if nv == 0 {
			h[k] = nil
			continue
		}
		vs := make([]string, nv-1)
		for n := range vs {
			vs[n] = str()
		}
		h[k] = vs
	}
	return h
}
