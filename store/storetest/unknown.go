package storetest

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
)

// Scenarios for unknown outcomes (issue 30): an owner abandons its attempt
// or records checkpoints through the fenced Extend, and a claimant may
// refuse to take an expired lease over (NoTakeover) or take over only the
// attempt it decided about (TakeoverToken).
func unknownScenarios() []scenario {
	return []scenario{
		{"Abandon", testAbandon},
		{"AbandonThenFinish", testAbandonThenFinish},
		{"Checkpoint", testCheckpoint},
		{"CheckpointFenced", testCheckpointFenced},
		{"TakeoverKeepsCheckpoint", testTakeoverKeepsCheckpoint},
		{"NoTakeover", testNoTakeover},
		{"TakeoverToken", testTakeoverToken},
		{"ConcurrentTakeoverToken", testConcurrentTakeoverToken},
		{"AdminUnknown", testAdminUnknown},
	}
}

func (h *harness) abandon(scope, key, token string, now time.Time) error {
	// A Lease is given on purpose: Abandon must ignore it.
	return h.s.Extend(h.ctx, &retrysafe.ExtendParams{Scope: scope, Key: key, Token: token, Now: now, Lease: time.Hour, Abandon: true})
}

func (h *harness) checkpoint(scope, key, token string, now time.Time, l time.Duration, cp *retrysafe.Checkpoint) error {
	return h.s.Extend(h.ctx, &retrysafe.ExtendParams{Scope: scope, Key: key, Token: token, Now: now, Lease: l, Checkpoint: cp})
}

// checkCheckpoint fails the test unless got holds want's name and data
// (nil and empty data are equal) and was recorded at.
func checkCheckpoint(t *testing.T, what string, got *retrysafe.Checkpoint, name string, data []byte, recorded time.Time) {
	t.Helper()
	if got == nil {
		t.Errorf("%s: Checkpoint is nil, want %q", what, name)
		return
	}
	if got.Name != name {
		t.Errorf("%s: Checkpoint.Name = %q, want %q", what, got.Name, name)
	}
	if !bytes.Equal(got.Data, data) {
		t.Errorf("%s: Checkpoint.Data differs: got %d bytes, want %d bytes%s", what, len(got.Data), len(data), firstDiff(got.Data, data))
	}
	checkTime(t, what+": Checkpoint.At", got.At, recorded)
}

