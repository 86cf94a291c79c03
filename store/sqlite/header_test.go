package sqlite_test

import (
	"context"
	"database/sql"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/sqlite"
)

// TestBinaryHeaders: a completion stores its headers as a BLOB in the
// binary encoding (first byte 0x01), which keeps bytes that are not UTF-8;
// a headers column holding anything else (say JSON text) is reported as
// corrupt, never guessed at.
func TestBinaryHeaders(t *testing.T) {
	t.Parallel()
	s, path := openStore(t)
	ctx := context.Background()
	db, err := sql.Open("sqlite", sqlite.DSN(path, sqlite.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	now := time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)

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
	rec, err := s.Get(ctx, &retrysafe.GetParams{Scope: "tenant", Key: "new", Now: now})
	if err != nil || !reflect.DeepEqual(rec.Response.Header, cp.Response.Header) {
		t.Fatalf("Get: %+v, %v; want header %q", rec, err, cp.Response.Header)
	}
	if _, err := db.ExecContext(ctx, `UPDATE retrysafe_records SET headers = '{"Content-Type":["text/plain"]}' WHERE idem_key = 'new'`); err != nil {
		t.Fatal(err)
	}
	if rec, err := s.Get(ctx, &retrysafe.GetParams{Scope: "tenant", Key: "new", Now: now}); err == nil || !strings.Contains(err.Error(), "corrupt stored header") {
		t.Fatalf("Get of a row with JSON headers = %+v, %v; want a corrupt-header error", rec, err)
	}
}
