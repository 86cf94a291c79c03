package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/internal/storeurl"
)

const sweepDescription = `
Deletes completed records whose TTL has run out, once, and retires processing
records whose lease ran out more than --processing-retention ago (requests
whose outcome is unknown: the owner crashed or the upstream timed out), and
prints how many it deleted. Sweeping only reclaims space: an expired record
already counts as absent on every read, whether or not it was swept. Until
its retention has passed, an abandoned processing record is kept: the next
request with its key and body takes it over once its lease runs out, and an
operator can inspect it ("retrysafe keys").

"retrysafe serve" sweeps in the background by itself; run this command from
cron or a job scheduler when no gateway runs, or after a large expiry.

SQLite and PostgreSQL delete in batches of --batch records, each in its own
short transaction, so requests keep being served during a long sweep. Redis
expires records natively (key TTLs): there is nothing to sweep. The memory
store lives inside one process, so sweeping a new one from this command finds
nothing. A SQLite file that does not exist is an error: sweep never creates
a store.`

const sweepExamples = `  retrysafe sweep --store sqlite:retrysafe.db
  retrysafe sweep --store postgres://retrysafe@db/retrysafe --batch 5000
  retrysafe sweep --store sqlite:retrysafe.db --processing-retention 72h
  retrysafe sweep --store "$RETRYSAFE_STORE" --json`

// sweepCommand returns the "sweep" command, opening stores with open.
func sweepCommand(open storeOpener) func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		return runSweep(ctx, args, stdout, stderr, open)
	}
}

func runSweep(ctx context.Context, args []string, stdout, stderr io.Writer, open storeOpener) error {
	fs := newFlagSet("sweep", "--store URL [--batch N] [--processing-retention DURATION] [--json]", sweepDescription, sweepExamples, stdout, stderr)
	storeURL := fs.String("store", storeurl.Default, "idempotency store `URL`: "+storeurl.Accepted)
	batch := fs.Int("batch", 0, "records deleted per statement (0: the store's default: 25 on SQLite, 1000 on PostgreSQL and MySQL)")
	retention := fs.Duration("processing-retention", admin.DefaultProcessingRetention, "how long a processing record whose lease ran out is kept before it is retired")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	if *batch < 0 {
		return usagef("--batch must not be negative")
	}
	if *retention <= 0 {
		return usagef("--processing-retention must be positive (got %s; default %s)", *retention, admin.DefaultProcessingRetention)
	}
	// Sweeping a store that does not exist would create an empty one.
	store, closeStore, err := open(ctx, *storeURL, storeurl.Options{MustExist: true})
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	defer closeStore()

	name := storeurl.Redact(*storeURL)
	start := time.Now()
	n, err := storeurl.Sweep(ctx, store, &admin.SweepParams{Now: start, BatchSize: *batch, ProcessingRetention: *retention})
	took := time.Since(start)
	result := struct {
		Store   string  `json:"store"`
		Deleted int     `json:"deleted"`
		Seconds float64 `json:"seconds"`
		Native  bool    `json:"nativeExpiry,omitempty"`
		Note    string  `json:"note,omitempty"`
	}{Store: name, Deleted: n, Seconds: took.Seconds()}
	switch {
	case errors.Is(err, storeurl.ErrNotSupported):
		result.Native = true
		result.Note = "nothing to sweep: this store expires records natively"
		if strings.HasPrefix(strings.ToLower(*storeURL), "redis") {
			result.Note = "nothing to sweep: Redis expires records natively (key TTLs)"
		}
	case err != nil:
		return fmt.Errorf("sweep %s: deleted %d records, then: %w", name, n, err)
	case isMemoryURL(*storeURL):
		result.Note = memoryNote
	}
	if *asJSON {
		return printJSON(stdout, result)
	}
	if result.Native {
		fmt.Fprintf(stdout, "%s (store %s).\n", result.Note, name)
		return nil
	}
	fmt.Fprintf(stdout, "Deleted %d expired or retired record(s) in %s (store %s).\n", n, took.Round(time.Millisecond), name)
	if result.Note != "" {
		fmt.Fprintf(stdout, "Note: %s.\n", result.Note)
	}
	return nil
}
