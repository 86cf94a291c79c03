// Command retrysafe makes non-idempotent HTTP operations safe to retry.
//
//	retrysafe serve   run the gateway in front of an HTTP service
//	retrysafe demo    play the classic failure stories against a demo service
//	retrysafe keys    inspect idempotency records, resolve unknown outcomes
//	retrysafe ui      serve the operator page for a shared store
//	retrysafe sweep   delete expired records
//	retrysafe migrate apply the store's schema migrations
//	retrysafe health  check a running gateway's /readyz (exit 0 when ready)
//	retrysafe version print the module version and VCS revision
//
// Run "retrysafe COMMAND --help" for a command's flags and examples.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/retrysafe/retrysafe/internal/storeurl"
)

// A command is one subcommand; each lives in its own file.
//
// run receives the arguments after the command's name and a context that
// is cancelled on SIGINT or SIGTERM. It parses its flags with [newFlagSet]
// and returns flag.ErrHelp (after printing help), a [usageError] (wrong
// arguments: exit status 2), or any other error (exit status 1).
type command struct {
	name    string
	summary string // one line for the command list
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// commands are the subcommands, in the order the command list shows them.
var commands = []*command{
	{name: "serve", summary: "run the idempotency gateway in front of an HTTP service", run: runServe},
	{name: "demo", summary: "play the classic failure stories against a demo payments service", run: runDemo},
	{name: "keys", summary: "list, show, delete or resolve idempotency records", run: keysCommand(storeurl.OpenWith)},
	{name: "ui", summary: "serve the operator page for a store on its own (gateways sharing PostgreSQL, MySQL or Redis)", run: uiCommand(storeurl.OpenWith)},
	{name: "sweep", summary: "delete expired records once (stores without native expiry)", run: sweepCommand(storeurl.OpenWith)},
	{name: "migrate", summary: "apply the store's schema migrations (SQLite, PostgreSQL, MySQL)", run: migrateCommand(storeurl.OpenWith)},
	{name: "health", summary: "exit 0 when a running gateway's /readyz answers 200 (container health check)", run: runHealth},
	{name: "version", summary: "print the module version and VCS revision", run: runVersion},
}

// findCommand returns the command called name, or nil.
func findCommand(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// usageError reports wrong command-line arguments (exit status 2).
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// usagef returns a *usageError.
func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first signal, restore the default behaviour: a second
		// SIGINT or SIGTERM ends the process at once.
		<-ctx.Done()
		stop()
	}()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches args to a command and returns the process exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		printUsage(stderr)
		return 2
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help", "help":
		if len(args) > 1 {
			if c := findCommand(args[1]); c != nil {
				return exitStatus(c.run(ctx, []string{"--help"}, stdout, stderr), c.name, stderr)
			}
			fmt.Fprintf(stderr, "retrysafe: unknown command %q\n\n", args[1])
			printUsage(stderr)
			return 2
		}
		printUsage(stdout)
		return 0
	case "-version", "--version":
		name = "version"
	}
	c := findCommand(name)
	if c == nil {
		fmt.Fprintf(stderr, "retrysafe: unknown command %q\n\n", name)
		printUsage(stderr)
		return 2
	}
	return exitStatus(c.run(ctx, args[1:], stdout, stderr), c.name, stderr)
}

// loggedError is an error that the command has written to its log
// already: the exit status is 1 and nothing more is printed.
type loggedError struct{ err error }

func (e *loggedError) Error() string { return e.err.Error() }
func (e *loggedError) Unwrap() error { return e.err }

func exitStatus(err error, name string, stderr io.Writer) int {
	var ue *usageError
	var le *loggedError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &le):
		return 1
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "retrysafe %s: %v\nRun 'retrysafe %s --help' for usage.\n", name, err, name)
		return 2
	default:
		fmt.Fprintf(stderr, "retrysafe %s: %v\n", name, err)
		return 1
	}
}

func printUsage(w io.Writer) {
	width := 0
	for _, c := range commands {
		width = max(width, len(c.name))
	}
	fmt.Fprintf(w, "retrysafe makes non-idempotent HTTP operations safe to retry (Idempotency-Key).\n\n")
	fmt.Fprintf(w, "Usage:\n  retrysafe COMMAND [flags]\n\nCommands:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-*s  %s\n", width, c.name, c.summary)
	}
	fmt.Fprintf(w, "\nRun 'retrysafe COMMAND --help' for a command's flags and examples.\n")
	fmt.Fprintf(w, "First time? Run: retrysafe demo\n")
}

// newFlagSet returns a flag set for a command whose --help prints synopsis,
// description, the flags and examples to stdout. Parse it with
// [parseFlags], which prints that help only for --help and turns flag
// errors into usage errors (the error and a one-line pointer to --help).
func newFlagSet(name, synopsis, description, examples string, stdout, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("retrysafe "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		w := stdout
		fmt.Fprintf(w, "Usage:\n  retrysafe %s %s\n\n", name, synopsis)
		if description != "" {
			fmt.Fprintf(w, "%s\n\n", strings.TrimSpace(description))
		}
		fmt.Fprintf(w, "Flags:\n")
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
		if examples != "" {
			fmt.Fprintf(w, "\nExamples:\n%s\n", strings.TrimRight(examples, "\n"))
		}
	}
	return fs
}

// parseFlags parses args with fs, turning flag errors into usage errors.
// The flag package calls fs.Usage on every parse error; the help is
// printed only for -h/--help: a mistyped flag gets its error and a one-line
// pointer to --help (see exitStatus), not the whole help text.
func parseFlags(fs *flag.FlagSet, args []string) error {
	help := fs.Usage
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.Usage = help
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		help()
		return err
	}
	return usagef("%v", err)
}
