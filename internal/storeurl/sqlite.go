package storeurl

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/sqlite"
)

// openSQLite opens the SQLite store of rawURL; rest is the part after
// "sqlite:". Before opening it checks the path, so that a mistake is
// reported with the path and its cause rather than as SQLite's "unable to
// open database file".
func openSQLite(ctx context.Context, rawURL, rest string, opts Options) (retrysafe.Store, func() error, error) {
	path, cfg, err := sqlitePath(rest)
	if err != nil {
		return nil, nil, fmt.Errorf("store %q: %w", Redact(rawURL), err)
	}
	if err := checkSQLitePath(path, opts.MustExist); err != nil {
		return nil, nil, err // it names the path
	}
	_, statErr := os.Stat(path)
	s, err := sqlite.Open(ctx, path, cfg)
	if err != nil {
		if cause := diagnoseSQLiteOpen(path, statErr == nil); cause != nil {
			return nil, nil, cause
		}
		return nil, nil, fmt.Errorf("store %s: SQLite file %s: %w", Redact(rawURL), describePath(path), err)
	}
	return s, s.Close, nil
}

// diagnoseSQLiteOpen looks for the cause of SQLite's failure to open path
// (which it reports only as "unable to open database file"): it opens the
// file for writing itself, or creates it when it did not exist (and
// removes it again), and returns what the operating system said, or nil.
func diagnoseSQLiteOpen(path string, existed bool) error {
	if existed {
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			return fmt.Errorf("cannot open SQLite file %s for writing: %w", describePath(path), unwrapPathError(err))
		}
		f.Close()
		return nil
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("cannot create SQLite file %s: %w", describePath(path), unwrapPathError(err))
	}
	f.Close()
	_ = os.Remove(path)
	return nil
}

// checkSQLitePath reports a path SQLite could not open, or (with
// mustExist) a file that does not exist, with the reason.
func checkSQLitePath(path string, mustExist bool) error {
	fi, err := os.Stat(path)
	switch {
	case err == nil && fi.IsDir():
		return fmt.Errorf("%s is a directory, not an SQLite file", describePath(path))
	case err == nil:
		return nil
	case !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("SQLite file %s: %w", describePath(path), unwrapPathError(err))
	}
	// The file does not exist (or a part of its directory is a file):
	// SQLite would create it, in its directory.
	dir := filepath.Dir(path)
	di, derr := os.Stat(dir)
	switch {
	case errors.Is(derr, fs.ErrNotExist):
		return fmt.Errorf("cannot create SQLite file %s: directory %s does not exist", path, describePath(dir))
	case derr != nil:
		return fmt.Errorf("cannot create SQLite file %s: directory %s: %w", path, describePath(dir), unwrapPathError(derr))
	case !di.IsDir():
		return fmt.Errorf("cannot create SQLite file %s: %s is not a directory", path, describePath(dir))
	}
	if mustExist {
		return &notExistError{path: path}
	}
	return nil
}

// notExistError reports a SQLite file that does not exist, to a caller
// that must not create it. It matches fs.ErrNotExist.
type notExistError struct{ path string }

func (e *notExistError) Error() string {
	return fmt.Sprintf("SQLite file %s does not exist; check the path (this command does not create a store)", describePath(e.path))
}

func (e *notExistError) Is(target error) bool { return target == fs.ErrNotExist }

// describePath returns path, followed by its absolute form when it is
// relative (a relative path depends on the working directory).
func describePath(path string) string {
	if filepath.IsAbs(path) {
		return path
	}
	if abs, err := filepath.Abs(path); err == nil {
		return fmt.Sprintf("%s (%s)", path, abs)
	}
	return path
}

// unwrapPathError returns the cause of an *fs.PathError (whose message
// repeats the path the caller already names).
func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// sqlitePath splits the part after "sqlite:" into a file path and the
// store's configuration.
func sqlitePath(rest string) (path string, cfg sqlite.Config, err error) {
	if p, q, ok := strings.Cut(rest, "?"); ok {
		rest = p
		vals, err := url.ParseQuery(q)
		if err != nil {
			return "", cfg, fmt.Errorf("query: %w", err)
		}
		for k := range vals {
			if k != ParamTable && k != ParamSynchronous {
				return "", cfg, fmt.Errorf("unknown parameter %q (only %s and %s)", k, ParamTable, ParamSynchronous)
			}
		}
		cfg.Table = vals.Get(ParamTable)
		cfg.Synchronous = vals.Get(ParamSynchronous)
	}
	if after, ok := strings.CutPrefix(rest, "//"); ok {
		rest = after // sqlite://rel.db is relative; sqlite:///abs.db is absolute
	}
	if rest == "" {
		return "", cfg, errors.New("empty path; write sqlite:retrysafe.db or sqlite:/var/lib/retrysafe.db")
	}
	return rest, cfg, nil
}
