package sqlite

import (
	"database/sql"
	"fmt"
	"net/http"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/headercodec"
)

// Times are stored as integer Unix nanoseconds and read back in UTC, so
// params.Now round-trips exactly (time.Time.Equal; the monotonic reading and
// the location are not kept).
func toNanos(t time.Time) int64 { return t.UnixNano() }

func fromNanos(n int64) time.Time { return time.Unix(0, n).UTC() }

func fromNullNanos(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return fromNanos(n.Int64)
}

// encodeHeaders stores nil as NULL and anything else as a BLOB in the
// binary encoding of internal/headercodec, which keeps every byte of names
// and values (JSON would replace bytes that are not UTF-8 with U+FFFD), and
// a nil and an empty header map both round-trip. The headers column has TEXT
// affinity, which stores a BLOB as it is.
func encodeHeaders(h http.Header) any {
	if h == nil {
		return nil
	}
	return headercodec.Encode(h)
}

// decodeHeaders reads the headers column: NULL is a nil header.
func decodeHeaders(b []byte) (http.Header, error) {
	h, err := headercodec.Decode(b)
	if err != nil {
		return nil, fmt.Errorf("decode headers: %w", err)
	}
	return h, nil
}

// encodeBody never binds nil: a NULL body and an empty one both read back
// with length 0, but an empty blob keeps the column's type uniform.
func encodeBody(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// scanner is *sql.Row or *sql.Rows.
type scanner interface {
	Scan(dest ...any) error
}

// scanRecord reads one row of recordColumns into a new Record the caller
// owns.
func scanRecord(row scanner) (*retrysafe.Record, error) {
	var (
		rec                          retrysafe.Record
		state                        string
		created, updated, leaseUntil int64
		expires, status              sql.NullInt64
		headers                      []byte
		body                         []byte
		cpName                       sql.NullString
		cpData                       []byte
		cpAt                         sql.NullInt64
	)
	err := row.Scan(&rec.Scope, &rec.Key, &rec.Fingerprint, &state, &rec.Token, &rec.Attempt,
		&created, &updated, &leaseUntil, &expires, &status, &headers, &body, &rec.Route,
		&rec.Abandoned, &cpName, &cpData, &cpAt)
	if err != nil {
		return nil, err
	}
	if cpName.Valid {
		rec.Checkpoint = &retrysafe.Checkpoint{Name: cpName.String, Data: cpData, At: fromNullNanos(cpAt)}
	}
	rec.State = retrysafe.State(state)
	rec.CreatedAt = fromNanos(created)
	rec.UpdatedAt = fromNanos(updated)
	rec.LeaseUntil = fromNanos(leaseUntil)
	rec.ExpiresAt = fromNullNanos(expires)
	if rec.State == retrysafe.StateCompleted {
		h, err := decodeHeaders(headers)
		if err != nil {
			return nil, err
		}
		rec.Response = &retrysafe.Response{Status: int(status.Int64), Header: h, Body: body}
	}
	return &rec, nil
}
