package storetest

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
)

func responseScenarios() []scenario {
	return []scenario{
		{"CompleteReplay", testCompleteReplay},
		{"Bodies", testBodies},
		{"ExactBytes", testExactBytes},
		{"LargeBody", testLargeBody},
		{"Copies", testCopies},
	}
}

// testCompleteReplay: Complete stores the response; Get and later claims
// return it exactly, with ExpiresAt = Now + TTL.
func testCompleteReplay(t *testing.T, h *harness) {
	p, _ := h.claimNew(scope1, "k", fpA, at(0))
	done := at(5 * time.Second)
	want := sampleResponse()
	h.mustComplete(scope1, "k", p.Token, done, want)

	rec := h.get(scope1, "k", done)
	if rec.State != retrysafe.StateCompleted {
		t.Errorf("State = %q, want completed", rec.State)
	}
	if rec.Token != p.Token || rec.Attempt != 1 || rec.Fingerprint != fpA || rec.Scope != scope1 || rec.Key != "k" {
		t.Errorf("completed record: %s, want the owner's token, attempt 1, fingerprint A", describe(rec))
	}
	checkTime(t, "CreatedAt", rec.CreatedAt, at(0))
	checkTime(t, "UpdatedAt", rec.UpdatedAt, done)
	checkTime(t, "ExpiresAt", rec.ExpiresAt, done.Add(ttl))
	checkResponse(t, "Get", rec.Response, want)

	// A duplicate gets the completed record with its response, and
	// changes nothing.
	later := done.Add(time.Hour)
	dup := h.claimBlocked(scope1, "k", fpA, later)
	checkSameRecord(t, "record returned to a duplicate", dup, rec)
	checkResponse(t, "duplicate claim", dup.Response, want)
	checkSameRecord(t, "stored record after a duplicate", h.get(scope1, "k", later), rec)

	// Error statuses are stored like any other result.
	p2, _ := h.claimNew(scope1, "failed", fpA, at(0))
	failed := &retrysafe.Response{
		Status: http.StatusInternalServerError,
		Header: http.Header{"Content-Type": {"application/problem+json"}},
		Body:   []byte(`{"title":"upstream failed"}`),
	}
	h.mustComplete(scope1, "failed", p2.Token, done, failed)
	checkResponse(t, "stored 500", h.claimBlocked(scope1, "failed", fpA, later).Response, failed)

	// A response without headers comes back without headers.
	p3, _ := h.claimNew(scope1, "bare", fpA, at(0))
	bare := &retrysafe.Response{Status: http.StatusNoContent}
	h.mustComplete(scope1, "bare", p3.Token, done, bare)
	checkResponse(t, "response without headers", h.get(scope1, "bare", done).Response, bare)
}

// testBodies: bodies are bytes, not text: every byte value, NUL bytes,
// invalid UTF-8 and empty bodies round-trip. A nil and an empty body both
// come back with length 0.
func testBodies(t *testing.T, h *harness) {
	all := make([]byte, 0, 512)
	for i := range 256 {
		all = append(all, byte(i))
	}
	for i := range 256 {
		all = append(all, byte(255-i))
	}
	cases := []struct {
		name string
		body []byte
	}{
		{"every byte value", all},
		{"NUL bytes", []byte{0, 0, 'a', 0, 'b', 0, 0}},
		{"single NUL", []byte{0}},
		{"invalid UTF-8", []byte{0xff, 0xfe, 0xc3, 0x28, 0xa0, 0xa1, 0xe2, 0x28, 0xa1}},
		{"looks like JSON escapes", []byte(`"\u0000\\x00%00'--;` + "\r\n\t")},
		{"empty", []byte{}},
		{"nil", nil},
	}
	for i, tc := range cases {
		key := "body-" + itoaKey(i)
		p, _ := h.claimNew(scope1, key, fpA, at(0))
		want := &retrysafe.Response{Status: 200, Header: http.Header{"Content-Type": {"application/octet-stream"}}, Body: tc.body}
		h.mustComplete(scope1, key, p.Token, at(time.Second), want)
		checkResponse(t, tc.name+": Get", h.get(scope1, key, at(time.Second)).Response, want)
		checkResponse(t, tc.name+": replay", h.claimBlocked(scope1, key, fpA, at(time.Second)).Response, want)
	}
}

