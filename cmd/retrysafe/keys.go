package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/gateway"
	"github.com/retrysafe/retrysafe/internal/scopehash"
	"github.com/retrysafe/retrysafe/internal/storeurl"
	"github.com/retrysafe/retrysafe/store/sealed"
)

const keysSynopsis = "list|show|delete|resolve --store URL [flags] [KEY]"

const keysDescription = `
Inspects idempotency records, for support and operations.

  list           records ordered by scope and key, a page at a time
  show KEY       every field of one record (bodies only with --bodies)
  delete KEY     removes one record, whatever its state, and prints what it
                 removed; it asks no questions. A deleted key runs as new on
                 its next request: delete a completed record only if you know
                 the operation must run again. It writes one JSON audit line
                 on stderr: who (the OS user), the scope, a digest of the key
                 and the record's state before (as the operator page logs).
  resolve KEY    ends an attempt whose outcome is unknown (a processing record
                 whose lease ran out, or that its owner abandoned), which
                 --on-unknown block keeps blocked: --complete --status N
                 [--body-file F] [--header 'K: V']... stores that answer
                 (retries replay it), --release deletes the record (the next
                 retry runs the operation). It refuses any other record, and
                 writes nothing if the record changed since it was read (a
                 retry took it over, or someone resolved it): it is fenced by
                 the owner token it read. It prints one JSON audit line on
                 stderr: who (the OS user), what, the key's SHA-256 prefix
                 and the state before. With encryption at rest, give the keys
                 (--encryption-keys-file) so the answer is stored encrypted.

A record is identified by scope + key. The gateway's scope is the SHA-256 (hex)
of the caller's credential (the Authorization header by default): pass it with
--scope (a unique prefix of it is enough), or pass the credential itself with
--identity to have it hashed the same way. With encryption at rest the store
keeps the HMAC of the scope instead (the scope list shows): --identity then
needs the keys (--encryption-keys-file) to compute it. Without either, show and delete
look for the key in every scope (on SQL stores a scan of the table, on Redis
a SCAN of the store's keys).

States: processing (claimed; its owner holds a lease until LEASE-UNTIL),
completed (a stored result, replayed until EXPIRES), failed (a completed record
whose stored status is 400 or more: it replays like any result, see
docs/problems.md), expired (completed, past EXPIRES, not yet swept: it counts
as absent). A processing record whose lease ran out is shown as
"processing (lease expired)" (state "unknown" in --json, as on the operator
page): its outcome is unknown, and the next request with its key takes it over
(unless the gateway runs with --on-unknown block or a --resolve-url). One
whose owner gave up (an upstream timeout, a cut after sending) is shown as
"processing (abandoned: outcome unknown)", state "unknown" too.

keys never creates a store: a SQLite file that does not exist is reported as
such. The memory store lives inside one process: keys can only open a new,
empty one (it says so).

Owner tokens are never printed. Response bodies can hold personal data: they
are printed only with --bodies.

Responses stored by a gateway with --encryption-keys-file are encrypted: show
decrypts them only when given the same keys (--encryption-keys-file, or
RETRYSAFE_ENCRYPTION_KEYS); without them it says which key encrypted the
record and prints header names, never ciphertext as if it were the body.`

const keysExamples = `  retrysafe keys list --store sqlite:retrysafe.db
  retrysafe keys list --store postgres://retrysafe@db/retrysafe --scope 3f1a9c --limit 20
  retrysafe keys list --store sqlite:retrysafe.db --after "$NEXT"     # the cursor list printed
  retrysafe keys show --store redis://127.0.0.1:6379/0 6f2c4d8e-9c77-4d92-a9b3-2d0f9a1c8a11
  retrysafe keys show --store sqlite:retrysafe.db --identity "Bearer sk_live_…" --bodies KEY
  retrysafe keys show --store sqlite:retrysafe.db --encryption-keys-file keys.txt --bodies KEY
  retrysafe keys delete --store sqlite:retrysafe.db --scope 3f1a9c KEY
  retrysafe keys list --store sqlite:retrysafe.db --json | jq '.records[] | select(.state == "failed")'
  retrysafe keys resolve --store sqlite:retrysafe.db --scope 3f1a9c KEY --complete --status 201 \
      --header 'Content-Type: application/json' --body-file charge.json
  retrysafe keys resolve --store sqlite:retrysafe.db --scope 3f1a9c KEY --release`

