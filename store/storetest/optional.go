package storetest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
)

func optionalScenarios() []scenario {
	return []scenario{
		{"Pinger", testPinger},
		{"ReadyChecker", testReadyChecker},
		{"Sweeper", testSweeper},
		{"SweepRetention", testSweepRetention},
		{"Notifier", testNotifier},
		{"AdminList", testAdminList},
		{"AdminDelete", testAdminDelete},
		{"AdminFind", testAdminFind},
		{"AdminFindAmongMany", testAdminFindAmongMany},
		{"AdminListEmptyScope", testAdminListEmptyScope},
		{"AdminListFilters", testAdminListFilters},
		{"AdminStats", testAdminStats},
		{"Route", testRoute},
	}
}

func testReadyChecker(t *testing.T, h *harness) {
	rc, ok := retrysafe.As[admin.ReadyChecker](h.s)
	if !ok {
		t.Skip("store does not implement admin.ReadyChecker")
	}
	if err := rc.CheckReady(h.ctx); err != nil {
		t.Fatalf("CheckReady: %v", err)
	}
}

// notifyTimeout bounds how long the suite waits for a notification before
// it fails. It is a bound on a hang, not a speed requirement.
const notifyTimeout = 10 * time.Second

func testPinger(t *testing.T, h *harness) {
	p, ok := retrysafe.As[admin.Pinger](h.s)
	if !ok {
		t.Skip("store does not implement admin.Pinger")
	}
	if err := p.Ping(h.ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
}

// testSweeper: Sweep deletes exactly the completed records with
// ExpiresAt <= Now and reports how many. One call deletes all of them,
// however small BatchSize is: BatchSize bounds each statement (or batch) a
// store runs, not the total. Processing records are kept, even when their
// lease ran out, until ProcessingRetention has passed (see
// testSweepRetention).
func testSweeper(t *testing.T, h *harness) {
	sw, ok := retrysafe.As[admin.Sweeper](h.s)
	if !ok {
		t.Skip("store does not implement admin.Sweeper")
	}
	sweepAt := at(ttl + time.Hour)

	// Completed at Base+i seconds: expired at sweepAt when
	// Base+i+ttl <= sweepAt, that is i <= 3600.
	type rec struct {
		key       string
		completed time.Time // zero: left processing
		lease     time.Duration
		expired   bool
	}
	var recs []rec
	for i := range 7 {
		recs = append(recs, rec{key: fmt.Sprintf("expired-%d", i), completed: at(time.Duration(i) * time.Second), expired: true})
	}
	recs = append(recs,
		rec{key: "expires-exactly-now", completed: at(time.Hour), expired: true},
		rec{key: "live-1", completed: at(time.Hour + time.Second)},
		rec{key: "live-2", completed: at(2 * time.Hour)},
		rec{key: "processing-lease-ran-out", lease: lease},
		rec{key: "processing-live", lease: 48 * time.Hour},
	)
	wantDeleted := 0
	for _, r := range recs {
		p := claimParams(scope1, r.key, fpA, at(0))
		if r.lease != 0 {
			p.Lease = r.lease
		}
		res, err := h.s.Claim(h.ctx, p)
		if err != nil || !res.Claimed {
			t.Fatalf("Claim(%q): %+v, %v", r.key, res, err)
		}
		if !r.completed.IsZero() {
			h.mustComplete(scope1, r.key, p.Token, r.completed, sampleResponse())
		}
		if r.expired {
			wantDeleted++
		}
	}

	n, err := sw.Sweep(h.ctx, &admin.SweepParams{Now: sweepAt, BatchSize: 3})
	if err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	if n != wantDeleted {
		t.Errorf("Sweep with BatchSize 3 deleted %d records, want %d (one call must delete every expired record)", n, wantDeleted)
	}
	for _, r := range recs {
		// Reading at Base+1s, when nothing had expired yet, tells a
		// deleted record from one that only reads as expired.
		_, err := h.s.Get(h.ctx, &retrysafe.GetParams{Scope: scope1, Key: r.key, Now: at(time.Second)})
		switch {
		case r.expired && !errors.Is(err, retrysafe.ErrNotFound):
			t.Errorf("record %q (expired) after Sweep: Get error %v, want ErrNotFound", r.key, err)
		case !r.expired && err != nil:
			t.Errorf("record %q (live or processing) after Sweep: Get error %v, want it kept", r.key, err)
		}
	}

	n, err = sw.Sweep(h.ctx, &admin.SweepParams{Now: sweepAt})
	if err != nil || n != 0 {
		t.Errorf("second Sweep: %d, %v; want 0, nil", n, err)
	}
	// Later, the rest of the completed records expire; processing ones
	// stay while their retention lasts.
	n, err = sw.Sweep(h.ctx, &admin.SweepParams{Now: at(10 * ttl), ProcessingRetention: 30 * ttl})
	if err != nil || n != 2 {
		t.Errorf("Sweep after every completed record expired: %d, %v; want 2, nil", n, err)
	}
	for _, key := range []string{"processing-lease-ran-out", "processing-live"} {
		if rec := h.get(scope1, key, at(10*ttl)); rec.State != retrysafe.StateProcessing {
			t.Errorf("record %q after Sweep: state %q, want processing", key, rec.State)
		}
	}
}

// testSweepRetention: a sweep retires a processing record whose lease ran
// out at least ProcessingRetention before Now (LeaseUntil + retention <=
// Now), keeps one whose lease ran out more recently or is live (Extend and
// takeover move LeaseUntil), and leaves completed records to their TTL.
// Zero means admin.DefaultProcessingRetention; negative is an error.
// A retired record's owner is fenced and its key is free again.
func testSweepRetention(t *testing.T, h *harness) {
	sw, ok := retrysafe.As[admin.Sweeper](h.s)
	if !ok {
		t.Skip("store does not implement admin.Sweeper")
	}
	const retention = 2 * time.Hour
	sweepAt := at(3 * time.Hour)
	claimAt := func(key string, now time.Time, l time.Duration) *retrysafe.ClaimParams {
		t.Helper()
		p := claimParams(scope1, key, fpA, now)
		p.Lease = l
		res, err := h.s.Claim(h.ctx, p)
		if err != nil || !res.Claimed {
			t.Fatalf("Claim(%q): %+v, %v", key, res, err)
		}
		return p
	}
	// Lease ran out at Base+30s, 2h30m before the sweep: retired.
	old := claimAt("abandoned-old", at(0), lease)
	// Lease ran out at Base+1h, exactly retention before the sweep: retired.
	claimAt("abandoned-exactly", at(time.Hour-lease), lease)
	// Lease ran out at Base+1h+1s: one second short of retention, kept.
	claimAt("abandoned-young", at(time.Hour+time.Second-lease), lease)
	// A live lease (until Base+48h): kept.
	claimAt("live", at(0), 48*time.Hour)
	// Claimed at Base, extended at Base+1h: its lease ran out at
	// Base+1h+30s, so it is kept.
	ext := claimAt("extended", at(0), lease)
	if err := h.extend(scope1, "extended", ext.Token, at(time.Hour), lease); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	// Abandoned at Base+30s, taken over at Base+1h: kept.
	claimAt("taken-over", at(0), lease)
	claimAt("taken-over", at(time.Hour), lease)
	// Completed records follow their TTL, not the retention.
	done := claimAt("completed-within-ttl", at(0), lease)
	h.mustComplete(scope1, "completed-within-ttl", done.Token, at(time.Second), sampleResponse())
	short := claimAt("completed-expired", at(0), lease)
	if err := h.s.Complete(h.ctx, &retrysafe.CompleteParams{Scope: scope1, Key: "completed-expired", Token: short.Token,
		Now: at(time.Second), TTL: time.Hour, Response: sampleResponse()}); err != nil {
		t.Fatalf("Complete: %v", err)
	}

	if n, err := sw.Sweep(h.ctx, &admin.SweepParams{Now: sweepAt, ProcessingRetention: -time.Second}); err == nil {
		t.Errorf("Sweep with a negative ProcessingRetention deleted %d records and returned no error", n)
	}
	n, err := sw.Sweep(h.ctx, &admin.SweepParams{Now: sweepAt, BatchSize: 1, ProcessingRetention: retention})
	if err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	if n != 3 {
		t.Errorf("Sweep at Base+3h with a 2h retention deleted %d records, want 3 (two abandoned, one expired)", n)
	}
	for _, tc := range []struct {
		key     string
		deleted bool
	}{
		{"abandoned-old", true},
		{"abandoned-exactly", true},
		{"abandoned-young", false},
		{"live", false},
		{"extended", false},
		{"taken-over", false},
		{"completed-within-ttl", false},
		{"completed-expired", true},
	} {
		// Reading at Base+2s, when every record was there and live, tells
		// a deleted record from one that only reads as expired.
		rec, err := h.s.Get(h.ctx, &retrysafe.GetParams{Scope: scope1, Key: tc.key, Now: at(2 * time.Second)})
		switch {
		case tc.deleted && !errors.Is(err, retrysafe.ErrNotFound):
			t.Errorf("record %q after Sweep: %s, %v; want it deleted", tc.key, describe(rec), err)
		case !tc.deleted && err != nil:
			t.Errorf("record %q after Sweep: Get error %v, want it kept", tc.key, err)
		}
	}
	if n, err := sw.Sweep(h.ctx, &admin.SweepParams{Now: sweepAt, ProcessingRetention: retention}); err != nil || n != 0 {
		t.Errorf("second Sweep: %d, %v; want 0, nil", n, err)
	}

	// The owner of a retired record is fenced; its key runs as new, even
	// with another fingerprint.
	wantLeaseLost(t, "Complete by the owner of a retired record", h.complete(scope1, "abandoned-old", old.Token, sweepAt, sampleResponse()))
	p, rec := h.claimNew(scope1, "abandoned-old", fpB, sweepAt)
	checkProcessing(t, rec, p, 1, sweepAt)
	if err := h.release(scope1, "abandoned-old", p.Token); err != nil {
		t.Fatalf("Release: %v", err)
	}

	// Zero means the default retention: one second before the youngest
	// abandoned lease (Base+1h+30s, extended and taken over) is due, the
	// two others are retired; the live one goes when its own is due.
	youngest := at(time.Hour + lease)
	n, err = sw.Sweep(h.ctx, &admin.SweepParams{Now: youngest.Add(admin.DefaultProcessingRetention - time.Second)})
	if err != nil || n != 2 { // abandoned-young, completed-within-ttl
		t.Errorf("Sweep with the default retention, 1s before the extended and taken-over records are due: %d, %v; want 2 (abandoned-young and the expired completed record)", n, err)
	}
	n, err = sw.Sweep(h.ctx, &admin.SweepParams{Now: youngest.Add(admin.DefaultProcessingRetention)})
	if err != nil || n != 2 {
		t.Errorf("Sweep with the default retention when the extended and taken-over records are due: %d, %v; want 2", n, err)
	}
	if rec := h.get(scope1, "live", at(2*time.Second)); rec.State != retrysafe.StateProcessing {
		t.Errorf("live record: %s", describe(rec))
	}
	n, err = sw.Sweep(h.ctx, &admin.SweepParams{Now: at(48*time.Hour + admin.DefaultProcessingRetention)})
	if err != nil || n != 1 {
		t.Errorf("Sweep with the default retention when the 48h lease is due: %d, %v; want 1", n, err)
	}
}

// waitSignal fails the test unless ch delivers a value within
// notifyTimeout.
func waitSignal(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	timer := time.NewTimer(notifyTimeout)
	defer timer.Stop()
	select {
	case <-ch:
	case <-timer.C:
		t.Fatalf("%s: no notification within %s", what, notifyTimeout)
	}
}

// testNotifier: a subscriber is signalled when another goroutine completes
// or releases the record; the subscription outlives Subscribe's context;
// the function Subscribe returns ends the subscription and may be called
// more than once.
func testNotifier(t *testing.T, h *harness) {
	nf, ok := retrysafe.As[retrysafe.Notifier](h.s)
	if !ok {
		t.Skip("store does not implement retrysafe.Notifier")
	}
	subscribe := func(key string) (<-chan struct{}, func()) {
		t.Helper()
		ch, unsubscribe, err := nf.Subscribe(h.ctx, scope1, key)
		if err != nil {
			t.Fatalf("Subscribe(%q): %v", key, err)
		}
		if ch == nil || unsubscribe == nil {
			t.Fatalf("Subscribe(%q) returned a nil channel or function", key)
		}
		t.Cleanup(unsubscribe)
		return ch, unsubscribe
	}

	for _, tc := range []struct {
		name   string
		finish func(token string) error
	}{
		{"complete", func(token string) error {
			return h.complete(scope1, "complete", token, at(time.Second), sampleResponse())
		}},
		{"release", func(token string) error { return h.release(scope1, "release", token) }},
	} {
		p, _ := h.claimNew(scope1, tc.name, fpA, at(0))
		ch, unsubscribe := subscribe(tc.name)
		errc := make(chan error, 1)
		go func() { errc <- tc.finish(p.Token) }()
		waitSignal(t, "subscriber of a record another goroutine "+tc.name+"d", ch)
		if err := <-errc; err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		unsubscribe()
	}

	// ctx bounds the call to Subscribe only: the subscription outlives it
	// and lasts until the returned function is called.
	p, _ := h.claimNew(scope1, "outlives", fpA, at(0))
	subCtx, cancelSub := context.WithCancel(h.ctx)
	ch, unsubscribe, err := nf.Subscribe(subCtx, scope1, "outlives")
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	t.Cleanup(unsubscribe)
	cancelSub()
	<-subCtx.Done()
	for range 20 { // time for a store that ends it on ctx to do so
		h.get(scope1, "outlives", at(0))
		runtime.Gosched()
	}
	h.mustComplete(scope1, "outlives", p.Token, at(time.Second), sampleResponse())
	waitSignal(t, "subscriber whose Subscribe context ended after Subscribe returned", ch)

	// Several subscribers of one record are all signalled.
	p, _ = h.claimNew(scope1, "many", fpA, at(0))
	var chans []<-chan struct{}
	for range 5 {
		ch, _ := subscribe("many")
		chans = append(chans, ch)
	}
	go func() { _ = h.complete(scope1, "many", p.Token, at(time.Second), sampleResponse()) }()
	for i, ch := range chans {
		waitSignal(t, fmt.Sprintf("subscriber %d of 5", i), ch)
	}

	// After unsubscribing, a change neither panics nor blocks the writer.
	// A value already in flight may arrive.
	p, _ = h.claimNew(scope1, "unsubscribed", fpA, at(0))
	_, unsubscribe = subscribe("unsubscribed")
	unsubscribe()
	unsubscribe() // a second call is harmless
	h.mustComplete(scope1, "unsubscribed", p.Token, at(time.Second), sampleResponse())

	// Many short subscriptions: each is ended, none blocks a writer.
	p, _ = h.claimNew(scope1, "churn", fpA, at(0))
	for range 200 {
		_, unsubscribe := subscribe("churn")
		unsubscribe()
	}
	h.mustComplete(scope1, "churn", p.Token, at(time.Second), sampleResponse())
}

// adminFixture stores 15 records in scope1 and 10 in scope2, every third
// one completed, and returns them ordered by (Scope, Key).
func adminFixture(t *testing.T, h *harness) []*retrysafe.Record {
	t.Helper()
	var want []*retrysafe.Record
	for _, sc := range []struct {
		scope string
		n     int
	}{{scope1, 15}, {scope2, 10}} {
		for i := range sc.n {
			key := fmt.Sprintf("key-%02d", i)
			p, _ := h.claimNew(sc.scope, key, fpA, at(0))
			if i%3 == 0 {
				resp := &retrysafe.Response{Status: 200 + i, Header: http.Header{"X-I": {fmt.Sprint(i)}}, Body: []byte("body " + key)}
				h.mustComplete(sc.scope, key, p.Token, at(time.Second), resp)
			}
			want = append(want, h.get(sc.scope, key, at(time.Second)))
		}
	}
	slices.SortFunc(want, func(a, b *retrysafe.Record) int { return compareID(a.Scope, a.Key, b.Scope, b.Key) })
	return want
}

func compareID(scopeA, keyA, scopeB, keyB string) int {
	if scopeA != scopeB {
		if scopeA < scopeB {
			return -1
		}
		return 1
	}
	switch {
	case keyA < keyB:
		return -1
	case keyA > keyB:
		return 1
	}
	return 0
}

// testAdminList: List pages through records ordered by (Scope, Key) with
// an (AfterScope, AfterKey) cursor and a Limit; Scope filters;
// WithBodies=false leaves Response.Body nil but keeps status and headers.
func testAdminList(t *testing.T, h *harness) {
	ad, ok := retrysafe.As[admin.Admin](h.s)
	if !ok {
		t.Skip("store does not implement admin.Admin")
	}
	want := adminFixture(t, h)
	list := func(p admin.ListParams) []*retrysafe.Record {
		t.Helper()
		recs, err := ad.List(h.ctx, &p)
		if err != nil {
			t.Fatalf("List(%+v): %v", p, err)
		}
		return recs
	}

	// Page through everything, 10 at a time.
	var got []*retrysafe.Record
	var sizes []int
	cursor := admin.ListParams{Limit: 10, WithBodies: true}
	for range 10 {
		page := list(cursor)
		sizes = append(sizes, len(page))
		got = append(got, page...)
		if len(page) < cursor.Limit {
			break
		}
		last := page[len(page)-1]
		cursor.AfterScope, cursor.AfterKey = last.Scope, last.Key
	}
	if !slices.Equal(sizes, []int{10, 10, 5}) {
		t.Errorf("page sizes with Limit 10 = %v, want [10 10 5]", sizes)
	}
	checkListed(t, "paged List", got, want, true)

	// An exact multiple of the limit ends with an empty page.
	last := want[len(want)-1]
	if page := list(admin.ListParams{AfterScope: last.Scope, AfterKey: last.Key}); len(page) != 0 {
		t.Errorf("List after the last record returned %d records, want 0", len(page))
	}

	// Limit 0 means DefaultListLimit (100): everything in one page.
	checkListed(t, "List with Limit 0", list(admin.ListParams{WithBodies: true}), want, true)
	// A negative Limit is the default too, not an empty page.
	checkListed(t, "List with Limit -1", list(admin.ListParams{Limit: -1, WithBodies: true}), want, true)

	// Without bodies.
	checkListed(t, "List without bodies", list(admin.ListParams{}), want, false)

	// One scope, paged from inside it.
	var scope2Want []*retrysafe.Record
	for _, r := range want {
		if r.Scope == scope2 {
			scope2Want = append(scope2Want, r)
		}
	}
	checkListed(t, "List of scope 2", list(admin.ListParams{Scope: scope2, WithBodies: true}), scope2Want, true)
	checkListed(t, "List of scope 2 after key-04",
		list(admin.ListParams{Scope: scope2, AfterScope: scope2, AfterKey: "key-04", Limit: 3, WithBodies: true}),
		scope2Want[5:8], true)
	if page := list(admin.ListParams{Scope: "0000000000000000000000000000000000000000000000000000000000000000"}); len(page) != 0 {
		t.Errorf("List of an empty scope returned %d records", len(page))
	}
}

func checkListed(t *testing.T, what string, got, want []*retrysafe.Record, withBodies bool) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d records, want %d", what, len(got), len(want))
	}
	for i := range min(len(got), len(want)) {
		g, w := got[i], want[i]
		checkSameRecord(t, fmt.Sprintf("%s: record %d", what, i), g, w)
		if w.Response == nil {
			if g.Response != nil {
				t.Errorf("%s: record %d (processing) has a response", what, i)
			}
			continue
		}
		if withBodies {
			checkResponse(t, fmt.Sprintf("%s: record %d", what, i), g.Response, w.Response)
			continue
		}
		if g.Response == nil {
			t.Errorf("%s: record %d (completed) has no response; want status and headers without the body", what, i)
			continue
		}
		if g.Response.Body != nil {
			t.Errorf("%s: record %d: Body has %d bytes, want nil when WithBodies is false", what, i, len(g.Response.Body))
		}
		checkResponse(t, fmt.Sprintf("%s: record %d", what, i), g.Response,
			&retrysafe.Response{Status: w.Response.Status, Header: w.Response.Header})
	}
}

