package memory

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"reflect"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/cputime"
)

// TestCompletedRecordRoundTrip: a completed record comes back from Get,
// Claim, List and Find exactly as it was completed, whichever form the
// store keeps it in (packed, or a *Record for times in a zone or in
// different locations, or a status beyond int32): every field, the body's
// bytes, a nil body as nil and an empty one as empty, the header, the
// times in their locations. The record Get and Claim return is made once
// and shared.
func TestCompletedRecordRoundTrip(t *testing.T) {
	t.Parallel()
	paris := time.FixedZone("CET", 3600)
	utc := time.Date(2026, 5, 1, 12, 0, 0, 123456789, time.UTC)
	local := time.Now()
	for _, tc := range []struct {
		name       string
		claimed    time.Time // the claim's Now
		completed  time.Time // the completion's Now
		body       []byte
		route      string
		attempt    bool // take the record over once first (Attempt 2)
		status     int  // 0: 201
		wantPacked bool
	}{
		{"nil body", utc, utc.Add(time.Second), nil, "", false, 0, true},
		{"empty body", utc, utc.Add(time.Second), []byte{}, "POST /orders", false, 0, true},
		{"small", utc, utc.Add(time.Second), []byte(`{"id":"ord_1"}`), "POST /orders", false, 0, true},
		{"local", local, local.Add(time.Second), []byte(strings.Repeat("m", 100)), "", false, 0, true},
		{"large", utc, utc.Add(time.Second), []byte(strings.Repeat("l", 100_000)), "", true, 0, true},
		{"status beyond int32", utc, utc.Add(time.Second), []byte("x"), "", false, 1 << 40, false},
		{"locations differ", utc, utc.Add(time.Second).In(paris), []byte("x"), "", false, 0, false},
		{"in a zone", utc.In(paris), utc.Add(time.Second).In(paris), []byte("x"), "", false, 0, false},
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
			// Monotonic readings are not kept (no other store keeps them).
			for _, tm := range []*time.Time{&want.CreatedAt, &want.UpdatedAt, &want.LeaseUntil, &want.ExpiresAt} {
				*tm = tm.Round(0)
			}

			i := id{"scope", "k"}
			sh, h := s.shardFor(i)
			sh.mu.Lock()
			packed := sh.records.get(h, i).rec == nil
			sh.mu.Unlock()
			if packed != tc.wantPacked {
				t.Errorf("kept packed: %v, want %v", packed, tc.wantPacked)
			}

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
			// The first answer is made for its caller (see replayAt); from
			// the second on, one record is kept and shared. An unpacked
			// record is shared from the first.
			if again != dup.Record || (get == dup.Record) == tc.wantPacked {
				t.Errorf("Get, Claim, Get returned %p, %p, %p: want the second and third the same, the first %s",
					get, dup.Record, again, map[bool]string{true: "made for its caller", false: "the same"}[tc.wantPacked])
			}

			list, err := s.List(ctx, &retrysafe.ListParams{WithBodies: true, State: retrysafe.StateCompleted, Route: tc.route})
			if err != nil || len(list) != 1 {
				t.Fatalf("List: %d records, %v", len(list), err)
			}
			check(t, "List", list[0], &want)
			if list[0] == get || list[0].Response == get.Response {
				t.Errorf("List returned the stored record, want a copy")
			}
			found, err := s.Find(ctx, &retrysafe.FindParams{Key: "k"})
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
// with == (so in the same location too) and the body's nil-ness kept.
func check(t *testing.T, what string, got, want *retrysafe.Record) {
	t.Helper()
	g, w := *got, *want
	g.Response, w.Response = nil, nil
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

// TestStatsCountsCompleted: Stats counts completed records (kept
// packed) as StatsOf does: completed, failed (status >= 400, not
// expired), expired.
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
	st, err := s.Stats(ctx, &retrysafe.StatsParams{Now: base.Add(30 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if st.Completed != 4 || st.Failed != 1 || st.Expired != 2 || st.Processing != 1 || st.OldestInFlight == nil {
		t.Errorf("Stats = %+v, want 4 completed, 1 failed (the expired 404 counts as expired), 2 expired, 1 processing in flight", st)
	}
}

// TestCompletedRecordConcurrentReaders: claims and gets of one completed
// record racing each other (the first of them makes its *Record) all
// get the same, intact record; run with -race.
func TestCompletedRecordConcurrentReaders(t *testing.T) {
	t.Parallel()
	s := New(Config{JanitorInterval: -1})
	t.Cleanup(func() { s.Close() })
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
	// The first reader's record is made for it; every later one gets the
	// record kept from the second (see replayAt).
	seen := map[*retrysafe.Record]int{}
	for range readers {
		rec := <-got
		seen[rec]++
		if rec == nil || rec.State != retrysafe.StateCompleted || rec.Token != p.Token || string(rec.Response.Body) != string(body) || rec.Response.Status != 201 {
			t.Errorf("record = %+v", rec)
		}
	}
	if len(seen) != 2 {
		t.Errorf("readers got %d different *Records (%v): want the first's and one shared by the rest", len(seen), seen)
	}
}

// BenchmarkGetCompleted: Get of a completed record the first time (the
// store makes the *Record from its packed form) and again (kept).
func BenchmarkGetCompleted(b *testing.B) {
	for _, again := range []bool{false, true} {
		b.Run(map[bool]string{false: "first", true: "again"}[again], func(b *testing.B) {
			s := New(Config{JanitorInterval: -1})
			defer s.Close()
			ctx := context.Background()
			keys := make([]string, b.N)
			for n := range keys {
				keys[n] = fmt.Sprintf("%036d", n)
				p := &retrysafe.ClaimParams{Key: keys[n], Fingerprint: strings.Repeat("f", 64), Token: retrysafe.NewToken(), Now: base, Lease: time.Minute}
				if _, err := s.Claim(ctx, p); err != nil {
					b.Fatal(err)
				}
				resp := &retrysafe.Response{Status: 201, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"id":"ord_1"}`)}
				if err := s.Complete(ctx, &retrysafe.CompleteParams{Key: keys[n], Token: p.Token, Now: base, TTL: time.Hour, Response: resp}); err != nil {
					b.Fatal(err)
				}
				for range map[bool]int{false: 0, true: 2}[again] { // the second Get keeps the record
					if _, err := s.Get(ctx, &retrysafe.GetParams{Key: keys[n], Now: base}); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for n := range b.N {
				if _, err := s.Get(ctx, &retrysafe.GetParams{Key: keys[n], Now: base}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkNewKey: Claim and Complete of a fresh key, the store growing
// by one record per iteration (as under a stream of new requests), with a
// header map shared by every response, as the middleware stores it.
// cpu-ns/op is the process's CPU time per key (the collector's included).
func BenchmarkNewKey(b *testing.B) {
	nk := newKeyBench(b, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cputime.Process()
	for n := range b.N {
		nk.run(b, n)
	}
	b.ReportMetric(float64(cputime.Process()-cpu0)/float64(b.N), "cpu-ns/op")
}

// BenchmarkNewKeyParallel is BenchmarkNewKey from GOMAXPROCS goroutines,
// each taking its keys in runs of 1024 (one shared counter per key would
// measure the counter). Compare its cpu-ns/op with BenchmarkNewKey's: the
// difference is what running on several cores at once adds per key
// (docs/performance.md, "Tenth round").
func BenchmarkNewKeyParallel(b *testing.B) {
	const run = 1024
	nk := newKeyBench(b, b.N+run*runtime.GOMAXPROCS(0))
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cputime.Process()
	b.RunParallel(func(pb *testing.PB) {
		var n, end int
		for pb.Next() {
			if n == end {
				n = int(next.Add(run)) - run
				end = n + run
			}
			nk.run(b, n)
			n++
		}
	})
	b.ReportMetric(float64(cputime.Process()-cpu0)/float64(b.N), "cpu-ns/op")
}

// newKeyRun is the state of BenchmarkNewKey and BenchmarkNewKeyParallel.
type newKeyRun struct {
	s      *Store
	fp     string
	keys   []string
	tokens []string
	resp   *retrysafe.Response
}

// newKeyBench makes a store and n keys for it, closed when b ends.
func newKeyBench(b *testing.B, n int) *newKeyRun {
	s := New(Config{JanitorInterval: -1, MaxRecords: 1 << 30})
	b.Cleanup(func() { s.Close() })
	nk := &newKeyRun{
		s:      s,
		fp:     strings.Repeat("f", 64),
		keys:   make([]string, n),
		tokens: make([]string, 64),
		resp:   &retrysafe.Response{Status: 201, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"id":"ord_1"}`)},
	}
	for i := range nk.keys {
		nk.keys[i] = fmt.Sprintf("%036d", i)
	}
	for i := range nk.tokens {
		nk.tokens[i] = retrysafe.NewToken()
	}
	return nk
}

// run claims and completes the n-th key.
func (nk *newKeyRun) run(b *testing.B, n int) {
	ctx := context.Background()
	p := retrysafe.ClaimParams{Scope: "POST /orders", Key: nk.keys[n], Fingerprint: nk.fp, Token: nk.tokens[n%len(nk.tokens)], Now: base, Lease: time.Minute}
	if _, err := nk.s.Claim(ctx, &p); err != nil {
		b.Fatal(err)
	}
	if err := nk.s.Complete(ctx, &retrysafe.CompleteParams{Scope: p.Scope, Key: p.Key, Token: p.Token, Now: base, TTL: time.Hour, Response: nk.resp}); err != nil {
		b.Fatal(err)
	}
}

// TestCompletedKeepsNoRequestStrings: a packed completed record holds its
// scope and key in its own data, not the strings the claim was made with
// (which would keep the request's header strings alive, one object each).
func TestCompletedKeepsNoRequestStrings(t *testing.T) {
	t.Parallel()
	s := New(Config{JanitorInterval: -1})
	t.Cleanup(func() { s.Close() })
	ctx := t.Context()
	scope, key := strings.Repeat("s", 64), "00000000-0000-4000-8000-000000000001"
	p := &retrysafe.ClaimParams{Scope: scope, Key: key, Fingerprint: strings.Repeat("f", 64), Token: retrysafe.NewToken(), Now: base, Lease: time.Minute}
	if _, err := s.Claim(ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, &retrysafe.CompleteParams{Scope: scope, Key: key, Token: p.Token, Now: base, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	i := id{scope, key}
	sh, h := s.shardFor(i)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.records.get(h, i)
	if e == nil || e.done() == nil || e.rec != nil {
		t.Fatalf("entry = %+v, want a packed completed one", e)
	}
	data := e.done().data()
	within := func(s string) bool {
		start := uintptr(unsafe.Pointer(unsafe.StringData(data)))
		p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
		return start <= p && p+uintptr(len(s)) <= start+uintptr(len(data))
	}
	// The scope is kept as it is, in the data; the key, a UUID, as its
	// 16 bytes, made again when asked for.
	if c := e.done(); c.form(formScope) != formRaw || c.form(formKey) != formUUID || c.keyLen != 16 {
		t.Fatalf("forms %b, key length %d: want the scope raw and the key as a UUID's bytes", c.forms, c.keyLen)
	}
	same := func(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }
	got := e.id()
	if got != i || !within(got.scope) || same(got.key, key) {
		t.Fatalf("id = %v (scope in its data: %v; key the claim's: %v), want %v held by the entry", got, within(got.scope), same(got.key, key), i)
	}
	if rec := e.view(); rec.Scope != scope || rec.Key != key || !within(rec.Scope) || same(rec.Key, key) || rec.Fingerprint != p.Fingerprint {
		t.Fatalf("view = %+v", rec)
	}
}

// TestCompletedLayout checks what completed.data and entry.done rely on:
// the entry is the first field of a completed, and a completed's size
// keeps the data after it, and the next one, aligned.
func TestCompletedLayout(t *testing.T) {
	t.Parallel()
	if off := unsafe.Offsetof(completed{}.entry); off != 0 {
		t.Fatalf("entry at offset %d of completed, want 0", off)
	}
	if size := unsafe.Sizeof(completed{}); size%unsafe.Alignof(completed{}) != 0 {
		t.Fatalf("completed is %d bytes, not a multiple of its alignment", size)
	}
}

// TestPackedKeepsNothing: a completed record, packed, keeps nothing of
// the response it was completed with: the header map and its values
// (and the body) can be collected once Complete returned (and the store
// encoded another header), and the record still replays them.
func TestPackedKeepsNothing(t *testing.T) {
	s := quietStore(t)
	collected := make(chan string, 2)
	values := []string{"application/json"}
	body := []byte(`{"id":"ord_1"}`)
	runtime.AddCleanup(&values[0], func(what string) { collected <- what }, "header values")
	runtime.AddCleanup(&body[0], func(what string) { collected <- what }, "body")
	completeKey(t, s, "k", &retrysafe.Response{Status: 201, Header: http.Header{"Content-Type": values}, Body: body})
	values, body = nil, nil
	// The store keeps the last header map it encoded, not to encode it
	// again (see headerCache): another one takes its place.
	completeKey(t, s, "k2", &retrysafe.Response{Status: 201, Header: http.Header{}})
	for n, cycles := 0, 0; n < 2; cycles++ {
		if cycles == 100 {
			t.Fatalf("%d of the response's header values and body collected after %d cycles: the store keeps the rest alive", n, cycles)
		}
		runtime.GC()
		select {
		case <-collected:
			n++
		case <-time.After(10 * time.Millisecond):
		}
	}
	rec, err := s.Get(t.Context(), &retrysafe.GetParams{Scope: "s", Key: "k", Now: base})
	if err != nil || rec.Response.Header.Get("Content-Type") != "application/json" || string(rec.Response.Body) != `{"id":"ord_1"}` {
		t.Fatalf("Get = %+v, %v", rec, err)
	}
}

// TestUnpackedHeaderShared: records completed with equal headers, as an
// API's responses mostly are, share one header map once replayed; a
// record with another header gets its own, and each keeps its values.
func TestUnpackedHeaderShared(t *testing.T) {
	t.Parallel()
	s := quietStore(t)
	json := http.Header{"Content-Type": {"application/json"}}
	headers := []http.Header{
		json,
		json, // the same map, as the middleware stores it
		{"Content-Type": {"text/plain"}},
		{"Content-Type": {"application/json"}},
	}
	var got []http.Header
	for n, h := range headers {
		key := fmt.Sprint("k", n)
		completeKey(t, s, key, &retrysafe.Response{Status: 201, Header: h})
		rec, err := s.Get(t.Context(), &retrysafe.GetParams{Scope: "s", Key: key, Now: base})
		if err != nil || !reflect.DeepEqual(rec.Response.Header, h) {
			t.Fatalf("Get %s = %+v, %v; want header %v", key, rec, err, h)
		}
		got = append(got, rec.Response.Header)
	}
	same := func(a, b http.Header) bool {
		return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
	}
	if !same(got[0], got[1]) || same(got[1], got[2]) || same(got[2], got[3]) {
		t.Errorf("header maps shared: 0-1 %v, 1-2 %v, 2-3 %v; want true, false, false", same(got[0], got[1]), same(got[1], got[2]), same(got[2], got[3]))
	}
}

// TestHeaderCacheEncode: the same map is encoded once; another map, even
// with equal fields, is encoded anew.
func TestHeaderCacheEncode(t *testing.T) {
	t.Parallel()
	var hc headerCache
	a, b := http.Header{"A": {"1"}}, http.Header{"A": {"2"}}
	first := hc.encode(a)
	if again := hc.encode(a); unsafe.StringData(again) != unsafe.StringData(first) {
		t.Error("the same map was encoded again")
	}
	if got := decodeHeader(hc.encode(b)); !reflect.DeepEqual(got, b) {
		t.Errorf("another map: decoded %v, want %v", got, b)
	}
	if got := decodeHeader(hc.encode(a)); !reflect.DeepEqual(got, a) {
		t.Errorf("the first map again: decoded %v, want %v", got, a)
	}
}

// TestHeaderEncoding: appendHeader and decodeHeader round-trip every
// header exactly (nil and empty value slices, empty and non-UTF-8 values,
// lengths that take several bytes), and headerLen is the encoding's
// length.
func TestHeaderEncoding(t *testing.T) {
	t.Parallel()
	many := http.Header{}
	for n := range 200 {
		many[fmt.Sprintf("X-Name-%d", n)] = []string{strings.Repeat("v", n)}
	}
	for _, h := range []http.Header{
		{},
		{"Content-Type": {"application/json"}},
		{"A": nil, "B": {}, "C": {""}, "D": {"1", "2", "3"}},
		{"X-Bytes": {"\xff\x00\xfe"}, strings.Repeat("N", 200): {strings.Repeat("v", 20000)}},
		many,
	} {
		enc := appendHeader([]byte("prefix"), h)
		if got := len(enc) - len("prefix"); got != headerLen(h) {
			t.Errorf("headerLen = %d, encoding is %d bytes", headerLen(h), got)
		}
		if got := decodeHeader(string(enc[len("prefix"):])); !reflect.DeepEqual(got, h) {
			t.Errorf("decoded %v, want %v", got, h)
		}
	}
	if headerLen(nil) != 0 || len(appendHeader(nil, nil)) != 0 {
		t.Error("a nil header is not encoded as nothing")
	}
}

// TestReplayClaimAllocates: a replay's Claim of a completed record
// allocates nothing once the record was asked for (its answer is made with
// it and shared), and every replay gets the same read-only answer.
func TestReplayClaimAllocates(t *testing.T) {
	s := New(Config{JanitorInterval: -1})
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	p := &retrysafe.ClaimParams{Scope: "s", Key: "k", Fingerprint: strings.Repeat("f", 64), Token: retrysafe.NewToken(), Now: base, Lease: time.Minute}
	if _, err := s.Claim(ctx, p); err != nil {
		t.Fatal(err)
	}
	resp := &retrysafe.Response{Status: 201, Body: []byte(`{"id":"ord_1"}`)}
	if err := s.Complete(ctx, &retrysafe.CompleteParams{Scope: "s", Key: "k", Token: p.Token, Now: base, TTL: time.Hour, Response: resp}); err != nil {
		t.Fatal(err)
	}
	replay := *p
	replay.Token = retrysafe.NewToken()
	var first *retrysafe.ClaimResult
	for range 2 { // the first replay's answer is made for it; the second's is kept
		res, err := s.Claim(ctx, &replay)
		if err != nil || res.Claimed || res.Record.State != retrysafe.StateCompleted || string(res.Record.Response.Body) != `{"id":"ord_1"}` {
			t.Fatalf("replay Claim = %+v, %v", res, err)
		}
		if res == first {
			t.Fatal("the first replay's answer was kept")
		}
		first = res
	}
	allocs := testing.AllocsPerRun(100, func() {
		res, err := s.Claim(ctx, &replay)
		if err != nil || res != first {
			t.Fatalf("replay Claim = %p, %v; want the first answer %p", res, err, first)
		}
	})
	if allocs != 0 {
		t.Errorf("a replay's Claim allocates %.1f times, want 0", allocs)
	}
}

// TestPackedTimes: a packed record keeps its times as Unix nanoseconds,
// the zero time included; a time beyond them (before 1678, after 2262)
// keeps the record unpacked, and its expiry still compares right.
func TestPackedTimes(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 8, 0, 0, 987654321, time.UTC)
	for _, tc := range []struct {
		name       string
		created    time.Time
		exp        time.Time
		wantPacked bool
	}{
		{"within", now.Add(-time.Second), now.Add(time.Hour), true},
		{"created zero", time.Time{}, now.Add(time.Hour), true},
		{"expires after 2262", now, time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC), false},
		{"created before 1678", time.Date(1600, 1, 1, 0, 0, 0, 1, time.UTC), now.Add(time.Hour), false},
	} {
		rec := &retrysafe.Record{Scope: "s", Key: "k", Fingerprint: "fp", Token: "t", Attempt: 1,
			State: retrysafe.StateProcessing, CreatedAt: tc.created, UpdatedAt: tc.created, LeaseUntil: now}
		e := completedEntry(rec, &retrysafe.Response{Status: 201}, now, tc.exp, nil, nil)
		if packed := e.rec == nil; packed != tc.wantPacked {
			t.Errorf("%s: packed %v, want %v", tc.name, packed, tc.wantPacked)
			continue
		}
		v := e.view()
		if v.CreatedAt != tc.created || v.UpdatedAt != now || v.LeaseUntil != now || v.ExpiresAt != tc.exp {
			t.Errorf("%s: times %v %v %v %v", tc.name, v.CreatedAt, v.UpdatedAt, v.LeaseUntil, v.ExpiresAt)
		}
		if e.expired(tc.exp.Add(-time.Nanosecond)) || !e.expired(tc.exp) {
			t.Errorf("%s: expired wrong around %v", tc.name, tc.exp)
		}
	}
}
