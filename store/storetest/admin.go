package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
)

// The empty scope is the scope of callers without credentials.
const emptyScope = ""

// testAdminFind: Find returns the records of one key in every scope,
// ordered by scope, or in the one scope selected (the empty scope too),
// expired ones included; bodies only when asked.
func testAdminFind(t *testing.T, h *harness) {
	ad, ok := retrysafe.As[admin.Admin](h.s)
	if !ok {
		t.Skip("store does not implement admin.Admin")
	}
	find := func(p admin.FindParams) []*retrysafe.Record {
		t.Helper()
		recs, err := ad.Find(h.ctx, &p)
		if err != nil {
			t.Fatalf("Find(%+v): %v", p, err)
		}
		return recs
	}
	// "k" in three scopes: processing in scope1, completed in the empty
	// scope and in scope2. Other keys that share a prefix with it, or
	// extend it, must not be found.
	h.claimNew(scope1, "k", fpA, at(0))
	var want []*retrysafe.Record
	for _, scope := range []string{emptyScope, scope2} {
		p, _ := h.claimNew(scope, "k", fpA, at(0))
		h.mustComplete(scope, "k", p.Token, at(time.Second), sampleResponse())
	}
	for _, scope := range []string{emptyScope, scope2, scope1} { // by scope
		want = append(want, h.get(scope, "k", at(time.Second)))
	}
	for _, key := range []string{"k2", "kk", "K", "k*", "x-k"} {
		h.claimNew(scope1, key, fpA, at(0))
	}
	h.claimNew(emptyScope, "k*", fpA, at(0))

	checkListed(t, "Find of k in every scope", find(admin.FindParams{Key: "k", WithBodies: true}), want, true)
	checkListed(t, "Find of k without bodies", find(admin.FindParams{Key: "k"}), want, false)
	checkListed(t, "Find of k in scope 2", find(admin.FindParams{Key: "k", Scope: scope2, WithBodies: true}), want[1:2], true)
	checkListed(t, "Find of k in the empty scope",
		find(admin.FindParams{Key: "k", ScopeSet: true, WithBodies: true}), want[:1], true)
	if got := find(admin.FindParams{Key: "k2", ScopeSet: true}); len(got) != 0 {
		t.Errorf("Find of k2 in the empty scope: %d records, want none (k2 is in scope 1 only)", len(got))
	}
	if got := find(admin.FindParams{Key: "absent"}); len(got) != 0 {
		t.Errorf("Find of an absent key: %d records, want none", len(got))
	}
	if got := find(admin.FindParams{Key: "k*"}); len(got) != 2 || got[0].Scope != emptyScope || got[1].Scope != scope1 {
		t.Errorf("Find of k* = %v, want its records in the empty scope and scope 1 (a key is not a pattern)", scopesOf(got))
	}

	// Expired but not swept: Get no longer returns it, Find still does.
	later := at(ttl + time.Hour)
	h.getNotFound(scope2, "k", later)
	checkListed(t, "Find of k after it expired", find(admin.FindParams{Key: "k", Scope: scope2, WithBodies: true}), want[1:2], true)
}

func scopesOf(recs []*retrysafe.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = fmt.Sprintf("%q", r.Scope)
	}
	return out
}

// testAdminFindAmongMany is the case `retrysafe keys show` once got wrong:
// 199 keys sort before "order-2" in its scope, and order-2 has expired
// but has not been swept. Find returns it, in its scope and across scopes,
// like order-11 in the same state.
func testAdminFindAmongMany(t *testing.T, h *harness) {
	ad, ok := retrysafe.As[admin.Admin](h.s)
	if !ok {
		t.Skip("store does not implement admin.Admin")
	}
	// 199 keys that sort before order-2: order-1, order-10 … order-19,
	// order-100 … order-199, order-1200 … order-1287. order-11 and order-2
	// are completed, the others processing.
	keys := []string{"order-1"}
	for _, r := range [][2]int{{10, 19}, {100, 199}, {1200, 1287}} {
		for i := r[0]; i <= r[1]; i++ {
			keys = append(keys, fmt.Sprintf("order-%d", i))
		}
	}
	if len(keys) != 199 {
		t.Fatalf("%d keys before order-2, want 199", len(keys))
	}
	for _, key := range keys {
		p, _ := h.claimNew(scope1, key, fpA, at(0))
		if key == "order-11" {
			h.mustComplete(scope1, key, p.Token, at(time.Second), sampleResponse())
		}
	}
	p, _ := h.claimNew(scope1, "order-2", fpA, at(0))
	h.mustComplete(scope1, "order-2", p.Token, at(time.Second), sampleResponse())
	later := at(ttl + time.Hour)
	for _, key := range []string{"order-2", "order-11"} {
		h.getNotFound(scope1, key, later)
		for _, p := range []admin.FindParams{{Key: key}, {Key: key, Scope: scope1}} {
			recs, err := ad.Find(h.ctx, &p)
			if err != nil {
				t.Fatalf("Find(%+v): %v", p, err)
			}
			if len(recs) != 1 || recs[0].Scope != scope1 || recs[0].Key != key || recs[0].State != retrysafe.StateCompleted {
				t.Errorf("Find(%+v) of the expired, unswept record = %d records, want it", p, len(recs))
			}
		}
	}
}

// testAdminListEmptyScope: ScopeSet selects the empty scope in List;
// without it, an empty Scope lists every scope.
func testAdminListEmptyScope(t *testing.T, h *harness) {
	ad, ok := retrysafe.As[admin.Admin](h.s)
	if !ok {
		t.Skip("store does not implement admin.Admin")
	}
	for _, scope := range []string{emptyScope, scope1, scope2} {
		for _, key := range []string{"a", "b"} {
			h.claimNew(scope, key, fpA, at(0))
		}
	}
	recs, err := ad.List(h.ctx, &admin.ListParams{ScopeSet: true})
	if err != nil {
		t.Fatalf("List of the empty scope: %v", err)
	}
	if len(recs) != 2 || recs[0].Scope != emptyScope || recs[1].Scope != emptyScope || recs[0].Key != "a" || recs[1].Key != "b" {
		t.Errorf("List of the empty scope = %d records in scopes %v, want a and b of the empty scope", len(recs), scopesOf(recs))
	}
	recs, err = ad.List(h.ctx, &admin.ListParams{})
	if err != nil {
		t.Fatalf("List of every scope: %v", err)
	}
	if len(recs) != 6 {
		t.Errorf("List of every scope = %d records, want 6", len(recs))
	}
}
