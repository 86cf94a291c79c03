package provider

import (
	"fmt"
	"time"
)

// Fault is a way for the provider to misbehave on one charge request.
type Fault string

// The faults. Each names what happens to the charge and to the answer.
const (
	// FaultNone: charge (or replay) and answer normally.
	FaultNone Fault = ""
	// FaultDropAfterCharge: charge, then close the connection without an
	// answer. The caller cannot know the charge happened.
	FaultDropAfterCharge Fault = "drop-after-charge"
	// FaultSlow: charge, then wait Config.SlowDelay before answering.
	FaultSlow Fault = "slow"
	// FaultFailBeforeCharge: answer 503 without charging.
	FaultFailBeforeCharge Fault = "fail-before-charge"
	// FaultFailAfterCharge: charge, then answer 503 as if it had failed.
	FaultFailAfterCharge Fault = "fail-after-charge"
)

// Faults lists every fault but FaultNone.
var Faults = []Fault{FaultDropAfterCharge, FaultSlow, FaultFailBeforeCharge, FaultFailAfterCharge}

func parseFault(s string) (Fault, error) {
	for _, f := range Faults {
		if string(f) == s {
			return f, nil
		}
	}
	if s == "" || s == "none" {
		return FaultNone, nil
	}
	return FaultNone, fmt.Errorf("unknown fault %q", s)
}

// Request describes a charge request to a fault function.
type Request struct {
	Key string
	// Attempt is 1 for the first request with Key, 2 for the second, …
	Attempt int
}

// InjectNext queues fault for the next n charge requests (any key).
// Queued faults are used before the fault function.
func (s *Server) InjectNext(fault Fault, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.queue = append(s.queue, fault)
	}
}

// ClearFaults drops queued faults and the fault function.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue = nil
	s.faultFunc = nil
}

// SetFaultFunc makes fn choose the fault of every charge request that no
// queued fault takes. fn runs with the server's lock held: keep it quick and
// do not call the Server from it.
func (s *Server) SetFaultFunc(fn func(Request) Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faultFunc = fn
}

// SetSlowDelay changes how long FaultSlow holds an answer.
func (s *Server) SetSlowDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cfg.SlowDelay = d
}

// nextFault picks the fault for a request (s.mu held).
func (s *Server) nextFault(r Request) Fault {
	if len(s.queue) > 0 {
		f := s.queue[0]
		s.queue = s.queue[1:]
		return f
	}
	if s.faultFunc != nil {
		return s.faultFunc(r)
	}
	return FaultNone
}