// storeOpener opens a store from a --store URL; storeurl.OpenWith in the
// binary. Tests pass one that returns a store they populated (the memory
// store cannot be reached through a URL from another process).
type storeOpener func(ctx context.Context, rawURL string, opts storeurl.Options) (retrysafe.Store, func() error, error)

// memoryNote is printed by commands that open a memory: store: it lives
// inside one process, so a command run on its own sees a new, empty one.
const memoryNote = "the memory store lives inside one process; this command opened a new, empty one"

// isMemoryURL reports whether rawURL names the memory store.
func isMemoryURL(rawURL string) bool {
	return strings.HasPrefix(strings.ToLower(strings.TrimSpace(rawURL)), "memory:")
}

// keysOptions are the flags of "keys".
type keysOptions struct {
	store    string
	scope    string
	identity string
	limit    int
	after    string
	bodies   bool
	json     bool
	wide     bool
	keysFile string
	resolve  resolveFlags
}

// keysCommand returns the "keys" command, opening stores with open.
func keysCommand(open storeOpener) func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		return runKeys(ctx, args, stdout, stderr, open)
	}
}

func runKeys(ctx context.Context, args []string, stdout, stderr io.Writer, open storeOpener) error {
	var o keysOptions
	fs := newFlagSet("keys", keysSynopsis, keysDescription, keysExamples, stdout, stderr)
	fs.StringVar(&o.store, "store", storeurl.Default, "idempotency store `URL`: "+storeurl.Accepted)
	fs.StringVar(&o.scope, "scope", "", "the records' `scope`, or a unique prefix of it (\"-\" is the empty scope of callers without credentials); list: only this scope")
	fs.StringVar(&o.identity, "identity", "", "the caller's credential `value` (e.g. the Authorization header); hashed into the scope as the gateway does")
	fs.IntVar(&o.limit, "limit", 50, "list: records per page")
	fs.StringVar(&o.after, "after", "", "list: start after this `cursor` (printed at the end of the previous page)")
	fs.BoolVar(&o.bodies, "bodies", false, "show: include the stored response body")
	fs.BoolVar(&o.json, "json", false, "print JSON, for scripts")
	fs.BoolVar(&o.wide, "wide", false, "list: print whole scopes and keys instead of shortening them")
	fs.StringVar(&o.keysFile, "encryption-keys-file", "", "show: decrypt stored responses with the keys in this `file` (the gateway's); or set "+encryptionKeysEnv)
	o.resolve.define(fs)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usagef("missing subcommand: list, show, delete or resolve")
	}
	sub, pos := pos[0], pos[1:]
	switch sub {
	case "list":
		if len(pos) > 0 {
			return usagef("list takes no arguments (got %q)", pos[0])
		}
	case "show", "delete", "resolve":
		if len(pos) != 1 {
			return usagef("%s takes exactly one KEY", sub)
		}
		if o.after != "" {
			return usagef("--after is a list flag")
		}
	default:
		return usagef("unknown subcommand %q: want list, show, delete or resolve", sub)
	}
	if sub == "resolve" {
		if err := o.resolve.check(); err != nil {
			return err
		}
	} else if o.resolve.used() {
		return usagef("--complete, --release, --status, --body-file and --header are resolve flags")
	}
	if o.limit <= 0 {
		return usagef("--limit must be positive")
	}
	if o.scope != "" && o.identity != "" {
		return usagef("give --scope or --identity, not both")
	}
	ring, err := loadKeyRing(o.keysFile, os.Getenv)
	if err != nil {
		return err
	}
	if o.identity != "" {
		o.scope = scopehash.Sum(o.identity)
		if ring != nil {
			// Encrypted at rest, records are kept under the HMAC of
			// their scope: the scope keys list shows.
			o.scope = ring.Scope(o.scope)
		}
	}
	// keys never creates a store: a mistyped SQLite path is an error, not
	// a new, empty database with "no records".
	store, closeStore, err := open(ctx, o.store, storeurl.Options{MustExist: true})
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	defer closeStore()
	if isMemoryURL(o.store) {
		fmt.Fprintf(stderr, "Note: %s.\n", memoryNote)
	}
	if ring != nil {
		// Records stored before encryption was turned on are shown as
		// they are; records the ring cannot open are listed still sealed.
		if store, err = sealed.New(store, ring, sealed.Config{AcceptPlaintext: true}); err != nil {
			return err
		}
	}
	adm, ok := retrysafe.As[admin.Admin](store)
	if !ok {
		return fmt.Errorf("store %s cannot list records (it does not implement admin.Admin)", storeurl.Redact(o.store))
	}
	k := &keysCmd{o: o, store: store, admin: adm, ring: ring, out: stdout, now: time.Now(),
		audit: slog.New(slog.NewJSONHandler(stderr, nil))}
	switch sub {
	case "list":
		return k.list(ctx)
	case "show":
		return k.show(ctx, pos[0])
	case "resolve":
		return k.resolve(ctx, pos[0], &o.resolve)
	default:
		return k.delete(ctx, pos[0])
	}
}

