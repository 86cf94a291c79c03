package storetest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
)

// statsFixture stores the records the filter and stats scenarios read,
// and returns the time at which they read them (two minutes in):
//
//	scope   key       state                         created  updated  lease until / expires
//	scope1  a-old     processing (lease expired)    0        0        30s
//	scope2  a-mid     processing (lease expired)    10s      10s      40s
//	scope1  a-new     processing                    100s     100s     130s
//	""      a-newest  processing                    110s     110s     140s
//	scope1  x~a       processing (lease expired)    50s      50s      80s
//	scope1  order, order-1, order-10, order-2
//	                  processing (live)             115s     115s     145s
//	scope1  b-done    completed 201                 0        5s       5s+ttl
//	scope2  b-fail    completed 500 (failed)        20s      25s      25s+ttl
//	scope1  b-old     completed 201 (expired)       -48h     -47h     -47h+ttl
func statsFixture(h *harness) time.Time {
	h.claimNew(scope1, "a-old", fpA, at(0))
	h.claimNew(scope2, "a-mid", fpA, at(10*time.Second))
	h.claimNew(scope1, "a-new", fpA, at(100*time.Second))
	h.claimNew(emptyScope, "a-newest", fpA, at(110*time.Second))
	h.claimNew(scope1, "x~a", fpA, at(50*time.Second))
	for _, k := range []string{"order", "order-1", "order-10", "order-2"} {
		h.claimNew(scope1, k, fpA, at(115*time.Second))
	}
	p, _ := h.claimNew(scope1, "b-done", fpA, at(0))
	h.mustComplete(scope1, "b-done", p.Token, at(5*time.Second), sampleResponse())
	p, _ = h.claimNew(scope2, "b-fail", fpA, at(20*time.Second))
	failed := sampleResponse()
	failed.Status = 500
	h.mustComplete(scope2, "b-fail", p.Token, at(25*time.Second), failed)
	p, _ = h.claimNew(scope1, "b-old", fpA, at(-48*time.Hour))
	h.mustComplete(scope1, "b-old", p.Token, at(-47*time.Hour), sampleResponse())
	return at(120 * time.Second)
}

