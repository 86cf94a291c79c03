package memory

import (
	"math"
	"net/http"
	"slices"
	"time"
	"unsafe"

	"github.com/retrysafe/retrysafe"
)

// entry is what the store keeps for one key, behind the map's pointer.
// Entries are the store's own and change in place under its mutex; the
// records they hand out never change.
//
// A processing record is kept as the *Record that Claim returned (the
// entry lives in the same allocation). A completed record, kept until it
// expires and so most of what the store holds, is kept as a [completed]:
// its strings (scope and key included) and body back to back in one
// string, its times as Unix seconds and nanoseconds, all in one allocation
// with the entry. The garbage collector marks every stored record on every
// cycle, and its work grows with the objects and pointers it finds: a
// *Record with its Response, scope, key, fingerprint, token and body is
// seven objects with about fifteen pointers; a completed entry is one
// object with four pointer fields, two of them usually nil (rec, next) and
// none to itself or to anything of the request's (its key and scope
// strings are not kept alive). The *Record and Response that Claim and Get
// return for it are made the first time one asks (a replay) and kept in
// rec for the next ones.
type entry struct {
	// rec is the record Claim and Get return: the processing record, or
	// the completed one once asked for (nil until then).
	rec  *retrysafe.Record
	next *entry // the next entry whose id has the same hash (see table)
	// completed: e is the first field of a completed (see done).
	completed bool
}

// done returns the completed record e is part of, or nil while e holds a
// processing record.
func (e *entry) done() *completed {
	if !e.completed {
		return nil
	}
	return (*completed)(unsafe.Pointer(e)) // e is completed's first field
}

// id returns the scope and key of e's record.
func (e *entry) id() id {
	if e.rec != nil {
		return id{e.rec.Scope, e.rec.Key}
	}
	c := e.done()
	data := c.data()
	return id{data[:c.scopeLen], data[c.scopeLen : c.scopeLen+c.keyLen]}
}

// is reports whether e holds the record of i.
func (e *entry) is(i id) bool {
	if e.rec != nil {
		return e.rec.Key == i.key && e.rec.Scope == i.scope
	}
	c := e.done()
	data := c.data()
	return data[c.scopeLen:c.scopeLen+c.keyLen] == i.key && data[:c.scopeLen] == i.scope
}

// completed is a completed record in the compact form (see entry), with
// the entry that points to it.
type completed struct {
	entry              // first: see entry.done
	header http.Header // the stored response's header map (read-only, may be shared)
	loc    *time.Location
	sec    [4]int64 // CreatedAt, UpdatedAt, LeaseUntil, ExpiresAt: Unix seconds
	nsec   [4]int32 // and nanoseconds
	// attempt and status are the record's Attempt and the response's
	// Status; scopeLen, keyLen, fpLen, tokLen and routeLen the lengths of
	// the strings at the start of data.
	attempt, status                           int32
	scopeLen, keyLen, fpLen, tokLen, routeLen uint16
	dataLen                                   uint16 // see data
	nilBody                                   bool   // the stored body was nil (not empty)
}

// data returns the record's strings and body, back to back: scope, key,
// fingerprint, token, route, then the body. They are stored right after c,
// in the same allocation (see completedEntry): computed from c's address,
// not kept in a pointer field, so the collector has one pointer less to
// follow per record.
func (c *completed) data() string {
	if c.dataLen == 0 {
		return ""
	}
	return unsafe.String((*byte)(unsafe.Add(unsafe.Pointer(c), unsafe.Sizeof(*c))), int(c.dataLen))
}

// Indexes into completed.sec and completed.nsec.
const (
	createdAt = iota
	updatedAt
	leaseUntil
	expiresAt
)

// time returns the n-th time, in UTC: enough for comparisons.
func (c *completed) time(n int) time.Time { return time.Unix(c.sec[n], int64(c.nsec[n])) }

// expired reports whether e holds a completed record that expired at now.
func (e *entry) expired(now time.Time) bool {
	c := e.done()
	return c != nil && !now.Before(c.time(expiresAt))
}

// view returns the record e holds, without an allocation: a completed
// one not yet made (rec is nil) without its response, its strings sharing
// e's memory. For filters.
func (e *entry) view() retrysafe.Record {
	if e.rec != nil {
		return *e.rec
	}
	c := e.done()
	data := c.data()
	i := e.id()
	fp := c.scopeLen + c.keyLen
	tok := fp + c.fpLen
	route := tok + c.tokLen
	body := route + c.routeLen
	return retrysafe.Record{
		Scope:       i.scope,
		Key:         i.key,
		Fingerprint: data[fp:tok],
		State:       retrysafe.StateCompleted,
		Token:       data[tok:route],
		Attempt:     int(c.attempt),
		Route:       data[route:body],
		CreatedAt:   c.time(createdAt).In(c.loc),
		UpdatedAt:   c.time(updatedAt).In(c.loc),
		LeaseUntil:  c.time(leaseUntil).In(c.loc),
		ExpiresAt:   c.time(expiresAt).In(c.loc),
	}
}

// record returns the record e holds, made once and kept (see entry). The
// caller holds the store's mutex.
func (e *entry) record() *retrysafe.Record {
	if e.rec == nil {
		e.rec = e.decode()
	}
	return e.rec
}

