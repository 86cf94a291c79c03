package memory

import (
	"cmp"
	"fmt"
	"net/http"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
)

// TestCompletedRecordRoundTrip: a completed record comes back from Get,
// Claim, List and Find as it was completed: every field, the body's
// bytes, a nil body as nil and an empty one as empty, the header, the
// times as the same instants (in UTC: the store keeps Unix nanoseconds,
// as the SQL stores do, not the location or the monotonic reading).
// Every read decodes a record of its own.
func TestCompletedRecordRoundTrip(t *testing.T) {
	t.Parallel()
	paris := time.FixedZone("CET", 3600)
	utc := time.Date(2026, 5, 1, 12, 0, 0, 123456789, time.UTC)
	local := time.Now()
	for _, tc := range []struct {
		name      string
		claimed   time.Time // the claim's Now
		completed time.Time // the completion's Now
		body      []byte
		route     string
		attempt   bool // take the record over once first (Attempt 2)
		status    int  // 0: 201
	}{
		{"nil body", utc, utc.Add(time.Second), nil, "", false, 0},
		{"empty body", utc, utc.Add(time.Second), []byte{}, "POST /orders", false, 0},
		{"small", utc, utc.Add(time.Second), []byte(`{"id":"ord_1"}`), "POST /orders", false, 0},
		{"local", local, local.Add(time.Second), []byte(strings.Repeat("m", 100)), "", false, 0},
		{"large", utc, utc.Add(time.Second), []byte(strings.Repeat("l", 100_000)), "", true, 0},
		{"status beyond int32", utc, utc.Add(time.Second), []byte("x"), "", false, 1 << 40},
		{"locations differ", utc, utc.Add(time.Second).In(paris), []byte("x"), "", false, 0},
		{"in a zone", utc.In(paris), utc.Add(time.Second).In(paris), []byte("x"), "", false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := New(Config{JanitorInterval: -1})
			t.Cleanup(func() { s.Close() })
			ctx := t.Context()
			fp := strings.Repeat("f", 64)
			p := &retrysafe.ClaimParams{Scope: "scope", Key: "k", Fingerprint: fp, Token: retrysafe.NewToken(), Now: tc.claimed, Lease: time.Minute, Route: tc.route}
			res, err := s.Claim(ctx, p)
			if err != nil || !res.Claimed {
				t.Fatalf("Claim: %+v, %v", res, err)
			}
			if tc.attempt {
				p.Token, p.Now = retrysafe.NewToken(), tc.claimed.Add(2*time.Minute)
				if res, err = s.Claim(ctx, p); err != nil || !res.Claimed {
					t.Fatalf("takeover: %+v, %v", res, err)
				}
			}
			status := cmp.Or(tc.status, http.StatusCreated)
			header := http.Header{"Content-Type": {"application/json"}, "X-Two": {"a", "b"}}
			resp := &retrysafe.Response{Status: status, Header: header, Body: tc.body}
			if err := s.Complete(ctx, &retrysafe.CompleteParams{Scope: "scope", Key: "k", Token: p.Token, Now: tc.completed, TTL: time.Hour, Response: resp}); err != nil {
				t.Fatal(err)
			}
			want := *res.Record
			want.State = retrysafe.StateCompleted
			want.UpdatedAt, want.ExpiresAt = tc.completed, tc.completed.Add(time.Hour)
			want.Response = &retrysafe.Response{Status: status, Header: header, Body: tc.body}

			get, err := s.Get(ctx, &retrysafe.GetParams{Scope: "scope", Key: "k", Now: tc.completed})
			if err != nil {
				t.Fatal(err)
			}
			check(t, "Get", get, &want)
			p.Token, p.Now = retrysafe.NewToken(), tc.completed.Add(time.Minute)
			dup, err := s.Claim(ctx, p)
			if err != nil || dup.Claimed {
				t.Fatalf("duplicate Claim: %+v, %v", dup, err)
			}
			check(t, "duplicate Claim", dup.Record, &want)
			again, err := s.Get(ctx, &retrysafe.GetParams{Scope: "scope", Key: "k", Now: tc.completed})
			if err != nil {
				t.Fatal(err)
			}
			check(t, "Get again", again, &want)
			if again != dup.Record || dup.Record == get {
				// Records a store returns are read-only: a completed
				// record read twice is kept decoded, and the reads after
				// the first share it.
				t.Errorf("Get, Claim, Get returned %p, %p, %p: want the second and third to share a record", get, dup.Record, again)
			}

			list, err := s.List(ctx, &admin.ListParams{WithBodies: true, State: retrysafe.StateCompleted, Route: tc.route})
			if err != nil || len(list) != 1 {
				t.Fatalf("List: %d records, %v", len(list), err)
			}
			check(t, "List", list[0], &want)
			if list[0] == get || list[0].Response == get.Response {
				t.Errorf("List returned the stored record, want a copy")
			}
			found, err := s.Find(ctx, &admin.FindParams{Key: "k"})
			if err != nil || len(found) != 1 {
				t.Fatalf("Find: %d records, %v", len(found), err)
			}
			noBody := want
			noBody.Response = &retrysafe.Response{Status: status, Header: header}
			check(t, "Find without bodies", found[0], &noBody)
		})
	}
}