// testExactBytes: a stored answer comes back byte for byte, whatever bytes
// HTTP lets it carry. Header values may hold tab, space, visible ASCII and
// obs-text (every byte 0x80-0xFF, which is not UTF-8 on its own: a store
// that encodes headers as JSON strings turns it into U+FFFD); bodies hold
// any byte. Get, a replaying Claim and (when the store has one) Admin.List
// return them exactly.
func testExactBytes(t *testing.T, h *harness) {
	var visible, obsText []byte
	visible = append(visible, '\t', ' ')
	for c := 0x21; c <= 0x7e; c++ {
		visible = append(visible, byte(c))
	}
	for c := 0x80; c <= 0xff; c++ {
		obsText = append(obsText, byte(c))
	}
	body := make([]byte, 0, 512)
	for i := range 256 {
		body = append(body, byte(i), byte(255-i))
	}
	want := &retrysafe.Response{
		Status: http.StatusOK,
		Header: http.Header{
			"Content-Disposition": {"attachment; filename=\"r\xe9sum\xe9.pdf\""},
			"Content-Type":        {"application/octet-stream"},
			"X-Obs-Text":          {string(obsText), "a\xffb", "\xc3("},
			"X-Visible":           {string(visible)},
			"X-Mixed":             {string(visible) + string(obsText)},
		},
		Body: body,
	}
	p, _ := h.claimNew(scope1, "bytes", fpA, at(0))
	h.mustComplete(scope1, "bytes", p.Token, at(time.Second), want)
	checkResponse(t, "Get", h.get(scope1, "bytes", at(time.Second)).Response, want)
	checkResponse(t, "replaying Claim", h.claimBlocked(scope1, "bytes", fpA, at(2*time.Second)).Response, want)
	if ad, ok := retrysafe.As[admin.Admin](h.s); ok {
		recs, err := ad.List(h.ctx, &admin.ListParams{Scope: scope1, WithBodies: true})
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		if len(recs) != 1 {
			t.Fatalf("List returned %d records, want 1", len(recs))
		}
		checkResponse(t, "Admin.List", recs[0].Response, want)
	}
}

func itoaKey(i int) string { return string(rune('a'+i/26)) + string(rune('a'+i%26)) }

// BodyLimiter is implemented by stores that keep response bodies only up
// to a size, such as store/dynamodb (DynamoDB's 400 KB item limit). The
// engine's Config.MaxResponseBody must not exceed it. The suite's
// LargeBody scenario then round-trips a body of exactly that size, and
// checks that Complete with a body twice as large fails with an error
// (not ErrLeaseLost) and changes nothing.
type BodyLimiter interface {
	// MaxResponseBody is the largest response body, in bytes, that
	// Complete stores whatever the record holds (its checkpoint
	// included), with headers of up to 16 KiB.
	MaxResponseBody() int64
}

// largeBody is the body size of the LargeBody scenario for stores that
// keep any size.
const largeBody = 5 << 20

