package gateway_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/gateway"
)

var revField = regexp.MustCompile(`name="rev" value="([0-9a-f]+)"`)

// TestUIResolve: an abandoned request (the upstream hung up after reading
// it) is resolved from its page: a confirmation that says what the client
// will see, CSRF required, fenced by the version the page showed, logged
// with the token's name; the client then gets the operator's answer.
func TestUIResolve(t *testing.T) {
	t.Parallel()
	e := newUIEnv(t, gateway.AdminToken{Name: "alice", Secret: aliceToken})
	auth := "Authorization: Bearer " + aliceToken
	for _, key := range []string{"k-resolve", "k-stale"} {
		if r := send(t, e.gw.URL, "POST", "/hangup", key, `{"amount":1}`); r.Status != http.StatusBadGateway {
			t.Fatalf("POST /hangup: %s", r)
		}
	}
	if r := send(t, e.gw.URL, "POST", "/hangup", "k-resolve", `{"amount":1}`); r.Status != http.StatusConflict || problemType(t, r) != retrysafe.ProblemOutcomeUnknown {
		t.Fatalf("retry before the resolve: %s, want 409 outcome-unknown", r)
	}
	code, page := e.get(t, "/ui/record?scope="+testScope+"&key=k-resolve", auth)
	if code != http.StatusOK || !strings.Contains(page, `id="resolve"`) || !strings.Contains(page, "abandoned by its owner: the outcome is unknown") {
		t.Fatalf("record page %d has no Resolve form:\n%s", code, page)
	}
	csrf, rev := csrfOf(t, page), revField.FindStringSubmatch(page)[1]
	form := url.Values{"csrf": {csrf}, "scope": {testScope}, "key": {"k-resolve"}, "rev": {rev}, "action": {"complete"},
		"status": {"201"}, "content_type": {"application/json"}, "body": {`{"charge":"ch_op"}`}}

	noCSRF := url.Values{}
	for k, v := range form {
		if k != "csrf" {
			noCSRF[k] = v
		}
	}
	if code, _ := e.post(t, "/ui/resolve", noCSRF, auth); code != http.StatusForbidden {
		t.Errorf("resolve without a CSRF token: %d, want 403", code)
	}
	if code, _ := e.post(t, "/ui/resolve", form); code != http.StatusUnauthorized {
		t.Errorf("resolve without the admin token: %d, want 401", code)
	}
	if code := e.postHost(t, "/ui/resolve", form, "evil.example", auth); code != http.StatusMisdirectedRequest {
		t.Errorf("resolve with a foreign Host: %d, want 421", code)
	}
	bad := url.Values{}
	for k, v := range form {
		bad[k] = v
	}
	bad.Set("status", "42")
	if code, _ := e.post(t, "/ui/resolve", bad, auth); code != http.StatusBadRequest {
		t.Errorf("resolve with status 42: %d, want 400", code)
	}

	code, confirm := e.post(t, "/ui/resolve", form, auth)
	if code != http.StatusOK || !strings.Contains(confirm, "The client will see") || !strings.Contains(confirm, "201 Created") ||
		!strings.Contains(confirm, "ch_op") || !strings.Contains(confirm, "every retry of this key gets the answer below") {
		t.Fatalf("confirmation %d does not say what the client will see:\n%s", code, confirm)
	}
	if rec := e.record(t, "k-resolve"); rec.State != retrysafe.StateProcessing {
		t.Fatalf("the confirmation page wrote: %+v", rec)
	}
	form.Set("confirm", "yes")
	if code, _ := e.post(t, "/ui/resolve", form, auth); code != http.StatusSeeOther {
		t.Fatalf("confirmed resolve: %d, want 303", code)
	}
	if rec := e.record(t, "k-resolve"); rec.State != retrysafe.StateCompleted || rec.Response.Status != 201 || string(rec.Response.Body) != `{"charge":"ch_op"}` {
		t.Fatalf("record after the resolve: %+v", rec)
	}
	if log := e.log.String(); !strings.Contains(log, "unknown outcome resolved") || !strings.Contains(log, "actor=alice") || strings.Contains(log, "k-resolve") {
		t.Errorf("the resolve was not logged with its actor (or the log holds the key):\n%s", log)
	}
	r := send(t, e.gw.URL, "POST", "/hangup", "k-resolve", `{"amount":1}`)
	if r.Status != 201 || string(r.Body) != `{"charge":"ch_op"}` || r.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("the client after the resolve: %s, want the operator's answer", r)
	}
	// A second confirmation of the same form: the record is completed now.
	if code, body := e.post(t, "/ui/resolve", form, auth); code != http.StatusConflict || !strings.Contains(body, "nothing was written") {
		t.Errorf("second resolve: %d, want 409 nothing written", code)
	}

	// k-stale changes after its page was shown (taken over by a retry
	// after its lease, then abandoned again): the old form writes nothing.
	_, page = e.get(t, "/ui/record?scope="+testScope+"&key=k-stale", auth)
	staleRev := revField.FindStringSubmatch(page)[1]
	rec := e.record(t, "k-stale")
	res, err := e.store.Claim(t.Context(), &retrysafe.ClaimParams{Scope: rec.Scope, Key: rec.Key, Fingerprint: rec.Fingerprint,
		Token: retrysafe.NewToken(), Now: rec.LeaseUntil.Add(time.Second), Lease: time.Minute})
	if err != nil || !res.Claimed {
		t.Fatalf("takeover: %v", err)
	}
	if err := e.store.Extend(t.Context(), &retrysafe.ExtendParams{Scope: rec.Scope, Key: rec.Key, Token: res.Record.Token, Now: time.Now(), Abandon: true}); err != nil {
		t.Fatal(err)
	}
	stale := url.Values{"csrf": {csrf}, "scope": {testScope}, "key": {"k-stale"}, "rev": {staleRev}, "action": {"release"}, "confirm": {"yes"}}
	if code, body := e.post(t, "/ui/resolve", stale, auth); code != http.StatusConflict || !strings.Contains(body, "changed since the page showed it") {
		t.Fatalf("resolve of a record that changed: %d\n%s", code, body)
	}
	if rec := e.record(t, "k-stale"); rec.Attempt != 2 || rec.State != retrysafe.StateProcessing {
		t.Fatalf("the stale resolve changed the record: %+v", rec)
	}
}

func (e *uiEnv) record(t *testing.T, key string) *retrysafe.Record {
	t.Helper()
	recs, err := e.store.Find(t.Context(), &admin.FindParams{Key: key, Scope: testScope, ScopeSet: true, WithBodies: true})
	if err != nil || len(recs) != 1 {
		t.Fatalf("find %s: %v %v", key, recs, err)
	}
	return recs[0]
}

// postHost posts form with another Host header.
func (e *uiEnv) postHost(t *testing.T, path string, form url.Values, host string, hdr ...string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.gw.AdminURL+path, strings.NewReader(form.Encode()))
	req.Host = host
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for _, h := range hdr {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Set(k, v)
	}
	res, err := e.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}
