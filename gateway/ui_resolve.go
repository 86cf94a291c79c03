package gateway

import (
	"context"
	"crypto/hmac"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
)

// uiResolveBody bounds the body an operator types into the Resolve form.
const uiResolveBody = 1 << 20

// recordRev names the version of rec that a page showed, so that a
// confirmation acts only on that version: a MAC of its owner token (never
// shown), attempt and state.
func (u *UI) recordRev(rec *retrysafe.Record) string {
	return hex.EncodeToString(u.mac("rev", rec.Scope, rec.Key, rec.Token, strconv.Itoa(rec.Attempt), string(rec.State)))
}

// ttlFor is how long an answer stored by Resolve for a record of route
// is replayed: the route's TTL in a gateway, else UIConfig.ResolveTTL.
func (u *UI) ttlFor(route string) time.Duration {
	if ttl, ok := u.cfg.ttls[route]; ok {
		return ttl
	}
	if u.cfg.ResolveTTL > 0 {
		return u.cfg.ResolveTTL
	}
	return retrysafe.DefaultTTL
}

// resolve takes the Resolve form of a record's page: without confirm it
// shows what the client will then see, with confirm=yes it completes the
// record with the operator's answer or releases it, fenced by the owner
// token read now, and only if the record is still the version the page
// showed and still an unknown outcome.
func (u *UI) resolve(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, uiResolveBody+64<<10)
	if !u.checkCSRF(r) {
		u.logger.WarnContext(r.Context(), "operator page: resolve refused: missing or wrong CSRF token", "actor", actorOf(r), "remote", r.RemoteAddr)
		http.Error(w, "missing or wrong CSRF token: reload the page and try again", http.StatusForbidden)
		return
	}
	scope, key, action := r.PostFormValue("scope"), r.PostFormValue("key"), r.PostFormValue("action")
	problem := func(status int, msg string) {
		u.render(w, r, status, "error", map[string]any{"Message": msg, "Key": key, "Scope": scope})
	}
	var resp *retrysafe.Response
	switch action {
	case "release":
	case "complete":
		status, err := strconv.Atoi(strings.TrimSpace(r.PostFormValue("status")))
		if err != nil || status < 100 || status > 599 {
			problem(http.StatusBadRequest, "The status must be a number from 100 to 599: go back and correct it.")
			return
		}
		resp = &retrysafe.Response{Status: status, Header: http.Header{}, Body: []byte(r.PostFormValue("body"))}
		if ct := strings.TrimSpace(r.PostFormValue("content_type")); ct != "" {
			if strings.ContainsAny(ct, "\r\n\x00") {
				problem(http.StatusBadRequest, "The Content-Type cannot hold a line break.")
				return
			}
			resp.Header.Set("Content-Type", ct)
		}
		if len(resp.Body) > uiResolveBody {
			problem(http.StatusRequestEntityTooLarge, fmt.Sprintf("The body is over %d bytes: store a shorter answer, or use retrysafe keys resolve --body-file.", uiResolveBody))
			return
		}
	default:
		problem(http.StatusBadRequest, "Choose complete (with a status) or release.")
		return
	}
	rec, err := u.find(r, scope, key)
	if err != nil {
		u.storeError(w, r, "reading the record", err)
		return
	}
	log := []any{"actor", actorOf(r), "remote", r.RemoteAddr, "action", action, "scope", scope, "key_sha256", keyDigest(key)}
	now := u.now()
	switch {
	case rec == nil:
		problem(http.StatusNotFound, "No record with this key in this scope any more (released, deleted or swept): nothing to resolve.")
		return
	case admin.StatusOf(rec, now) != admin.StatusUnknown:
		problem(http.StatusConflict, fmt.Sprintf("The record is %s now, not an unknown outcome: nothing was written. Open it again to see what it holds.", admin.StatusOf(rec, now)))
		return
	case !equalHex(r.PostFormValue("rev"), u.recordRev(rec)):
		u.logger.InfoContext(r.Context(), "operator page: resolve refused: the record changed since the page showed it", log...)
		problem(http.StatusConflict, "The record changed since the page showed it (a retry took it over, or someone resolved it): nothing was written. Open it again and decide on what it holds now.")
		return
	}
	if r.PostFormValue("confirm") != "yes" {
		data := map[string]any{"Rec": u.view(rec, now), "Action": action, "Rev": r.PostFormValue("rev"), "TTL": u.ttlFor(rec.Route)}
		if resp != nil {
			data["Status"], data["ContentType"], data["Body"] = resp.Status, resp.Header.Get("Content-Type"), string(resp.Body)
		}
		u.render(w, r, http.StatusOK, "resolve", data)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), uiStoreTimeout)
	defer cancel()
	attrs := []any{"action", action, "abandoned", rec.Abandoned}
	if resp != nil {
		attrs = append(attrs, "status", resp.Status, "body_bytes", len(resp.Body))
		err = u.completeStored(ctx, &retrysafe.CompleteParams{Scope: rec.Scope, Key: rec.Key, Token: rec.Token, Now: now, TTL: u.ttlFor(rec.Route), Response: resp})
	} else {
		err = u.releaseStored(ctx, &retrysafe.ReleaseParams{Scope: rec.Scope, Key: rec.Key, Token: rec.Token})
	}
	LogAudit(r.Context(), u.logger, now, Audit{Actor: actorOf(r), Via: "operator page", Action: "unknown outcome resolved",
		Scope: scope, Key: key, Before: rec, Remote: r.RemoteAddr, Attrs: attrs}, err)
	switch {
	case errors.Is(err, retrysafe.ErrLeaseLost):
		problem(http.StatusConflict, "The record changed just now (a retry took it over, or someone resolved it): nothing was written. Open it again.")
		return
	case err != nil:
		u.storeError(w, r, "resolving the record", err)
		return
	}
	http.Redirect(w, r, recordURL(rec.Scope, rec.Key), http.StatusSeeOther)
}

// completeStored and releaseStored write a record found through Admin,
// whose scope is as stored (see storedScopes).
func (u *UI) completeStored(ctx context.Context, p *retrysafe.CompleteParams) error {
	return storedScopes(u.cfg.Store).Complete(ctx, p)
}

func (u *UI) releaseStored(ctx context.Context, p *retrysafe.ReleaseParams) error {
	return storedScopes(u.cfg.Store).Release(ctx, p)
}

func equalHex(a, b string) bool {
	x, err := hex.DecodeString(a)
	y, err2 := hex.DecodeString(b)
	return err == nil && err2 == nil && len(x) > 0 && hmac.Equal(x, y)
}