// testAdminListFilters: List's filters (state, key prefix, updated range,
// expired lease), alone and together, with and without a scope, select
// exactly the records ListParams.Matches accepts, in (scope, key) order,
// and page through them with the cursor without losing or repeating one.
func testAdminListFilters(t *testing.T, h *harness) {
	ad, ok := retrysafe.As[admin.Admin](h.s)
	if !ok {
		t.Skip("store does not implement admin.Admin")
	}
	now := statsFixture(h)
	all, err := ad.List(h.ctx, &admin.ListParams{Limit: 1000})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(all) != 12 {
		t.Fatalf("List of every record: %d records, want 12", len(all))
	}
	ids := func(recs []*retrysafe.Record) []string {
		out := make([]string, len(recs))
		for i, r := range recs {
			out[i] = short(r.Scope) + "/" + r.Key
		}
		return out
	}
	cases := []struct {
		name string
		p    admin.ListParams
		want int // the number of records that pass, counted by hand
	}{
		{"processing", admin.ListParams{State: retrysafe.StateProcessing}, 9},
		{"completed", admin.ListParams{State: retrysafe.StateCompleted}, 3},
		{"prefix order", admin.ListParams{KeyPrefix: "order"}, 4},
		{"prefix order-1", admin.ListParams{KeyPrefix: "order-1"}, 2},
		{"prefix a-", admin.ListParams{KeyPrefix: "a-"}, 4},
		{"prefix ending in a tilde", admin.ListParams{KeyPrefix: "x~"}, 1},
		{"prefix longer than every key", admin.ListParams{KeyPrefix: "order-10-and-more"}, 0},
		{"prefix with a pattern character", admin.ListParams{KeyPrefix: "a_"}, 0},
		{"prefix a- in scope 1", admin.ListParams{Scope: scope1, KeyPrefix: "a-"}, 2},
		{"completed in scope 2", admin.ListParams{Scope: scope2, State: retrysafe.StateCompleted}, 1},
		{"processing in the empty scope", admin.ListParams{ScopeSet: true, State: retrysafe.StateProcessing}, 1},
		{"updated from 100s", admin.ListParams{UpdatedFrom: at(100 * time.Second)}, 6},
		{"updated before 10s", admin.ListParams{UpdatedTo: at(10 * time.Second)}, 3},
		{"updated in [10s, 50s)", admin.ListParams{UpdatedFrom: at(10 * time.Second), UpdatedTo: at(50 * time.Second)}, 2},
		{"updated in [10s, 50s], processing", admin.ListParams{UpdatedFrom: at(10 * time.Second), UpdatedTo: at(51 * time.Second), State: retrysafe.StateProcessing}, 2},
		{"lease expired by now", admin.ListParams{LeaseExpiredBy: now}, 3},
		{"lease expired by 40s (bound included)", admin.ListParams{LeaseExpiredBy: at(40 * time.Second)}, 2},
		{"lease expired by now in scope 1", admin.ListParams{Scope: scope1, LeaseExpiredBy: now}, 2},
		{"lease expired, completed: none", admin.ListParams{LeaseExpiredBy: now, State: retrysafe.StateCompleted}, 0},
		{"after the cursor", admin.ListParams{AfterScope: scope1, AfterKey: "order", KeyPrefix: "order"}, 3},
	}
	for _, c := range cases {
		var want []*retrysafe.Record
		for _, r := range all {
			after := r.Scope > c.p.AfterScope || r.Scope == c.p.AfterScope && r.Key > c.p.AfterKey
			if after && c.p.Matches(r) {
				want = append(want, r)
			}
		}
		if len(want) != c.want {
			t.Fatalf("%s: ListParams.Matches accepts %d records (%v), the scenario counts %d", c.name, len(want), ids(want), c.want)
		}
		p := c.p
		p.Limit = 1000
		got, err := ad.List(h.ctx, &p)
		if err != nil {
			t.Fatalf("%s: List: %v", c.name, err)
		}
		if g, w := ids(got), ids(want); !slices.Equal(g, w) {
			t.Errorf("%s: List = %v, want %v", c.name, g, w)
		}
		// Page by two with the cursor.
		p.Limit = 2
		var paged []*retrysafe.Record
		for range 20 {
			page, err := ad.List(h.ctx, &p)
			if err != nil {
				t.Fatalf("%s: List page: %v", c.name, err)
			}
			paged = append(paged, page...)
			if len(page) < p.Limit {
				break
			}
			p.AfterScope, p.AfterKey = page[len(page)-1].Scope, page[len(page)-1].Key
		}
		if g, w := ids(paged), ids(want); !slices.Equal(g, w) {
			t.Errorf("%s: List by pages of 2 = %v, want %v", c.name, g, w)
		}
	}
	// Bodies follow WithBodies with filters too.
	recs, err := ad.List(h.ctx, &admin.ListParams{State: retrysafe.StateCompleted, KeyPrefix: "b-done", WithBodies: true})
	if err != nil || len(recs) != 1 || recs[0].Response == nil || string(recs[0].Response.Body) != string(sampleResponse().Body) {
		t.Errorf("filtered List with bodies = %d records (err %v), want b-done with its body", len(recs), err)
	}
	recs, err = ad.List(h.ctx, &admin.ListParams{State: retrysafe.StateCompleted, KeyPrefix: "b-done"})
	if err != nil || len(recs) != 1 || recs[0].Response == nil || recs[0].Response.Body != nil || recs[0].Response.Status != 201 {
		t.Errorf("filtered List without bodies = %d records (err %v), want b-done with its status and no body", len(recs), err)
	}
}

// testAdminStats: Stats counts by state and by status
// (admin.StatusOf: lease-expired, failed, expired records), and returns the oldest record in flight and the
// unknown outcomes, longest expired first, bounded by params.Unknown.
func testAdminStats(t *testing.T, h *harness) {
	ad, ok := retrysafe.As[admin.Admin](h.s)
	if !ok {
		t.Skip("store does not implement admin.Admin")
	}
	empty, err := ad.Stats(h.ctx, &admin.StatsParams{Now: at(0)})
	if err != nil {
		t.Fatalf("Stats of an empty store: %v", err)
	}
	if empty.Processing+empty.Completed+empty.LeaseExpired+empty.Failed+empty.Expired != 0 || empty.OldestInFlight != nil || len(empty.Unknown) != 0 {
		t.Errorf("Stats of an empty store = %+v, want zeros", empty)
	}
	now := statsFixture(h)
	st, err := ad.Stats(h.ctx, &admin.StatsParams{Now: now})
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	got := fmt.Sprintf("processing=%d completed=%d leaseExpired=%d failed=%d expired=%d",
		st.Processing, st.Completed, st.LeaseExpired, st.Failed, st.Expired)
	if want := "processing=9 completed=3 leaseExpired=3 failed=1 expired=1"; got != want {
		t.Errorf("Stats counts: %s, want %s", got, want)
	}
	if o := st.OldestInFlight; o == nil || o.Scope != scope1 || o.Key != "a-new" || o.State != retrysafe.StateProcessing || o.Response != nil {
		t.Errorf("OldestInFlight = %s, want a-new of scope 1 (a-old and a-mid have expired leases)", describe(o))
	} else {
		checkTime(t, "OldestInFlight.CreatedAt", o.CreatedAt, at(100*time.Second))
	}
	keysOf := func(recs []*retrysafe.Record) string {
		var out []string
		for _, r := range recs {
			out = append(out, r.Key)
		}
		return strings.Join(out, ",")
	}
	if got, want := keysOf(st.Unknown), "a-old,a-mid,x~a"; got != want {
		t.Errorf("Unknown = %s, want %s (by lease expiry)", got, want)
	}
	for _, r := range st.Unknown {
		if r.State != retrysafe.StateProcessing || r.Response != nil || r.Attempt != 1 || r.Fingerprint != fpA {
			t.Errorf("Unknown record %s: want a processing record as stored", describe(r))
		}
	}
	st, err = ad.Stats(h.ctx, &admin.StatsParams{Now: now, Unknown: 2})
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	if got, want := keysOf(st.Unknown), "a-old,a-mid"; got != want || st.LeaseExpired != 3 {
		t.Errorf("Stats with Unknown=2: Unknown = %s (LeaseExpired %d), want %s (LeaseExpired 3)", got, st.LeaseExpired, want)
	}
	// Earlier, before any lease ran out: a-old is the oldest in flight.
	st, err = ad.Stats(h.ctx, &admin.StatsParams{Now: at(20 * time.Second)})
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	if o := st.OldestInFlight; o == nil || o.Key != "a-old" || st.LeaseExpired != 0 || len(st.Unknown) != 0 {
		t.Errorf("Stats at 20s: oldest %s, %d lease-expired, want a-old and none", describe(o), st.LeaseExpired)
	}
	// Once b-fail's result has expired it counts as expired, not failed
	// (admin.StatusOf): the counts are those of the statuses.
	st, err = ad.Stats(h.ctx, &admin.StatsParams{Now: at(25*time.Second + ttl)})
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	got = fmt.Sprintf("processing=%d completed=%d leaseExpired=%d failed=%d expired=%d",
		st.Processing, st.Completed, st.LeaseExpired, st.Failed, st.Expired)
	if want := "processing=9 completed=3 leaseExpired=9 failed=0 expired=3"; got != want {
		t.Errorf("Stats counts once every result expired: %s, want %s", got, want)
	}
}

