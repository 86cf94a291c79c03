package sqlite_test

import (
	"context"
	"database/sql"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/sqlite"
)

// TestLegacyJSONHeaders: a completed row written by an earlier release,
// whose headers column holds JSON text, still decodes; a row completed now
// holds a BLOB in the binary encoding (first byte 0x01) that keeps bytes
// that are not UTF-8.
func TestLegacyJSONHeaders(t *testing.T) {
	t.Parallel()
	s, path := openStore(t)
	ctx := context.Background()
	db, err := sql.Open("sqlite", sqlite.DSN(path, sqlite.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	// The fixture: a row exactly as the JSON-header release wrote it.
	now := time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)
	_, err = db.ExecContext(ctx, `INSERT INTO retrysafe_records (
	scope, idem_key, fingerprint, state, token, attempt,
	created_at, updated_at, lease_until, expires_at, status, headers, body
) VALUES ('tenant', 'legacy', 'fp', 'completed', 'tok', 1, ?1, ?1, ?2, ?3, 201, ?4, ?5)`,
		now.UnixNano(), now.Add(30*time.Second).UnixNano(), now.Add(time.Hour).UnixNano(),
		`{"Content-Type":["application/json"],"X-Multi":["a","","b, c"],"X-Unicode":["naïve ✓"]}`, []byte(`{"id":1}`))
	if err != nil {
		t.Fatal(err)
	}
	want := &retrysafe.Response{
		Status: 201,
		Header: http.Header{"Content-Type": {"application/json"}, "X-Multi": {"a", "", "b, c"}, "X-Unicode": {"naïve ✓"}},
		Body:   []byte(`{"id":1}`),
	}
	rec, err := s.Get(ctx, &retrysafe.GetParams{Scope: "tenant", Key: "legacy", Now: now})
	if err != nil {
		t.Fatalf("Get of a row with JSON headers: %v", err)
	}
	if !reflect.DeepEqual(rec.Response, want) {
		t.Fatalf("legacy row decoded as %+v, want %+v", rec.Response, want)
	}
	res := mustClaim(t, s, claimParams("legacy", "fp", now.Add(time.Minute)))
	if res.Claimed || !reflect.DeepEqual(res.Record.Response, want) {
		t.Fatalf("replaying claim of the legacy row: claimed %v, %+v", res.Claimed, res.Record.Response)
	}

	// A new completion writes the binary encoding.
	p := claimParams("new", "fp", now)
	mustClaim(t, s, p)
	cp := completeParams(p, now, "body")
	cp.Response.Header.Set("Content-Disposition", "attachment; filename=\"r\xe9sum\xe9.pdf\"")
	if err := s.Complete(ctx, cp); err != nil {
		t.Fatal(err)
	}
	var typ string
	var raw []byte
	if err := db.QueryRowContext(ctx, `SELECT typeof(headers), headers FROM retrysafe_records WHERE idem_key = 'new'`).Scan(&typ, &raw); err != nil {
		t.Fatal(err)
	}
	if typ != "blob" || len(raw) == 0 || raw[0] != 0x01 {
		t.Fatalf("headers column: %s %q, want a blob in the binary encoding (version byte 0x01)", typ, raw)
	}
	rec, err = s.Get(ctx, &retrysafe.GetParams{Scope: "tenant", Key: "new", Now: now})
	if err != nil || !reflect.DeepEqual(rec.Response.Header, cp.Response.Header) {
		t.Fatalf("Get: %+v, %v; want header %q", rec, err, cp.Response.Header)
	}
}
