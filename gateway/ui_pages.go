package gateway

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/internal/scopehash"
	"github.com/retrysafe/retrysafe/store/sealed"
)

func contextWithActor(r *http.Request, name string) context.Context {
	return context.WithValue(r.Context(), actorKey{}, name)
}

// uiPageSize is the number of records on one page of the list.
const uiPageSize = 50

// uiStoreTimeout bounds the store calls of one page.
const uiStoreTimeout = 10 * time.Second

// uiRecord is a record as the page shows it.
type uiRecord struct {
	*retrysafe.Record
	StateName string // rec.Status: processing, unknown, completed, failed, expired
	URL       string

	// For an unknown outcome: why (a cause of unknowncause.go and its
	// text), since when, the error the gateway recorded, and how to find
	// the attempt at the upstream.
	Cause, CauseText string
	Since            time.Time
	Detail           string
	Lookup           upstreamLookup
}

func (u *UI) view(rec *retrysafe.Record, now time.Time) uiRecord {
	v := uiRecord{Record: rec, StateName: string(admin.StatusOf(rec, now)), URL: recordURL(rec.Scope, rec.Key)}
	if v.StateName == string(admin.StatusUnknown) {
		v.Cause, v.Since, v.Detail = unknownCause(rec)
		v.CauseText = causeText[v.Cause]
		v.Lookup = lookupFor(rec, u.cfg.webhooks[rec.Route])
	}
	return v
}

// rateGroups are the outcome groups of the chart, in stacking order.
var rateGroups = []struct {
	Name, Class string
	Outcomes    []retrysafe.Outcome
}{
	{"new", "new", []retrysafe.Outcome{retrysafe.OutcomeNew}},
	{"replayed", "replayed", []retrysafe.Outcome{retrysafe.OutcomeReplayed}},
	{"conflict", "conflict", []retrysafe.Outcome{retrysafe.OutcomeConflict}},
	{"mismatch", "mismatch", []retrysafe.Outcome{retrysafe.OutcomeMismatch}},
	{"invalid", "invalid", []retrysafe.Outcome{retrysafe.OutcomeInvalidKey, retrysafe.OutcomeMissingKey, retrysafe.OutcomeTooLarge, retrysafe.OutcomeUnauthorized}},
	{"store error", "storeerr", []retrysafe.Outcome{retrysafe.OutcomeStoreError, retrysafe.OutcomeFailOpen}},
	{"other", "other", []retrysafe.Outcome{retrysafe.OutcomeReleased, retrysafe.OutcomeAbandoned, retrysafe.OutcomeLeaseLost, retrysafe.OutcomeBlocked}},
}

// Chart geometry: 60 bars of 10 seconds, the last ten minutes.
const (
	chartStep   = 10
	chartBars   = rateWindow / chartStep
	chartWidth  = 600
	chartHeight = 120
	barWidth    = chartWidth / chartBars
)

type uiRect struct {
	X, Y, W, H int
	Class      string
	Title      string
}

type uiRateRow struct {
	Name, Class                  string
	Last10s, LastMinute, Last10m int64
}

type uiRates struct {
	Rects []uiRect
	Rows  []uiRateRow
	Max   int64
	Total int64
}

func (u *UI) rates(now time.Time) *uiRates {
	if u.cfg.rates == nil {
		return nil
	}
	buckets := u.cfg.rates.buckets(now, chartStep, chartBars)
	out := &uiRates{}
	sums := make([][]int64, len(buckets))
	for i, b := range buckets {
		sums[i] = make([]int64, len(rateGroups))
		var total int64
		for g, grp := range rateGroups {
			for _, o := range grp.Outcomes {
				sums[i][g] += b.Counts[o]
			}
			total += sums[i][g]
		}
		out.Max = max(out.Max, total)
	}
	scale := max(out.Max, 1)
	for i := range buckets {
		y := chartHeight
		for g, grp := range rateGroups {
			if sums[i][g] == 0 {
				continue
			}
			h := int(sums[i][g] * chartHeight / scale)
			h = max(h, 1)
			y -= h
			out.Rects = append(out.Rects, uiRect{X: i * barWidth, Y: y, W: barWidth - 1, H: h, Class: grp.Class,
				Title: fmt.Sprintf("%s: %d %s", buckets[i].Start.UTC().Format("15:04:05"), sums[i][g], grp.Name)})
		}
	}
	for g, grp := range rateGroups {
		row := uiRateRow{Name: grp.Name, Class: grp.Class}
		for i := range buckets {
			v := sums[i][g]
			row.Last10m += v
			if i >= len(buckets)-6 {
				row.LastMinute += v
			}
			if i == len(buckets)-1 {
				row.Last10s += v
			}
		}
		out.Total += row.Last10m
		out.Rows = append(out.Rows, row)
	}
	return out
}