// check fails unless got equals want field by field, times compared
// with Equal (and got's in UTC), and the body's nil-ness kept.
func check(t *testing.T, what string, got, want *retrysafe.Record) {
	t.Helper()
	g, w := *got, *want
	g.Response, w.Response = nil, nil
	for _, tt := range []struct{ g, w *time.Time }{{&g.CreatedAt, &w.CreatedAt}, {&g.UpdatedAt, &w.UpdatedAt}, {&g.LeaseUntil, &w.LeaseUntil}, {&g.ExpiresAt, &w.ExpiresAt}} {
		if tt.g.Equal(*tt.w) && (tt.g.IsZero() || tt.g.Location() == time.UTC) {
			*tt.g = *tt.w
		}
	}
	if g != w {
		t.Errorf("%s:\n got  %+v\n want %+v", what, g, w)
	}
	gr, wr := got.Response, want.Response
	if gr == nil || gr.Status != wr.Status || !reflect.DeepEqual(gr.Header, wr.Header) ||
		string(gr.Body) != string(wr.Body) || (gr.Body == nil) != (wr.Body == nil) {
		t.Errorf("%s: response %s, want %s", what, describeResponse(gr), describeResponse(wr))
	}
}

func describeResponse(r *retrysafe.Response) string {
	if r == nil {
		return "<nil>"
	}
	return fmt.Sprintf("{%d %v body=%q nil=%v}", r.Status, r.Header, r.Body, r.Body == nil)
}

