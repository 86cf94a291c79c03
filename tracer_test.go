package retrysafe_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/memory"
)

// stepTracer is a Tracer that records every step. StartStep puts the
// step's id in the context it returns, so the test can tell which step's
// context another step (or a handler) ran with.
type stepTracer struct {
	requestOutcomes
	mu     sync.Mutex
	next   int
	steps  []*tracedStep
	starts chan retrysafe.Step // when set, receives every step that starts
}

type tracedStep struct {
	id     int
	parent int // id of the step whose context it started in; 0 for none
	start  retrysafe.StepInfo
	end    *retrysafe.StepInfo
}

type stepKey struct{}

func stepID(ctx context.Context) int {
	id, _ := ctx.Value(stepKey{}).(int)
	return id
}

func (t *stepTracer) StartStep(ctx context.Context, info retrysafe.StepInfo) context.Context {
	t.mu.Lock()
	t.next++
	s := &tracedStep{id: t.next, parent: stepID(ctx), start: info}
	t.steps = append(t.steps, s)
	t.mu.Unlock()
	if t.starts != nil {
		t.starts <- info.Step
	}
	return context.WithValue(ctx, stepKey{}, s.id)
}

func (t *stepTracer) EndStep(ctx context.Context, info retrysafe.StepInfo) {
	t.mu.Lock()
	defer t.mu.Unlock()
	id := stepID(ctx)
	for _, s := range t.steps {
		if s.id == id {
			if s.end != nil {
				panic(fmt.Sprintf("step %d (%s) ended twice", id, s.start.Step))
			}
			s.end = &info
			return
		}
	}
	panic(fmt.Sprintf("EndStep(%s) with a context StartStep did not return", info.Step))
}

// ended returns the steps recorded so far, failing t if one has not ended
// or ended as another kind of step.
func (t *stepTracer) ended(tb testing.TB) []*tracedStep {
	tb.Helper()
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range t.steps {
		if s.end == nil {
			tb.Fatalf("step %d (%s) never ended", s.id, s.start.Step)
		}
		if s.end.Step != s.start.Step {
			tb.Fatalf("step %d started as %s, ended as %s", s.id, s.start.Step, s.end.Step)
		}
	}
	return append([]*tracedStep(nil), t.steps...)
}

func (t *stepTracer) reset() {
	t.mu.Lock()
	t.steps = nil
	t.mu.Unlock()
}

func newStepTracer() *stepTracer {
	return &stepTracer{requestOutcomes: requestOutcomes{outcomes: map[string]retrysafe.Outcome{}}}
}

func stepNames(steps []*tracedStep) string {
	var names []string
	for _, s := range steps {
		names = append(names, string(s.start.Step))
	}
	return strings.Join(names, ",")
}

