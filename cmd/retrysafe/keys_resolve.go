package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/gateway"
	"github.com/retrysafe/retrysafe/internal/storeheader"
	"github.com/retrysafe/retrysafe/store/sealed"
)

// resolveFlags are the flags of "keys resolve".
type resolveFlags struct {
	complete, release bool
	status            int
	bodyFile          string
	headers           headerFlags
	ttl               time.Duration
}

func (f *resolveFlags) define(fs *flag.FlagSet) {
	fs.BoolVar(&f.complete, "complete", false, "resolve: store the answer given by --status, --body-file and --header; retries of the key replay it")
	fs.BoolVar(&f.release, "release", false, "resolve: delete the record, so that the next retry of the key runs the operation again")
	fs.IntVar(&f.status, "status", 0, "resolve --complete: the stored answer's `status` (100-599)")
	fs.StringVar(&f.bodyFile, "body-file", "", "resolve --complete: the stored answer's body, read from this `file` (default: empty)")
	fs.Var(&f.headers, "header", "resolve --complete: a stored answer's header, `'Name: value'` (repeatable)")
	fs.DurationVar(&f.ttl, "ttl", retrysafe.DefaultTTL, "resolve --complete: how long the stored answer is replayed (the gateway's --ttl)")
}

// used reports whether any resolve flag was given, for the other
// subcommands to refuse them.
func (f *resolveFlags) used() bool {
	return f.complete || f.release || f.status != 0 || f.bodyFile != "" || len(f.headers) > 0
}

// headerFlags collects repeated --header 'Name: value' flags.
type headerFlags []string

func (h *headerFlags) String() string { return strings.Join(*h, ", ") }

func (h *headerFlags) Set(v string) error {
	name, value, ok := strings.Cut(v, ":")
	name = strings.TrimSpace(name)
	if !ok || name == "" || !validFieldName(name) {
		return fmt.Errorf("%q is not 'Name: value'", v)
	}
	if strings.ContainsAny(value, "\r\n\x00") {
		return fmt.Errorf("%q: a header value cannot hold a line break", v)
	}
	*h = append(*h, v)
	return nil
}

func validFieldName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// response is the answer --complete stores.
func (f *resolveFlags) response() (*retrysafe.Response, error) {
	if f.status < 100 || f.status > 599 {
		return nil, usagef("--complete needs --status N with N in 100-599 (got %d)", f.status)
	}
	resp := &retrysafe.Response{Status: f.status, Header: http.Header{}}
	for _, h := range f.headers {
		name, value, _ := strings.Cut(h, ":")
		name = strings.TrimSpace(name)
		if !storeheader.Default(name) {
			return nil, usagef("--header %q: %s is never stored for replay (hop-by-hop, Set-Cookie, Content-Length, Date)", h, name)
		}
		resp.Header.Add(name, strings.TrimSpace(value))
	}
	if f.bodyFile != "" {
		b, err := os.ReadFile(f.bodyFile)
		if err != nil {
			return nil, fmt.Errorf("--body-file: %w", err)
		}
		resp.Body = b
	}
	return resp, nil
}

// checkResolve validates the resolve flags before the store is opened.
func (f *resolveFlags) check() error {
	switch {
	case f.complete == f.release:
		return usagef("resolve needs exactly one of --complete (with --status) or --release")
	case f.release && (f.status != 0 || f.bodyFile != "" || len(f.headers) > 0):
		return usagef("--status, --body-file and --header go with --complete, not --release")
	case f.complete:
		if _, err := f.response(); err != nil {
			return err
		}
	}
	if f.ttl <= 0 {
		return usagef("--ttl must be positive (got %s)", f.ttl)
	}
	return nil
}

// storedScopes returns the store that writes back a record found through
// Admin: with encryption at rest its scope is the stored HMAC, which the
// sealed wrapper's Complete would map a second time; sealed.StoredScopes
// takes it as it is (and seals the answer).
func (k *keysCmd) storedScopes() retrysafe.Store {
	if st, ok := sealed.StoredScopes(k.store); ok {
		return st
	}
	return k.store
}

// errResolveRefused is a record that is not an unknown outcome.
var errResolveRefused = errors.New("nothing to resolve")

// resolve ends an attempt whose outcome is unknown (a processing record
// that its owner abandoned or whose lease ran out): --complete stores an
// answer, --release deletes the record. Both are fenced by the token read
// with the record, so a record that changed meanwhile (taken over,
// completed, resolved by someone else) is left as it is.
func (k *keysCmd) resolve(ctx context.Context, key string, f *resolveFlags) error {
	rec, err := k.find(ctx, key, false)
	if err != nil {
		return err
	}
	before := keysState(rec, k.now)
	switch {
	case rec.State != retrysafe.StateProcessing:
		return fmt.Errorf("key %q in scope %s is %s: %w (only a processing record whose lease ran out, or that its owner abandoned, has an unknown outcome)",
			key, keysShortScope(rec.Scope), before, errResolveRefused)
	case admin.StatusOf(rec, k.now) != admin.StatusUnknown:
		return fmt.Errorf("key %q in scope %s is processing and its owner's lease runs until %s: %w yet (the attempt may still be running; wait for it to end or its lease to run out)",
			key, keysShortScope(rec.Scope), keysTimeFull(rec.LeaseUntil, k.now), errResolveRefused)
	}
	action, after := "release", "the next retry of the key runs the operation again"
	var resp *retrysafe.Response
	if f.complete {
		if resp, err = f.response(); err != nil {
			return err
		}
		action, after = "complete", fmt.Sprintf("retries of the key get the stored %d for %s", resp.Status, f.ttl)
		err = k.storedScopes().Complete(ctx, &retrysafe.CompleteParams{Scope: rec.Scope, Key: rec.Key, Token: rec.Token, Now: time.Now(), TTL: f.ttl, Response: resp})
	} else {
		err = k.storedScopes().Release(ctx, &retrysafe.ReleaseParams{Scope: rec.Scope, Key: rec.Key, Token: rec.Token})
	}
	attrs := []any{"action", action, "abandoned", rec.Abandoned}
	if resp != nil {
		attrs = append(attrs, "status", resp.Status, "body_bytes", len(resp.Body))
	}
	gateway.LogAudit(ctx, k.audit, k.now, gateway.Audit{Actor: osUser(), Via: "cli", Action: "unknown outcome resolved",
		Scope: rec.Scope, Key: rec.Key, Before: rec, Attrs: attrs}, err)
	switch {
	case errors.Is(err, retrysafe.ErrLeaseLost):
		return fmt.Errorf("key %q in scope %s changed since it was read (taken over by a retry, completed, or resolved by someone else): nothing was written; look again with keys show", key, keysShortScope(rec.Scope))
	case err != nil:
		return fmt.Errorf("%s: %w", action, err)
	}
	if k.o.json {
		return k.printJSON(struct {
			Action   string         `json:"action"`
			Status   int            `json:"status,omitempty"`
			Resolved keysJSONRecord `json:"resolved"`
		}{action, f.status, k.jsonRecord(rec, false)})
	}
	fmt.Fprintf(k.out, "resolved (%s): %s\n", action, after)
	k.printRecord(rec, false)
	return nil
}
