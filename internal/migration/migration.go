// Package migration reads the numbered SQL migrations a store embeds and
// checks them, so that every SQL store follows one rule: files named
// NNNN_name.sql (four digits, then lower-case letters, digits and
// underscores), numbered 1, 2, 3 … without gaps or duplicates.
//
// Before v0.1.0 the stores' schemas grew by several migrations each; v0.1.0
// folded them into one 0001 migration per store. A table migrated by a
// pre-release build records migrations this build does not have (another
// number, or another name under a number), and [Check] refuses it: such a
// database must be recreated. A folded migration therefore takes a name
// that no earlier build recorded under its number.
package migration

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"regexp"
	"slices"
	"strconv"
)

// Migration is one numbered schema change.
type Migration struct {
	Version int    // the file's number, from 1
	Name    string // the file's name without number and extension: "create_records"
	File    string // the file's name: "0001_create_records.sql"
	SQL     string // the file's contents
}

// fileName is the pattern of a migration's file name.
var fileName = regexp.MustCompile(`^([0-9]{4})_([a-z0-9_]+)\.sql$`)

// Load returns the migrations in directory dir of fsys in version order.
// Every file in dir must be a migration; it returns an error naming the
// file when a name does not match NNNN_name.sql, when two files share a
// number, when the numbers do not run 1, 2, 3 … without a gap, or when
// dir holds none.
func Load(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	var ms []Migration
	for _, e := range entries {
		m := fileName.FindStringSubmatch(e.Name())
		if m == nil || e.IsDir() {
			return nil, fmt.Errorf("migrations: %s: not a migration file name (want NNNN_name.sql: four digits, then a-z, 0-9 and _)", path.Join(dir, e.Name()))
		}
		v, _ := strconv.Atoi(m[1]) // four digits: cannot fail
		b, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("migrations: %w", err)
		}
		ms = append(ms, Migration{Version: v, Name: m[2], File: e.Name(), SQL: string(b)})
	}
	if len(ms) == 0 {
		return nil, fmt.Errorf("migrations: %s holds no migrations", dir)
	}
	slices.SortStableFunc(ms, func(a, b Migration) int { return a.Version - b.Version })
	for i, m := range ms {
		switch {
		case i > 0 && m.Version == ms[i-1].Version:
			return nil, fmt.Errorf("migrations: %s and %s have the same number", ms[i-1].File, m.File)
		case m.Version != i+1:
			return nil, fmt.Errorf("migrations: %s: numbered %d, want %d (numbers run from 1 without gaps)", m.File, m.Version, i+1)
		}
	}
	return ms, nil
}

// Latest returns the version of the last of ms, 0 when there are none.
func Latest(ms []Migration) int {
	if len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].Version
}

// Check compares the migrations a table records as applied (version to
// name) with ms and returns the table's version, the highest applied (0
// for none). It fails when the table records a migration that is not one
// of ms under the same number and name: the table was migrated by a newer
// build, or by a pre-release one (before v0.1.0), whose database must be
// recreated.
func Check(ms []Migration, applied map[int]string) (int, error) {
	current := 0
	for _, v := range slices.Sorted(maps.Keys(applied)) {
		if v < 1 || v > len(ms) || ms[v-1].Name != applied[v] {
			return 0, fmt.Errorf("the table records migration %d (%s), which this build (schema version %d) does not have: "+
				"it was migrated by a newer build, or by a pre-release one (before v0.1.0), whose database must be recreated",
				v, applied[v], Latest(ms))
		}
		current = v
	}
	return current, nil
}

// ReadApplied runs query, which selects the version and name of each
// applied migration, on q (a *sql.DB, *sql.Conn or *sql.Tx) and returns
// them for [Check].
func ReadApplied(ctx context.Context, q interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}, query string) (map[int]string, error) {
	rows, err := q.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	applied := map[int]string{}
	for rows.Next() {
		var (
			v    int
			name string
		)
		if err := rows.Scan(&v, &name); err != nil {
			return nil, err
		}
		applied[v] = name
	}
	return applied, rows.Err()
}
