package torture

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Report is what a run writes to its output directory, as report.md and
// report.json (the whole history goes to history.json).
type Report struct {
	Params Params         `json:"params"`
	Faults map[string]int `json:"faults"` // by "link/kind"
	// Reported counts, by kind, the documented-window events the gateways'
	// logs report (with or without an injected fault behind them).
	Reported map[string]int `json:"reported"`
	Result   *Result        `json:"result"`
	Stores   []*StoreResult `json:"stores,omitempty"` // store-level linearizability checks
}

// NewReport summarizes a history, its verdict and the store-level checks.
func NewReport(h *History, res *Result, stores []*StoreResult) *Report {
	r := &Report{Params: h.Params, Faults: map[string]int{}, Reported: map[string]int{}, Result: res, Stores: stores}
	for _, f := range h.Faults {
		if f.Link == LinkReported {
			r.Reported[f.Kind]++
		} else {
			r.Faults[f.Link+"/"+f.Kind]++
		}
	}
	return r
}

// NotInjected counts the repeats whose cause is no injected event (the
// gateway gave up on the request's own connection on a loaded machine).
func (r *Report) NotInjected() int {
	return r.Result.RepeatsByCause()[CauseGatewayGaveUp]
}

// Anomalies returns every anomaly of the run, end to end and store level.
func (r *Report) Anomalies() []Anomaly {
	as := append([]Anomaly(nil), r.Result.Anomalies...)
	for _, s := range r.Stores {
		as = append(as, s.Anomalies()...)
	}
	return as
}

// WriteFiles writes report.md, report.json and history.json to dir.
func (r *Report) WriteFiles(dir string, h *History) error {
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFile(dir, "report.json", js); err != nil {
		return err
	}
	hs, err := json.Marshal(h)
	if err != nil {
		return err
	}
	if err := writeFile(dir, "history.json", hs); err != nil {
		return err
	}
	return writeFile(dir, "report.md", []byte(r.Markdown()))
}

