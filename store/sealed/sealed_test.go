// The checks that need every store (no plaintext in what each store keeps,
// a completion without a response) are in internal/e2e/sealed_test.go.

package sealed_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/store/memory"
	"github.com/retrysafe/retrysafe/store/sealed"
)

var now = time.Date(2031, time.March, 4, 5, 6, 7, 0, time.UTC)

const (
	scopeA = "scope-a"
	scopeB = "scope-b"
	secret = "Jane Doe, 1 Main St, card ending 4242"
)

func payment() *retrysafe.Response {
	return &retrysafe.Response{
		Status: http.StatusCreated,
		Header: http.Header{
			"Content-Type": {"application/json"},
			"Location":     {"/customers/" + secret},
			"X-Multi":      {"one", "", "three"},
		},
		Body: []byte(`{"customer":"` + secret + `"}`),
	}
}

// complete claims scope/key on s and completes it with resp.
func complete(t *testing.T, s retrysafe.Store, scope, key string, resp *retrysafe.Response) {
	t.Helper()
	ctx := t.Context()
	res, err := s.Claim(ctx, &retrysafe.ClaimParams{Scope: scope, Key: key, Fingerprint: "fp", Token: retrysafe.NewToken(), Now: now, Lease: time.Minute})
	if err != nil || !res.Claimed {
		t.Fatalf("Claim(%q, %q): claimed=%v err=%v", scope, key, res != nil && res.Claimed, err)
	}
	err = s.Complete(ctx, &retrysafe.CompleteParams{Scope: scope, Key: key, Token: res.Record.Token, Now: now, TTL: time.Hour, Response: resp})
	if err != nil {
		t.Fatalf("Complete(%q, %q): %v", scope, key, err)
	}
}

func get(s retrysafe.Store, ctx context.Context, scope, key string) (*retrysafe.Record, error) {
	return s.Get(ctx, &retrysafe.GetParams{Scope: scope, Key: key, Now: now})
}

// claimExisting claims a completed key again and returns the replay.
func claimExisting(s retrysafe.Store, ctx context.Context, scope, key string) (*retrysafe.Record, error) {
	res, err := s.Claim(ctx, &retrysafe.ClaimParams{Scope: scope, Key: key, Fingerprint: "fp", Token: retrysafe.NewToken(), Now: now, Lease: time.Minute})
	if err != nil {
		return nil, err
	}
	if res.Claimed {
		return nil, errors.New("claimed a completed key")
	}
	return res.Record, nil
}

func wantResponse(t *testing.T, what string, got, want *retrysafe.Response) {
	t.Helper()
	if got == nil || got.Status != want.Status || !reflect.DeepEqual(got.Header, want.Header) || !bytes.Equal(got.Body, want.Body) {
		t.Fatalf("%s: got %+v, want %+v", what, got, want)
	}
}

func wantCannotDecrypt(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, sealed.ErrCannotDecrypt) {
		t.Fatalf("%s: got error %v, want ErrCannotDecrypt", what, err)
	}
	if errors.Is(err, retrysafe.ErrStoreUnavailable) {
		t.Fatalf("%s: %v matches ErrStoreUnavailable: FailOpen would run the operation again", what, err)
	}
}

// TestRotation: after a new key is appended, responses sealed with the old
// key still open, and new ones are sealed with the new key.
func TestRotation(t *testing.T) {
	t.Parallel()
	raw := memory.New(memory.Config{})
	old, next := newKey("2026-06"), newKey("2026-11")

	before := wrap(t, raw, ringOf(t, old), sealed.Config{})
	complete(t, before, scopeA, "old", payment())

	after := wrap(t, raw, ringOf(t, old, next), sealed.Config{})
	complete(t, after, scopeA, "new", payment())

	for key, wantID := range map[string]string{"old": "2026-06", "new": "2026-11"} {
		kept, err := get(raw, t.Context(), stored(t, scopeA), key)
		if err != nil {
			t.Fatal(err)
		}
		if id, _ := sealed.KeyID(kept.Response); id != wantID {
			t.Errorf("%s: sealed with key %q, want %q", key, id, wantID)
		}
		rec, err := claimExisting(after, t.Context(), scopeA, key)
		if err != nil {
			t.Fatalf("%s: replay with the rotated ring: %v", key, err)
		}
		wantResponse(t, key+": replay with the rotated ring", rec.Response, payment())
	}

	// The old key removed too early: what it sealed no longer opens.
	onlyNew := wrap(t, raw, ringOf(t, next), sealed.Config{})
	_, err := get(onlyNew, t.Context(), scopeA, "old")
	wantCannotDecrypt(t, "Get with the old key removed", err)
	if !strings.Contains(err.Error(), `"2026-06"`) {
		t.Errorf("error %q does not name the missing key id", err)
	}
	if _, err := get(onlyNew, t.Context(), scopeA, "new"); err != nil {
		t.Errorf("Get of the new record: %v", err)
	}
}