// decoded is a completed record as Claim and Get return it: the Record,
// its Response and the ClaimResult a replay's Claim returns, in one
// allocation. A completed entry's rec, once set, is always the rec of a
// decoded (see replay).
type decoded struct {
	rec  retrysafe.Record // first: see replay
	resp retrysafe.Response
	res  retrysafe.ClaimResult // {Record: &rec}
}

// newDecoded returns a decoded of rec with resp.
func newDecoded(rec retrysafe.Record, resp retrysafe.Response) *decoded {
	d := &decoded{rec: rec, resp: resp}
	d.rec.Response = &d.resp
	d.res.Record = &d.rec
	return d
}

// replay returns the answer to a Claim of the completed record e holds:
// made once, with the record, and then the same for every replay.
func (e *entry) replay() *retrysafe.ClaimResult {
	rec := e.record()
	return &(*decoded)(unsafe.Pointer(rec)).res // rec is a decoded's first field
}

// decode makes the completed record e holds, as a decoded. Its strings and
// body share the memory of e's data, which never changes: the Record and
// Response are read-only, like every record the store hands out.
func (e *entry) decode() *retrysafe.Record {
	c := e.done()
	d := newDecoded(e.view(), retrysafe.Response{Status: int(c.status), Header: c.header})
	switch body := c.data()[c.scopeLen+c.keyLen+c.fpLen+c.tokLen+c.routeLen:]; {
	case c.nilBody:
	case body == "":
		d.resp.Body = []byte{}
	default:
		d.resp.Body = unsafe.Slice(unsafe.StringData(body), len(body))
	}
	return &d.rec
}

// completedEntry returns the entry for the record rec completed with resp
// (nil means an empty response) at now, expiring at exp. It copies resp
// and its body, and keeps only its header map.
//
// The entry and its data are one allocation, in three sizes: 160, 224
// and 352 bytes of data (288, 352 and 480 bytes in all, each a size class
// of Go's allocator) hold a 36-byte key (a UUID), a 64-byte fingerprint
// and a 32-byte token with a body of up to 28, 92 and 220 bytes (less a
// scope's length: the default, a hashed Authorization header, takes 64).
// A larger record, and the rare one whose times are in different
// locations, keeps a *Record, as Claim and Get return it.
func completedEntry(rec *retrysafe.Record, resp *retrysafe.Response, now, exp time.Time) *entry {
	var r retrysafe.Response // resp's fields; zero for a nil resp
	if resp != nil {
		r = *resp
	}
	times := [4]time.Time{rec.CreatedAt, now, rec.LeaseUntil, exp}
	loc := times[0].Location()
	n := len(rec.Scope) + len(rec.Key) + len(rec.Fingerprint) + len(rec.Token) + len(rec.Route) + len(r.Body)
	compact := n <= 352 && rec.Attempt == int(int32(rec.Attempt)) && r.Status == int(int32(r.Status))
	for _, s := range [...]string{rec.Scope, rec.Key, rec.Fingerprint, rec.Token, rec.Route} {
		compact = compact && len(s) <= math.MaxUint16
	}
	for _, t := range times[1:] {
		compact = compact && t.Location() == loc
	}

	var (
		c   *completed
		buf []byte // c's room for data
	)
	switch {
	case !compact:
		c = new(completed)
		done := *rec
		done.State = retrysafe.StateCompleted
		done.UpdatedAt, done.ExpiresAt = now, exp
		// A copy, as in the compact form: the caller may reuse the body
		// (see Store.CopiesResponse). The header map is kept.
		c.rec = &newDecoded(done, retrysafe.Response{Status: r.Status, Header: r.Header, Body: slices.Clone(r.Body)}).rec
	case n <= 160:
		a := new(struct {
			c completed
			b [160]byte
		})
		c, buf = &a.c, a.b[:0:n]
	case n <= 224:
		a := new(struct {
			c completed
			b [224]byte
		})
		c, buf = &a.c, a.b[:0:n]
	default:
		a := new(struct {
			c completed
			b [352]byte
		})
		c, buf = &a.c, a.b[:0:n]
	}
	c.completed = true
	c.loc = loc
	for k, t := range times {
		c.sec[k], c.nsec[k] = t.Unix(), int32(t.Nanosecond())
	}
	c.attempt, c.status, c.header = int32(rec.Attempt), int32(r.Status), r.Header
	if !compact {
		return &c.entry
	}
	c.scopeLen, c.keyLen = uint16(len(rec.Scope)), uint16(len(rec.Key))
	c.fpLen, c.tokLen, c.routeLen = uint16(len(rec.Fingerprint)), uint16(len(rec.Token)), uint16(len(rec.Route))
	c.nilBody = r.Body == nil
	buf = append(buf, rec.Scope...)
	buf = append(buf, rec.Key...)
	buf = append(buf, rec.Fingerprint...)
	buf = append(buf, rec.Token...)
	buf = append(buf, rec.Route...)
	buf = append(buf, r.Body...)
	// buf is the array right after c (see completed.data); nothing writes
	// it again.
	c.dataLen = uint16(len(buf))
	return &c.entry
}