// TestTracerSteps checks the steps a Tracer is told about for a new key, a
// replay and a panicking handler: every store call is a step whose context
// descends from the request's, the handler runs with the request step's
// context, and each step ends once with what it found.
func TestTracerSteps(t *testing.T) {
	t.Parallel()
	store := memory.New(memory.Config{})
	t.Cleanup(func() { _ = store.Close() })
	tr := newStepTracer()
	mw, err := retrysafe.NewMiddleware(retrysafe.Config{Store: store, Observer: tr})
	if err != nil {
		t.Fatal(err)
	}
	var handlerStep int
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Panic") != "" {
			panic("boom")
		}
		handlerStep = stepID(r.Context())
		w.WriteHeader(http.StatusCreated)
	}))
	serve := func(key string, hdr ...string) int {
		req := httptest.NewRequest("POST", "/orders", strings.NewReader(`{"a":1}`))
		req.Header.Set(retrysafe.HeaderKey, key)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}

	if code := serve("key-1"); code != http.StatusCreated {
		t.Fatalf("new key: status %d", code)
	}
	steps := tr.ended(t)
	if got := stepNames(steps); got != "request,claim,complete" {
		t.Fatalf("new key: steps %s, want request,claim,complete", got)
	}
	req, claim, complete := steps[0], steps[1], steps[2]
	if req.start.Request == nil || req.start.Request.URL.Path != "/orders" || req.end.Outcome != retrysafe.OutcomeNew || req.end.Duration <= 0 {
		t.Errorf("request step: start %+v end %+v", req.start, *req.end)
	}
	if claim.parent != req.id || complete.parent != req.id || handlerStep != req.id {
		t.Errorf("claim, complete and handler ran under steps %d, %d, %d; want the request's, %d", claim.parent, complete.parent, handlerStep, req.id)
	}
	if c := claim.end; !c.Claimed || c.State != retrysafe.StateProcessing || c.Attempt != 1 || c.Err != nil || c.Key != "key-1" || claim.start.Key != "key-1" {
		t.Errorf("claim step ended with %+v", *c)
	}
	if complete.end.Err != nil {
		t.Errorf("complete step error %v", complete.end.Err)
	}

	tr.reset()
	if code := serve("key-1"); code != http.StatusCreated {
		t.Fatalf("replay: status %d", code)
	}
	steps = tr.ended(t)
	if got := stepNames(steps); got != "request,claim" {
		t.Fatalf("replay: steps %s, want request,claim", got)
	}
	if c := steps[1].end; c.Claimed || c.State != retrysafe.StateCompleted || c.Attempt != 1 {
		t.Errorf("replay's claim step ended with %+v", *c)
	}
	if o := steps[0].end.Outcome; o != retrysafe.OutcomeReplayed {
		t.Errorf("replay's request step outcome %q", o)
	}

	tr.reset()
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the handler's panic did not go on")
			}
		}()
		serve("key-2", "X-Panic", "1")
	}()
	steps = tr.ended(t) // the request step ended despite the panic
	if got := stepNames(steps); got != "request,claim,release" {
		t.Errorf("panic: steps %s, want request,claim,release", got)
	}

	tr.reset()
	get := httptest.NewRequest("GET", "/orders", nil)
	h.ServeHTTP(httptest.NewRecorder(), get)
	if steps := tr.ended(t); len(steps) != 0 {
		t.Errorf("an unprotected GET made steps %s", stepNames(steps))
	}
}