// TestMovedRecord: a sealed response copied, in the raw store, to another
// key or another scope fails to open instead of replaying.
func TestMovedRecord(t *testing.T) {
	t.Parallel()
	ring := testRing(t, "k1")
	raw := memory.New(memory.Config{})
	s := wrap(t, raw, ring, sealed.Config{})
	complete(t, s, scopeA, "original", payment())
	original, err := get(raw, t.Context(), stored(t, scopeA), "original")
	if err != nil {
		t.Fatal(err)
	}

	cases := map[string]struct {
		scope, key string
		status     int
	}{
		"other key":   {scopeA, "copy", http.StatusCreated},
		"other scope": {scopeB, "original", http.StatusCreated},
	}
	for name, c := range cases {
		moved := original.Response.Clone()
		moved.Status = c.status
		complete(t, raw, stored(t, c.scope), c.key, moved)
		_, err := get(s, t.Context(), c.scope, c.key)
		wantCannotDecrypt(t, name+": Get", err)
		_, err = claimExisting(s, t.Context(), c.scope, c.key)
		wantCannotDecrypt(t, name+": Claim", err)
	}
	// The original still opens.
	if _, err := get(s, t.Context(), scopeA, "original"); err != nil {
		t.Fatalf("original: %v", err)
	}
}

// TestTampering: changing any byte of a sealed body, or the status stored
// next to it, fails to open.
func TestTampering(t *testing.T) {
	t.Parallel()
	ring := testRing(t, "k1")
	sealedResp, err := ring.Seal(scopeA, "k", payment())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ring.Open(scopeA, "k", sealedResp); err != nil {
		t.Fatalf("untampered: %v", err)
	}
	for i := range sealedResp.Body {
		tampered := sealedResp.Clone()
		tampered.Body[i] ^= 0x01
		if _, err := ring.Open(scopeA, "k", tampered); !errors.Is(err, sealed.ErrCannotDecrypt) {
			t.Fatalf("byte %d flipped: got %v, want ErrCannotDecrypt", i, err)
		}
	}
	for _, n := range []int{0, 1, 5, len(sealedResp.Body) - 1} {
		cut := sealedResp.Clone()
		cut.Body = cut.Body[:n]
		if _, err := ring.Open(scopeA, "k", cut); !errors.Is(err, sealed.ErrCannotDecrypt) {
			t.Fatalf("truncated to %d bytes: got %v, want ErrCannotDecrypt", n, err)
		}
	}
	for _, status := range []int{http.StatusOK, http.StatusInternalServerError, 0} {
		other := sealedResp.Clone()
		other.Status = status
		if _, err := ring.Open(scopeA, "k", other); !errors.Is(err, sealed.ErrCannotDecrypt) {
			t.Fatalf("status changed to %d: got %v, want ErrCannotDecrypt", status, err)
		}
	}
	// The marker names the key: another id of the ring fails to open, and
	// a response without the marker is not sealed.
	two := testRing(t, "k1", "k2")
	resealed, err := two.Seal(scopeA, "k", payment())
	if err != nil {
		t.Fatal(err)
	}
	for _, ids := range [][]string{{"k1"}, nil, {"k2", "k2"}} {
		other := resealed.Clone()
		other.Header[sealed.MarkerHeader] = ids
		if ids == nil {
			delete(other.Header, sealed.MarkerHeader)
		}
		if _, err := two.Open(scopeA, "k", other); !errors.Is(err, sealed.ErrCannotDecrypt) {
			t.Fatalf("marker %q instead of k2: got %v, want ErrCannotDecrypt", ids, err)
		}
	}
	// The stored header placeholders are not what is replayed: changing
	// them changes nothing.
	renamed := sealedResp.Clone()
	renamed.Header = http.Header{"X-Injected": {"evil"}, sealed.MarkerHeader: sealedResp.Header[sealed.MarkerHeader]}
	got, err := ring.Open(scopeA, "k", renamed)
	if err != nil {
		t.Fatal(err)
	}
	wantResponse(t, "placeholders replaced", got, payment())
}