// Markdown renders the report.
func (r *Report) Markdown() string {
	var b strings.Builder
	p := r.Params
	fmt.Fprintf(&b, "# Torture run: %s\n\n", p.Store)
	fmt.Fprintf(&b, "| parameter | value |\n| --- | --- |\n")
	fmt.Fprintf(&b, "| store | %s |\n| gateways | %d (in-flight modes alternate conflict/wait) |\n| clients | %d |\n| tenants | %d |\n| duration | %s |\n| lease | %s |\n| faults | %v |\n",
		p.Store, p.Gateways, p.Clients, p.Tenants, p.Duration.Round(time.Second), p.Lease, p.Faults)
	fmt.Fprintf(&b, "| wall-clock step seen | %s |\n", p.ClockStep)
	if p.MaxOps > 0 {
		fmt.Fprintf(&b, "| requests asked for | %d |\n", p.MaxOps)
	}
	if p.Mutation != "" {
		fmt.Fprintf(&b, "| mutation | %s |\n", p.Mutation)
	}
	if p.Resolve {
		fmt.Fprintf(&b, "| mode | resolve (--resolve-url answered from the upstream's effect log; completer every %s) |\n", p.SweepInterval)
	} else {
		b.WriteString("| mode | takeover (--on-unknown takeover) |\n")
	}
	res := r.Result
	fmt.Fprintf(&b, "\n## Operations\n\n%d requests on %d keys, %d upstream effects.\n\n| answer | count |\n| --- | --- |\n", res.Requests, res.Keys, res.Effects)
	for _, k := range slices.Sorted(maps.Keys(res.Outcomes)) {
		fmt.Fprintf(&b, "| %s | %d |\n", k, res.Outcomes[k])
	}
	fmt.Fprintf(&b, "\n## Faults injected\n\n")
	if len(r.Faults) == 0 {
		b.WriteString("None.\n")
	} else {
		b.WriteString("| link/kind | count |\n| --- | --- |\n")
		for _, k := range slices.Sorted(maps.Keys(r.Faults)) {
			fmt.Fprintf(&b, "| %s | %d |\n", k, r.Faults[k])
		}
	}
	if len(r.Reported) > 0 {
		b.WriteString("\n## Reported by the gateways' logs\n\n| kind | count |\n| --- | --- |\n")
		for _, k := range slices.Sorted(maps.Keys(r.Reported)) {
			fmt.Fprintf(&b, "| %s | %d |\n", k, r.Reported[k])
		}
	}
	as := r.Anomalies()
	fmt.Fprintf(&b, "\n## Anomalies: %d\n\n", len(as))
	byKind := map[string]int{}
	for _, a := range as {
		byKind[a.Kind]++
	}
	if len(byKind) > 0 {
		b.WriteString("| kind | count |\n| --- | --- |\n")
		for _, k := range slices.Sorted(maps.Keys(byKind)) {
			fmt.Fprintf(&b, "| %s | %d |\n", k, byKind[k])
		}
		b.WriteString("\n")
		for i, a := range as {
			if i == 50 {
				fmt.Fprintf(&b, "- … %d more in report.json\n", len(as)-50)
				break
			}
			fmt.Fprintf(&b, "- **%s** tenant %q key %q: %s\n", a.Kind, a.Tenant, a.Key, a.Detail)
		}
	}
	byCause := res.RepeatsByCause()
	fmt.Fprintf(&b, "\n## Repeats: %d\n\n", len(res.Repeats))
	if len(res.Repeats) > 0 {
		b.WriteString("A second effect for a key is allowed only with one specific injected event of the attempt it repeats: " +
			"a SIGKILL of its gateway while the key was in flight there, a fault on its gateway's upstream link when that request's own connection ended, " +
			"an upstream answer to that very effect slower than the gateway waits, or a fault on its gateway's store link while the key was in flight there (lease lost, result not stored). " +
			"gateway-gave-up is the one cause that is not injected: the gateway closed that request's own connection before the answer with no fault on the link. " +
			"No repeat may start sooner than a lease after the request of the attempt it repeats.\n\n")
		b.WriteString("| cause | count |\n| --- | --- |\n")
		for _, k := range slices.Sorted(maps.Keys(byCause)) {
			fmt.Fprintf(&b, "| %s | %d |\n", k, byCause[k])
		}
		b.WriteString("\n| tenant | key | first effect | repeated by | attempts | gap | cause | event |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n")
		for _, d := range res.Repeats {
			ev := d.Detail
			if f := d.Fault; f != nil {
				ev = fmt.Sprintf("#%d %s %s on gateway %d at %s: %s", f.ID, f.Link, f.Kind, f.Gateway, f.Start.Format("15:04:05.000"), d.Detail)
			}
			fmt.Fprintf(&b, "| %s | %s | %d | %d | %d→%d | %dms | %s | %s |\n", d.Tenant, d.Key, d.First, d.Repeat, d.Attempts[0], d.Attempts[1], d.GapMillis, d.Cause, ev)
		}
	}
	if u := res.Unknowns; u != nil {
		fmt.Fprintf(&b, "\n## Unknown outcomes: %d\n\n", u.Total)
		fmt.Fprintf(&b, "| resolved by | count |\n| --- | --- |\n| the resolver (a retry's resolve call: done, answer stored and replayed) | %d |\n| a retry (its resolve call: not_done, the retry ran it) | %d |\n| the completer | %d |\n| no decision needed (the owner finished, or the key was settled otherwise) | %d |\n| not done, awaiting a retry that never came (the completer's not_done; nothing ran) | %d |\n| **unresolved** | %d |\n",
			u.Resolver, u.Retry, u.Completer, u.Owner, u.AwaitingRetry, u.Unresolved)
		b.WriteString("\n| resolve calls (source/outcome) | count |\n| --- | --- |\n")
		for _, k := range slices.Sorted(maps.Keys(u.Calls)) {
			fmt.Fprintf(&b, "| %s | %d |\n", k, u.Calls[k])
		}
		fmt.Fprintf(&b, "\nRequests the upstream refused (an attempt it had declared not done): %d.\n", u.Refused)
	}
	if len(r.Stores) > 0 {
		b.WriteString("\n## Store-level linearizability (porcupine)\n\n| store | operations | result | visualization |\n| --- | --- | --- | --- |\n")
		for _, s := range r.Stores {
			fmt.Fprintf(&b, "| %s | %d | %s | %s |\n", s.Store, s.Operations, s.Result, s.Visualization)
		}
	}
	return b.String()
}
