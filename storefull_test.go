package retrysafe_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/retrysafe/retrysafe"
)

// fullStore is a store out of room for new records: every Claim fails
// with err (a capacity error, as a Redis OOM or a memory store at
// MaxRecords).
type fullStore struct {
	retrysafe.Store
	err error
}

func (s fullStore) Claim(context.Context, *retrysafe.ClaimParams) (*retrysafe.ClaimResult, error) {
	return nil, s.err
}

var fullErrors = map[string]error{
	"Full":                retrysafe.Full("claim", errors.New("OOM command not allowed when used memory > 'maxmemory'")),
	"Full in Unavailable": retrysafe.Unavailable("claim", retrysafe.Full("claim", errors.New("too many records"))),
}

// TestStoreFullNeverFailsOpen: a full store gets 503 store-full with
// Retry-After, counted as OutcomeStoreFull, and the handler does not run,
// even with FailOpen (capacity is not an outage).
func TestStoreFullNeverFailsOpen(t *testing.T) {
	t.Parallel()
	for name, ferr := range fullErrors {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var runs atomic.Int64
			obs := &outcomeLog{}
			srv := newServer(t, retrysafe.Config{Store: fullStore{newMemory(t), ferr}, FailOpen: true, Observer: obs},
				http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { runs.Add(1) }))
			r := send(t, srv.URL, http.MethodPost, "k", `{}`)
			wantProblem(t, r, http.StatusServiceUnavailable, retrysafe.ProblemStoreFull)
			if r.header.Get("Retry-After") == "" {
				t.Error("503 store-full without Retry-After")
			}
			if runs.Load() != 0 {
				t.Fatal("the handler ran: a full store failed open")
			}
			obs.mu.Lock()
			defer obs.mu.Unlock()
			if len(obs.outcomes) != 1 || obs.outcomes[0] != retrysafe.OutcomeStoreFull {
				t.Fatalf("outcomes %v, want [%s]", obs.outcomes, retrysafe.OutcomeStoreFull)
			}
		})
	}
}

// TestDoStoreFull: Do on a full store runs nothing and returns an error
// matching ErrStoreFull, reported as OutcomeStoreFull.
func TestDoStoreFull(t *testing.T) {
	t.Parallel()
	for name, ferr := range fullErrors {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			obs := &outcomeLog{}
			var runs atomic.Int64
			_, err := doWith(context.Background(), &retrysafe.DoConfig{Store: fullStore{newMemory(t), ferr}, Observer: obs},
				"job", "fp", func(context.Context) (int, error) { runs.Add(1); return 1, nil })
			if !errors.Is(err, retrysafe.ErrStoreFull) || runs.Load() != 0 {
				t.Fatalf("err = %v, runs %d; want ErrStoreFull and no run", err, runs.Load())
			}
			obs.mu.Lock()
			defer obs.mu.Unlock()
			if len(obs.outcomes) != 1 || obs.outcomes[0] != retrysafe.OutcomeStoreFull {
				t.Fatalf("outcomes %v, want [%s]", obs.outcomes, retrysafe.OutcomeStoreFull)
			}
		})
	}
}
