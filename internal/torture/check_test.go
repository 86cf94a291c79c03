package torture

import (
	"maps"
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

func TestCheck(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		build      func() *synth
		want       map[string]int // anomalies by kind
		documented int
	}{
		"clean": {build: clean, want: map[string]int{}},
		"duplicate without a fault": {build: func() *synth {
			s := clean()
			s.effect(10, 1, "t1", "k1", "op1", 5000, 5100)
			return s
		}, want: map[string]int{AnomalyDuplicate: 1}},
		"duplicate after its gateway was killed": {build: func() *synth {
			s := clean()
			s.fault(FaultKill, LinkProcess, 0, 190, 1500)
			s.effect(10, 1, "t1", "k1", "op1", 5000, 5100)
			return s
		}, want: map[string]int{}, documented: 1},
		"duplicate after its store link was cut": {build: func() *synth {
			s := clean()
			s.fault(FaultDown, LinkStore, 0, 150, 3000)
			s.effect(10, 1, "t1", "k1", "op1", 5000, 5100)
			return s
		}, want: map[string]int{}, documented: 1},
		"duplicate after its upstream link reset mid-response": {build: func() *synth {
			s := clean()
			s.fault(FaultResetResp, LinkUpstream, -1, 0, 120)
			s.effect(10, 1, "t1", "k1", "op1", 5000, 5100)
			return s
		}, want: map[string]int{}, documented: 1},
		"duplicate after a slow upstream answer": {build: func() *synth {
			s := clean()
			s.fault(FaultSlow, LinkService, 0, 100, 200).Effect = 1
			s.effect(10, 1, "t1", "k1", "op1", 5000, 5100)
			return s
		}, want: map[string]int{}, documented: 1},
		"duplicate after another effect's slow answer": {build: func() *synth {
			s := clean()
			s.fault(FaultSlow, LinkService, 0, 100, 200).Effect = 2
			s.effect(10, 1, "t1", "k1", "op1", 5000, 5100)
			return s
		}, want: map[string]int{AnomalyDuplicate: 1}},
		"duplicate after its gateway reported an unknown outcome": {build: func() *synth {
			s := clean()
			s.fault(ReportedOutcomeUnknown, LinkReported, 0, 1100, 1100)
			s.effect(10, 1, "t1", "k1", "op1", 5000, 5100)
			return s
		}, want: map[string]int{}, documented: 1},
		"duplicate when another gateway reported a problem": {build: func() *synth {
			s := clean()
			s.fault(ReportedLeaseLost, LinkReported, 1, 1100, 1100)
			s.effect(10, 1, "t1", "k1", "op1", 5000, 5100)
			return s
		}, want: map[string]int{AnomalyDuplicate: 1}},
		"duplicate when another gateway was killed": {build: func() *synth {
			s := clean()
			s.fault(FaultKill, LinkProcess, 1, 150, 1500)
			s.effect(10, 1, "t1", "k1", "op1", 5000, 5100)
			return s
		}, want: map[string]int{AnomalyDuplicate: 1}},
		"duplicate when the gateway was killed long after": {build: func() *synth {
			s := clean()
			s.fault(FaultKill, LinkProcess, 0, 60000, 61000)
			s.effect(10, 1, "t1", "k1", "op1", 65000, 65100)
			return s
		}, want: map[string]int{AnomalyDuplicate: 1}},
		"duplicate after a graceful stop": {build: func() *synth {
			s := clean()
			s.fault(FaultTerm, LinkProcess, 0, 150, 1500)
			s.effect(10, 1, "t1", "k1", "op1", 5000, 5100)
			return s
		}, want: map[string]int{AnomalyDuplicate: 1}},
		"duplicate after a client hang-up": {build: func() *synth {
			s := clean()
			s.fault(FaultResetPeer, LinkClient, 0, 150, 1500)
			s.effect(10, 1, "t1", "k1", "op1", 5000, 5100)
			return s
		}, want: map[string]int{AnomalyDuplicate: 1}},
		"the other body ran": {build: func() *synth {
			s := clean()
			s.fault(FaultKill, LinkProcess, 0, 190, 1500)
			s.effect(10, 1, "t1", "k1", "op1-x", 5000, 5100)
			return s
		}, want: map[string]int{AnomalyMismatchRan: 1}, documented: 1},
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
			res := Check(&s.h, CheckOptions{Before: 50 * time.Millisecond, After: time.Second})
			if got := res.AnomaliesByKind(); !maps.Equal(got, tc.want) {
				t.Errorf("anomalies %v, want %v:\n%+v", got, tc.want, res.Anomalies)
			}
			if len(res.Documented) != tc.documented {
				t.Errorf("documented duplicates %d, want %d: %+v", len(res.Documented), tc.documented, res.Documented)
			}
		})
	}
}