// TestTracerWaitAndExtend checks the steps of a duplicate that waits for
// the original (wait, with the gets it polls with) and the lease renewals
// of a slow handler (extend, under the request's step, on the heartbeat's
// goroutine).
func TestTracerWaitAndExtend(t *testing.T) {
	t.Parallel()
	store := memory.New(memory.Config{})
	t.Cleanup(func() { _ = store.Close() })
	tr := newStepTracer()
	tr.starts = make(chan retrysafe.Step, 100)
	release := make(chan struct{})
	mw, err := retrysafe.NewMiddleware(retrysafe.Config{
		Store: store, Observer: tr, InFlight: retrysafe.InFlightWait, Lease: 60 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
		w.WriteHeader(http.StatusCreated)
	}))
	serve := func(tag string) <-chan int {
		done := make(chan int, 1)
		go func() {
			req := httptest.NewRequest("POST", "/orders", strings.NewReader(`{}`))
			req = req.WithContext(context.WithValue(req.Context(), tagKey{}, tag))
			req.Header.Set(retrysafe.HeaderKey, "k")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			done <- rec.Code
		}()
		return done
	}
	waitFor := func(step retrysafe.Step) {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case s := <-tr.starts:
				if s == step {
					return
				}
			case <-timeout:
				t.Fatalf("no %s step started", step)
			}
		}
	}
	first := serve("first")
	waitFor(retrysafe.StepExtend) // the handler outlived a third of the lease
	second := serve("second")
	waitFor(retrysafe.StepWait)
	go func() { // the tracer sends on starts: keep it from blocking
		for range tr.starts {
		}
	}()
	close(release)
	if a, b := <-first, <-second; a != http.StatusCreated || b != http.StatusCreated {
		t.Fatalf("statuses %d and %d, want 201 twice", a, b)
	}
	steps := tr.ended(t)
	close(tr.starts)
	byID := map[int]*tracedStep{}
	var requests []*tracedStep
	for _, s := range steps {
		byID[s.id] = s
		if s.start.Step == retrysafe.StepRequest {
			requests = append(requests, s)
		}
	}
	if len(requests) != 2 {
		t.Fatalf("%d request steps, want 2: %s", len(requests), stepNames(steps))
	}
	var extends, waits, gets int
	for _, s := range steps {
		switch s.start.Step {
		case retrysafe.StepExtend:
			extends++
			if s.parent != requests[0].id {
				t.Errorf("extend step under step %d, want the first request's %d", s.parent, requests[0].id)
			}
			if s.end.Err != nil {
				t.Errorf("extend failed: %v", s.end.Err)
			}
		case retrysafe.StepWait:
			waits++
			if s.parent != requests[1].id {
				t.Errorf("wait step under step %d, want the second request's %d", s.parent, requests[1].id)
			}
			if s.end.Err != nil || s.end.State != retrysafe.StateCompleted || s.end.Attempt != 1 {
				t.Errorf("wait step ended with %+v, want the completed record", *s.end)
			}
		case retrysafe.StepGet:
			gets++
			if p := byID[s.parent]; p == nil || p.start.Step != retrysafe.StepWait {
				t.Errorf("get step under step %d, want a wait step", s.parent)
			}
		}
	}
	if extends == 0 || waits != 1 || gets == 0 {
		t.Errorf("%d extend, %d wait and %d get steps: %s", extends, waits, gets, stepNames(steps))
	}
	if o := requests[1].end.Outcome; o != retrysafe.OutcomeReplayed {
		t.Errorf("the duplicate's outcome %q, want replayed", o)
	}
}

// TestTracerDo checks Do's steps: do, with the claim and complete under it
// and the function running with its context; a replay; a refusal.
func TestTracerDo(t *testing.T) {
	t.Parallel()
	store := memory.New(memory.Config{})
	t.Cleanup(func() { _ = store.Close() })
	tr := newStepTracer()
	d, err := retrysafe.NewDoer(retrysafe.DoConfig{Store: store, Observer: tr})
	if err != nil {
		t.Fatal(err)
	}
	var fnStep int
	fn := func(ctx context.Context) (int, error) { fnStep = stepID(ctx); return 7, nil }
	if v, err := retrysafe.Run(context.Background(), d, "job-1", "fp", fn); v != 7 || err != nil {
		t.Fatalf("Run: %v, %v", v, err)
	}
	steps := tr.ended(t)
	if got := stepNames(steps); got != "do,claim,complete" {
		t.Fatalf("steps %s, want do,claim,complete", got)
	}
	if steps[1].parent != steps[0].id || steps[2].parent != steps[0].id || fnStep != steps[0].id {
		t.Errorf("claim, complete and fn ran under %d, %d, %d; want the do step's, %d", steps[1].parent, steps[2].parent, fnStep, steps[0].id)
	}
	if o := steps[0].end.Outcome; o != retrysafe.OutcomeNew {
		t.Errorf("do step outcome %q", o)
	}
	tr.reset()
	if _, err := retrysafe.Run(context.Background(), d, "job-1", "other", fn); !errors.Is(err, retrysafe.ErrMismatch) {
		t.Fatalf("mismatch: %v", err)
	}
	steps = tr.ended(t)
	if got := stepNames(steps); got != "do,claim" || steps[0].end.Outcome != retrysafe.OutcomeMismatch {
		t.Errorf("mismatch: steps %s, outcome %q", got, steps[0].end.Outcome)
	}
}