// testRoute: a claim stores its route; a takeover replaces it with the
// new claimant's, Complete keeps it, an empty route is kept empty, and
// List's Route filter selects exactly the records of one route.
func testRoute(t *testing.T, h *harness) {
	claim := func(scope, key, route string, now time.Time) *retrysafe.ClaimParams {
		t.Helper()
		p := claimParams(scope, key, fpA, now)
		p.Route = route
		res, err := h.s.Claim(h.ctx, p)
		if err != nil || !res.Claimed {
			t.Fatalf("Claim(%q) with route %q: %+v, %v", key, route, res, err)
		}
		if res.Record.Route != route {
			t.Errorf("Claim(%q): Route = %q, want %q", key, res.Record.Route, route)
		}
		return p
	}
	claim(scope1, "r-1", "POST /payments", at(0))
	claim(scope1, "r-none", "", at(0))
	p := claim(scope2, "r-2", "POST /payments", at(0))
	h.mustComplete(scope2, "r-2", p.Token, at(time.Second), sampleResponse())
	if got := h.get(scope2, "r-2", at(time.Second)); got.Route != "POST /payments" {
		t.Errorf("after Complete: Route = %q, want POST /payments", got.Route)
	}
	// Takeover of the expired lease by a claimant of another route.
	claim(scope1, "r-1", "POST /orders/{id}/refunds", at(lease+time.Second))
	if got := h.get(scope1, "r-1", at(lease+time.Second)); got.Route != "POST /orders/{id}/refunds" || got.Attempt != 2 {
		t.Errorf("after the takeover: Route = %q, attempt %d; want the new claimant's route, attempt 2", got.Route, got.Attempt)
	}
	if got := h.get(scope1, "r-none", at(time.Second)); got.Route != "" {
		t.Errorf("a claim without a route: Route = %q, want empty", got.Route)
	}
	ad, ok := retrysafe.As[admin.Admin](h.s)
	if !ok {
		return
	}
	for route, want := range map[string]string{
		"POST /payments":            "r-2",
		"POST /orders/{id}/refunds": "r-1",
		"POST /pay":                 "", // not a prefix match
	} {
		recs, err := ad.List(h.ctx, &admin.ListParams{Route: route})
		if err != nil {
			t.Fatalf("List with Route %q: %v", route, err)
		}
		var keys []string
		for _, r := range recs {
			keys = append(keys, r.Key)
			if r.Route != route {
				t.Errorf("List with Route %q returned %s with route %q", route, r.Key, r.Route)
			}
		}
		if strings.Join(keys, ",") != want {
			t.Errorf("List with Route %q = %v, want %q", route, keys, want)
		}
	}
	recs, err := ad.Find(h.ctx, &admin.FindParams{Key: "r-2"})
	if err != nil || len(recs) != 1 || recs[0].Route != "POST /payments" {
		t.Errorf("Find of r-2: %d records (%v), want it with its route", len(recs), err)
	}
}
