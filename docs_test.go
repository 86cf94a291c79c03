package retrysafe_test

import (
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// docFiles are the pages a user reads: the README, CONTRIBUTING and docs/.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{"README.md", "CONTRIBUTING.md"}, files...)
	if len(files) < 5 {
		t.Fatalf("found only %q: this test runs from the repository's root", files)
	}
	return files
}

// TestDocsHaveNoDuplicateRows: no table of the docs has two rows about
// the same thing (the same first cell), and no list names the same link
// twice: a second row that disagrees with the first leaves the reader to
// guess which one is true.
func TestDocsHaveNoDuplicateRows(t *testing.T) {
	t.Parallel()
	for _, f := range docFiles(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range duplicateRows(string(b)) {
			t.Errorf("%s:%d: %s", f, d.line, d.what)
		}
	}
}

// TestDocsLinksResolve: every relative link of the docs names a file or
// directory of the repository.
func TestDocsLinksResolve(t *testing.T) {
	t.Parallel()
	for _, f := range docFiles(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range relativeLinks(string(b)) {
			target := filepath.Join(filepath.Dir(f), filepath.FromSlash(l.path))
			if _, err := os.Stat(target); err != nil {
				t.Errorf("%s:%d: link to %s: no such file (%s)", f, l.line, l.path, target)
			}
		}
	}
}

// TestDocsChecksFindFaults: the checks above see what they are for.
func TestDocsChecksFindFaults(t *testing.T) {
	t.Parallel()
	page := "# T\n\n" +
		"| flag | default |\n| --- | --- |\n| `--store` | a |\n| `--ttl` | 24h |\n| `--store` | b |\n\n" +
		"| other table | x |\n| --- | --- |\n| `--store` | c |\n\n" +
		"- [docs/redis.md](docs/redis.md) — one\n- [docs/redis.md](docs/redis.md) — two\n" +
		"```\n| `--ttl` | in a code block |\n| `--ttl` | in a code block |\n```\n" +
		"See [x](missing.md#part), [y](https://example.com/a.md), [z](#anchor), ![img](pic.png \"title\") and [w](<dir/a b.md>).\n"
	var got []int
	for _, d := range duplicateRows(page) {
		got = append(got, d.line)
	}
	if want := []int{7, 14}; !slices.Equal(got, want) {
		t.Errorf("duplicate rows on lines %v, want %v", got, want)
	}
	var paths []string
	for _, l := range relativeLinks(page) {
		paths = append(paths, l.path)
	}
	if want := []string{"docs/redis.md", "docs/redis.md", "missing.md", "pic.png", "dir/a b.md"}; !slices.Equal(paths, want) {
		t.Errorf("relative links %q, want %q", paths, want)
	}
}

type docFault struct {
	line int
	what string
}

// duplicateRows finds, outside code blocks, a table row whose first cell
// an earlier row of the same table had, and a list item that links to
// what an earlier item of the same list linked to first.
func duplicateRows(page string) []docFault {
	var out []docFault
	var fence bool
	table := map[string]int{} // first cell -> line, for the current table
	list := map[string]int{}  // first link -> line, for the current list
	for i, line := range strings.Split(page, "\n") {
		n := i + 1
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") {
			fence = !fence
			continue
		}
		if fence {
			continue
		}
		if strings.HasPrefix(trimmed, "|") {
			cells := strings.Split(strings.Trim(trimmed, "|"), "|")
			first := strings.TrimSpace(cells[0])
			if strings.Trim(first, "-: ") == "" {
				continue // the delimiter row
			}
			if prev, ok := table[first]; ok {
				out = append(out, docFault{n, "table row " + first + " repeats the row on line " + strconv.Itoa(prev)})
			} else {
				table[first] = n
			}
			continue
		}
		clear(table)
		if strings.HasPrefix(trimmed, "- ") || strings.HasPrefix(trimmed, "* ") {
			if m := linkRE.FindStringSubmatch(trimmed); m != nil {
				if prev, ok := list[m[2]]; ok {
					out = append(out, docFault{n, "list item links to " + m[2] + " again (line " + strconv.Itoa(prev) + ")"})
				} else {
					list[m[2]] = n
				}
			}
			continue
		}
		if trimmed == "" || !strings.HasPrefix(line, " ") {
			clear(list) // a blank line or a paragraph ends the list
		}
	}
	return out
}

// linkRE matches an inline Markdown link or image: [text](target "title").
var linkRE = regexp.MustCompile(`!?\[([^\]]*)\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+"[^"]*")?\s*\)`)

type docLink struct {
	line int
	path string
}

// relativeLinks lists the links of page, outside code, that name a file
// of the repository: not a URL with a scheme, not an anchor of the page
// itself. A fragment is cut off.
func relativeLinks(page string) []docLink {
	var out []docLink
	var fence bool
	for i, line := range strings.Split(page, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fence = !fence
			continue
		}
		if fence {
			continue
		}
		line = codeSpanRE.ReplaceAllString(line, "")
		for _, m := range linkRE.FindAllStringSubmatch(line, -1) {
			target := strings.TrimSuffix(strings.TrimPrefix(m[2], "<"), ">")
			if u, err := url.Parse(target); err == nil && u.Scheme != "" {
				continue
			}
			if j := strings.IndexByte(target, '#'); j >= 0 {
				target = target[:j]
			}
			if target == "" {
				continue
			}
			out = append(out, docLink{i + 1, target})
		}
	}
	return out
}

// codeSpanRE matches inline code, whose brackets are not links.
var codeSpanRE = regexp.MustCompile("`[^`]*`")
