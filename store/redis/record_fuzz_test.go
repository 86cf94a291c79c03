package redis

import (
	"bytes"
	"fmt"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
)

// FuzzTimeCodec: every time in range round-trips exactly through the
// fixed-width encoding, and the encoding orders like the times do (the
// scripts compare the strings).
func FuzzTimeCodec(f *testing.F) {
	f.Add(int64(0), int64(0), int64(1), int64(5))
	f.Add(int64(1_900_000_000), int64(999_999_999), int64(1_900_000_000), int64(0))
	f.Add(int64(-62135596800), int64(0), int64(253402300799), int64(1))
	f.Fuzz(func(t *testing.T, s1, n1, s2, n2 int64) {
		a := time.Unix(s1, n1%1_000_000_000).UTC()
		b := time.Unix(s2, n2%1_000_000_000).UTC()
		ea, errA := encodeTime(a)
		eb, errB := encodeTime(b)
		if errA != nil || errB != nil {
			return // out of range: refused, never mangled
		}
		da, err := decodeTime(ea)
		if err != nil || !da.Equal(a) {
			t.Fatalf("decodeTime(encodeTime(%v)) = %v, %v", a, da, err)
		}
		if want := fmt.Sprintf("%012d%09d", a.Unix()+year1Unix, a.Nanosecond()); ea != want {
			t.Fatalf("encodeTime(%v) = %q, want %q (the format of earlier releases)", a, ea, want)
		}
		// exactTime is decodeTime(encodeTime(t)) without the strings, for
		// any time: a monotonic reading and a location are dropped.
		local := time.Unix(s1, n1%1_000_000_000).In(time.FixedZone("x", 3600))
		if got := exactTime(local); got != da || got.Location() != time.UTC {
			t.Fatalf("exactTime(%v) = %v, want %v", local, got, da)
		}
		if (ea < eb) != a.Before(b) {
			t.Fatalf("order of %q and %q differs from %v and %v", ea, eb, a, b)
		}
	})
}

// FuzzDecodeRecord: arbitrary hash contents never panic; a decoded record
// has a valid state, and re-encoding a decoded response's header yields the
// same header.
func FuzzDecodeRecord(f *testing.F) {
	f.Add("completed", "2", "000063823000000000000", "1", `{"A":["b"]}`, "body")
	f.Add("processing", "1", "000063823000000000000", "", "", "")
	f.Add("x", "nan", "bad", "bad", "{", "")
	f.Add("completed", "1", "000063823000000000000", "200", encodeHeader(http.Header{"A": {"\xe9", ""}, "B": nil}), "\xff")
	f.Add("completed", "1", "000063823000000000000", "200", "\x01\x01\x01", "")
	f.Fuzz(func(t *testing.T, state, attempt, when, status, header, body string) {
		h := map[string]string{
			fScope: "s", fKey: "k", fFP: "fp", fState: state, fToken: "t", fAttempt: attempt,
			fCreated: when, fUpdated: when, fLease: when, fExpires: when,
			fStatus: status, fHeader: header, fBody: body,
			fAbandoned: status, fCPName: header, fCPAt: when, fCPData: body,
		}
		rec, err := decodeRecord(h)
		if err != nil {
			return
		}
		if rec.State != retrysafe.StateProcessing && rec.State != retrysafe.StateCompleted {
			t.Fatalf("decoded state %q", rec.State)
		}
		if !rec.Abandoned || rec.Checkpoint == nil || rec.Checkpoint.Name != header || string(rec.Checkpoint.Data) != body {
			t.Fatalf("abandoned %q and checkpoint (%q, %q) decoded as %v, %+v", status, header, body, rec.Abandoned, rec.Checkpoint)
		}
		if rec.Response == nil {
			return
		}
		enc := encodeHeader(rec.Response.Header)
		var again http.Header
		if rec2, err := decodeRecord(map[string]string{
			fState: string(retrysafe.StateCompleted), fAttempt: "1", fExpires: when,
			fStatus: status, fHeader: enc,
		}); err == nil && rec2.Response != nil {
			again = rec2.Response.Header
		}
		if !reflect.DeepEqual(again, rec.Response.Header) {
			t.Fatalf("header %v re-decoded as %v", rec.Response.Header, again)
		}
	})
}

// FuzzHeaderField: any header, whatever bytes its names and values hold,
// comes back exactly from the header field.
func FuzzHeaderField(f *testing.F) {
	f.Add("Content-Disposition", "attachment; filename=\"r\xe9sum\xe9.pdf\"", "\x00\xff", false)
	f.Add("", "", "", true)
	f.Fuzz(func(t *testing.T, name, v1, v2 string, nilValues bool) {
		h := http.Header{name: {v1, v2}, "Nil": nil}
		if nilValues {
			h[name] = nil
		}
		got, err := decodeHeader(encodeHeader(h))
		if err != nil || !reflect.DeepEqual(got, h) {
			t.Fatalf("header %q came back as %q, %v", h, got, err)
		}
	})
}

// FuzzCheckpointFields: a checkpoint comes back exactly from the fields
// the extend script writes from checkpointArgs (name, time, and data
// unless nil), and a nil Data stays nil, an empty one empty.
func FuzzCheckpointFields(f *testing.F) {
	f.Add("charge requested", []byte("ch_1"), false, int64(1_900_000_000), int64(5))
	f.Add("", []byte{}, true, int64(0), int64(0))
	f.Add("x", []byte("\x00\xff"), false, int64(-62135596800), int64(999_999_999))
	f.Fuzz(func(t *testing.T, name string, data []byte, nilData bool, sec, nsec int64) {
		if nilData {
			data = nil
		}
		at := time.Unix(sec, nsec%1_000_000_000).UTC()
		now, err := encodeTime(at)
		if err != nil {
			return
		}
		cp := &retrysafe.Checkpoint{Name: name, Data: data, At: time.Unix(1, 0)} // At is the write's time, not this
		args := checkpointArgs(cp, now)
		h := map[string]string{}
		for i, field := range []string{fCPName, fCPAt, fCPData}[:len(args)] {
			switch v := args[i].(type) {
			case string:
				h[field] = v
			case []byte:
				h[field] = string(v)
			default:
				t.Fatalf("argument %d is %T", i, v)
			}
		}
		got, err := decodeCheckpoint(h)
		if err != nil || got == nil {
			t.Fatalf("decodeCheckpoint: %+v, %v", got, err)
		}
		if got.Name != name || !got.At.Equal(at) || !bytes.Equal(got.Data, data) || (got.Data == nil) != (data == nil) {
			t.Fatalf("checkpoint (%q, %q, %v) came back as %+v", name, data, at, got)
		}
	})
}
