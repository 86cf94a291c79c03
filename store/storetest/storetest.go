package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
)

// Base is the fixed time every scenario starts from. The suite never reads
// the wall clock to decide expiry: it moves params.Now forward from Base.
// Base and every offset the suite uses are whole seconds, so a store that
// keeps only millisecond or microsecond precision passes.
var Base = time.Date(2031, time.March, 4, 5, 6, 7, 0, time.UTC)

const (
	// lease is the lease the suite claims with unless a scenario says otherwise.
	lease = 30 * time.Second
	// ttl is the TTL the suite completes with.
	ttl = 24 * time.Hour

	fpA = "fp-a-0123456789abcdef0123456789abcdef0123456789abcdef0123456789ab"
	fpB = "fp-b-fedcba9876543210fedcba9876543210fedcba9876543210fedcba987654"

	// scope1 and scope2 look like the engine's default scopes: a hex
	// SHA-256 of the caller's Authorization header.
	scope1 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	scope2 = "60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752"
)

// Run runs the conformance suite against the store that newStore returns.
//
// newStore is called once per scenario, from inside the scenario's own
// subtest, and must return a fresh, isolated, empty store (its own
// PostgreSQL schema, Redis key prefix or SQLite file) that registers its
// cleanup with t.Cleanup. Scenarios run in parallel (t.Parallel), so
// stores returned by different calls must not see each other's records.
//
// Scenarios for the optional interfaces ([retrysafe.Pinger],
// [retrysafe.ReadyChecker], [retrysafe.Sweeper], [retrysafe.Notifier],
// [retrysafe.Admin]) run only
// when the store implements them; otherwise they are skipped with a note.
func Run(t *testing.T, newStore func(t *testing.T) retrysafe.Store) {
	t.Helper()
	for _, sc := range scenarios() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			sc.run(t, newHarness(t, newStore(t)))
		})
	}
}

type scenario struct {
	name string
	run  func(t *testing.T, h *harness)
}

func scenarios() []scenario {
	var all []scenario
	all = append(all, claimScenarios()...)
	all = append(all, fencingScenarios()...)
	all = append(all, responseScenarios()...)
	all = append(all, keyScenarios()...)
	all = append(all, contextScenarios()...)
	all = append(all, consistencyScenarios()...)
	all = append(all, overlapScenarios()...)
	all = append(all, unknownScenarios()...)
	all = append(all, optionalScenarios()...)
	return all
}

// harness wraps a store under test with helpers that fail the test on
// unexpected errors, so scenarios read as a list of steps.
type harness struct {
	t   *testing.T
	s   retrysafe.Store
	ctx context.Context
}

func newHarness(t *testing.T, s retrysafe.Store) *harness {
	t.Helper()
	if s == nil {
		t.Fatal("storetest: newStore returned a nil store")
	}
	return &harness{t: t, s: s, ctx: t.Context()}
}

// at returns Base moved forward by d.
func at(d time.Duration) time.Time { return Base.Add(d) }

// claimParams returns the parameters of a claim with a fresh token.
func claimParams(scope, key, fp string, now time.Time) *retrysafe.ClaimParams {
	return &retrysafe.ClaimParams{
		Scope:       scope,
		Key:         key,
		Fingerprint: fp,
		Token:       retrysafe.NewToken(),
		Now:         now,
		Lease:       lease,
		Route:       routeOf(key),
	}
}

// routeOf is the route the suite's claims of key give: every record has
// one, so every scenario checks that stores keep it.
func routeOf(key string) string { return "POST /r/" + key }

// claim claims scope/key with a fresh token and fails the test on error.
func (h *harness) claim(scope, key, fp string, now time.Time) (*retrysafe.ClaimParams, *retrysafe.ClaimResult) {
	h.t.Helper()
	p := claimParams(scope, key, fp, now)
	res, err := h.s.Claim(h.ctx, p)
	if err != nil {
		h.t.Fatalf("Claim(%q, %q) at %s: unexpected error: %v", scope, key, now.Sub(Base), err)
	}
	if res == nil || res.Record == nil {
		h.t.Fatalf("Claim(%q, %q) returned a nil result or record: %+v", scope, key, res)
	}
	return p, res
}

// claimNew claims scope/key and fails the test unless the claim won.
func (h *harness) claimNew(scope, key, fp string, now time.Time) (*retrysafe.ClaimParams, *retrysafe.Record) {
	h.t.Helper()
	p, res := h.claim(scope, key, fp, now)
	if !res.Claimed {
		h.t.Fatalf("Claim(%q, %q) at %s: Claimed=false, want true; existing record: %s", scope, key, now.Sub(Base), describe(res.Record))
	}
	return p, res.Record
}

