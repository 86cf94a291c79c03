package redis_test

import (
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	redisstore "github.com/retrysafe/retrysafe/store/redis"
)

// TestHeaderEncoding: a record completed keeps its header in the binary
// encoding (first byte 0x01) with every byte of its values.
func TestHeaderEncoding(t *testing.T) {
	t.Parallel()
	s, c, _ := newStore(t)
	ctx := t.Context()
	now := time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)
	// A new completion writes the binary encoding.
	p2 := claimParams("scope", "new", now, time.Minute)
	if _, err := s.Claim(ctx, p2); err != nil {
		t.Fatal(err)
	}
	resp := &retrysafe.Response{Status: 200, Header: http.Header{"Content-Disposition": {"attachment; filename=\"r\xe9sum\xe9.pdf\""}}}
	if err := s.Complete(ctx, &retrysafe.CompleteParams{Scope: "scope", Key: "new", Token: p2.Token, Now: now, TTL: time.Hour, Response: resp}); err != nil {
		t.Fatal(err)
	}
	field, err := c.HGet(ctx, redisstore.RecordKey(s, "scope", "new"), "header").Result()
	if err != nil || len(field) == 0 || field[0] != 0x01 {
		t.Fatalf("header field %q, %v: want the binary encoding (version byte 0x01)", field, err)
	}
	rec, err := s.Get(ctx, &retrysafe.GetParams{Scope: "scope", Key: "new", Now: now})
	if err != nil || !reflect.DeepEqual(rec.Response.Header, resp.Header) {
		t.Fatalf("Get: %+v, %v; want header %q", rec, err, resp.Header)
	}
}