// parseInterspersed parses flags that may come before, between and after
// positional arguments ("keys show KEY --store URL") and returns the
// positional ones. "--" ends the flags.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parseFlags(fs, args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

type keysCmd struct {
	o     keysOptions
	store retrysafe.Store
	admin admin.Admin
	ring  *sealed.KeyRing // nil: records are shown as stored
	out   io.Writer
	audit *slog.Logger // the audit lines of destructive subcommands
	now   time.Time
}

// keysCursor encodes a list position; it is opaque to users.
func keysCursor(scope, key string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(scope + "\x00" + key))
}

func parseKeysCursor(c string) (scope, key string, err error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return "", "", usagef("--after %q is not a cursor printed by keys list", c)
	}
	scope, key, ok := strings.Cut(string(b), "\x00")
	if !ok {
		return "", "", usagef("--after %q is not a cursor printed by keys list", c)
	}
	return scope, key, nil
}

func (k *keysCmd) list(ctx context.Context) error {
	p := &admin.ListParams{Limit: k.o.limit}
	if k.o.scope != "" {
		scope, err := k.resolveScope(ctx, k.o.scope)
		if err != nil {
			return err
		}
		p.Scope, p.ScopeSet = scope, true
	}
	if k.o.after != "" {
		var err error
		if p.AfterScope, p.AfterKey, err = parseKeysCursor(k.o.after); err != nil {
			return err
		}
	}
	recs, err := k.admin.List(ctx, p)
	if err != nil {
		return fmt.Errorf("list: %w", err)
	}
	next := ""
	if len(recs) == k.o.limit {
		last := recs[len(recs)-1]
		next = keysCursor(last.Scope, last.Key)
	}
	if k.o.json {
		out := struct {
			Records []keysJSONRecord `json:"records"`
			Next    string           `json:"next,omitempty"`
		}{Records: make([]keysJSONRecord, 0, len(recs)), Next: next}
		for _, r := range recs {
			out.Records = append(out.Records, k.jsonRecord(r, false))
		}
		return k.printJSON(out)
	}
	if len(recs) == 0 {
		fmt.Fprintln(k.out, "no records")
		return nil
	}
	tw := tabwriter.NewWriter(k.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCOPE\tKEY\tSTATE\tATTEMPTS\tCREATED\tEXPIRES / LEASE-UNTIL\tFINGERPRINT\tSTATUS")
	for _, r := range recs {
		scope, key := keysShortScope(r.Scope), keysShort(r.Key, 40)
		if k.o.wide {
			scope, key = r.Scope, r.Key
			if scope == "" {
				scope = "-"
			}
		}
		until := r.ExpiresAt
		if r.State == retrysafe.StateProcessing {
			until = r.LeaseUntil
		}
		status := "-"
		if r.Response != nil {
			status = fmt.Sprint(r.Response.Status)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n",
			scope, key, keysState(r, k.now), r.Attempt, keysTime(r.CreatedAt), keysTime(until), keysShort(r.Fingerprint, 12), status)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if next != "" {
		fmt.Fprintf(k.out, "\nmore: --after %s\n", next)
	}
	return nil
}

func (k *keysCmd) show(ctx context.Context, key string) error {
	// The body is read even without --bodies: it tells whether the
	// response is encrypted, and with which key.
	rec, err := k.find(ctx, key, true)
	if err != nil {
		return err
	}
	if k.o.json {
		return k.printJSON(k.jsonRecord(rec, true))
	}
	k.printRecord(rec, true)
	return nil
}

func (k *keysCmd) delete(ctx context.Context, key string) error {
	rec, err := k.find(ctx, key, false)
	if err != nil {
		return err
	}
	err = k.admin.Delete(ctx, rec.Scope, rec.Key)
	gateway.LogAudit(ctx, k.audit, k.now, gateway.Audit{Actor: osUser(), Via: "cli", Action: "record deleted",
		Scope: rec.Scope, Key: rec.Key, Before: rec}, err)
	if err != nil {
		if errors.Is(err, retrysafe.ErrNotFound) {
			return fmt.Errorf("key %q in scope %s: already gone", key, keysShortScope(rec.Scope))
		}
		return fmt.Errorf("delete: %w", err)
	}
	if k.o.json {
		return k.printJSON(struct {
			Deleted keysJSONRecord `json:"deleted"`
		}{k.jsonRecord(rec, false)})
	}
	fmt.Fprintln(k.out, "deleted:")
	k.printRecord(rec, false)
	return nil
}

// osUser names who runs the command, for the audit line: the OS user
// (and, under sudo, who ran sudo).
func osUser() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	if name == "" { // no passwd entry (a FROM-scratch image) and no $USER
		name = "uid " + strconv.Itoa(os.Getuid())
	}
	if by := os.Getenv("SUDO_USER"); by != "" && by != name {
		name += " (sudo by " + by + ")"
	}
	return name
}

// find returns the record for key: in the given scope, or in whichever
// scope holds it when no scope was given (an error names the scopes when
// several do). It finds expired records too, until they are swept.
func (k *keysCmd) find(ctx context.Context, key string, bodies bool) (*retrysafe.Record, error) {
	p := &admin.FindParams{Key: key, WithBodies: bodies}
	if k.o.scope != "" {
		scope, err := k.resolveScope(ctx, k.o.scope)
		if err != nil {
			return nil, err
		}
		p.Scope, p.ScopeSet = scope, true
	}
	recs, err := k.admin.Find(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("find: %w", err)
	}
	switch {
	case len(recs) == 1:
		return recs[0], nil
	case len(recs) == 0 && p.ScopeSet:
		return nil, fmt.Errorf("no record for key %q in scope %s", key, keysShortScope(p.Scope))
	case len(recs) == 0:
		return nil, fmt.Errorf("no record for key %q in any scope", key)
	}
	scopes := make([]string, len(recs))
	for i, r := range recs {
		scopes[i] = keysShortScope(r.Scope)
	}
	return nil, usagef("key %q exists in %d scopes (%s): choose one with --scope", key, len(recs), strings.Join(scopes, ", "))
}

// resolveScope returns the one scope that starts with prefix: prefix
// itself when records have exactly that scope, else the unique scope that
// extends it. "-" is the empty scope.
func (k *keysCmd) resolveScope(ctx context.Context, prefix string) (string, error) {
	if prefix == "-" {
		return "", nil
	}
	prefix = strings.TrimSuffix(prefix, "…")
	if recs, err := k.admin.List(ctx, &admin.ListParams{Scope: prefix, Limit: 1}); err != nil {
		return "", fmt.Errorf("list: %w", err)
	} else if len(recs) > 0 || k.o.identity != "" {
		return prefix, nil
	}
	var scopes []string
	p := &admin.ListParams{AfterScope: prefix, Limit: 1000}
	for {
		recs, err := k.admin.List(ctx, p)
		if err != nil {
			return "", fmt.Errorf("list: %w", err)
		}
		for _, r := range recs {
			if strings.HasPrefix(r.Scope, prefix) && !slices.Contains(scopes, r.Scope) {
				scopes = append(scopes, r.Scope)
			}
		}
		if len(recs) < p.Limit || len(scopes) > 1 || (len(recs) > 0 && !strings.HasPrefix(recs[len(recs)-1].Scope, prefix)) {
			break
		}
		last := recs[len(recs)-1]
		p.AfterScope, p.AfterKey = last.Scope, last.Key
	}
	switch len(scopes) {
	case 0:
		return "", fmt.Errorf("no records in a scope starting with %q", prefix)
	case 1:
		return scopes[0], nil
	}
	return "", usagef("scope prefix %q is ambiguous (%s, %s, …): give more of it", prefix, keysShortScope(scopes[0]), keysShortScope(scopes[1]))
}

func (k *keysCmd) printRecord(r *retrysafe.Record, full bool) {
	tw := tabwriter.NewWriter(k.out, 0, 0, 2, ' ', 0)
	row := func(name, format string, args ...any) {
		fmt.Fprintf(tw, "  %s\t"+format+"\n", append([]any{name}, args...)...)
	}
	scope := r.Scope
	if scope == "" {
		scope = "(empty: callers without credentials)"
	}
	row("scope", "%s", scope)
	row("key", "%s", r.Key)
	if r.Route != "" {
		row("route", "%s", r.Route)
	}
	row("state", "%s", keysState(r, k.now))
	row("attempts", "%d", r.Attempt)
	row("created", "%s", keysTimeFull(r.CreatedAt, k.now))
	if full {
		row("updated", "%s", keysTimeFull(r.UpdatedAt, k.now))
	}
	if r.State == retrysafe.StateProcessing {
		row("lease until", "%s", keysTimeFull(r.LeaseUntil, k.now))
	} else {
		row("expires", "%s", keysTimeFull(r.ExpiresAt, k.now))
	}
	row("fingerprint", "%s", r.Fingerprint)
	keyID, encrypted := sealed.KeyID(r.Response)
	if r.Response != nil {
		row("status", "%d %s", r.Response.Status, http.StatusText(r.Response.Status))
		if full && encrypted {
			k.printEncrypted(row, r, keyID)
		}
		if full && !encrypted {
			names := make([]string, 0, len(r.Response.Header))
			for name := range r.Response.Header {
				names = append(names, name)
			}
			slices.Sort(names)
			for i, name := range names {
				label := ""
				if i == 0 {
					label = "headers"
				}
				for _, v := range r.Response.Header[name] {
					row(label, "%s: %s", name, v)
					label = ""
				}
			}
			switch {
			case !k.o.bodies:
				row("body", "(not shown; add --bodies to print it)")
			case len(r.Response.Body) == 0:
				row("body", "(empty)")
			case utf8.Valid(r.Response.Body):
				row("body", "(%d bytes)", len(r.Response.Body))
			default:
				row("body", "(%d bytes, binary; printed as base64)", len(r.Response.Body))
			}
		}
	}
	_ = tw.Flush()
	if full && k.o.bodies && !encrypted && r.Response != nil && len(r.Response.Body) > 0 {
		if utf8.Valid(r.Response.Body) {
			fmt.Fprintf(k.out, "%s\n", strings.TrimRight(string(r.Response.Body), "\n"))
		} else {
			fmt.Fprintln(k.out, base64.StdEncoding.EncodeToString(r.Response.Body))
		}
	}
}

// printEncrypted prints the header names of a response that is still
// encrypted, and why it is: no keys given, or the keys cannot open it.
func (k *keysCmd) printEncrypted(row func(name, format string, args ...any), r *retrysafe.Record, keyID string) {
	names := make([]string, 0, len(r.Response.Header))
	for name := range r.Response.Header {
		if name != sealed.MarkerHeader {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	if len(names) > 0 {
		row("headers", "%s (values encrypted)", strings.Join(names, ", "))
	}
	row("body", "(encrypted with key %s; %s)", keyID, k.whyEncrypted(r))
}

// whyEncrypted says why a record is shown encrypted.
func (k *keysCmd) whyEncrypted(r *retrysafe.Record) string {
	if k.ring == nil {
		return "give the keys with --encryption-keys-file or " + encryptionKeysEnv + " to decrypt it"
	}
	_, err := k.ring.Open(r.Scope, r.Key, r.Response)
	if err == nil {
		return "not decrypted"
	}
	return "cannot decrypt: " + strings.TrimPrefix(err.Error(), sealed.ErrCannotDecrypt.Error()+": ")
}

// keysJSONEncrypted describes, in --json output, a response that is
// still encrypted.
type keysJSONEncrypted struct {
	KeyID string `json:"keyId"`
	// Reason says what would decrypt it, or why the keys given cannot.
	Reason string `json:"reason"`
}

// keysJSONRecord is a record in --json output. The owner token is left
// out on purpose.
type keysJSONRecord struct {
	Scope       string              `json:"scope"`
	Key         string              `json:"key"`
	Route       string              `json:"route,omitempty"`
	State       string              `json:"state"`
	Attempts    int                 `json:"attempts"`
	CreatedAt   time.Time           `json:"createdAt"`
	UpdatedAt   time.Time           `json:"updatedAt"`
	LeaseUntil  *time.Time          `json:"leaseUntil,omitempty"`
	ExpiresAt   *time.Time          `json:"expiresAt,omitempty"`
	Fingerprint string              `json:"fingerprint"`
	Status      int                 `json:"status,omitempty"`
	Headers     map[string][]string `json:"headers,omitempty"`
	// Body is the stored body as text when it is valid UTF-8; otherwise
	// BodyBase64 holds it. Both only with --bodies.
	Body       *string `json:"body,omitempty"`
	BodyBase64 string  `json:"bodyBase64,omitempty"`
	// Encrypted is set when the response is encrypted and was not
	// decrypted; then headers hold placeholders and the body is left out.
	Encrypted *keysJSONEncrypted `json:"encrypted,omitempty"`
}

func (k *keysCmd) jsonRecord(r *retrysafe.Record, full bool) keysJSONRecord {
	j := keysJSONRecord{
		Scope:       r.Scope,
		Key:         r.Key,
		Route:       r.Route,
		State:       string(admin.StatusOf(r, k.now)),
		Attempts:    r.Attempt,
		CreatedAt:   r.CreatedAt.UTC(),
		UpdatedAt:   r.UpdatedAt.UTC(),
		Fingerprint: r.Fingerprint,
	}
	if r.State == retrysafe.StateProcessing {
		t := r.LeaseUntil.UTC()
		j.LeaseUntil = &t
	} else {
		t := r.ExpiresAt.UTC()
		j.ExpiresAt = &t
	}
	if r.Response != nil {
		j.Status = r.Response.Status
		if full {
			j.Headers = r.Response.Header
			if _, marked := r.Response.Header[sealed.MarkerHeader]; marked {
				h := r.Response.Header.Clone() // the marker is no header of the answer
				delete(h, sealed.MarkerHeader)
				j.Headers = h
			}
		}
		if id, ok := sealed.KeyID(r.Response); ok && full {
			j.Encrypted = &keysJSONEncrypted{KeyID: id, Reason: k.whyEncrypted(r)}
		} else if full && k.o.bodies {
			if utf8.Valid(r.Response.Body) {
				s := string(r.Response.Body)
				j.Body = &s
			} else {
				j.BodyBase64 = base64.StdEncoding.EncodeToString(r.Response.Body)
			}
		}
	}
	return j
}

func (k *keysCmd) printJSON(v any) error { return printJSON(k.out, v) }

// printJSON writes v as indented JSON (the --json output of keys, sweep
// and migrate).
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// keysState is the record's status (admin.StatusOf), with an
// unknown outcome shown as "processing (lease expired)".
func keysState(r *retrysafe.Record, now time.Time) string {
	switch st := admin.StatusOf(r, now); st {
	case admin.StatusAwaitingRetry:
		return "processing (resolved not done: awaiting retry)"
	case admin.StatusUnknown:
	default:
		return string(st)
	}
	if r.Abandoned {
		return "processing (abandoned: outcome unknown)"
	}
	return "processing (lease expired)"
}

// keysShortScope shortens a scope (normally 64 hex digits) to 12
// characters; "-" is the empty scope.
func keysShortScope(s string) string {
	if s == "" {
		return "-"
	}
	return keysShort(s, 12)
}

func keysShort(s string, n int) string {
	if len(s) <= n+1 {
		return s
	}
	return s[:n] + "…"
}

func keysTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05")
}

func keysTimeFull(t time.Time, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := t.Sub(now).Round(time.Second)
	rel := "in " + d.String()
	if d < 0 {
		rel = (-d).String() + " ago"
	}
	return t.UTC().Format(time.RFC3339) + " (" + rel + ")"
}
