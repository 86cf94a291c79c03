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
// its strings and body back to back in one string, its times as Unix
// seconds and nanoseconds, all in one allocation with the entry. The
// garbage collector marks every stored record on every cycle, and its
// work grows with the pointers it finds: a *Record with its Response,
// fingerprint, token and body has about fifteen, a completed entry five,
// three of them to itself. The *Record and Response that Claim and Get
// return for it are made the first time one asks (a replay) and kept in
// rec for the next ones.
type entry struct {
	// rec is the record Claim and Get return: the processing record, or
	// the completed one once asked for (nil until then).
	rec  *retrysafe.Record
	done *completed // nil while processing
	id   id         // the record's scope and key
	next *entry     // the next entry whose id has the same hash (see table)
}

// completed is a completed record in the compact form (see entry), with
// the entry that points to it.
type completed struct {
	entry
	data   string      // fingerprint, token, route, then the body
	header http.Header // the stored response's header map (read-only, may be shared)
	loc    *time.Location
	sec    [4]int64 // CreatedAt, UpdatedAt, LeaseUntil, ExpiresAt: Unix seconds
	nsec   [4]int32 // and nanoseconds
	// attempt and status are the record's Attempt and the response's
	// Status; fpLen, tokLen and routeLen the lengths of the strings at the
	// start of data.
	attempt, status         int32
	fpLen, tokLen, routeLen uint16
	nilBody                 bool // the stored body was nil (not empty)
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
	return e.done != nil && !now.Before(e.done.time(expiresAt))
}

// view returns the record e holds, without an allocation: a completed
// one not yet made (rec is nil) without its response, its strings sharing
// e's memory. For filters.
func (e *entry) view() retrysafe.Record {
	if e.rec != nil {
		return *e.rec
	}
	c := e.done
	tok := c.fpLen + c.tokLen
	route := tok + c.routeLen
	return retrysafe.Record{
		Scope:       e.id.scope,
		Key:         e.id.key,
		Fingerprint: c.data[:c.fpLen],
		State:       retrysafe.StateCompleted,
		Token:       c.data[c.fpLen:tok],
		Attempt:     int(c.attempt),
		Route:       c.data[tok:route],
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

// decode makes the completed record e holds, the Record and its Response
// in one allocation. Its strings and body share the memory of e's data,
// which never changes: the Record and Response are read-only, like every
// record the store hands out.
func (e *entry) decode() *retrysafe.Record {
	c := e.done
	r := new(struct {
		rec  retrysafe.Record
		resp retrysafe.Response
	})
	r.rec = e.view()
	r.resp = retrysafe.Response{Status: int(c.status), Header: c.header}
	switch body := c.data[c.fpLen+c.tokLen+c.routeLen:]; {
	case c.nilBody:
	case body == "":
		r.resp.Body = []byte{}
	default:
		r.resp.Body = unsafe.Slice(unsafe.StringData(body), len(body))
	}
	r.rec.Response = &r.resp
	return &r.rec
}

// completedEntry returns the entry for the record rec completed with resp
// (nil means an empty response) at now, expiring at exp. It copies resp
// and its body, and keeps only its header map.
//
// The entry and its data are one allocation, in three sizes: 128, 208
// and 336 bytes of data (240, 320 and 448 bytes in all) hold a 64-byte
// fingerprint and a 32-byte token with a body of up to 32, 112 and 240
// bytes. A larger record, and the rare one whose times are in different
// locations, keeps a *Record, as Claim and Get return it.
func completedEntry(rec *retrysafe.Record, resp *retrysafe.Response, now, exp time.Time) *entry {
	var r retrysafe.Response // resp's fields; zero for a nil resp
	if resp != nil {
		r = *resp
	}
	times := [4]time.Time{rec.CreatedAt, now, rec.LeaseUntil, exp}
	loc := times[0].Location()
	n := len(rec.Fingerprint) + len(rec.Token) + len(rec.Route) + len(r.Body)
	compact := n <= 336 && len(rec.Fingerprint) <= math.MaxUint16 && len(rec.Token) <= math.MaxUint16 && len(rec.Route) <= math.MaxUint16 &&
		rec.Attempt == int(int32(rec.Attempt)) && r.Status == int(int32(r.Status))
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
		done.Response = &retrysafe.Response{Status: r.Status, Header: r.Header, Body: slices.Clone(r.Body)}
		c.rec = &done
	case n <= 128:
		a := new(struct {
			c completed
			b [128]byte
		})
		c, buf = &a.c, a.b[:0:n]
	case n <= 208:
		a := new(struct {
			c completed
			b [208]byte
		})
		c, buf = &a.c, a.b[:0:n]
	default:
		a := new(struct {
			c completed
			b [336]byte
		})
		c, buf = &a.c, a.b[:0:n]
	}
	c.done = c
	c.id = id{rec.Scope, rec.Key}
	c.loc = loc
	for k, t := range times {
		c.sec[k], c.nsec[k] = t.Unix(), int32(t.Nanosecond())
	}
	c.attempt, c.status, c.header = int32(rec.Attempt), int32(r.Status), r.Header
	if !compact {
		return &c.entry
	}
	c.fpLen, c.tokLen, c.routeLen = uint16(len(rec.Fingerprint)), uint16(len(rec.Token)), uint16(len(rec.Route))
	c.nilBody = r.Body == nil
	buf = append(buf, rec.Fingerprint...)
	buf = append(buf, rec.Token...)
	buf = append(buf, rec.Route...)
	buf = append(buf, r.Body...)
	if len(buf) > 0 {
		// Nothing writes buf again, and nothing else holds it.
		c.data = unsafe.String(&buf[0], len(buf))
	}
	return &c.entry
}
