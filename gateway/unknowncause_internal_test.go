package gateway

import (
	"fmt"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/webhook"
)

func TestParseCause(t *testing.T) {
	t.Parallel()
	for _, c := range []string{causeTimeout, causeCutAfterSend, causeHandlerPanic, causeLeaseExpired} {
		name := causeCheckpointName(12, c)
		if len(name) > retrysafe.MaxCheckpointName {
			t.Errorf("%q is longer than a checkpoint name may be", name)
		}
		if a, got, ok := parseCause(&retrysafe.Checkpoint{Name: name}); !ok || a != 12 || got != c {
			t.Errorf("parseCause(%q) = %d, %q, %v", name, a, got, ok)
		}
	}
	for name, cp := range map[string]*retrysafe.Checkpoint{
		"nil":            nil,
		"another's":      {Name: "charge-requested"},
		"unknown cause":  {Name: "gateway-unknown attempt=1 cause=gremlins"},
		"no attempt":     {Name: "gateway-unknown attempt= cause=timeout"},
		"attempt 0":      {Name: "gateway-unknown attempt=0 cause=timeout"},
		"no cause field": {Name: "gateway-unknown attempt=1"},
	} {
		if a, c, ok := parseCause(cp); ok {
			t.Errorf("%s: parseCause = %d, %q, true; want ok false", name, a, c)
		}
	}
}

func TestUnknownCause(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cp := func(attempt int, cause string, data string) *retrysafe.Checkpoint {
		return &retrysafe.Checkpoint{Name: causeCheckpointName(attempt, cause), Data: []byte(data), At: at}
	}
	lease, updated := at.Add(time.Minute), at.Add(time.Second)
	for name, tc := range map[string]struct {
		rec    retrysafe.Record
		cause  string
		since  time.Time
		detail string
	}{
		"timeout":        {retrysafe.Record{Attempt: 1, Abandoned: true, Checkpoint: cp(1, causeTimeout, "net/http: timeout"), UpdatedAt: updated, LeaseUntil: lease}, causeTimeout, at, "net/http: timeout"},
		"cut":            {retrysafe.Record{Attempt: 3, Abandoned: true, Checkpoint: cp(3, causeCutAfterSend, "EOF"), UpdatedAt: updated, LeaseUntil: lease}, causeCutAfterSend, at, "EOF"},
		"sealed detail":  {retrysafe.Record{Attempt: 1, Abandoned: true, Checkpoint: cp(1, causeTimeout, "\x00sealed\xff"), LeaseUntil: lease}, causeTimeout, at, ""},
		"panic":          {retrysafe.Record{Attempt: 1, Abandoned: true, UpdatedAt: updated, LeaseUntil: lease}, causeHandlerPanic, updated, ""},
		"lease":          {retrysafe.Record{Attempt: 1, UpdatedAt: updated, LeaseUntil: lease}, causeLeaseExpired, lease, ""},
		"earlier's":      {retrysafe.Record{Attempt: 2, Checkpoint: cp(1, causeTimeout, "x"), UpdatedAt: updated, LeaseUntil: lease}, causeLeaseExpired, lease, ""},
		"earlier's, abd": {retrysafe.Record{Attempt: 2, Abandoned: true, Checkpoint: cp(1, causeTimeout, "x"), UpdatedAt: updated, LeaseUntil: lease}, causeHandlerPanic, updated, ""},
		"app checkpoint": {retrysafe.Record{Attempt: 1, Checkpoint: &retrysafe.Checkpoint{Name: "charge-requested", At: at}, LeaseUntil: lease}, causeLeaseExpired, lease, ""},
	} {
		cause, since, detail := unknownCause(&tc.rec)
		if cause != tc.cause || !since.Equal(tc.since) || detail != tc.detail {
			t.Errorf("%s: unknownCause = %q, %s, %q; want %q, %s, %q", name, cause, since, detail, tc.cause, tc.since, tc.detail)
		}
		if causeText[cause] == "" {
			t.Errorf("%s: cause %q has no text", name, cause)
		}
	}
}

func TestLookupFor(t *testing.T) {
	t.Parallel()
	rec := &retrysafe.Record{Key: "evt-1", Attempt: 2}
	for scheme, want := range map[webhook.Scheme]string{
		"":               "[{Idempotency-Key evt-1} {Idempotency-Attempt 2}]",
		webhook.Standard: "[{webhook-id evt-1} {Idempotency-Attempt 2}]",
		webhook.GitHub:   "[{X-GitHub-Delivery evt-1} {Idempotency-Attempt 2}]",
		webhook.Shopify:  "[{X-Shopify-Event-Id evt-1} {Idempotency-Attempt 2}]",
		webhook.Stripe:   "[{Idempotency-Attempt 2}]",
	} {
		l := lookupFor(rec, scheme)
		if got := fmt.Sprint(l.Headers); got != want || l.Note == "" {
			t.Errorf("scheme %q: %s (note %q), want %s with a note", scheme, got, l.Note, want)
		}
	}
	if l := lookupFor(rec, webhook.Stripe); l.Note != `the event whose body has "id": "evt-1"` {
		t.Errorf("stripe note: %q", l.Note)
	}
	if len(webhook.Schemes) != 4 {
		t.Errorf("webhook has %d schemes: lookupFor knows 4", len(webhook.Schemes))
	}
}