// claimBlocked claims scope/key and fails the test if the claim won.
func (h *harness) claimBlocked(scope, key, fp string, now time.Time) *retrysafe.Record {
	h.t.Helper()
	_, res := h.claim(scope, key, fp, now)
	if res.Claimed {
		h.t.Fatalf("Claim(%q, %q) at %s: Claimed=true, want false; record: %s", scope, key, now.Sub(Base), describe(res.Record))
	}
	return res.Record
}

// get reads scope/key and fails the test on any error.
func (h *harness) get(scope, key string, now time.Time) *retrysafe.Record {
	h.t.Helper()
	rec, err := h.s.Get(h.ctx, &retrysafe.GetParams{Scope: scope, Key: key, Now: now})
	if err != nil {
		h.t.Fatalf("Get(%q, %q) at %s: unexpected error: %v", scope, key, now.Sub(Base), err)
	}
	if rec == nil {
		h.t.Fatalf("Get(%q, %q) returned a nil record and no error", scope, key)
	}
	return rec
}

// getNotFound fails the test unless Get returns ErrNotFound.
func (h *harness) getNotFound(scope, key string, now time.Time) {
	h.t.Helper()
	rec, err := h.s.Get(h.ctx, &retrysafe.GetParams{Scope: scope, Key: key, Now: now})
	if !errors.Is(err, retrysafe.ErrNotFound) {
		h.t.Fatalf("Get(%q, %q) at %s: got record %s, error %v; want ErrNotFound", scope, key, now.Sub(Base), describe(rec), err)
	}
}

func (h *harness) extend(scope, key, token string, now time.Time, l time.Duration) error {
	return h.s.Extend(h.ctx, &retrysafe.ExtendParams{Scope: scope, Key: key, Token: token, Now: now, Lease: l})
}

func (h *harness) complete(scope, key, token string, now time.Time, resp *retrysafe.Response) error {
	return h.s.Complete(h.ctx, &retrysafe.CompleteParams{Scope: scope, Key: key, Token: token, Now: now, TTL: ttl, Response: resp})
}

func (h *harness) release(scope, key, token string) error {
	return h.s.Release(h.ctx, &retrysafe.ReleaseParams{Scope: scope, Key: key, Token: token})
}

// mustComplete completes scope/key and fails the test on error.
func (h *harness) mustComplete(scope, key, token string, now time.Time, resp *retrysafe.Response) {
	h.t.Helper()
	if err := h.complete(scope, key, token, now, resp); err != nil {
		h.t.Fatalf("Complete(%q, %q) at %s by the owner: unexpected error: %v", scope, key, now.Sub(Base), err)
	}
}

// wantLeaseLost fails the test unless err matches ErrLeaseLost.
func wantLeaseLost(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, retrysafe.ErrLeaseLost) {
		t.Fatalf("%s: got error %v, want ErrLeaseLost", what, err)
	}
}

// sampleResponse is a typical stored answer with multi-valued headers.
func sampleResponse() *retrysafe.Response {
	return &retrysafe.Response{
		Status: http.StatusCreated,
		Header: http.Header{
			"Content-Type": {"application/json"},
			"Location":     {"/payments/pay_123"},
			"X-Multi":      {"first", "second", "third, with comma", ""},
			"X-Empty":      {""},
			"X-Unicode":    {"naïve ✓ 日本"},
		},
		Body: []byte(`{"id":"pay_123","amount":1000,"currency":"eur"}` + "\n"),
	}
}

// describe renders a record for failure messages (bodies are summarised).
func describe(rec *retrysafe.Record) string {
	if rec == nil {
		return "<nil>"
	}
	resp := "<nil>"
	if rec.Response != nil {
		resp = fmt.Sprintf("{status=%d headers=%d body=%d bytes}", rec.Response.Status, len(rec.Response.Header), len(rec.Response.Body))
	}
	cp := "<nil>"
	if rec.Checkpoint != nil {
		cp = fmt.Sprintf("{name=%q data=%d bytes at=%s}", rec.Checkpoint.Name, len(rec.Checkpoint.Data), rel(rec.Checkpoint.At))
	}
	return fmt.Sprintf("{scope=%s key=%s fp=%s state=%s token=%s attempt=%d route=%q created=%s updated=%s lease_until=%s expires=%s abandoned=%v checkpoint=%s response=%s}",
		short(rec.Scope), short(rec.Key), short(rec.Fingerprint), rec.State, short(rec.Token), rec.Attempt, rec.Route,
		rel(rec.CreatedAt), rel(rec.UpdatedAt), rel(rec.LeaseUntil), rel(rec.ExpiresAt), rec.Abandoned, cp, resp)
}

func short(s string) string {
	if len(s) > 24 {
		return fmt.Sprintf("%q...", s[:21])
	}
	return fmt.Sprintf("%q", s)
}