// TestStatsCountsCompleted: Stats counts completed records as StatsOf
// does: completed, failed (status >= 400, not expired), expired.
func TestStatsCountsCompleted(t *testing.T) {
	t.Parallel()
	s := New(Config{JanitorInterval: -1})
	t.Cleanup(func() { s.Close() })
	ctx := t.Context()
	for n, tc := range []struct {
		status int
		ttl    time.Duration
	}{{200, time.Hour}, {500, time.Hour}, {404, time.Second}, {201, time.Second}} {
		p, err := claim(t, s, fmt.Sprint("done-", n), base)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Complete(ctx, &retrysafe.CompleteParams{Scope: "s", Key: p.Key, Token: p.Token, Now: base, TTL: tc.ttl, Response: &retrysafe.Response{Status: tc.status}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := claim(t, s, "processing", base); err != nil {
		t.Fatal(err)
	}
	st, err := s.Stats(ctx, &admin.StatsParams{Now: base.Add(30 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if st.Completed != 4 || st.Failed != 1 || st.Expired != 2 || st.Processing != 1 || st.OldestInFlight == nil {
		t.Errorf("Stats = %+v, want 4 completed, 1 failed (the expired 404 counts as expired), 2 expired, 1 processing in flight", st)
	}
}

// TestCompletedRecordConcurrentReaders: claims and gets of one completed
// record racing each other all get it intact; run with -race.
func TestCompletedRecordConcurrentReaders(t *testing.T) {
	t.Parallel()
	s := quietStore(t)
	ctx := t.Context()
	p, err := claim(t, s, "k", base)
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"id":"ord_1"}`)
	if err := s.Complete(ctx, &retrysafe.CompleteParams{Scope: "s", Key: "k", Token: p.Token, Now: base, TTL: time.Hour,
		Response: &retrysafe.Response{Status: 201, Header: http.Header{"Content-Type": {"application/json"}}, Body: body}}); err != nil {
		t.Fatal(err)
	}
	const readers = 8
	got := make(chan *retrysafe.Record, readers)
	start := make(chan struct{})
	for n := range readers {
		go func() {
			<-start
			var rec *retrysafe.Record
			if n%2 == 0 {
				rec, _ = s.Get(ctx, &retrysafe.GetParams{Scope: "s", Key: "k", Now: base})
			} else {
				res, _ := s.Claim(ctx, &retrysafe.ClaimParams{Scope: "s", Key: "k", Fingerprint: "fp", Token: retrysafe.NewToken(), Now: base, Lease: time.Minute})
				if res != nil {
					rec = res.Record
				}
			}
			got <- rec // nil on an error, which fails the comparison
		}()
	}
	close(start)
	for range readers {
		rec := <-got
		if rec == nil || rec.State != retrysafe.StateCompleted || rec.Token != p.Token || string(rec.Response.Body) != string(body) || rec.Response.Status != 201 {
			t.Errorf("record = %+v", rec)
		}
	}
}

// TestCompleteCopiesResponse: Complete keeps a copy of the response, so
// a caller that reuses its header map and body buffer once Complete
// returned (as a middleware that pools them would) changes no stored
// record.
func TestCompleteCopiesResponse(t *testing.T) {
	t.Parallel()
	s := quietStore(t)
	header := http.Header{"Content-Type": {"application/json"}}
	body := []byte(`{"id":"ord_1"}`)
	completeKey(t, s, "k", &retrysafe.Response{Status: 201, Header: header, Body: body})
	header["Content-Type"][0] = "text/plain"
	header.Set("X-Later", "1")
	copy(body, "XXXXXXXXXXXXXX")
	rec, err := s.Get(t.Context(), &retrysafe.GetParams{Scope: "s", Key: "k", Now: base})
	if err != nil {
		t.Fatal(err)
	}
	if got := rec.Response; string(got.Body) != `{"id":"ord_1"}` || len(got.Header) != 1 || got.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("stored response %s changed with the caller's buffers", describeResponse(got))
	}
}

// TestReturnedRecordsNeverChange: a record handed out by Claim or Get
// stays as it was while the store's record moves on (renewed, completed,
// taken over, deleted): every change stores a new *Record.
func TestReturnedRecordsNeverChange(t *testing.T) {
	t.Parallel()
	s := quietStore(t)
	ctx := t.Context()
	p := &retrysafe.ClaimParams{Scope: "s", Key: "k", Fingerprint: "fp", Token: retrysafe.NewToken(), Now: base, Lease: time.Minute}
	res, err := s.Claim(ctx, p)
	if err != nil || !res.Claimed {
		t.Fatalf("Claim: %+v, %v", res, err)
	}
	claimed, snapshot := res.Record, *res.Record
	if err := s.Extend(ctx, &retrysafe.ExtendParams{Scope: "s", Key: "k", Token: p.Token, Now: base.Add(time.Second), Lease: time.Hour}); err != nil {
		t.Fatal(err)
	}
	extended, err := s.Get(ctx, &retrysafe.GetParams{Scope: "s", Key: "k", Now: base.Add(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	extendedSnapshot := *extended
	if err := s.Complete(ctx, &retrysafe.CompleteParams{Scope: "s", Key: "k", Token: p.Token, Now: base.Add(2 * time.Second), TTL: time.Hour, Response: &retrysafe.Response{Status: 201}}); err != nil {
		t.Fatal(err)
	}
	done, err := s.Get(ctx, &retrysafe.GetParams{Scope: "s", Key: "k", Now: base.Add(2 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	doneSnapshot := *done
	if err := s.Delete(ctx, "s", "k"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what      string
		got, want retrysafe.Record
	}{{"claimed", *claimed, snapshot}, {"extended", *extended, extendedSnapshot}, {"completed", *done, doneSnapshot}} {
		if c.got != c.want {
			t.Errorf("%s record changed after it was returned:\n now %+v\n was %+v", c.what, c.got, c.want)
		}
	}
	if extended.LeaseUntil != base.Add(time.Second+time.Hour) || snapshot.LeaseUntil != base.Add(time.Minute) || done.State != retrysafe.StateCompleted {
		t.Errorf("records: claimed %+v, extended %+v, completed %+v", snapshot, extendedSnapshot, doneSnapshot)
	}
}

// TestHeaderRoundTrip: a completed record's header comes back exactly as
// it was stored: nil as nil and empty as empty, a name's nil values as nil
// and empty ones as empty, the order of values, strings long enough that
// their lengths take more than one byte, and a text longer than the
// buffer newText starts with.
func TestHeaderRoundTrip(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("v", 300)
	many := http.Header{}
	for n := range 40 {
		many[fmt.Sprintf("X-Name-%d", n)] = []string{fmt.Sprint(n), long[:n]}
	}
	for name, header := range map[string]http.Header{
		"nil":          nil,
		"empty":        {},
		"nil values":   {"X-Nil": nil, "Content-Type": {"application/json"}},
		"empty values": {"X-Empty": {}, "Content-Type": {"application/json"}},
		"order":        {"X-Two": {"b", "a", "b"}, "X-One": {""}},
		"long":         {long: {long, "", long + long}},
		"many":         many,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := quietStore(t)
			completeKey(t, s, "k", &retrysafe.Response{Status: 200, Header: header, Body: []byte("b")})
			rec, err := s.Get(t.Context(), &retrysafe.GetParams{Scope: "s", Key: "k", Now: base})
			if err != nil {
				t.Fatal(err)
			}
			if got := rec.Response.Header; !reflect.DeepEqual(got, header) || (got == nil) != (header == nil) {
				t.Fatalf("header %#v, want %#v", got, header)
			}
			for name, vs := range rec.Response.Header {
				if cap(vs) != len(vs) {
					t.Errorf("values of %q: capacity %d beyond their %d: an append would reach the next name's", name, cap(vs), len(vs))
				}
			}
		})
	}
}

// TestCompletedRecordObjects: a completed record is two objects in the Go
// heap, its text and its body, whatever its header, so that a garbage
// collection has little to mark per record (an entry larger than a map
// keeps in its slots, or a map key holding the caller's string, would be
// a third). Not parallel: it counts the heap's objects.
func TestCompletedRecordObjects(t *testing.T) {
	s := quietStore(t)
	const n = 10_000
	header := http.Header{"Content-Type": {"application/json"}, "Location": {"/orders/1"}}
	body := []byte(`{"id":"ord_1"}`)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for k := range n {
		// A key of the caller's own, which the store must not keep (its
		// map's keys are strings of the entry's text).
		completeKey(t, s, fmt.Sprint("key-", k), &retrysafe.Response{Status: 201, Header: header, Body: body})
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perRecord := float64(after.HeapObjects-before.HeapObjects) / n
	t.Logf("%.2f objects, %d bytes live per completed record", perRecord, (after.HeapAlloc-before.HeapAlloc)/n)
	if perRecord > 2.5 {
		t.Errorf("a completed record holds %.2f heap objects, want 2 (its text and its body)", perRecord)
	}
}