// testAbandon: Extend with Abandon is fenced like Extend; it sets
// Abandoned, leaves LeaseUntil as it is (its Lease is ignored) and sets
// UpdatedAt; every read shows it (Get, and the record a blocked Claim
// returns), and admin.StatusOf calls it unknown although the lease is live.
// A takeover once the lease ran out clears it.
func testAbandon(t *testing.T, h *harness) {
	p, orig := h.claimNew(scope1, "k", fpA, at(0))
	now := at(5 * time.Second)

	wantLeaseLost(t, "Abandon with another token", h.abandon(scope1, "k", retrysafe.NewToken(), now))
	wantLeaseLost(t, "Abandon with an empty token", h.abandon(scope1, "k", "", now))
	wantLeaseLost(t, "Abandon of an absent key", h.abandon(scope1, "absent", p.Token, now))
	h.getNotFound(scope1, "absent", now)
	if got := h.get(scope1, "k", now); got.Abandoned {
		t.Fatalf("a fenced Abandon marked the record abandoned: %s", describe(got))
	}
	checkSameRecord(t, "record after fenced Abandons", h.get(scope1, "k", now), orig)

	if err := h.abandon(scope1, "k", p.Token, now); err != nil {
		t.Fatalf("Abandon by the owner: %v", err)
	}
	got := h.get(scope1, "k", now)
	if !got.Abandoned || got.State != retrysafe.StateProcessing || got.Token != p.Token || got.Attempt != 1 || got.Fingerprint != fpA {
		t.Errorf("record after Abandon: %s abandoned=%v, want the owner's processing record, abandoned", describe(got), got.Abandoned)
	}
	checkTime(t, "LeaseUntil after Abandon (left as it was)", got.LeaseUntil, orig.LeaseUntil)
	checkTime(t, "UpdatedAt after Abandon", got.UpdatedAt, now)
	checkTime(t, "CreatedAt after Abandon", got.CreatedAt, orig.CreatedAt)
	if st := admin.StatusOf(got, now); st != admin.StatusUnknown {
		t.Errorf("Status of an abandoned record with a live lease = %q, want %q", st, admin.StatusUnknown)
	}

	// A claim during the lease is blocked and sees the mark, with either
	// fingerprint; a second Abandon is harmless.
	for _, fp := range []string{fpA, fpB} {
		if rec := h.claimBlocked(scope1, "k", fp, at(10*time.Second)); !rec.Abandoned || rec.Token != p.Token {
			t.Errorf("record a blocked claim (fingerprint %.4s) returned: %s abandoned=%v, want the abandoned record", fp, describe(rec), rec.Abandoned)
		}
	}
	if err := h.abandon(scope1, "k", p.Token, at(11*time.Second)); err != nil {
		t.Fatalf("second Abandon by the owner: %v", err)
	}
	checkTime(t, "LeaseUntil after a second Abandon", h.get(scope1, "k", at(11*time.Second)).LeaseUntil, orig.LeaseUntil)

	// The lease runs out as it would have: a takeover clears the mark.
	h.claimBlocked(scope1, "k", fpA, at(lease-time.Second))
	p2, rec2 := h.claimNew(scope1, "k", fpA, at(lease))
	checkProcessing(t, rec2, p2, 2, at(0))
	checkProcessing(t, h.get(scope1, "k", at(lease)), p2, 2, at(0))

	// The old owner can no longer abandon the new attempt.
	wantLeaseLost(t, "Abandon by the owner taken over", h.abandon(scope1, "k", p.Token, at(lease)))
	if got := h.get(scope1, "k", at(lease)); got.Abandoned {
		t.Errorf("the old owner's Abandon marked the new attempt: %s", describe(got))
	}

	// A completed record cannot be abandoned.
	h.mustComplete(scope1, "k", p2.Token, at(lease+time.Second), sampleResponse())
	wantLeaseLost(t, "Abandon of a completed record", h.abandon(scope1, "k", p2.Token, at(lease+2*time.Second)))
	if got := h.get(scope1, "k", at(lease+2*time.Second)); got.Abandoned || got.State != retrysafe.StateCompleted {
		t.Errorf("record after an Abandon of a completed one: %s abandoned=%v", describe(got), got.Abandoned)
	}
}

// testAbandonThenFinish: an abandoned record's owner token still fences
// it: Complete with it succeeds and clears the mark (a resolver or an
// operator completing a stranded record does this), and Release with it
// deletes the record (a resolver decided to re-run it).
func testAbandonThenFinish(t *testing.T, h *harness) {
	p, _ := h.claimNew(scope1, "complete", fpA, at(0))
	if err := h.abandon(scope1, "complete", p.Token, at(time.Second)); err != nil {
		t.Fatalf("Abandon: %v", err)
	}
	resp := sampleResponse()
	// After the lease ran out too: nobody took it over.
	h.mustComplete(scope1, "complete", p.Token, at(lease+time.Minute), resp)
	got := h.get(scope1, "complete", at(lease+time.Minute))
	if got.State != retrysafe.StateCompleted || got.Abandoned || got.Token != p.Token {
		t.Errorf("record after completing an abandoned one: %s abandoned=%v, want completed, not abandoned", describe(got), got.Abandoned)
	}
	checkResponse(t, "response of the completed abandoned record", got.Response, resp)
	if st := admin.StatusOf(got, at(lease+time.Minute)); st != admin.StatusCompleted {
		t.Errorf("Status = %q, want %q", st, admin.StatusCompleted)
	}

	p2, _ := h.claimNew(scope1, "release", fpA, at(0))
	if err := h.abandon(scope1, "release", p2.Token, at(time.Second)); err != nil {
		t.Fatalf("Abandon: %v", err)
	}
	wantLeaseLost(t, "Release of an abandoned record with another token", h.release(scope1, "release", retrysafe.NewToken()))
	if err := h.release(scope1, "release", p2.Token); err != nil {
		t.Fatalf("Release of an abandoned record by its owner: %v", err)
	}
	h.getNotFound(scope1, "release", at(2*time.Second))
	p3, rec := h.claimNew(scope1, "release", fpA, at(2*time.Second))
	checkProcessing(t, rec, p3, 1, at(2*time.Second))
}