// TestWrongKey: a ring whose key has the right id but another secret (a
// key file from another environment) refuses to open.
func TestWrongKey(t *testing.T) {
	t.Parallel()
	raw := memory.New(memory.Config{})
	complete(t, wrap(t, raw, ringOf(t, newKey("prod")), sealed.Config{}), scopeA, "k", payment())
	_, err := get(wrap(t, raw, ringOf(t, newKey("prod")), sealed.Config{}), t.Context(), scopeA, "k")
	wantCannotDecrypt(t, "Get with a different key of the same id", err)
	if !strings.Contains(err.Error(), "authentication") {
		t.Errorf("error %q does not say authentication failed", err)
	}
}

// TestPlaintextRecords: a record in the clear where a sealed one belongs
// (planted by whoever can write to the store) is refused by default; with
// AcceptPlaintext, records stored before encryption was turned on (under
// their scope in the clear) are found and returned as they are; a wrapper
// without a ring refuses sealed records.
func TestPlaintextRecords(t *testing.T) {
	t.Parallel()
	ring := testRing(t, "k1")
	raw := memory.New(memory.Config{})
	complete(t, raw, scopeA, "clear", payment())
	complete(t, raw, stored(t, scopeA), "planted", payment())
	complete(t, wrap(t, raw, ring, sealed.Config{}), scopeA, "sealed", payment())

	_, err := get(wrap(t, raw, ring, sealed.Config{}), t.Context(), scopeA, "planted")
	wantCannotDecrypt(t, "plaintext record, strict", err)

	lenient := wrap(t, raw, ring, sealed.Config{AcceptPlaintext: true})
	for _, key := range []string{"clear", "sealed"} {
		rec, err := get(lenient, t.Context(), scopeA, key)
		if err != nil {
			t.Fatalf("%s with AcceptPlaintext: %v", key, err)
		}
		wantResponse(t, key+" with AcceptPlaintext", rec.Response, payment())
	}

	noRing := wrap(t, raw, nil, sealed.Config{})
	_, err = claimExisting(noRing, t.Context(), stored(t, scopeA), "sealed")
	wantCannotDecrypt(t, "sealed record without a ring", err)
	if !strings.Contains(err.Error(), `"k1"`) {
		t.Errorf("error %q does not name the key id", err)
	}
	rec, err := claimExisting(noRing, t.Context(), scopeA, "clear")
	if err != nil {
		t.Fatal(err)
	}
	wantResponse(t, "plaintext record without a ring", rec.Response, payment())
}

// TestList: Admin.List opens what it can, with and without bodies, and
// leaves what it cannot open sealed.
func TestList(t *testing.T) {
	t.Parallel()
	raw := memory.New(memory.Config{})
	old, cur := newKey("old"), newKey("cur")
	complete(t, wrap(t, raw, ringOf(t, old), sealed.Config{}), scopeA, "a-old", payment())
	s := wrap(t, raw, ringOf(t, cur), sealed.Config{})
	complete(t, s, scopeA, "b-cur", payment())

	adm, _ := retrysafe.As[admin.Admin](s)
	for _, bodies := range []bool{true, false} {
		recs, err := adm.List(t.Context(), &admin.ListParams{WithBodies: bodies})
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 2 {
			t.Fatalf("listed %d records, want 2", len(recs))
		}
		want := payment()
		if !bodies {
			want.Body = nil
		}
		wantResponse(t, "opened record", recs[1].Response, want)
		if got := recs[0].Response.Header.Get("Location"); got != sealed.HeaderPlaceholder {
			t.Errorf("record of an unknown key: Location = %q, want the placeholder", got)
		}
		if id, ok := sealed.KeyID(recs[0].Response); bodies && (!ok || id != "old") {
			t.Errorf("record of an unknown key: KeyID = %q, %v; want old, true", id, ok)
		}
		if !bodies && recs[0].Response.Body != nil {
			t.Errorf("WithBodies=false returned a body")
		}
	}
}

