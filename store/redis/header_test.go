package redis_test

import (
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
)

// TestLegacyJSONHeader: a completed record written by an earlier release,
// whose header field is JSON, still decodes, and a record completed now
// keeps its header in the binary encoding (first byte 0x01) with every byte
// of its values.
func TestLegacyJSONHeader(t *testing.T) {
	t.Parallel()
	s, c, prefix := newStore(t)
	ctx := t.Context()
	now := time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)

	// The fixture: the fields exactly as the JSON-header release wrote
	// them (times are 12 digits of seconds since year 1 and 9 of
	// nanoseconds): updated at now, expiring a day later).
	p := claimParams("scope", "legacy", now, time.Minute)
	if _, err := s.Claim(ctx, p); err != nil {
		t.Fatal(err)
	}
	keys, err := c.Keys(ctx, prefix+"*:legacy").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("key of the record: %q, %v", keys, err)
	}
	err = c.HSet(ctx, keys[0],
		"state", "completed", "updated", "064065963967000000000", "expires", "064066050367000000000",
		"status", "201", "header", `{"Content-Type":["application/json"],"X-Multi":["a","","b, c"],"X-Unicode":["naïve ✓"]}`,
		"body", "{\"id\":1}\n",
	).Err()
	if err != nil {
		t.Fatal(err)
	}
	want := &retrysafe.Response{
		Status: 201,
		Header: http.Header{"Content-Type": {"application/json"}, "X-Multi": {"a", "", "b, c"}, "X-Unicode": {"naïve ✓"}},
		Body:   []byte("{\"id\":1}\n"),
	}
	rec, err := s.Get(ctx, &retrysafe.GetParams{Scope: "scope", Key: "legacy", Now: now})
	if err != nil {
		t.Fatalf("Get of a record with a JSON header: %v", err)
	}
	if !reflect.DeepEqual(rec.Response, want) {
		t.Fatalf("legacy record decoded as %+v, want %+v", rec.Response, want)
	}

	// A new completion writes the binary encoding.
	p2 := claimParams("scope", "new", now, time.Minute)
	if _, err := s.Claim(ctx, p2); err != nil {
		t.Fatal(err)
	}
	resp := &retrysafe.Response{Status: 200, Header: http.Header{"Content-Disposition": {"attachment; filename=\"r\xe9sum\xe9.pdf\""}}}
	if err := s.Complete(ctx, &retrysafe.CompleteParams{Scope: "scope", Key: "new", Token: p2.Token, Now: now, TTL: time.Hour, Response: resp}); err != nil {
		t.Fatal(err)
	}
	keys, err = c.Keys(ctx, prefix+"*:new").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("key of the record: %q, %v", keys, err)
	}
	field, err := c.HGet(ctx, keys[0], "header").Result()
	if err != nil || len(field) == 0 || field[0] != 0x01 {
		t.Fatalf("header field %q, %v: want the binary encoding (version byte 0x01)", field, err)
	}
	rec, err = s.Get(ctx, &retrysafe.GetParams{Scope: "scope", Key: "new", Now: now})
	if err != nil || !reflect.DeepEqual(rec.Response.Header, resp.Header) {
		t.Fatalf("Get: %+v, %v; want header %q", rec, err, resp.Header)
	}
}