// testCheckpoint: Extend with a Checkpoint stores a copy of it, with At =
// Now, and renews the lease as usual; a later one replaces it; an Extend
// without one keeps it; empty data and MaxCheckpointData bytes of any
// value are kept exactly; Abandon and Checkpoint may come in one call.
func testCheckpoint(t *testing.T, h *harness) {
	p, _ := h.claimNew(scope1, "k", fpA, at(0))
	data := []byte("ch_3Nq1 \x00\xff")
	cp := &retrysafe.Checkpoint{Name: "charge-requested", Data: data, At: at(time.Hour)} // At is the store's to set
	if err := h.checkpoint(scope1, "k", p.Token, at(10*time.Second), lease, cp); err != nil {
		t.Fatalf("Checkpoint by the owner: %v", err)
	}
	want := bytes.Clone(data)
	data[0], cp.Name = 'X', "changed-after"
	got := h.get(scope1, "k", at(10*time.Second))
	checkCheckpoint(t, "after the first checkpoint", got.Checkpoint, "charge-requested", want, at(10*time.Second))
	checkTime(t, "LeaseUntil after a checkpoint", got.LeaseUntil, at(10*time.Second+lease))
	checkTime(t, "UpdatedAt after a checkpoint", got.UpdatedAt, at(10*time.Second))
	if got.Abandoned || got.Token != p.Token || got.Attempt != 1 || got.State != retrysafe.StateProcessing {
		t.Errorf("record after a checkpoint: %s abandoned=%v, want the owner's processing record", describe(got), got.Abandoned)
	}
	// A blocked claim sees it too.
	checkCheckpoint(t, "record a blocked claim returned", h.claimBlocked(scope1, "k", fpA, at(11*time.Second)).Checkpoint,
		"charge-requested", want, at(10*time.Second))

	// A plain Extend keeps it.
	if err := h.extend(scope1, "k", p.Token, at(15*time.Second), lease); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	checkCheckpoint(t, "after a plain Extend", h.get(scope1, "k", at(15*time.Second)).Checkpoint, "charge-requested", want, at(10*time.Second))

	// A later one replaces it, whatever its size: MaxCheckpointData
	// bytes, the most the engine sends. (A backend accepts
	// CheckpointStoreLimit, room for what a wrapper makes of those: the
	// sealed store's conformance run over each backend checks that.)
	size := retrysafe.MaxCheckpointData
	big := make([]byte, size)
	for i := range big {
		big[i] = byte(i*7 + i/256)
	}
	steps := []struct {
		name string
		data []byte
	}{
		{"charge-confirmed", []byte(`{"charge":"ch_3Nq1","amount":1000}`)},
		{"empty-data", []byte{}},
		{"nil-data", nil},
		{"max-data", big},
		{"after-max", []byte("small again")},
	}
	for n, st := range steps {
		now := at(time.Duration(20+n) * time.Second)
		if err := h.checkpoint(scope1, "k", p.Token, now, lease, &retrysafe.Checkpoint{Name: st.name, Data: st.data}); err != nil {
			t.Fatalf("Checkpoint %q (%d bytes): %v", st.name, len(st.data), err)
		}
		got := h.get(scope1, "k", now)
		checkCheckpoint(t, "checkpoint "+st.name, got.Checkpoint, st.name, st.data, now)
		checkTime(t, "LeaseUntil after checkpoint "+st.name, got.LeaseUntil, now.Add(lease))
	}

	// Abandon and Checkpoint together: both, and the lease left alone.
	before := h.get(scope1, "k", at(30*time.Second))
	both := &retrysafe.ExtendParams{Scope: scope1, Key: "k", Token: p.Token, Now: at(30 * time.Second), Lease: time.Hour,
		Abandon: true, Checkpoint: &retrysafe.Checkpoint{Name: "request-sent", Data: []byte("req-1")}}
	if err := h.s.Extend(h.ctx, both); err != nil {
		t.Fatalf("Extend with Abandon and Checkpoint: %v", err)
	}
	got = h.get(scope1, "k", at(30*time.Second))
	if !got.Abandoned {
		t.Errorf("Extend with Abandon and Checkpoint: not abandoned: %s", describe(got))
	}
	checkCheckpoint(t, "checkpoint written with Abandon", got.Checkpoint, "request-sent", []byte("req-1"), at(30*time.Second))
	checkTime(t, "LeaseUntil after Abandon with a checkpoint", got.LeaseUntil, before.LeaseUntil)
}