// TestOptionalInterfaces: retrysafe.As finds exactly the optional
// abilities of the wrapped store on the wrapper, and the Admin it finds is
// the wrapper's, which opens what it lists.
func TestOptionalInterfaces(t *testing.T) {
	t.Parallel()
	mem := memory.New(memory.Config{})
	cases := map[string]retrysafe.Store{
		"none": struct{ retrysafe.Store }{mem},
		"pinger": struct {
			retrysafe.Store
			admin.Pinger
		}{mem, mem},
		"sweeper+admin": struct {
			retrysafe.Store
			admin.Sweeper
			admin.Admin
		}{mem, mem, mem},
		"pinger+notifier+admin (redis-like: no sweeper)": struct {
			retrysafe.Store
			admin.Pinger
			retrysafe.Notifier
			admin.Admin
		}{mem, mem, mem, mem},
		"all": mem,
	}
	has := map[string]func(retrysafe.Store) bool{
		"Pinger":   func(s retrysafe.Store) bool { _, ok := retrysafe.As[admin.Pinger](s); return ok },
		"Sweeper":  func(s retrysafe.Store) bool { _, ok := retrysafe.As[admin.Sweeper](s); return ok },
		"Notifier": func(s retrysafe.Store) bool { _, ok := retrysafe.As[retrysafe.Notifier](s); return ok },
		"Admin":    func(s retrysafe.Store) bool { _, ok := retrysafe.As[admin.Admin](s); return ok },
	}
	for name, inner := range cases {
		ring := testRing(t, "k")
		s := wrap(t, inner, ring, sealed.Config{})
		for ability, found := range has {
			if got, want := found(s), found(inner); got != want {
				t.Errorf("%s: As finds %s on the wrapper = %v, want %v", name, ability, got, want)
			}
		}
		adm, ok := retrysafe.As[admin.Admin](s)
		if !ok {
			continue
		}
		scope := "scope-" + name
		complete(t, s, scope, "k", payment())
		recs, err := adm.List(t.Context(), &admin.ListParams{Scope: ring.Scope(scope), WithBodies: true})
		if err != nil || len(recs) != 1 {
			t.Fatalf("%s: List: %d records, %v", name, len(recs), err)
		}
		wantResponse(t, name+": listed through the Admin As finds", recs[0].Response, payment())
	}
	if _, err := sealed.New(nil, nil, sealed.Config{}); err == nil {
		t.Error("New(nil) succeeded")
	}
}

// TestSealDoesNotChangeParams: Complete seals a copy; the caller's
// response is untouched.
func TestSealDoesNotChangeParams(t *testing.T) {
	t.Parallel()
	s := wrap(t, memory.New(memory.Config{}), testRing(t, "k"), sealed.Config{})
	resp := payment()
	complete(t, s, scopeA, "k", resp)
	wantResponse(t, "caller's response after Complete", resp, payment())
}

// TestDoWithSealedStore: Do stores its result sealed and replays it; with
// the key gone from the ring it returns ErrCannotDecrypt and does not run
// the function again.
func TestDoWithSealedStore(t *testing.T) {
	t.Parallel()
	raw := memory.New(memory.Config{})
	k1 := newKey("k1")
	s := wrap(t, raw, ringOf(t, k1), sealed.Config{})
	runs := 0
	charge := func(context.Context) (string, error) {
		runs++
		return secret, nil
	}
	for range 2 {
		got, err := retrysafe.Do(t.Context(), s, "msg-1", "fp", charge)
		if err != nil || got != secret {
			t.Fatalf("Do = %q, %v", got, err)
		}
	}
	if runs != 1 {
		t.Fatalf("runs = %d, want 1", runs)
	}
	_, err := retrysafe.Do(t.Context(), wrap(t, raw, ringOf(t, newKey("k2")), sealed.Config{}), "msg-1", "fp", charge)
	wantCannotDecrypt(t, "Do without the key", err)
	if runs != 1 {
		t.Fatalf("runs = %d after the key was lost, want 1", runs)
	}
}

// TestReplaysLeaveTheStoredRecordSealed: a record the memory store returns
// shares its body with the one it keeps (read-only), so opening a replay
// must not change it: the stored record stays sealed after replays through
// Claim, Get and List, and every replay reads the same answer.
func TestReplaysLeaveTheStoredRecordSealed(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	inner := memory.New(memory.Config{})
	t.Cleanup(func() { inner.Close() })
	s := wrap(t, inner, testRing(t, "k1"), sealed.Config{})
	complete(t, s, scopeA, "order-1", payment())
	for i := range 3 {
		rec, err := claimExisting(s, ctx, scopeA, "order-1")
		if err != nil {
			t.Fatalf("replay %d through Claim: %v", i, err)
		}
		wantResponse(t, "replay through Claim", rec.Response, payment())
		if rec, err = get(s, ctx, scopeA, "order-1"); err != nil {
			t.Fatalf("replay %d through Get: %v", i, err)
		}
		wantResponse(t, "replay through Get", rec.Response, payment())
		if adm, _ := retrysafe.As[admin.Admin](s); adm == nil {
			t.Fatal("no Admin")
		} else if _, err := adm.List(ctx, &admin.ListParams{}); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := get(inner, ctx, stored(t, scopeA), "order-1")
	if err != nil {
		t.Fatal(err)
	}
	if id, ok := sealed.KeyID(raw.Response); !ok || id != "k1" {
		t.Fatalf("the stored record is no longer sealed with k1 after replays (key id %q, sealed %v)", id, ok)
	}
	if bytes.Contains(raw.Response.Body, []byte(secret)) {
		t.Fatal("the stored body holds the plaintext after replays")
	}
}
