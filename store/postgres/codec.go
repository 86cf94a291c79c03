package postgres

import (
	"fmt"
	"net/http"
	"time"

	"github.com/retrysafe/retrysafe/internal/headercodec"
)

// Times are stored as Unix nanoseconds (bigint), so every time a caller
// passes in round-trips exactly: PostgreSQL's timestamptz keeps only
// microseconds. The zero time.Time is stored as NULL. Representable times
// run from 1677 to 2262.

var (
	minTime = time.Unix(0, -1<<63)
	maxTime = time.Unix(0, 1<<63-1)
)

// nanos converts t to Unix nanoseconds; the zero time becomes nil (NULL).
func nanos(t time.Time) (*int64, error) {
	if t.IsZero() {
		return nil, nil
	}
	n, err := mustNanos(t)
	return &n, err
}

// mustNanos converts a non-zero t to Unix nanoseconds.
func mustNanos(t time.Time) (int64, error) {
	if t.Before(minTime) || t.After(maxTime) {
		return 0, fmt.Errorf("postgres: time %s out of the storable range (1677-2262)", t.UTC().Format(time.RFC3339))
	}
	return t.UnixNano(), nil
}

// fromNanos converts stored nanoseconds back; NULL becomes the zero time.
func fromNanos(n *int64) time.Time {
	if n == nil {
		return time.Time{}
	}
	return time.Unix(0, *n).UTC()
}

// Headers are stored in internal/headercodec's binary encoding (the bytea
// column header): it keeps every byte of names and values, their order,
// and nil versus empty, which JSON would not (invalid UTF-8 would be
// replaced). SQLite and Redis use the same encoding.

// encodeHeader returns nil (stored as NULL) for a nil header.
func encodeHeader(h http.Header) []byte { return headercodec.Encode(h) }

// decodeHeader reverses encodeHeader; nil (NULL) gives a nil header.
func decodeHeader(b []byte) (http.Header, error) {
	h, err := headercodec.Decode(b)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return h, nil
}