// testCheckpointFenced: a checkpoint with a token that does not own the
// record fails with ErrLeaseLost and changes nothing.
func testCheckpointFenced(t *testing.T, h *harness) {
	cp := func(name string) *retrysafe.Checkpoint { return &retrysafe.Checkpoint{Name: name, Data: []byte(name)} }
	wantLeaseLost(t, "Checkpoint of an absent key", h.checkpoint(scope1, "absent", retrysafe.NewToken(), at(0), lease, cp("x")))
	h.getNotFound(scope1, "absent", at(0))

	p, orig := h.claimNew(scope1, "k", fpA, at(0))
	wantLeaseLost(t, "Checkpoint with another token", h.checkpoint(scope1, "k", retrysafe.NewToken(), at(time.Second), lease, cp("intruder")))
	got := h.get(scope1, "k", at(time.Second))
	if got.Checkpoint != nil {
		t.Errorf("a fenced Checkpoint was stored: %+v", got.Checkpoint)
	}
	checkSameRecord(t, "record after a fenced Checkpoint", got, orig)

	if err := h.checkpoint(scope1, "k", p.Token, at(2*time.Second), lease, cp("mine")); err != nil {
		t.Fatalf("Checkpoint by the owner: %v", err)
	}
	p2, _ := h.claimNew(scope1, "k", fpA, at(2*time.Second+lease))
	wantLeaseLost(t, "Checkpoint by the owner taken over", h.checkpoint(scope1, "k", p.Token, at(3*time.Second+lease), lease, cp("stale")))
	checkCheckpoint(t, "after the old owner's Checkpoint", h.get(scope1, "k", at(3*time.Second+lease)).Checkpoint, "mine", []byte("mine"), at(2*time.Second))

	h.mustComplete(scope1, "k", p2.Token, at(4*time.Second+lease), sampleResponse())
	wantLeaseLost(t, "Checkpoint of a completed record", h.checkpoint(scope1, "k", p2.Token, at(5*time.Second+lease), lease, cp("late")))
	checkCheckpoint(t, "completed record after a late Checkpoint", h.get(scope1, "k", at(5*time.Second+lease)).Checkpoint, "mine", []byte("mine"), at(2*time.Second))
}