func (u *UI) overviewData(r *http.Request) (map[string]any, error) {
	ctx, cancel := context.WithTimeout(r.Context(), uiStoreTimeout)
	defer cancel()
	now := u.now()
	st, err := u.admin.Stats(ctx, &admin.StatsParams{Now: now})
	if err != nil {
		return nil, err
	}
	// The store counts by lease: the records resolved not done (awaiting
	// their retry) are left out of the list, and out of the count as far
	// as the list shows them (all of them when it holds every one).
	unknown := make([]uiRecord, 0, len(st.Unknown))
	var awaiting int64
	for _, rec := range st.Unknown {
		if admin.StatusOf(rec, now) == admin.StatusAwaitingRetry {
			awaiting++
			continue
		}
		unknown = append(unknown, u.view(rec, now))
	}
	data := map[string]any{
		"Stats":        st,
		"Unknown":      unknown,
		"UnknownCount": st.LeaseExpired - awaiting,
		"Rates":        u.rates(now),
		"ChartW":       chartWidth,
		"ChartH":       chartHeight,
		"Standalone":   u.cfg.rates == nil,
		"Updated":      now.UTC(),
		"Now":          now.UTC(),
	}
	if st.OldestInFlight != nil {
		v := u.view(st.OldestInFlight, now)
		data["Oldest"] = &v
	}
	return data, nil
}

func (u *UI) overview(w http.ResponseWriter, r *http.Request) {
	data, err := u.overviewData(r)
	if err != nil {
		u.storeError(w, r, "reading the store's stats", err)
		return
	}
	u.render(w, r, http.StatusOK, "overview", data)
}

func (u *UI) overviewPart(w http.ResponseWriter, r *http.Request) {
	data, err := u.overviewData(r)
	if err != nil {
		http.Error(w, "reading the store's stats failed: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	u.renderPart(w, r, "overview", "overviewPart", data)
}

// uiFilter is the records list's query, as the URL holds it. An identity
// (a customer's credential) is never part of it: the filter form posts it
// and the page turns it into its scope (recordsFilter).
type uiFilter struct {
	Scope, Prefix, State, Route, From, To, After string
}

const uiTimeLayout = "2006-01-02T15:04"

// errIdentityInURL refuses a link that carries an identity.
var errIdentityInURL = errors.New("an identity (a customer's credential) goes in the filter form, never in a URL, where history, logs and the live refresh would keep it: type it in the form below, and the page shows its scope")

func filterOf(v url.Values) uiFilter {
	return uiFilter{
		Scope: strings.TrimSpace(v.Get("scope")), Prefix: v.Get("prefix"),
		State: v.Get("state"), Route: strings.TrimSpace(v.Get("route")), From: v.Get("from"), To: v.Get("to"), After: v.Get("after"),
	}
}

// query returns the filter as URL query values, without the cursor.
func (f uiFilter) query() url.Values {
	v := url.Values{}
	for _, kv := range [][2]string{{"scope", f.Scope}, {"prefix", f.Prefix},
		{"state", f.State}, {"route", f.Route}, {"from", f.From}, {"to", f.To}} {
		if kv[1] != "" {
			v.Set(kv[0], kv[1])
		}
	}
	return v
}

// params turns the filter into ListParams, or explains what is wrong.
func (f uiFilter) params(now time.Time) (*admin.ListParams, error) {
	p := &admin.ListParams{Limit: uiPageSize, KeyPrefix: f.Prefix, Route: f.Route}
	switch {
	case f.Scope == "-":
		p.ScopeSet = true
	case f.Scope != "":
		p.Scope, p.ScopeSet = f.Scope, true
	}
	switch f.State {
	case "":
	case "processing", "completed":
		p.State = retrysafe.State(f.State)
	case "unknown":
		p.LeaseExpiredBy = now
	default:
		return nil, fmt.Errorf("unknown state %q", f.State)
	}
	for _, t := range []struct {
		v   string
		dst *time.Time
	}{{f.From, &p.UpdatedFrom}, {f.To, &p.UpdatedTo}} {
		if t.v == "" {
			continue
		}
		tm, err := time.Parse(uiTimeLayout, t.v)
		if err != nil {
			if tm, err = time.Parse(time.RFC3339, t.v); err != nil {
				return nil, fmt.Errorf("time %q: want YYYY-MM-DDTHH:MM (UTC)", t.v)
			}
		}
		*t.dst = tm.UTC()
	}
	if f.After != "" {
		b, err := base64.RawURLEncoding.DecodeString(f.After)
		scope, key, ok := strings.Cut(string(b), "\x00")
		if err != nil || !ok {
			return nil, errors.New("bad page cursor")
		}
		p.AfterScope, p.AfterKey = scope, key
	}
	return p, nil
}

func (u *UI) recordsData(r *http.Request) (map[string]any, int, error) {
	f := filterOf(r.URL.Query())
	now := u.now()
	data := map[string]any{"Filter": f, "States": []string{"processing", "unknown", "completed"}, "Routes": u.cfg.Routes,
		"Updated": now.UTC(), "Now": now.UTC()}
	p, err := f.params(now)
	if r.URL.Query().Has("identity") {
		err = errIdentityInURL
	}
	if err != nil {
		data["Problem"] = err.Error()
		return data, http.StatusBadRequest, nil
	}
	if p.OneScope() {
		data["ScopeShown"] = p.Scope
		data["ScopeSelected"] = true
	}
	ctx, cancel := context.WithTimeout(r.Context(), uiStoreTimeout)
	defer cancel()
	recs, err := u.admin.List(ctx, p)
	if err != nil {
		return nil, 0, err
	}
	views := make([]uiRecord, len(recs))
	for i, rec := range recs {
		views[i] = u.view(rec, now)
	}
	data["Records"] = views
	q := f.query()
	data["FirstURL"] = UIPath + "records?" + q.Encode()
	live := f.query()
	if f.After != "" {
		live.Set("after", f.After)
	}
	data["PartURL"] = UIPath + "records.part?" + live.Encode()
	data["Paged"] = f.After != ""
	if len(recs) == p.PageSize() {
		last := recs[len(recs)-1]
		q.Set("after", base64.RawURLEncoding.EncodeToString([]byte(last.Scope+"\x00"+last.Key)))
		data["NextURL"] = UIPath + "records?" + q.Encode()
	}
	return data, http.StatusOK, nil
}

func (u *UI) records(w http.ResponseWriter, r *http.Request) {
	data, status, err := u.recordsData(r)
	if err != nil {
		u.storeError(w, r, "listing records", err)
		return
	}
	if key, ok := u.takeFlash(w, r); ok {
		data["Deleted"] = key
	}
	u.render(w, r, status, "records", data)
}

// recordsFilter takes the filter form. An identity becomes its scope (the
// gateway's hash of it) before the redirect, so the credential is in no
// URL: not in the address bar, the history, a log or the live refresh.
func (u *UI) recordsFilter(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "the filter form could not be read: "+err.Error(), http.StatusBadRequest)
		return
	}
	f := filterOf(r.PostForm)
	f.After = ""
	if id := r.PostForm.Get("identity"); id != "" {
		if f.Scope != "" {
			u.render(w, r, http.StatusBadRequest, "records", map[string]any{"Filter": f, "States": []string{"processing", "unknown", "completed"},
				"Routes": u.cfg.Routes, "Problem": "give a scope or an identity, not both"})
			return
		}
		f.Scope = scopehash.Sum(id)
		if k, ok := u.admin.(interface{ StoredScope(string) string }); ok {
			f.Scope = k.StoredScope(f.Scope) // encrypted at rest: kept under the HMAC
		}
	}
	http.Redirect(w, r, UIPath+"records?"+f.query().Encode(), http.StatusSeeOther)
}

