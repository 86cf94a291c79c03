package consumers_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/examples/consumers"
)

// crashLease is the lease of the crash tests: how long the dead process's
// record blocks the key before a redelivery may take it over.
const crashLease = 500 * time.Millisecond

// The environment of the crashing child process.
const (
	crashEnvDB   = "CONSUMERS_CRASH_DB"
	crashEnvID   = "CONSUMERS_CRASH_MESSAGE_ID"
	crashEnvMode = "CONSUMERS_CRASH_MODE"
	crashExit    = 3
)

// A consumer process dies right after the effect returned, inside Do,
// before Do could store the result: the worst moment, described in
// docs/guarantees.md ("A crash between the side effect and Complete"). The
// record stays processing until its lease runs out; the broker redelivers
// and the next consumer takes the record over (attempt 2).
//
//   - With Ledger.Credit the credit committed on its own, so attempt 2
//     credits again: the gap, shown here so the README's claim is checked.
//   - With Ledger.CreditAndComplete the credit and the completion committed
//     together, so the redelivery replays: exactly once.
//
// The crash is real: a child process (this test binary) exits in the
// middle of Do, holding the record.
func TestCrashBetweenEffectAndCompletion(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		mode        string
		wantEntries int
	}{
		"Credit leaves the gap: applied twice": {mode: "credit", wantEntries: 2},
		"CreditAndComplete closes it: once":    {mode: "credit-and-complete", wantEntries: 1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "ledger.db")
			ctx := context.Background()
			l, err := consumers.OpenLedger(ctx, path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			if err := l.OpenAccount(ctx, account); err != nil {
				t.Fatal(err)
			}
			id := randomName("msg-")

			cmd := exec.Command(os.Args[0])
			cmd.Env = append(os.Environ(), crashEnvDB+"="+path, crashEnvID+"="+id, crashEnvMode+"="+tc.mode)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != crashExit {
				t.Fatalf("child process: %v, want exit code %d; output:\n%s", err, crashExit, out)
			}
			if n, _ := l.Entries(ctx, id); n != 1 {
				t.Fatalf("after the crash the ledger has %d entries, want 1", n)
			}

			// The redeliveries, in this process, as a broker makes them: a
			// delivery while the dead process's lease is live is told its
			// outcome is unknown and asked back (a waiter never takes the
			// record over); the first one after the lease takes it over.
			c := crashConsumer(l, tc.mode)
			var r consumers.Result
			for attempt := 0; ; attempt++ {
				r = c.Handle(ctx, id, transferBody)
				if r.Action != consumers.Retry || attempt == 20 {
					break
				}
				if !errors.Is(r.Err, retrysafe.ErrInProgress) {
					t.Fatalf("redelivery within the lease: err %v, want ErrInProgress (outcome unknown)", r.Err)
				}
				time.Sleep(crashLease / 4)
			}
			if r.Action != consumers.Ack || r.Err != nil {
				t.Fatalf("redelivery: action %v, err %v", r.Action, r.Err)
			}
			if n, err := l.Entries(ctx, id); err != nil || n != tc.wantEntries {
				t.Errorf("ledger entries = %d (err %v), want %d", n, err, tc.wantEntries)
			}
			if r := c.Handle(ctx, id, transferBody); r.Action != consumers.Ack || r.Err != nil {
				t.Fatalf("third delivery: action %v, err %v", r.Action, r.Err)
			}
			if n, _ := l.Entries(ctx, id); n != tc.wantEntries {
				t.Errorf("after a third delivery the ledger has %d entries, want %d (replayed)", n, tc.wantEntries)
			}
		})
	}
}

// crashConsumer is the consumer of the crash test, in both processes.
func crashConsumer(l *consumers.Ledger, mode string) *consumers.Consumer {
	apply := l.Credit
	if mode == "credit-and-complete" {
		apply = l.CreditAndComplete
	}
	c := (&world{ledger: l, store: l.Records()}).consumer(apply)
	c.Do.Lease = crashLease
	return c
}

// TestMain runs the crashing child process of
// TestCrashBetweenEffectAndCompletion when this test binary is started as
// one, and the tests otherwise.
func TestMain(m *testing.M) {
	if path := os.Getenv(crashEnvDB); path != "" {
		crashChild(path)
	}
	os.Exit(m.Run())
}

// crashChild handles the message and exits with crashExit as soon as the
// effect has returned, before Do stores anything. Any other exit code is a
// failure of the setup.
func crashChild(path string) {
	ctx := context.Background()
	l, err := consumers.OpenLedger(ctx, path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	c := crashConsumer(l, os.Getenv(crashEnvMode))
	apply := c.Apply
	c.Apply = func(ctx context.Context, id string, tr consumers.Transfer) (consumers.Receipt, error) {
		if _, err := apply(ctx, id, tr); err != nil {
			fmt.Fprintln(os.Stderr, "applying the effect:", err)
			os.Exit(1)
		}
		os.Exit(crashExit) // the process dies here, inside Do
		panic("unreachable")
	}
	r := c.Handle(ctx, os.Getenv(crashEnvID), transferBody)
	fmt.Fprintf(os.Stderr, "the child process did not crash: %+v\n", r)
	os.Exit(1)
}
