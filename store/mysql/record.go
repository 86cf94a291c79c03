package mysql

import (
	"database/sql"
	"fmt"
	"net/http"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/headercodec"
)

// Times are stored as Unix nanoseconds (BIGINT), so every time a caller
// passes in round-trips exactly (DATETIME(6) would keep microseconds).
// Storable times run from 1677 to 2262.

var (
	minTime = time.Unix(0, -1<<63)
	maxTime = time.Unix(0, 1<<63-1)
)

// nanos converts t to Unix nanoseconds.
func nanos(t time.Time) (int64, error) {
	if t.Before(minTime) || t.After(maxTime) {
		return 0, fmt.Errorf("mysql: time %s out of the storable range (1677-2262)", t.UTC().Format(time.RFC3339))
	}
	return t.UnixNano(), nil
}

// fromNanos converts stored nanoseconds back, in UTC; NULL becomes the
// zero time.
func fromNanos(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return time.Unix(0, n.Int64).UTC()
}

// fromNanosValue converts stored nanoseconds back, in UTC.
func fromNanosValue(n int64) time.Time { return time.Unix(0, n).UTC() }

// Headers are stored in internal/headercodec's binary encoding (the
// MEDIUMBLOB column header), as in the other stores: it keeps every byte of
// names and values, their order, and nil versus empty.

// encodeHeader returns nil (stored as NULL) for a nil header.
func encodeHeader(h http.Header) []byte { return headercodec.Encode(h) }

func decodeHeader(b []byte) (http.Header, error) {
	h, err := headercodec.Decode(b)
	if err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	return h, nil
}

// encodeBody never binds nil: a nil and an empty body both read back with
// length 0, and the column's value stays a byte string.
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

// recordColumns are the columns every statement that returns a record
// selects, in the order scanRecord reads them.
const recordColumns = "scope, idem_key, fingerprint, state, token, attempt, created_at_ns, updated_at_ns, lease_until_ns, expires_at_ns, status, header, body, route," +
	" abandoned, checkpoint_name, checkpoint_data, checkpoint_at_ns"

// row holds one record's columns as scanned.
type row struct {
	scope, key, fingerprint, state, token []byte
	attempt                               int64
	created, updated, lease, expires      sql.NullInt64
	status                                sql.NullInt64
	header, body, route                   []byte
	abandoned                             bool
	cpName, cpData                        []byte // cpName nil: no checkpoint
	cpAt                                  sql.NullInt64
}

// dest returns the scan destinations of the columns after scope and key.
func (r *row) dest() []any {
	return []any{&r.fingerprint, &r.state, &r.token, &r.attempt, &r.created, &r.updated, &r.lease, &r.expires,
		&r.status, &r.header, &r.body, &r.route, &r.abandoned, &r.cpName, &r.cpData, &r.cpAt}
}

// record builds the Record the row holds.
func (r *row) record() (*retrysafe.Record, error) {
	rec := &retrysafe.Record{
		Scope:       string(r.scope),
		Key:         string(r.key),
		Fingerprint: string(r.fingerprint),
		State:       retrysafe.State(r.state),
		Token:       string(r.token),
		Attempt:     int(r.attempt),
		Route:       string(r.route),
		CreatedAt:   fromNanos(r.created),
		UpdatedAt:   fromNanos(r.updated),
		LeaseUntil:  fromNanos(r.lease),
		ExpiresAt:   fromNanos(r.expires),
		Abandoned:   r.abandoned,
		Checkpoint:  r.checkpoint(),
	}
	if rec.State == retrysafe.StateCompleted {
		h, err := decodeHeader(r.header)
		if err != nil {
			return nil, fmt.Errorf("%w (scope %q)", err, rec.Scope)
		}
		rec.Response = &retrysafe.Response{Status: int(r.status.Int64), Header: h, Body: r.body}
	}
	return rec, nil
}

// checkpoint returns the row's checkpoint, nil when it has none.
func (r *row) checkpoint() *retrysafe.Checkpoint {
	if r.cpName == nil {
		return nil
	}
	data := r.cpData
	if data == nil {
		data = []byte{}
	}
	return &retrysafe.Checkpoint{Name: string(r.cpName), Data: data, At: fromNanos(r.cpAt)}
}

// scanRecord reads one row of recordColumns.
func scanRecord(sc scanner) (*retrysafe.Record, error) {
	var r row
	if err := sc.Scan(append([]any{&r.scope, &r.key}, r.dest()...)...); err != nil {
		return nil, err
	}
	return r.record()
}