// testLargeBody: a 5 MiB random body round-trips exactly (or a body of
// the store's BodyLimiter limit, and a larger one is refused whole).
func testLargeBody(t *testing.T, h *harness) {
	size := largeBody
	limiter, limited := retrysafe.As[BodyLimiter](h.s)
	if limited && limiter.MaxResponseBody() < largeBody {
		size = int(limiter.MaxResponseBody())
		if size < 64<<10 {
			t.Fatalf("MaxResponseBody() = %d: a store must keep bodies of at least 64 KiB", size)
		}
	}
	body := make([]byte, 2*size)
	rng := rand.NewChaCha8([32]byte{'r', 'e', 't', 'r', 'y', 's', 'a', 'f', 'e'})
	_, _ = rng.Read(body)
	want := &retrysafe.Response{Status: 200, Header: http.Header{"Content-Type": {"application/octet-stream"}}, Body: body[:size]}
	if size != largeBody {
		// The record of an over-limit Complete holds a checkpoint of the
		// largest size a store must keep, which Complete keeps.
		p, _ := h.claimNew(scope1, "over", fpA, at(0))
		cp := &retrysafe.Checkpoint{Name: "step", Data: body[:retrysafe.CheckpointStoreLimit]}
		if err := h.s.Extend(h.ctx, &retrysafe.ExtendParams{Scope: scope1, Key: "over", Token: p.Token, Now: at(0), Lease: lease, Checkpoint: cp}); err != nil {
			t.Fatalf("Extend with a checkpoint: %v", err)
		}
		over := &retrysafe.Response{Status: 200, Body: body}
		err := h.complete(scope1, "over", p.Token, at(time.Second), over)
		if err == nil || errors.Is(err, retrysafe.ErrLeaseLost) {
			t.Fatalf("Complete with a body of %d bytes, twice MaxResponseBody: got error %v, want a failure that is not ErrLeaseLost", len(body), err)
		}
		if rec := h.get(scope1, "over", at(time.Second)); rec.State != retrysafe.StateProcessing || rec.Token != p.Token {
			t.Fatalf("after a refused Complete: record %s, want it processing and owned as before", describe(rec))
		}
		h.mustComplete(scope1, "over", p.Token, at(2*time.Second), want)
		rec := h.get(scope1, "over", at(2*time.Second))
		checkResponse(t, "body of MaxResponseBody after a checkpoint of CheckpointStoreLimit: Get", rec.Response, want)
		if rec.Checkpoint == nil || !bytes.Equal(rec.Checkpoint.Data, cp.Data) {
			t.Fatalf("Complete lost the checkpoint of %d bytes", len(cp.Data))
		}
	}
	p, _ := h.claimNew(scope1, "large", fpA, at(0))
	h.mustComplete(scope1, "large", p.Token, at(time.Second), want)
	checkResponse(t, "large body: Get", h.get(scope1, "large", at(time.Second)).Response, want)
	checkResponse(t, "large body: replay", h.claimBlocked(scope1, "large", fpA, at(time.Second)).Response, want)
}

// testCopies: records and responses are read-only once they cross the
// store boundary. The store never modifies a record it returned (a
// takeover, renewal, completion or release leaves what callers hold as it
// was), nor the Response the caller passed to Complete; what it returns
// after a completion equals what was completed.
func testCopies(t *testing.T, h *harness) {
	p, claimed := h.claimNew(scope1, "k", fpA, at(0))
	claimedWas := *claimed
	got := h.get(scope1, "k", at(0))
	gotWas := *got
	if err := h.extend(scope1, "k", p.Token, at(time.Second), time.Minute); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	in := sampleResponse()
	h.mustComplete(scope1, "k", p.Token, at(2*time.Second), in)
	if *claimed != claimedWas || *got != gotWas {
		t.Errorf("records returned before Extend and Complete changed:\nClaim %+v\nwas   %+v\nGet   %+v\nwas   %+v", *claimed, claimedWas, *got, gotWas)
	}
	checkResponse(t, "Complete's argument after the call", in, sampleResponse())
	done := h.get(scope1, "k", at(2*time.Second))
	checkResponse(t, "stored response", done.Response, sampleResponse())
	checkResponse(t, "replayed response", h.claimBlocked(scope1, "k", fpA, at(2*time.Second)).Response, sampleResponse())

	// A takeover and a release leave the records returned before as they were.
	p2, old := h.claimNew(scope1, "k2", fpA, at(0))
	oldWas := *old
	p3, taken := h.claim(scope1, "k2", fpA, at(time.Hour))
	if !taken.Claimed {
		t.Fatalf("takeover of an expired lease: not claimed")
	}
	if *old != oldWas || old.Token != p2.Token || old.Attempt != 1 {
		t.Errorf("record returned before a takeover changed: %+v, was %+v", *old, oldWas)
	}
	takenWas := *taken.Record
	if err := h.release(scope1, "k2", p3.Token); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if *taken.Record != takenWas || taken.Record.State != retrysafe.StateProcessing {
		t.Errorf("record returned before a release changed: %+v, was %+v", *taken.Record, takenWas)
	}
}