// testTakeoverKeepsCheckpoint: a takeover keeps the checkpoint (the
// claim's returned record carries it) and clears Abandoned; the new
// owner's checkpoint replaces it; Complete keeps it; a record that starts
// afresh (after its result expired) has none.
func testTakeoverKeepsCheckpoint(t *testing.T, h *harness) {
	p, _ := h.claimNew(scope1, "k", fpA, at(0))
	if err := h.checkpoint(scope1, "k", p.Token, at(5*time.Second), lease, &retrysafe.Checkpoint{Name: "charge-requested", Data: []byte("ch_1")}); err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	if err := h.abandon(scope1, "k", p.Token, at(6*time.Second)); err != nil {
		t.Fatalf("Abandon: %v", err)
	}
	takeover := at(5*time.Second + lease)
	p2, rec2 := h.claimNew(scope1, "k", fpA, takeover)
	checkProcessing(t, rec2, p2, 2, at(0))
	checkCheckpoint(t, "record the takeover returned", rec2.Checkpoint, "charge-requested", []byte("ch_1"), at(5*time.Second))
	got := h.get(scope1, "k", takeover)
	checkProcessing(t, got, p2, 2, at(0))
	checkCheckpoint(t, "stored record after the takeover", got.Checkpoint, "charge-requested", []byte("ch_1"), at(5*time.Second))

	// A second takeover, with no checkpoint of the second owner, keeps it too.
	p3, rec3 := h.claimNew(scope1, "k", fpA, takeover.Add(lease))
	checkProcessing(t, rec3, p3, 3, at(0))
	checkCheckpoint(t, "record the second takeover returned", rec3.Checkpoint, "charge-requested", []byte("ch_1"), at(5*time.Second))

	now := takeover.Add(lease + time.Second)
	if err := h.checkpoint(scope1, "k", p3.Token, now, lease, &retrysafe.Checkpoint{Name: "charge-confirmed", Data: []byte("ch_1 ok")}); err != nil {
		t.Fatalf("Checkpoint by the new owner: %v", err)
	}
	h.mustComplete(scope1, "k", p3.Token, now.Add(time.Second), sampleResponse())
	done := h.get(scope1, "k", now.Add(time.Second))
	if done.State != retrysafe.StateCompleted || done.Abandoned {
		t.Errorf("completed record: %s abandoned=%v", describe(done), done.Abandoned)
	}
	checkCheckpoint(t, "completed record", done.Checkpoint, "charge-confirmed", []byte("ch_1 ok"), now)
	checkCheckpoint(t, "completed record a claim returned", h.claimBlocked(scope1, "k", fpA, now.Add(2*time.Second)).Checkpoint, "charge-confirmed", []byte("ch_1 ok"), now)

	// Its result expired: the next claim starts a new record, no checkpoint.
	fresh := now.Add(time.Second + ttl)
	p4, rec4 := h.claimNew(scope1, "k", fpA, fresh)
	checkProcessing(t, rec4, p4, 1, fresh)
	checkProcessing(t, h.get(scope1, "k", fresh), p4, 1, fresh)
}

// testNoTakeover: a claim with NoTakeover returns a processing record
// whose lease ran out unclaimed and unchanged (abandoned or not); it
// claims absent keys and expired results as usual.
func testNoTakeover(t *testing.T, h *harness) {
	noTakeover := func(key, fp string, now time.Time, token string) *retrysafe.ClaimResult {
		t.Helper()
		p := claimParams(scope1, key, fp, now)
		p.NoTakeover, p.TakeoverToken = true, token
		res, err := h.s.Claim(h.ctx, p)
		if err != nil || res == nil || res.Record == nil {
			t.Fatalf("Claim(%q) with NoTakeover: %+v, %v", key, res, err)
		}
		if res.Claimed {
			checkProcessing(t, res.Record, p, 1, now)
		}
		return res
	}
	p, orig := h.claimNew(scope1, "k", fpA, at(0))
	for _, tc := range []struct {
		name  string
		now   time.Time
		token string
	}{
		{"live lease", at(time.Second), ""},
		{"lease ran out", at(lease), ""},
		{"long after", at(lease + time.Hour), ""},
		{"with the matching TakeoverToken (NoTakeover wins)", at(lease), p.Token},
	} {
		res := noTakeover("k", fpA, tc.now, tc.token)
		if res.Claimed {
			t.Fatalf("%s: Claim with NoTakeover took the record over: %s", tc.name, describe(res.Record))
		}
		checkSameRecord(t, tc.name+": returned record", res.Record, orig)
		checkSameRecord(t, tc.name+": stored record", h.get(scope1, "k", tc.now), orig)
	}

	if err := h.abandon(scope1, "k", p.Token, at(time.Second)); err != nil {
		t.Fatalf("Abandon: %v", err)
	}
	res := noTakeover("k", fpA, at(lease), "")
	if res.Claimed || !res.Record.Abandoned || res.Record.Token != p.Token || res.Record.Attempt != 1 {
		t.Errorf("NoTakeover of an abandoned expired record: claimed=%v %s abandoned=%v, want it returned unchanged", res.Claimed, describe(res.Record), res.Record.Abandoned)
	}
	if got := h.get(scope1, "k", at(lease)); !got.Abandoned || got.Token != p.Token {
		t.Errorf("stored record after NoTakeover: %s abandoned=%v", describe(got), got.Abandoned)
	}
	// The owner may still finish.
	h.mustComplete(scope1, "k", p.Token, at(lease+time.Second), sampleResponse())

	// Absent keys and expired results are claimed as always.
	if res := noTakeover("absent", fpA, at(0), ""); !res.Claimed {
		t.Errorf("Claim with NoTakeover of an absent key: not claimed, record %s", describe(res.Record))
	}
	if res := noTakeover("k", fpB, at(lease+time.Second+ttl), ""); !res.Claimed {
		t.Errorf("Claim with NoTakeover of an expired result: not claimed, record %s", describe(res.Record))
	}
}