// testAdminDelete: Delete removes a record whatever its state and owner,
// and returns ErrNotFound when there is none.
func testAdminDelete(t *testing.T, h *harness) {
	ad, ok := retrysafe.As[admin.Admin](h.s)
	if !ok {
		t.Skip("store does not implement admin.Admin")
	}
	proc, _ := h.claimNew(scope1, "processing", fpA, at(0))
	done, _ := h.claimNew(scope1, "completed", fpA, at(0))
	h.mustComplete(scope1, "completed", done.Token, at(0), sampleResponse())
	h.claimNew(scope2, "processing", fpA, at(0))

	for _, key := range []string{"processing", "completed"} {
		if err := ad.Delete(h.ctx, scope1, key); err != nil {
			t.Fatalf("Delete(%q): %v", key, err)
		}
		h.getNotFound(scope1, key, at(time.Second))
		if err := ad.Delete(h.ctx, scope1, key); !errors.Is(err, retrysafe.ErrNotFound) {
			t.Errorf("second Delete(%q): %v, want ErrNotFound", key, err)
		}
	}
	if err := ad.Delete(h.ctx, scope1, "never"); !errors.Is(err, retrysafe.ErrNotFound) {
		t.Errorf("Delete of an absent key: %v, want ErrNotFound", err)
	}
	// The deleted owner is fenced; the other scope is untouched.
	wantLeaseLost(t, "Complete by the owner of a deleted record", h.complete(scope1, "processing", proc.Token, at(time.Second), sampleResponse()))
	if rec := h.get(scope2, "processing", at(time.Second)); rec.State != retrysafe.StateProcessing {
		t.Errorf("record in scope 2 after deleting scope 1's: %s", describe(rec))
	}
	// The key is free again.
	p, rec := h.claimNew(scope1, "processing", fpA, at(time.Second))
	checkProcessing(t, rec, p, 1, at(time.Second))
}
