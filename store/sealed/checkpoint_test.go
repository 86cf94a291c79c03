package sealed_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/memory"
	"github.com/retrysafe/retrysafe/store/sealed"
)

// claimNew claims scope/key on s at at and returns the owner's token.
func claimNew(t *testing.T, s retrysafe.Store, scope, key string, at time.Time) string {
	t.Helper()
	res, err := s.Claim(t.Context(), &retrysafe.ClaimParams{Scope: scope, Key: key, Fingerprint: "fp", Token: retrysafe.NewToken(), Now: at, Lease: time.Minute})
	if err != nil || !res.Claimed {
		t.Fatalf("Claim(%q, %q): claimed=%v err=%v", scope, key, res != nil && res.Claimed, err)
	}
	return res.Record.Token
}

// checkpoint writes a checkpoint named name with data as the owner.
func checkpoint(ctx context.Context, s retrysafe.Store, scope, key, token, name string, data []byte) error {
	return s.Extend(ctx, &retrysafe.ExtendParams{Scope: scope, Key: key, Token: token, Now: now, Lease: time.Minute,
		Checkpoint: &retrysafe.Checkpoint{Name: name, Data: data}})
}

// TestCheckpointSealed: checkpoint data is kept encrypted (its name in the
// clear) and reads back opened through Get, a blocked Claim, the record a
// takeover returns, List, Find and Stats.
func TestCheckpointSealed(t *testing.T) {
	t.Parallel()
	raw := memory.New(memory.Config{})
	s := wrap(t, raw, testRing(t, "k1"), sealed.Config{})
	ctx := t.Context()
	tok := claimNew(t, s, scopeA, "pay", now)
	data := []byte("charge ch_1 for " + secret)
	if err := checkpoint(ctx, s, scopeA, "pay", tok, "charge-requested", data); err != nil {
		t.Fatal(err)
	}

	in, err := get(raw, ctx, stored(t, scopeA), "pay")
	if err != nil {
		t.Fatal(err)
	}
	if in.Checkpoint == nil || in.Checkpoint.Name != "charge-requested" {
		t.Fatalf("stored checkpoint %+v, want its name in the clear", in.Checkpoint)
	}
	if bytes.Contains(in.Checkpoint.Data, []byte(secret)) || bytes.Contains(in.Checkpoint.Data, []byte("ch_1")) {
		t.Fatalf("the inner store keeps the checkpoint data in the clear: %q", in.Checkpoint.Data)
	}

	wantData := func(what string, rec *retrysafe.Record, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if rec.Checkpoint == nil || rec.Checkpoint.Name != "charge-requested" || !bytes.Equal(rec.Checkpoint.Data, data) || !rec.Checkpoint.At.Equal(now) {
			t.Fatalf("%s: checkpoint %+v, want the opened one", what, rec.Checkpoint)
		}
	}
	rec, err := get(s, ctx, scopeA, "pay")
	wantData("Get", rec, err)
	res, err := s.Claim(ctx, &retrysafe.ClaimParams{Scope: scopeA, Key: "pay", Fingerprint: "fp", Token: retrysafe.NewToken(), Now: now, Lease: time.Minute})
	if err == nil && res.Claimed {
		t.Fatal("claimed a live lease")
	}
	wantData("blocked Claim", res.Record, err)
	res, err = s.Claim(ctx, &retrysafe.ClaimParams{Scope: scopeA, Key: "pay", Fingerprint: "fp", Token: retrysafe.NewToken(), Now: now.Add(2 * time.Minute), Lease: time.Minute})
	if err == nil && (!res.Claimed || res.Record.Attempt != 2) {
		t.Fatalf("takeover: %+v", res)
	}
	wantData("takeover", res.Record, err)

	ad, _ := retrysafe.As[retrysafe.Admin](s)
	recs, err := ad.List(ctx, &retrysafe.ListParams{})
	if err != nil || len(recs) != 1 {
		t.Fatalf("List: %d records, %v", len(recs), err)
	}
	wantData("List", recs[0], nil)
	recs, err = ad.Find(ctx, &retrysafe.FindParams{Key: "pay"})
	if err != nil || len(recs) != 1 {
		t.Fatalf("Find: %d records, %v", len(recs), err)
	}
	wantData("Find", recs[0], nil)
	if err := s.Extend(ctx, &retrysafe.ExtendParams{Scope: scopeA, Key: "pay", Token: res.Record.Token, Now: now.Add(2 * time.Minute), Abandon: true}); err != nil {
		t.Fatal(err)
	}
	st, err := ad.Stats(ctx, &retrysafe.StatsParams{Now: now.Add(2 * time.Minute)})
	if err != nil || len(st.Unknown) != 1 || !st.Unknown[0].Abandoned {
		t.Fatalf("Stats: %+v, %v; want the abandoned record unknown", st, err)
	}
	wantData("Stats.Unknown", st.Unknown[0], nil)
	if rec, _ := get(raw, ctx, stored(t, scopeA), "pay"); bytes.Contains(rec.Checkpoint.Data, []byte(secret)) {
		t.Fatal("Stats opened the stored record in place")
	}
}

