package postgres

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// tidyConnectError folds the repeated lines of an error that holds a
// *pgconn.ConnectError.
// pgx lists one line per connection attempt, and with the default
// sslmode=prefer it tries every host twice (with TLS, then without): a
// server that is down is reported twice with the same dial error. The
// returned error prints each distinct line once, on one line when only
// one is left, and unwraps to err.
func tidyConnectError(err error) error {
	var ce *pgconn.ConnectError
	if err == nil || !errors.As(err, &ce) {
		return err
	}
	lines := strings.Split(err.Error(), "\n")
	seen := make(map[string]bool, len(lines))
	kept := lines[:0:0]
	for _, l := range lines {
		if seen[l] {
			continue
		}
		seen[l] = true
		kept = append(kept, l)
	}
	if len(kept) == len(lines) {
		return err
	}
	msg := strings.Join(kept, "\n")
	if len(kept) == 2 && strings.HasSuffix(kept[0], ":") {
		msg = kept[0] + " " + strings.TrimSpace(kept[1])
	}
	return &connectError{msg: msg, err: err}
}

// connectError is a connection failure with a tidied message.
type connectError struct {
	msg string
	err error
}

func (e *connectError) Error() string { return e.msg }
func (e *connectError) Unwrap() error { return e.err }
