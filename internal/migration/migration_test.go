package migration

import (
	"strings"
	"testing"
	"testing/fstest"
)

func files(names ...string) fstest.MapFS {
	fsys := fstest.MapFS{}
	for _, n := range names {
		fsys["m/"+n] = &fstest.MapFile{Data: []byte("-- " + n)}
	}
	return fsys
}

func TestLoad(t *testing.T) {
	t.Parallel()
	ms, err := Load(files("0002_add_index.sql", "0001_create_records.sql", "0003_x9_y.sql"), "m")
	if err != nil {
		t.Fatal(err)
	}
	want := []Migration{
		{1, "create_records", "0001_create_records.sql", "-- 0001_create_records.sql"},
		{2, "add_index", "0002_add_index.sql", "-- 0002_add_index.sql"},
		{3, "x9_y", "0003_x9_y.sql", "-- 0003_x9_y.sql"},
	}
	if len(ms) != len(want) {
		t.Fatalf("Load = %+v, want %+v", ms, want)
	}
	for i := range want {
		if ms[i] != want[i] {
			t.Errorf("migration %d = %+v, want %+v", i, ms[i], want[i])
		}
	}
	if Latest(ms) != 3 || Latest(nil) != 0 {
		t.Errorf("Latest = %d, %d; want 3, 0", Latest(ms), Latest(nil))
	}
}

func TestLoadRejects(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		fsys fstest.MapFS
		want string // in the error
	}{
		"gap":              {files("0001_a.sql", "0003_c.sql"), "0003_c.sql: numbered 3, want 2"},
		"not from 1":       {files("0002_b.sql"), "numbered 2, want 1"},
		"zero":             {files("0000_a.sql", "0001_b.sql"), "numbered 0, want 1"},
		"duplicate":        {files("0001_a.sql", "0002_b.sql", "0002_c.sql"), "0002_b.sql and 0002_c.sql have the same number"},
		"short number":     {files("1_a.sql"), "m/1_a.sql: not a migration file name"},
		"no name":          {files("0001.sql"), "m/0001.sql: not a migration file name"},
		"upper case":       {files("0001_Create.sql"), "not a migration file name"},
		"other extension":  {files("0001_a.sql", "0002_b.txt"), "m/0002_b.txt: not a migration file name"},
		"a directory":      {fstest.MapFS{"m/0001_a.sql": {}, "m/0002_b.sql/x": {}}, "m/0002_b.sql: not a migration file name"},
		"empty directory":  {fstest.MapFS{"m": {Mode: 0o755 | 1<<31}}, "holds no migrations"},
		"absent directory": {files("0001_a.sql"), "migrations: open n"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := "m"
			if name == "absent directory" {
				dir = "n"
			}
			ms, err := Load(tc.fsys, dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Load = %+v, %v; want an error containing %q", ms, err, tc.want)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	ms, err := Load(files("0001_initial.sql", "0002_add_index.sql"), "m")
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		applied map[int]string
		want    int
		err     string // in the error; "" for none
	}{
		"fresh":        {nil, 0, ""},
		"part way":     {map[int]string{1: "initial"}, 1, ""},
		"up to date":   {map[int]string{1: "initial", 2: "add_index"}, 2, ""},
		"pre-release":  {map[int]string{1: "create_records", 2: "notify_flag"}, 0, "records migration 1 (create_records), which this build (schema version 2) does not have"},
		"renamed 2":    {map[int]string{1: "initial", 2: "claim_procedure"}, 0, "migration 2 (claim_procedure)"},
		"newer build":  {map[int]string{1: "initial", 2: "add_index", 3: "route"}, 0, "migration 3 (route)"},
		"zero version": {map[int]string{0: "x"}, 0, "migration 0 (x)"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := Check(ms, tc.applied)
			if tc.err == "" && (err != nil || got != tc.want) {
				t.Fatalf("Check = %d, %v; want %d, nil", got, err, tc.want)
			}
			if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "must be recreated")) {
				t.Fatalf("Check = %d, %v; want an error containing %q", got, err, tc.err)
			}
		})
	}
}