// TestCheckpointMoved: sealed checkpoint data copied to another key, to
// another scope, or under another name does not open.
func TestCheckpointMoved(t *testing.T) {
	t.Parallel()
	raw := memory.New(memory.Config{})
	s := wrap(t, raw, testRing(t, "k1"), sealed.Config{})
	ctx := t.Context()
	tok := claimNew(t, s, scopeA, "src", now)
	if err := checkpoint(ctx, s, scopeA, "src", tok, "step", []byte(secret)); err != nil {
		t.Fatal(err)
	}
	src, err := get(raw, ctx, stored(t, scopeA), "src")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what, scope, key, name string
	}{
		{"another key", scopeA, "dst", "step"},
		{"another scope", scopeB, "src", "step"},
		{"another name", scopeA, "renamed", "other-step"},
	} {
		// Write the stolen ciphertext straight into the inner store.
		tok := claimNew(t, raw, stored(t, tc.scope), tc.key, now)
		if err := checkpoint(ctx, raw, stored(t, tc.scope), tc.key, tok, tc.name, src.Checkpoint.Data); err != nil {
			t.Fatal(err)
		}
		_, err := get(s, ctx, tc.scope, tc.key)
		wantCannotDecrypt(t, "checkpoint moved to "+tc.what, err)
	}

	// Flipping one byte of the ciphertext.
	bad := bytes.Clone(src.Checkpoint.Data)
	bad[len(bad)-1] ^= 1
	tok = claimNew(t, raw, stored(t, scopeA), "flipped", now)
	if err := checkpoint(ctx, raw, stored(t, scopeA), "flipped", tok, "step", bad); err != nil {
		t.Fatal(err)
	}
	_, err = get(s, ctx, scopeA, "flipped")
	wantCannotDecrypt(t, "altered checkpoint", err)
}