func (u *UI) recordsPart(w http.ResponseWriter, r *http.Request) {
	data, status, err := u.recordsData(r)
	if err != nil {
		http.Error(w, "listing records failed: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	if status != http.StatusOK {
		http.Error(w, fmt.Sprint(data["Problem"]), status)
		return
	}
	u.renderPart(w, r, "records", "recordsPart", data)
}

// find returns the record scope/key names, with its body.
func (u *UI) find(r *http.Request, scope, key string) (*retrysafe.Record, error) {
	ctx, cancel := context.WithTimeout(r.Context(), uiStoreTimeout)
	defer cancel()
	recs, err := u.admin.Find(ctx, &admin.FindParams{Key: key, Scope: scope, ScopeSet: true, WithBodies: true})
	if err != nil || len(recs) == 0 {
		return nil, err
	}
	return recs[0], nil
}

type uiHeader struct{ Name, Value string }

func (u *UI) record(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	scope, key := q.Get("scope"), q.Get("key")
	rec, err := u.find(r, scope, key)
	if err != nil {
		u.storeError(w, r, "reading the record", err)
		return
	}
	if rec == nil {
		u.render(w, r, http.StatusNotFound, "error", map[string]any{"Message": "No record with this key in this scope (deleted, released or swept).", "Key": key, "Scope": scope})
		return
	}
	now := u.now()
	data := map[string]any{"Rec": u.view(rec, now), "Now": now.UTC()}
	if rec.Response != nil {
		if id, sealedResp := sealed.KeyID(rec.Response); sealedResp {
			data["SealedKey"] = id
		} else {
			var headers []uiHeader
			for name, vals := range rec.Response.Header {
				for _, v := range vals {
					headers = append(headers, uiHeader{name, v})
				}
			}
			slices.SortStableFunc(headers, func(a, b uiHeader) int { return strings.Compare(a.Name, b.Name) })
			data["Headers"] = headers
			data["BodyLen"] = len(rec.Response.Body)
			if q.Get("body") == "1" {
				body := rec.Response.Body
				if utf8.Valid(body) {
					data["Body"] = string(body)
				} else {
					data["Body"] = base64.StdEncoding.EncodeToString(body)
					data["BodyBase64"] = true
				}
				data["BodyShown"] = true
				u.logger.InfoContext(r.Context(), "operator page: response body viewed", "actor", actorOf(r),
					"remote", r.RemoteAddr, "scope", rec.Scope, "key_sha256", keyDigest(rec.Key))
			}
			data["BodyURL"] = recordURL(rec.Scope, rec.Key) + "&body=1#body"
		}
	}
	data["Rev"] = u.recordRev(rec)
	data["DeleteURL"] = UIPath + "delete?" + url.Values{"scope": {rec.Scope}, "key": {rec.Key}}.Encode()
	u.render(w, r, http.StatusOK, "record", data)
}

func (u *UI) deleteConfirm(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	rec, err := u.find(r, q.Get("scope"), q.Get("key"))
	if err != nil {
		u.storeError(w, r, "reading the record", err)
		return
	}
	if rec == nil {
		u.render(w, r, http.StatusNotFound, "error", map[string]any{"Message": "No record with this key in this scope (already deleted, released or swept).", "Key": q.Get("key"), "Scope": q.Get("scope")})
		return
	}
	u.render(w, r, http.StatusOK, "delete", map[string]any{"Rec": u.view(rec, u.now())})
}

func (u *UI) delete(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if !u.checkCSRF(r) {
		u.logger.WarnContext(r.Context(), "operator page: delete refused: missing or wrong CSRF token", "actor", actorOf(r), "remote", r.RemoteAddr)
		http.Error(w, "missing or wrong CSRF token: reload the page and try again", http.StatusForbidden)
		return
	}
	scope, key := r.PostFormValue("scope"), r.PostFormValue("key")
	if r.PostFormValue("confirm") != "yes" {
		http.Error(w, "the delete was not confirmed", http.StatusBadRequest)
		return
	}
	// The record as it was goes into the audit line; a failed read only
	// leaves that out.
	before, _ := u.find(r, scope, key)
	ctx, cancel := context.WithTimeout(r.Context(), uiStoreTimeout)
	defer cancel()
	err := u.admin.Delete(ctx, scope, key)
	LogAudit(r.Context(), u.logger, u.now(), Audit{Actor: actorOf(r), Via: "operator page", Action: "record deleted",
		Scope: scope, Key: key, Before: before, Remote: r.RemoteAddr}, err)
	switch {
	case errors.Is(err, retrysafe.ErrNotFound):
		u.render(w, r, http.StatusNotFound, "error", map[string]any{"Message": "The record was already gone (deleted, released or swept).", "Key": key, "Scope": scope})
		return
	case err != nil:
		u.storeError(w, r, "deleting the record", err)
		return
	}
	u.setFlash(w, r, key)
	http.Redirect(w, r, UIPath+"records", http.StatusSeeOther)
}

// keyDigest identifies a key in the log without writing it (keys can be
// secrets): the first 16 hex digits of its SHA-256.
func keyDigest(key string) string { return scopehash.Sum(key)[:16] }

// Template helpers.
var uiFuncs = template.FuncMap{
	"short": func(s string, n int) string {
		if len(s) <= n+1 {
			return s
		}
		return s[:n] + "…"
	},
	"scopeLabel": func(s string) string {
		if s == "" {
			return "(empty)"
		}
		if len(s) > 13 {
			return s[:12] + "…"
		}
		return s
	},
	"time": func(t time.Time) string {
		if t.IsZero() {
			return "–"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"clock": func(t time.Time) string { return t.UTC().Format("15:04:05Z") },
	"ago": func(t, now time.Time) string {
		if t.IsZero() {
			return ""
		}
		d := now.Sub(t).Round(time.Second)
		if d < 0 {
			return "in " + (-d).String()
		}
		return d.String() + " ago"
	},
	"statusText": http.StatusText,
}

// parseUITemplates parses one template set per page: the layout with the
// page's own template.
func parseUITemplates() (map[string]*template.Template, error) {
	base, err := template.New("layout").Funcs(uiFuncs).ParseFS(uiFiles, "ui/layout.html")
	if err != nil {
		return nil, err
	}
	pages := map[string]*template.Template{}
	for _, name := range []string{"overview", "records", "record", "delete", "resolve", "login", "error"} {
		t, err := template.Must(base.Clone()).ParseFS(uiFiles, "ui/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("gateway: operator page %s: %w", name, err)
		}
		pages[name] = t
	}
	return pages, nil
}
