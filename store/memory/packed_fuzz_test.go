package memory

import (
	"encoding/hex"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
)

// FuzzPackedRecord packs a completed record of arbitrary strings, header
// and body (completedEntry, with and without the header cache) and checks
// that it comes back exactly: its view, its id, and the record and
// response it unpacks into.
func FuzzPackedRecord(f *testing.F) {
	f.Add("s", "k", "fp", "tok", "POST /orders", "Content-Type", "application/json", "", []byte(`{"id":1}`), false, 201, int64(0), uint8(0))
	f.Add("", "", "", "", "", "", "", "X-Two", []byte{}, true, 0, int64(123456789), uint8(0))
	f.Add("\xff", "k\x00", "f", "t", "r", "A", "\x80", "A", []byte(nil), false, 599, int64(-1), uint8(0))
	f.Add("scope", "0123456789abcdef", "fp", "tok", "", "", "", "", []byte("x"), false, 200, int64(7), uint8(0xff))
	f.Fuzz(func(t *testing.T, scope, key, fp, token, route, name, value, second string, body []byte, nilHeader bool, status int, nsec int64, shape uint8) {
		status = int(int32(status)) // beyond int32 a record is not packed (TestCompletedRecordRoundTrip)
		// shape turns strings into the compact forms' (see form).
		if shape&1 != 0 {
			scope = hex.EncodeToString([]byte(scope))
		}
		if shape&2 != 0 {
			u := hex.EncodeToString([]byte(key + "0123456789abcdef")[:16])
			key = u[:8] + "-" + u[8:12] + "-" + u[12:16] + "-" + u[16:20] + "-" + u[20:]
			if shape&4 != 0 {
				key = strings.ToUpper(key)
			}
		}
		if shape&8 != 0 {
			fp = hex.EncodeToString([]byte(fp))
		}
		if shape&16 != 0 {
			token = hex.EncodeToString([]byte(token))
		}
		var header http.Header
		if !nilHeader {
			header = http.Header{}
			if name != "" {
				header[name] = []string{value, second}
			}
			if second != "" && second != name {
				header[second] = nil
			}
		}
		created := time.Unix(1_700_000_000, nsec%1e9).UTC()
		rec := &retrysafe.Record{Scope: scope, Key: key, Fingerprint: fp, Token: token, Route: route, Attempt: 3,
			State: retrysafe.StateProcessing, CreatedAt: created, UpdatedAt: created, LeaseUntil: created.Add(time.Minute)}
		resp := &retrysafe.Response{Status: status, Header: header, Body: body}
		now, exp := created.Add(time.Second), created.Add(time.Hour)
		for _, hc := range []*headerCache{nil, {}} {
			var a *arena // on its own, and (with the cache) from an arena's chunk
			if hc != nil {
				a = new(arena)
			}
			e := completedEntry(rec, resp, now, exp, hc, a)
			if e.rec != nil || e.next != nil {
				t.Fatalf("not packed: rec %v, next %v", e.rec, e.next)
			}
			if got := e.id(); got != (id{scope, key}) || !e.is(id{scope, key}) {
				t.Fatalf("id = %q, want %q", got, id{scope, key})
			}
			want := *rec
			want.State, want.UpdatedAt, want.ExpiresAt = retrysafe.StateCompleted, now, exp
			if v := e.view(); v != want {
				t.Fatalf("view:\n got  %+v\n want %+v", v, want)
			}
			u := e.unpacked(hc)
			got := u.rec
			if u.next != nil || u.done() == nil || u.expired(exp) != true || u.expired(now) {
				t.Fatalf("unpacked entry: next %v, done %v", u.next, u.done())
			}
			gr := got.Response
			g := *got
			g.Response = nil
			if g != want || gr.Status != status || !reflect.DeepEqual(gr.Header, header) ||
				string(gr.Body) != string(body) || (gr.Body == nil) != (body == nil) {
				t.Fatalf("unpacked:\n got  %+v %+v\n want %+v %+v", g, gr, want, resp)
			}
		}
	})
}
