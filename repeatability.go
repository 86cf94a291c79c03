package retrysafe

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/retrysafe/retrysafe/internal/scopehash"
)

// repeatability is what a request said with the Repeatable Requests
// headers.
type repeatability struct {
	requested bool      // it carried Repeatability-Request-ID: answers say Repeatability-Result
	firstSent time.Time // zero when absent
}

// headerKey reads the key of a request from Idempotency-Key or, when that
// is absent, Repeatability-Request-ID, and checks Repeatability-First-Sent.
// It returns the key, or pass=true when the request carries neither header
// (and may pass through), or the outcome of the refusal it wrote.
func (h *protectedHandler) headerKey(w http.ResponseWriter, r *http.Request) (key string, rr repeatability, outcome Outcome, pass bool) {
	c := h.cfg
	values := r.Header[HeaderKey] // as Header.Values: HeaderKey is canonical
	ids := r.Header[HeaderRepeatabilityRequestID]
	if len(ids) > 0 {
		rr.requested = true
		w.Header().Set(HeaderRepeatabilityResult, "rejected") // until it is accepted
	}
	name := HeaderKey
	if len(values) == 0 && len(ids) > 0 {
		values, name = ids, "Repeatability-Request-ID"
	}
	if len(values) == 0 {
		if !c.RequireKey {
			return "", rr, "", true
		}
		WriteProblem(w, c.problem(ProblemMissingKey, "Idempotency-Key required", http.StatusBadRequest,
			"This endpoint requires an Idempotency-Key header: generate a unique value (a UUID) once per operation and send it on every retry."), 0)
		return "", rr, OutcomeMissingKey, false
	}
	if len(values) > 1 {
		WriteProblem(w, c.problem(ProblemInvalidKey, "Invalid "+name, http.StatusBadRequest,
			"Send exactly one "+name+" header."), 0)
		return "", rr, OutcomeInvalidKey, false
	}
	key, err := ParseKey(values[0])
	if err != nil {
		detail := err.Error()
		var ke *KeyError
		if errors.As(err, &ke) {
			detail = fmt.Sprintf("The %s header is invalid: %s. Use 1 to %d printable ASCII characters, such as a UUID.", name, ke.Reason, MaxKeyLength)
		}
		WriteProblem(w, c.problem(ProblemInvalidKey, "Invalid "+name, http.StatusBadRequest, detail), 0)
		return "", rr, OutcomeInvalidKey, false
	}
	if name == HeaderKey && len(ids) > 0 {
		id, err := ParseKey(ids[0])
		if len(ids) > 1 || err != nil || id != key {
			WriteProblem(w, c.problem(ProblemInvalidKey, "Two different keys", http.StatusBadRequest,
				"The request carries both Idempotency-Key and Repeatability-Request-ID, and they differ (or Repeatability-Request-ID is sent twice or is invalid). Send one of them, or the same single value in both."), 0)
			return "", rr, OutcomeInvalidKey, false
		}
	}
	if o := h.firstSent(w, r, &rr); o != "" {
		return "", rr, o, false
	}
	return key, rr, "", false
}

// firstSent reads and checks Repeatability-First-Sent into rr. A time
// older than the TTL, or more than FirstSentSkew ahead, is refused with
// 412: a retry that comes that late could find its first attempt's record
// gone and run again.
func (h *protectedHandler) firstSent(w http.ResponseWriter, r *http.Request, rr *repeatability) Outcome {
	c := h.cfg
	values := r.Header[HeaderRepeatabilityFirstSent]
	if len(values) == 0 {
		return ""
	}
	t, err := time.Parse(http.TimeFormat, values[0])
	if len(values) > 1 || err != nil {
		WriteProblem(w, c.problem(ProblemFirstSentInvalid, "Invalid Repeatability-First-Sent", http.StatusBadRequest,
			"Repeatability-First-Sent must be one IMF-fixdate, such as \"Sun, 06 Nov 1994 08:49:37 GMT\": the time the request was first sent, the same on every retry. Nothing was processed."), 0)
		return OutcomeInvalidKey
	}
	now := c.Now()
	switch {
	case t.Before(now.Add(-c.TTL)):
		WriteProblem(w, c.problem(ProblemFirstSentExpired, "Repeatability-First-Sent too old", http.StatusPreconditionFailed,
			fmt.Sprintf("The request was first sent at %s, more than %s (how long results are kept) ago, so it can no longer be told apart from a new request. Nothing was processed; check the resource's state, and send a new operation with a new Repeatability-Request-ID.",
				t.UTC().Format(http.TimeFormat), c.TTL)), 0)
		return OutcomeFirstSentExpired
	case t.After(now.Add(FirstSentSkew)):
		WriteProblem(w, c.problem(ProblemFirstSentExpired, "Repeatability-First-Sent in the future", http.StatusPreconditionFailed,
			fmt.Sprintf("The request says it was first sent at %s, more than %s ahead of the server's clock (%s). Nothing was processed; send the time of the first attempt, from a correct clock.",
				t.UTC().Format(http.TimeFormat), FirstSentSkew, now.UTC().Format(http.TimeFormat))), 0)
		return OutcomeFirstSentExpired
	}
	rr.firstSent = t
	return ""
}

// fingerprint returns fp with the first-sent time folded in, when the
// request gave one: the same Request-ID with another first-sent time is
// another request, refused as a reused key (422).
func (rr repeatability) fingerprint(fp string) string {
	if rr.firstSent.IsZero() {
		return fp
	}
	return scopehash.Sum("retrysafe-first-sent-v1\x00" + fp + "\x00" + strconv.FormatInt(rr.firstSent.Unix(), 10))
}

// accept marks the answer Repeatability-Result: accepted (the request ran,
// or its result is replayed), when the request asked for it.
func (rr repeatability) accept(w http.ResponseWriter) {
	if rr.requested {
		w.Header().Set(HeaderRepeatabilityResult, "accepted")
	}
}