// testTakeoverToken: a claim with TakeoverToken takes an expired lease over
// only when the record's token equals it, and otherwise returns the record
// unclaimed and unchanged; the fingerprint and the lease still rule; absent
// keys are claimed as always.
func testTakeoverToken(t *testing.T, h *harness) {
	claimWith := func(key, fp string, now time.Time, token string) (*retrysafe.ClaimParams, *retrysafe.ClaimResult) {
		t.Helper()
		p := claimParams(scope1, key, fp, now)
		p.TakeoverToken = token
		res, err := h.s.Claim(h.ctx, p)
		if err != nil || res == nil || res.Record == nil {
			t.Fatalf("Claim(%q) with a TakeoverToken: %+v, %v", key, res, err)
		}
		return p, res
	}
	p1, orig := h.claimNew(scope1, "k", fpA, at(0))
	if err := h.abandon(scope1, "k", p1.Token, at(time.Second)); err != nil {
		t.Fatalf("Abandon: %v", err)
	}
	orig = h.get(scope1, "k", at(time.Second))
	for _, tc := range []struct {
		name, fp, token string
		now             time.Time
	}{
		{"another token", fpA, retrysafe.NewToken(), at(lease)},
		{"the matching token, live lease", fpA, p1.Token, at(lease - time.Second)},
		{"the matching token, other fingerprint", fpB, p1.Token, at(lease)},
	} {
		_, res := claimWith("k", tc.fp, tc.now, tc.token)
		if res.Claimed {
			t.Fatalf("%s: the claim took the record over: %s", tc.name, describe(res.Record))
		}
		checkSameRecord(t, tc.name+": returned record", res.Record, orig)
		checkSameRecord(t, tc.name+": stored record", h.get(scope1, "k", tc.now), orig)
	}

	p2, res := claimWith("k", fpA, at(lease), p1.Token)
	if !res.Claimed {
		t.Fatalf("Claim with the record's own token as TakeoverToken: not claimed: %s", describe(res.Record))
	}
	checkProcessing(t, res.Record, p2, 2, at(0))

	// The second attempt's lease runs out: the first token no longer
	// matches, the second does.
	stale := at(2 * lease)
	_, res = claimWith("k", fpA, stale, p1.Token)
	if res.Claimed || res.Record.Token != p2.Token {
		t.Fatalf("Claim with a stale TakeoverToken: claimed=%v %s, want the second attempt unclaimed", res.Claimed, describe(res.Record))
	}
	p3, res := claimWith("k", fpA, stale, p2.Token)
	if !res.Claimed {
		t.Fatalf("Claim with the second attempt's token: not claimed: %s", describe(res.Record))
	}
	checkProcessing(t, res.Record, p3, 3, at(0))

	p4, res := claimWith("absent", fpA, at(0), retrysafe.NewToken())
	if !res.Claimed {
		t.Fatalf("Claim of an absent key with a TakeoverToken: not claimed: %s", describe(res.Record))
	}
	checkProcessing(t, res.Record, p4, 1, at(0))
}