// TestCheckpointPlaintext: with a ring, a checkpoint stored in the clear
// is refused unless AcceptPlaintext; without a ring, a sealed one is
// refused, naming no secret, and data that looks sealed is not stored.
func TestCheckpointPlaintext(t *testing.T) {
	t.Parallel()
	raw := memory.New(memory.Config{})
	ctx := t.Context()
	ring := testRing(t, "k1")
	tok := claimNew(t, raw, stored(t, scopeA), "planted", now)
	if err := checkpoint(ctx, raw, stored(t, scopeA), "planted", tok, "step", []byte("clear")); err != nil {
		t.Fatal(err)
	}
	_, err := get(wrap(t, raw, ring, sealed.Config{}), ctx, scopeA, "planted")
	wantCannotDecrypt(t, "plaintext checkpoint, strict", err)
	rec, err := get(wrap(t, raw, ring, sealed.Config{AcceptPlaintext: true}), ctx, scopeA, "planted")
	if err != nil || string(rec.Checkpoint.Data) != "clear" {
		t.Fatalf("plaintext checkpoint with AcceptPlaintext: %+v, %v", rec, err)
	}

	// A record stored in the clear, checkpointed through a lenient
	// wrapper: sealed for the scope it is kept under, and it opens.
	lenient := wrap(t, raw, ring, sealed.Config{AcceptPlaintext: true})
	tok = claimNew(t, raw, scopeA, "old", now)
	if err := checkpoint(ctx, lenient, scopeA, "old", tok, "step", []byte(secret)); err != nil {
		t.Fatalf("checkpoint of a clear record through AcceptPlaintext: %v", err)
	}
	if in, _ := get(raw, ctx, scopeA, "old"); bytes.Contains(in.Checkpoint.Data, []byte(secret)) {
		t.Fatal("the checkpoint of a clear record was stored in the clear")
	}
	if rec, err := get(lenient, ctx, scopeA, "old"); err != nil || string(rec.Checkpoint.Data) != secret {
		t.Fatalf("reading it back: %+v, %v", rec, err)
	}

	sealedOne := wrap(t, raw, ring, sealed.Config{})
	tok = claimNew(t, sealedOne, scopeA, "sealed", now)
	if err := checkpoint(ctx, sealedOne, scopeA, "sealed", tok, "step", []byte(secret)); err != nil {
		t.Fatal(err)
	}
	noRing := wrap(t, raw, nil, sealed.Config{})
	_, err = get(noRing, ctx, stored(t, scopeA), "sealed")
	wantCannotDecrypt(t, "sealed checkpoint without a ring", err)
	if strings.Contains(err.Error(), secret) {
		t.Fatalf("error %q shows the data", err)
	}
	in, _ := get(raw, ctx, stored(t, scopeA), "sealed")
	tok = claimNew(t, noRing, scopeA, "mimic", now)
	if err := checkpoint(ctx, noRing, scopeA, "mimic", tok, "step", in.Checkpoint.Data); err == nil {
		t.Fatal("without a ring the wrapper stored data that reads back as sealed")
	}
	if err := checkpoint(ctx, noRing, scopeA, "mimic", tok, "step", []byte(secret)); err != nil {
		t.Fatal(err)
	}
	if rec, err := get(noRing, ctx, scopeA, "mimic"); err != nil || string(rec.Checkpoint.Data) != secret {
		t.Fatalf("clear checkpoint without a ring: %+v, %v", rec, err)
	}
}

// TestCheckpointRotation: a checkpoint sealed with an old key opens once a
// new key is appended, and a new one is sealed with the new key.
func TestCheckpointRotation(t *testing.T) {
	t.Parallel()
	raw := memory.New(memory.Config{})
	ctx := t.Context()
	k1, k2 := newKey("k1"), newKey("k2")
	old := wrap(t, raw, ringOf(t, k1), sealed.Config{})
	tok := claimNew(t, old, scopeA, "pay", now)
	if err := checkpoint(ctx, old, scopeA, "pay", tok, "one", []byte("1")); err != nil {
		t.Fatal(err)
	}
	rotated := wrap(t, raw, ringOf(t, k1, k2), sealed.Config{})
	if rec, err := get(rotated, ctx, scopeA, "pay"); err != nil || string(rec.Checkpoint.Data) != "1" {
		t.Fatalf("old checkpoint after rotation: %+v, %v", rec, err)
	}
	if err := checkpoint(ctx, rotated, scopeA, "pay", tok, "two", []byte("2")); err != nil {
		t.Fatal(err)
	}
	_, err := get(old, ctx, scopeA, "pay")
	wantCannotDecrypt(t, "new checkpoint read with the old ring", err)
	if !strings.Contains(err.Error(), `"k2"`) {
		t.Errorf("error %q does not name the key id", err)
	}
}

