package torture

import (
	"maps"
	"reflect"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// synth builds synthetic histories for the checker's tests.
type synth struct{ h History }

// effect records an effect and returns the answer the upstream gave.
func (s *synth) effect(seq int64, gw int, tenant, key, op string, start, end int) Effect {
	e := Effect{Seq: seq, Gateway: gw, Tenant: tenant, Key: key, Op: op, Start: at(start), End: at(end), Status: 201}
	e.Body = answerBody(seq, tenant, key, op)
	e.Header = upstreamHeader(seq, tenant)
	s.h.Effects = append(s.h.Effects, e)
	return e
}

// answered records a request that got the effect's answer.
func (s *synth) answered(e Effect, replayed bool, start, end int) *Request {
	q := Request{ID: int64(len(s.h.Requests) + 1), Tenant: e.Tenant, Key: e.Key, Op: e.Op, Start: at(start), End: at(end),
		Status: e.Status, Header: maps.Clone(e.Header), Body: append([]byte(nil), e.Body...), Replayed: replayed}
	s.h.Requests = append(s.h.Requests, q)
	return &s.h.Requests[len(s.h.Requests)-1]
}

// problem records a request answered by the gateway itself.
func (s *synth) problem(tenant, key, op string, status int, start int) *Request {
	q := Request{ID: int64(len(s.h.Requests) + 1), Tenant: tenant, Key: key, Op: op, Start: at(start), End: at(start + 5),
		Status: status, Header: map[string]string{"Content-Type": "application/problem+json"}, Body: []byte(`{"status":` + itoa(status) + `}`)}
	s.h.Requests = append(s.h.Requests, q)
	return &s.h.Requests[len(s.h.Requests)-1]
}

func (s *synth) fault(kind, link string, gw, start, end int) *Fault {
	s.h.Faults = append(s.h.Faults, Fault{ID: len(s.h.Faults) + 1, Kind: kind, Link: link, Gateway: gw, Start: at(start), End: at(end)})
	return &s.h.Faults[len(s.h.Faults)-1]
}

func itoa(n int) string {
	return string(rune('0'+n/100)) + string(rune('0'+n/10%10)) + string(rune('0'+n%10))
}

// clean is a history with every kind of allowed answer and no anomaly.
func clean() *synth {
	s := &synth{}
	e := s.effect(1, 0, "t1", "k1", "op1", 100, 200)
	s.problem("t1", "k1", "op1", 409, 150)   // a duplicate while it ran
	s.answered(e, false, 90, 210)            // the original
	s.answered(e, true, 300, 310)            // replays
	s.answered(e, true, 400, 410)            //
	s.problem("t1", "k1", "op1-x", 422, 500) // the key reused with another body
	s.problem("t1", "k1", "op1-x", 503, 520) // ... while the store was down
	s.h.Requests = append(s.h.Requests, Request{ID: 99, Tenant: "t1", Key: "k1", Op: "op1", Start: at(600), End: at(700), Err: "EOF"})
	// Another tenant uses the same key string for its own operation.
	e2 := s.effect(2, 1, "t2", "k1", "op2", 100, 200)
	s.answered(e2, false, 90, 210)
	s.answered(e2, true, 300, 310)
	// A key whose upstream was unreachable: 502, then its retry ran.
	s.problem("t2", "k2", "op3", 502, 100)
	e3 := s.effect(3, 1, "t2", "k2", "op3", 300, 400)
	s.answered(e3, false, 290, 410)
	return s
}

// lost is clean with a key whose first attempt lost its result: request
// 50 at gateway 0 (1000–2000 ms, no answer) caused effect 20 (attempt 1,
// connection 7, 1010–1100 ms); effect 21 (attempt 2, gateway 1) repeated it
// at 5000 ms for request 51, which got its answer. What explains the repeat
// is added by each case.
func lost() *synth {
	s := clean()
	s.h.Requests = append(s.h.Requests, Request{ID: 50, Gateway: 0, Tenant: "t1", Key: "k9", Op: "op9", Start: at(1000), End: at(2000), Err: "EOF"})
	e1 := s.effect(20, 0, "t1", "k9", "op9", 1010, 1100)
	s.h.Effects[len(s.h.Effects)-1].Request, s.h.Effects[len(s.h.Effects)-1].Attempt, s.h.Effects[len(s.h.Effects)-1].Conn = 50, 1, 7
	_ = e1
	e2 := s.effect(21, 1, "t1", "k9", "op9", 5000, 5100)
	s.h.Effects[len(s.h.Effects)-1].Request, s.h.Effects[len(s.h.Effects)-1].Attempt = 51, 2
	q := s.answered(e2, false, 4990, 5110)
	q.ID = 51
	return s
}

// firstLost is lost's effect 20.
func (s *synth) firstLost() *Effect {
	for i := range s.h.Effects {
		if s.h.Effects[i].Seq == 20 {
			return &s.h.Effects[i]
		}
	}
	panic("no effect 20")
}

func TestUnknowns(t *testing.T) {
	t.Parallel()
	h := &History{
		Resolves: []Resolve{
			{Source: SourceRetry, Key: "a", Attempt: 1, At: at(100), Outcome: ResolveUnknown},
			{Source: SourceRetry, Key: "a", Attempt: 1, At: at(200), Outcome: ResolveDone},
			{Source: SourceCompleter, Key: "a", Attempt: 1, At: at(300), Outcome: ResolveDone}, // too late: the retry decided
			{Source: SourceRetry, Key: "b", Attempt: 1, At: at(100), Outcome: ResolveNotDone},
			{Source: SourceCompleter, Key: "c", Attempt: 2, At: at(100), Outcome: ResolveNotDone},
			{Source: SourceCompleter, Key: "d", Attempt: 1, At: at(100), Outcome: ResolveUnknown}, // its owner finished
			{Source: SourceCompleter, Key: "e", Attempt: 1, At: at(100), Outcome: ResolveUnknown},
			{Source: SourceCompleter, Key: "g", Attempt: 2, At: at(100), Outcome: ResolveNotDone}, // no retry came
			{Source: SourceCompleter, Key: "h", Attempt: 1, At: at(100), Outcome: ResolveUnknown},
		},
		Refusals: []Refusal{{Key: "b", Attempt: 1, Fence: 1}},
		Stranded: []Stranded{{Key: "e", Attempt: 1}, {Key: "f", Attempt: 3}, {Key: "g", Attempt: 2, AwaitingRetry: true},
			{Key: "h", Attempt: 1, AwaitingRetry: true}}, // marked, but nobody said not_done: unresolved
	}
	u := unknowns(h)
	want := Unknowns{Total: 8, Resolver: 1, Retry: 1, Completer: 1, Owner: 1, AwaitingRetry: 1, Unresolved: 3, Refused: 1}
	got := *u
	got.Calls = nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("unknowns %+v, want %+v", got, want)
	}
	if u.Calls["retry/done"] != 1 || u.Calls["completer/unknown"] != 3 || u.Calls["retry/unknown"] != 1 {
		t.Errorf("calls %v", u.Calls)
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		build   func() *synth
		want    map[string]int // anomalies by kind
		causes  map[string]int // repeats by cause
		resolve bool
	}{
		"clean": {build: clean, want: map[string]int{}},
		"a repeat with no event": {build: func() *synth {
			return lost()
		}, want: map[string]int{AnomalyDuplicate: 1}},
		"a repeat after its gateway was killed": {build: func() *synth {
			s := lost()
			s.fault(FaultKill, LinkProcess, 0, 1050, 1500)
			return s
		}, want: map[string]int{}, causes: map[string]int{CauseKill: 1}},
		"a repeat when another gateway was killed": {build: func() *synth {
			s := lost()
			s.fault(FaultKill, LinkProcess, 1, 1050, 1500)
			return s
		}, want: map[string]int{AnomalyDuplicate: 1}},
		"a repeat when its gateway was killed before the request": {build: func() *synth {
			s := lost()
			s.fault(FaultKill, LinkProcess, 0, 900, 950)
			return s
		}, want: map[string]int{AnomalyDuplicate: 1}},
		"a repeat when its gateway was killed after the key was settled": {build: func() *synth {
			s := lost()
			s.fault(FaultKill, LinkProcess, 0, 4400, 4500) // exchange bound 2010 + two store calls + grace = 4260
			return s
		}, want: map[string]int{AnomalyDuplicate: 1}},
		"a repeat when its gateway was killed after the client had the answer": {build: func() *synth {
			s := lost()
			q := &s.h.Requests[len(s.h.Requests)-2] // request 50
			e := *s.firstLost()
			q.Err, q.End, q.Status, q.Header, q.Body = "", at(1150), e.Status, maps.Clone(e.Header), e.Body
			s.fault(FaultKill, LinkProcess, 0, 1200, 1500)
			return s
		}, want: map[string]int{AnomalyDuplicate: 1}},
		"a repeat after a graceful stop": {build: func() *synth {
			s := lost()
			s.fault(FaultTerm, LinkProcess, 0, 1050, 1500)
			return s
		}, want: map[string]int{AnomalyDuplicate: 1}},
		"a repeat after a client hang-up": {build: func() *synth {
			s := lost()
			s.fault(FaultResetPeer, LinkClient, 0, 1000, 1500)
			return s
		}, want: map[string]int{AnomalyDuplicate: 1}},
		"a repeat after its own upstream connection was cut": {build: func() *synth {
			s := lost()
			s.fault(FaultResetResp, LinkUpstream, 0, 1000, 1500)
			s.firstLost().ClosedAt = at(1120)
			return s
		}, want: map[string]int{}, causes: map[string]int{CauseUpstreamCut: 1}},
		"a repeat during an upstream fault that left its connection open": {build: func() *synth {
			s := lost()
			s.fault(FaultResetResp, LinkUpstream, 0, 1000, 1500)
			return s
		}, want: map[string]int{AnomalyDuplicate: 1}},
		"a repeat whose connection closed long after its exchange": {build: func() *synth {
			s := lost()
			s.fault(FaultDown, LinkUpstream, 0, 3000, 3500)
			s.firstLost().ClosedAt = at(3200)
			return s
		}, want: map[string]int{AnomalyDuplicate: 1}},
		"a repeat whose connection was cut on another gateway's link": {build: func() *synth {
			s := lost()
			s.fault(FaultTimeout, LinkUpstream, 1, 1000, 1500)
			s.firstLost().CutAt = at(1200)
			return s
		}, want: map[string]int{}, causes: map[string]int{CauseGatewayGaveUp: 1}},
		"a repeat after a slow answer": {build: func() *synth {
			s := lost()
			s.fault(FaultSlow, LinkService, 0, 1010, 2510).Effect = 20
			return s
		}, want: map[string]int{}, causes: map[string]int{CauseSlowAnswer: 1}},
		"a repeat after another effect's slow answer": {build: func() *synth {
			s := lost()
			s.fault(FaultSlow, LinkService, 0, 1010, 2510).Effect = 1
			return s
		}, want: map[string]int{AnomalyDuplicate: 1}},
		"a repeat after its store link went down": {build: func() *synth {
			s := lost()
			s.fault(FaultDown, LinkStore, 0, 1500, 3000)
			return s
		}, want: map[string]int{}, causes: map[string]int{CauseLeaseLost: 1}},
		"a repeat after its store link went down once the key was settled": {build: func() *synth {
			s := lost()
			s.fault(FaultDown, LinkStore, 0, 4400, 6000)
			return s
		}, want: map[string]int{AnomalyDuplicate: 1}},
		"a repeat that a mutation's silent cut explains": {build: func() *synth {
			s := lost()
			s.fault(FaultSilentCut, LinkService, 0, 1010, 1010).Effect = 20
			s.firstLost().ClosedAt = at(1011)
			return s
		}, want: map[string]int{AnomalyDuplicate: 1}},
		"a repeat sooner than a lease": {build: func() *synth {
			s := lost()
			s.fault(FaultKill, LinkProcess, 0, 1050, 1500)
			s.h.Effects[len(s.h.Effects)-1].Start = at(3500) // 2.5s after request 50 began
			return s
		}, want: map[string]int{AnomalyEarlyRepeat: 1}},
		"a repeat in the resolve mode, whatever the cause": {build: func() *synth {
			s := lost()
			s.fault(FaultKill, LinkProcess, 0, 1050, 1500)
			return s
		}, resolve: true, want: map[string]int{AnomalyResolvedRepeat: 1}},
		"a record left stranded in the resolve mode": {build: func() *synth {
			s := clean()
			s.h.Stranded = []Stranded{{Scope: "s", Key: "k7", Attempt: 2}}
			return s
		}, resolve: true, want: map[string]int{AnomalyUnresolved: 1}},
		"a record resolved not done that no retry came back for": {build: func() *synth {
			s := clean()
			s.h.Resolves = append(s.h.Resolves, Resolve{Source: SourceCompleter, Key: "k7", Attempt: 2, At: at(9000), Outcome: ResolveNotDone})
			s.h.Stranded = []Stranded{{Scope: "s", Key: "k7", Attempt: 2, AwaitingRetry: true}}
			return s
		}, resolve: true, want: map[string]int{}},
		"a record marked not done that no resolve call found not done": {build: func() *synth {
			s := clean()
			s.h.Stranded = []Stranded{{Scope: "s", Key: "k7", Attempt: 2, AwaitingRetry: true}}
			return s
		}, resolve: true, want: map[string]int{AnomalyUnresolved: 1}},
		"the other body ran": {build: func() *synth {
			s := clean()
			s.effect(10, 1, "t1", "k1", "op1-x", 5000, 5100)
			return s
		}, want: map[string]int{AnomalyMismatchRan: 1, AnomalyDuplicate: 1}},
		"the other body got the replay": {build: func() *synth {
			s := clean()
			q := s.answered(s.h.Effects[0], true, 800, 810)
			q.Op = "op1-x"
			return s
		}, want: map[string]int{AnomalyMismatchAnswered: 1}},
		"the other body got 409": {build: func() *synth {
			s := clean()
			s.problem("t1", "k1", "op1-x", 409, 800)
			return s
		}, want: map[string]int{AnomalyMismatchAnswered: 1}},
		"the same body got 422": {build: func() *synth {
			s := clean()
			s.problem("t1", "k1", "op1", 422, 800)
			return s
		}, want: map[string]int{AnomalySpurious422: 1}},
		"a replay dropped a stored header": {build: func() *synth {
			s := clean()
			q := s.answered(s.h.Effects[0], true, 800, 810)
			delete(q.Header, "X-Torture-Effect")
			return s
		}, want: map[string]int{AnomalyReplayDiffers: 2}}, // differs from the first replay and from the upstream's answer
		"a replay with another body": {build: func() *synth {
			s := clean()
			q := s.answered(s.h.Effects[0], true, 800, 810)
			q.Body = append(q.Body[:len(q.Body)-1:len(q.Body)-1], ' ', '}')
			return s
		}, want: map[string]int{AnomalyReplayDiffers: 2}},
		"a first answer with another status": {build: func() *synth {
			s := clean()
			q := s.answered(s.h.Effects[0], false, 800, 810)
			q.Status = 200
			return s
		}, want: map[string]int{AnomalyAnswerDiffers: 1}},
		"another tenant's answer": {build: func() *synth {
			s := clean()
			q := s.answered(s.h.Effects[0], true, 800, 810) // t1's answer
			q.Tenant = "t2"
			q.Op = "op2"
			return s
		}, want: map[string]int{AnomalyCrossTenant: 1, AnomalyReplayDiffers: 1}},
		"an answer naming an unknown effect": {build: func() *synth {
			s := clean()
			q := s.problem("t2", "k2", "op3", 201, 800)
			q.Header = upstreamHeader(77, "t2")
			q.Body = answerBody(77, "t2", "k2", "op3")
			return s
		}, want: map[string]int{AnomalyPhantom: 1}},
		"an answer from nowhere": {build: func() *synth {
			s := clean()
			q := s.problem("t2", "k2", "op3", 200, 800)
			q.Header = map[string]string{"Content-Type": "text/plain"}
			return s
		}, want: map[string]int{AnomalyUnexpectedStatus: 1}},
		"an effect without its key": {build: func() *synth {
			s := clean()
			s.effect(10, 1, "t1", "", "op9", 5000, 5100)
			return s
		}, want: map[string]int{AnomalyUnkeyed: 1}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := tc.build()
			res := Check(&s.h, CheckOptions{Lease: 3 * time.Second, UpstreamTimeout: time.Second, StoreTimeout: time.Second, Resolve: tc.resolve})
			if got := res.AnomaliesByKind(); !maps.Equal(got, tc.want) {
				t.Errorf("anomalies %v, want %v:\n%+v", got, tc.want, res.Anomalies)
			}
			if tc.causes == nil {
				tc.causes = map[string]int{}
			}
			if got := res.RepeatsByCause(); !maps.Equal(got, tc.causes) {
				t.Errorf("repeats by cause %v, want %v: %+v", got, tc.causes, res.Repeats)
			}
		})
	}
}