// testConcurrentTakeoverToken: claims racing for one expired lease, half
// with the record's token as TakeoverToken (retries a resolver let re-run)
// and half without: exactly one takes it over.
func testConcurrentTakeoverToken(t *testing.T, h *harness) {
	const rounds, claimants = 20, 40
	for round := range rounds {
		key := fmt.Sprintf("token-takeover-%03d", round)
		old, _ := h.claimNew(scope1, key, fpA, at(0))
		if round%2 == 1 {
			if err := h.abandon(scope1, key, old.Token, at(time.Second)); err != nil {
				t.Fatalf("round %d: Abandon: %v", round, err)
			}
		}
		params := make([]*retrysafe.ClaimParams, claimants)
		for i := range params {
			params[i] = claimParams(scope1, key, fpA, at(lease))
			if i%2 == 0 {
				params[i].TakeoverToken = old.Token
			}
		}
		results := raceClaims(t, h, []retrysafe.Store{h.s}, params)
		w := oneWinner(t, round, params, results)
		checkProcessing(t, results[w].Record, params[w], 2, at(0))
	}
}

// testAdminUnknown: an abandoned processing record counts as an unknown
// outcome in Stats and is selected by List's LeaseExpiredBy filter while
// its lease is still live; Admin reads carry Abandoned and the checkpoint.
func testAdminUnknown(t *testing.T, h *harness) {
	ad, ok := retrysafe.As[admin.Admin](h.s)
	if !ok {
		t.Skip("store does not implement admin.Admin")
	}
	pa, _ := h.claimNew(scope1, "abandoned", fpA, at(0))
	h.claimNew(scope1, "live", fpA, at(0))
	if err := h.checkpoint(scope1, "abandoned", pa.Token, at(time.Second), lease, &retrysafe.Checkpoint{Name: "sent", Data: []byte("d")}); err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	if err := h.abandon(scope1, "abandoned", pa.Token, at(2*time.Second)); err != nil {
		t.Fatalf("Abandon: %v", err)
	}
	now := at(3 * time.Second) // both leases live
	st, err := ad.Stats(h.ctx, &admin.StatsParams{Now: now})
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	if st.Processing != 2 || st.LeaseExpired != 1 || len(st.Unknown) != 1 || st.Unknown[0].Key != "abandoned" || !st.Unknown[0].Abandoned {
		t.Errorf("Stats: processing %d, unknown %d %v; want 2 processing, the abandoned record unknown", st.Processing, st.LeaseExpired, st.Unknown)
	}
	if o := st.OldestInFlight; o == nil || o.Key != "live" {
		t.Errorf("Stats.OldestInFlight = %s, want live (an abandoned record is not in flight)", describe(o))
	}
	recs, err := ad.List(h.ctx, &admin.ListParams{LeaseExpiredBy: now})
	if err != nil {
		t.Fatalf("List with LeaseExpiredBy: %v", err)
	}
	if len(recs) != 1 || recs[0].Key != "abandoned" || !recs[0].Abandoned {
		t.Fatalf("List with LeaseExpiredBy = %d records, want the abandoned one", len(recs))
	}
	checkCheckpoint(t, "listed record", recs[0].Checkpoint, "sent", []byte("d"), at(time.Second))
	found, err := ad.Find(h.ctx, &admin.FindParams{Key: "abandoned", Scope: scope1})
	if err != nil || len(found) != 1 || !found[0].Abandoned {
		t.Fatalf("Find of the abandoned record: %d records (%v), want it abandoned", len(found), err)
	}
	checkCheckpoint(t, "found record", found[0].Checkpoint, "sent", []byte("d"), at(time.Second))
}