// TestSealExtend: SealExtend maps the scope and seals the checkpoint for
// a store's CheckpointTx, leaving its argument unchanged, and what it
// writes reads back through the wrapper.
func TestSealExtend(t *testing.T) {
	t.Parallel()
	raw := memory.New(memory.Config{})
	ring := testRing(t, "k1")
	s := wrap(t, raw, ring, sealed.Config{})
	tok := claimNew(t, s, scopeA, "tx", now)
	p := &retrysafe.ExtendParams{Scope: scopeA, Key: "tx", Token: tok, Now: now, Lease: time.Minute, Checkpoint: &retrysafe.Checkpoint{Name: "step", Data: []byte(secret)}}
	q, err := ring.SealExtend(p)
	if err != nil {
		t.Fatal(err)
	}
	if p.Scope != scopeA || string(p.Checkpoint.Data) != secret {
		t.Fatal("SealExtend changed its argument")
	}
	if q.Scope != stored(t, scopeA) || bytes.Contains(q.Checkpoint.Data, []byte(secret)) {
		t.Fatalf("SealExtend: scope %q, data %q", q.Scope, q.Checkpoint.Data)
	}
	if err := raw.Extend(t.Context(), q); err != nil {
		t.Fatal(err)
	}
	if rec, err := get(s, t.Context(), scopeA, "tx"); err != nil || string(rec.Checkpoint.Data) != secret {
		t.Fatalf("read back: %+v, %v", rec, err)
	}
	if _, err := ring.SealExtend(nil); err == nil {
		t.Fatal("SealExtend(nil) succeeded")
	}
}

// TestStoredScopes: records listed with Admin carry the stored scope, so a
// completer that writes them back through the wrapper misses them (fenced:
// nothing is overwritten); through StoredScopes it completes them, sealed,
// and the callers' retries get the answer.
func TestStoredScopes(t *testing.T) {
	t.Parallel()
	raw := memory.New(memory.Config{})
	s := wrap(t, raw, testRing(t, "k1"), sealed.Config{})
	ctx := t.Context()
	claimNew(t, s, scopeA, "stranded", now)
	ad, _ := retrysafe.As[retrysafe.Admin](s)
	later := now.Add(2 * time.Minute)
	recs, err := ad.List(ctx, &retrysafe.ListParams{LeaseExpiredBy: later})
	if err != nil || len(recs) != 1 || recs[0].Scope != stored(t, scopeA) {
		t.Fatalf("List: %+v, %v", recs, err)
	}
	resolver := func(ctx context.Context, rec *retrysafe.Record) (retrysafe.Resolution, error) {
		return retrysafe.Resolution{Action: retrysafe.ResolveComplete, Response: payment()}, nil
	}
	completer := func(st retrysafe.Store) retrysafe.Stranded {
		t.Helper()
		x, err := retrysafe.NewExecutor(retrysafe.Config{Store: st, Resolver: resolver, Now: func() time.Time { return later }})
		if err != nil {
			t.Fatal(err)
		}
		n, err := x.ResolveStranded(ctx, recs)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := completer(s); n.Skipped != 1 || n.Completed != 0 {
		t.Fatalf("completer through the wrapper: %+v, want the record missed", n)
	}
	st, ok := sealed.StoredScopes(s)
	if !ok {
		t.Fatal("StoredScopes of a sealed store: not ok")
	}
	if n := completer(st); n.Completed != 1 {
		t.Fatalf("completer through StoredScopes: %+v, want it completed", n)
	}
	rec, err := get(s, ctx, scopeA, "stranded")
	if err != nil || rec.State != retrysafe.StateCompleted {
		t.Fatalf("the caller's read: %+v, %v", rec, err)
	}
	wantResponse(t, "the completer's response", rec.Response, payment())
	in, _ := get(raw, ctx, stored(t, scopeA), "stranded")
	if bytes.Contains(in.Response.Body, []byte(secret)) {
		t.Fatal("the completer's response is stored in the clear")
	}
	if _, ok := sealed.StoredScopes(raw); ok {
		t.Error("StoredScopes of a plain store: ok")
	}
}
