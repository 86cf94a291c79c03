package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"strings"

	"github.com/retrysafe/retrysafe/internal/storeurl"
)

const migrateDescription = `
Applies the store's schema migrations (numbered, embedded in the binary) and
prints the schema version. It is safe to run at any time and from several
machines at once: applied migrations are recorded, and PostgreSQL serialises
concurrent runs with an advisory lock. Run it before rolling out a new
version of the gateway.

SQLite, PostgreSQL and MySQL have schemas (the serve command also applies
them at start-up). For DynamoDB, migrate creates the table (on-demand
capacity, Time to Live on the attribute "ttl") when it is absent; serve
never creates it. The memory and Redis stores have no schema: there is nothing to
migrate, and the command says so and succeeds.

A SQLite file that does not exist is an error (a mistyped path would
otherwise become a new, empty database): pass --create to create it and
apply the schema, e.g. to prepare a volume before the first start. serve
creates its file by itself. A PostgreSQL or MySQL database must exist;
migrate creates the schema (PostgreSQL), tables and the claim procedure
(MySQL) in it.`

const migrateExamples = `  retrysafe migrate --store sqlite:/var/lib/retrysafe/retrysafe.db
  retrysafe migrate --store sqlite:/var/lib/retrysafe/retrysafe.db --create   # a new file
  retrysafe migrate --store "postgres://retrysafe@db:5432/app?retrysafe_schema=idem"
  retrysafe migrate --store "dynamodb://retrysafe?region=eu-west-1"
  retrysafe migrate --store redis://127.0.0.1:6379/0      # nothing to migrate`

// migrateCommand returns the "migrate" command, opening stores with open.
func migrateCommand(open storeOpener) func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		return runMigrate(ctx, args, stdout, stderr, open)
	}
}

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer, open storeOpener) error {
	fs := newFlagSet("migrate", "--store URL [--create] [--json]", migrateDescription, migrateExamples, stdout, stderr)
	storeURL := fs.String("store", storeurl.Default, "idempotency store `URL`: "+storeurl.Accepted)
	create := fs.Bool("create", false, "create the SQLite file if it does not exist (without it, a missing file is an error)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	// Opening a SQLite, PostgreSQL or MySQL store applies its migrations already;
	// Migrate below confirms there is nothing left and reads the version.
	store, closeStore, err := open(ctx, *storeURL, storeurl.Options{MustExist: !*create})
	if !*create && errors.Is(err, iofs.ErrNotExist) {
		return fmt.Errorf("open store: %w; to create it, add --create", err)
	}
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	defer closeStore()

	name := storeurl.Redact(*storeURL)
	result := struct {
		Store   string `json:"store"`
		Version int    `json:"schemaVersion,omitempty"`
		Note    string `json:"note,omitempty"`
	}{Store: name}
	err = storeurl.Migrate(ctx, store)
	switch {
	case errors.Is(err, storeurl.ErrNotSupported):
		kind, _, _ := strings.Cut(strings.ToLower(*storeURL), ":")
		result.Note = fmt.Sprintf("nothing to migrate: the %s store has no schema", kind)
	case err != nil:
		return fmt.Errorf("migrate %s: %w", name, err)
	}
	// The version the database is at after migrating.
	if s, ok := store.(interface {
		SchemaVersion(context.Context) (int, error)
	}); ok {
		if result.Version, err = s.SchemaVersion(ctx); err != nil {
			return fmt.Errorf("migrate %s: read the schema version: %w", name, err)
		}
	} else if result.Note == "" {
		result.Note = "table ready: created, with its Time to Live attribute, if it was absent" // DynamoDB
	}
	if *asJSON {
		return printJSON(stdout, result)
	}
	if result.Note != "" {
		fmt.Fprintf(stdout, "%s (store %s).\n", result.Note, name)
		return nil
	}
	fmt.Fprintf(stdout, "Schema up to date at version %d (store %s).\n", result.Version, name)
	return nil
}
