package retrysafe

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// TestSharedHeaderReuse: a captured response reuses the previous stored
// header map only when the kept fields and values are exactly the same;
// any difference (a value, a value's order, a field more or less) gets a
// map of its own with the captured values, and filtered-out fields do not
// count.
func TestSharedHeaderReuse(t *testing.T) {
	keep := func(name string) bool { return name != "Date" }
	capture := func(h http.Header) *captureWriter {
		c := &captureWriter{header: h, status: http.StatusCreated}
		return c
	}
	var last sharedHeader
	base := http.Header{"Content-Type": {"application/json"}, "X-A": {"1", "2"}, "Date": {"Mon"}}
	first := capture(base.Clone()).response(keep, &last)
	want := http.Header{"Content-Type": {"application/json"}, "X-A": {"1", "2"}}
	if !reflect.DeepEqual(first.Header, want) {
		t.Fatalf("first: header %v, want %v", first.Header, want)
	}
	same := base.Clone()
	same["Date"] = []string{"Tue"} // filtered out: does not count
	if got := capture(same).response(keep, &last); reflect.ValueOf(got.Header).UnsafePointer() != reflect.ValueOf(first.Header).UnsafePointer() {
		t.Fatalf("same kept headers: got a new map %v, want the first one reused", got.Header)
	}
	for name, h := range differingHeaders() {
		last.v.Store(first.Header)
		got := capture(h.Clone()).response(keep, &last)
		if !reflect.DeepEqual(got.Header, h) {
			t.Errorf("%s: stored header %v, want %v", name, got.Header, h)
		}
		if reflect.ValueOf(got.Header).UnsafePointer() == reflect.ValueOf(first.Header).UnsafePointer() {
			t.Errorf("%s: reused the earlier map %v for headers %v", name, first.Header, h)
		}
	}
}

// TestSharedHeaderConcurrent: responses captured concurrently with two
// different header sets each keep their own values, whichever map the
// shared slot holds at the time.
func TestSharedHeaderConcurrent(t *testing.T) {
	var last sharedHeader
	keep := func(string) bool { return true }
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := strings.Repeat("v", g%2+1)
			for range 2000 {
				r := (&captureWriter{header: http.Header{"X-V": {v}}}).response(keep, &last)
				if got := r.Header.Get("X-V"); got != v {
					errs <- got + " != " + v
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// TestSharedHeaderHeld: a header kept whole and seen twice in a row is
// held with its fields listed; the next equal one reuses its map through
// the field-by-field comparison and flushes from the list, and every
// header that differs (including one with as many fields, one of them
// dropped by keep) gets its own map and reaches the client unchanged.
func TestSharedHeaderHeld(t *testing.T) {
	keep := func(name string) bool { return name != "Date" }
	var last sharedHeader
	base := http.Header{"Content-Type": {"application/json"}, "X-A": {"1", "2"}}
	store := func(h http.Header) (*captureWriter, http.Header, *httptest.ResponseRecorder) {
		rec := httptest.NewRecorder()
		c := &captureWriter{w: rec, header: h, status: http.StatusCreated}
		c.body.WriteString("{}")
		stored := c.response(keep, &last).Header
		c.flush()
		return c, stored, rec
	}
	same := func(a, b http.Header) bool {
		return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
	}
	wantClient := func(h http.Header) http.Header {
		w := h.Clone()
		w["Content-Length"] = []string{"2"}
		return w
	}
	_, first, _ := store(base.Clone())
	if last.held.Load() != nil {
		t.Fatal("a header seen once is held")
	}
	_, second, _ := store(base.Clone())
	if !same(first, second) || last.held.Load() == nil {
		t.Fatal("a header kept whole and seen twice is not reused and held")
	}
	c, third, rec := store(base.Clone())
	if !same(first, third) || c.fields == nil {
		t.Fatalf("the held header was not reused field by field (fields %v)", c.fields)
	}
	if !reflect.DeepEqual(rec.Header(), wantClient(base)) {
		t.Fatalf("flushed from the held fields: client header %v, want %v", rec.Header(), wantClient(base))
	}
	differing := differingHeaders()
	differing["dropped field"] = http.Header{"Content-Type": {"application/json"}, "Date": {"Mon"}}
	differing["dropped field too"] = http.Header{"Content-Type": {"application/json"}, "X-A": {"1", "2"}, "Date": {"Mon"}}
	for name, h := range differing {
		// Hold base again, then store h.
		last = sharedHeader{}
		store(base.Clone())
		store(base.Clone())
		if last.held.Load() == nil {
			t.Fatal("base not held")
		}
		c, got, rec := store(h.Clone())
		kept := h.Clone()
		delete(kept, "Date")
		if !reflect.DeepEqual(got, kept) {
			t.Errorf("%s: stored header %v, want %v", name, got, kept)
		}
		if name != "dropped field too" && same(got, last.held.Load().h) {
			t.Errorf("%s: reused the held map %v for headers %v", name, last.held.Load().h, h)
		}
		if name == "dropped field too" && c.fields != nil {
			t.Errorf("%s: flushed from a list of fields that lacks one", name)
		}
		if !reflect.DeepEqual(rec.Header(), wantClient(h)) {
			t.Errorf("%s: client header %v, want %v", name, rec.Header(), wantClient(h))
		}
	}
}

// differingHeaders returns headers that differ, in their kept fields, from
// {"Content-Type": {"application/json"}, "X-A": {"1", "2"}}.
func differingHeaders() map[string]http.Header {
	return map[string]http.Header{
		"other value":    {"Content-Type": {"text/plain"}, "X-A": {"1", "2"}},
		"value order":    {"Content-Type": {"application/json"}, "X-A": {"2", "1"}},
		"one value less": {"Content-Type": {"application/json"}, "X-A": {"1"}},
		"field more":     {"Content-Type": {"application/json"}, "X-A": {"1", "2"}, "Location": {"/o/1"}},
		"field less":     {"Content-Type": {"application/json"}},
		"other field":    {"Content-Type": {"application/json"}, "X-B": {"1", "2"}},
		"none":           {},
	}
}