// rel renders a time relative to Base.
func rel(tm time.Time) string {
	if tm.IsZero() {
		return "zero"
	}
	return "Base+" + tm.Sub(Base).String()
}

// checkTime fails the test unless got equals want (as an instant).
func checkTime(t *testing.T, what string, got, want time.Time) {
	t.Helper()
	if !got.Equal(want) {
		t.Errorf("%s = %s, want %s", what, rel(got), rel(want))
	}
}

// checkProcessing checks a freshly claimed (or taken over) record.
func checkProcessing(t *testing.T, rec *retrysafe.Record, p *retrysafe.ClaimParams, attempt int, created time.Time) {
	t.Helper()
	if rec.Scope != p.Scope || rec.Key != p.Key {
		t.Errorf("record identity = (%q, %q), want (%q, %q)", rec.Scope, rec.Key, p.Scope, p.Key)
	}
	if rec.Fingerprint != p.Fingerprint {
		t.Errorf("Fingerprint = %q, want %q", rec.Fingerprint, p.Fingerprint)
	}
	if rec.State != retrysafe.StateProcessing {
		t.Errorf("State = %q, want %q", rec.State, retrysafe.StateProcessing)
	}
	if rec.Token != p.Token {
		t.Errorf("Token = %q, want the claimant's token %q", rec.Token, p.Token)
	}
	if rec.Attempt != attempt {
		t.Errorf("Attempt = %d, want %d", rec.Attempt, attempt)
	}
	if rec.Route != p.Route {
		t.Errorf("Route = %q, want the claimant's %q", rec.Route, p.Route)
	}
	checkTime(t, "CreatedAt", rec.CreatedAt, created)
	checkTime(t, "UpdatedAt", rec.UpdatedAt, p.Now)
	checkTime(t, "LeaseUntil", rec.LeaseUntil, p.Now.Add(p.Lease))
	if rec.Response != nil {
		t.Errorf("Response = %+v, want nil for a processing record", rec.Response)
	}
	if rec.Abandoned {
		t.Errorf("Abandoned = true, want false for a new claim or a takeover")
	}
	if attempt == 1 && rec.Checkpoint != nil {
		t.Errorf("Checkpoint = %q, want none for a new record", rec.Checkpoint.Name)
	}
}

// checkSameRecord fails the test unless got and want describe the same
// stored record (identity, owner, state, attempt and times).
func checkSameRecord(t *testing.T, what string, got, want *retrysafe.Record) {
	t.Helper()
	if got.Scope != want.Scope || got.Key != want.Key || got.Fingerprint != want.Fingerprint ||
		got.State != want.State || got.Token != want.Token || got.Attempt != want.Attempt || got.Route != want.Route ||
		!got.CreatedAt.Equal(want.CreatedAt) || !got.UpdatedAt.Equal(want.UpdatedAt) ||
		!got.LeaseUntil.Equal(want.LeaseUntil) || !got.ExpiresAt.Equal(want.ExpiresAt) ||
		got.Abandoned != want.Abandoned || (got.Checkpoint == nil) != (want.Checkpoint == nil) {
		t.Errorf("%s changed:\n got  %s\n want %s", what, describe(got), describe(want))
	}
}

// checkResponse fails the test unless got holds the same status, headers
// (values in order) and body bytes as want. A nil and an empty header map
// are equal, and so are a nil and an empty body.
func checkResponse(t *testing.T, what string, got, want *retrysafe.Response) {
	t.Helper()
	if got == nil {
		t.Fatalf("%s: Response is nil, want status %d", what, want.Status)
	}
	if got.Status != want.Status {
		t.Errorf("%s: Status = %d, want %d", what, got.Status, want.Status)
	}
	if len(got.Header) != len(want.Header) {
		t.Errorf("%s: Header has %d keys %v, want %d keys %v", what, len(got.Header), got.Header, len(want.Header), want.Header)
	}
	for k, wv := range want.Header {
		gv, ok := got.Header[k]
		if !ok {
			t.Errorf("%s: Header[%q] missing, want %q", what, k, wv)
			continue
		}
		if !slices.Equal(gv, wv) {
			t.Errorf("%s: Header[%q] = %q, want %q (values and their order must be kept)", what, k, gv, wv)
		}
	}
	if !bytes.Equal(got.Body, want.Body) {
		t.Errorf("%s: Body differs: got %d bytes, want %d bytes%s", what, len(got.Body), len(want.Body), firstDiff(got.Body, want.Body))
	}
}

func firstDiff(a, b []byte) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Sprintf("; first difference at byte %d: got %#02x, want %#02x", i, a[i], b[i])
		}
	}
	return ""
}
