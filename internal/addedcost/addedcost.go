// Package addedcost measures what a middleware adds to its framework's
// bare handler, the way bench/peers does: each measurement is one
// benchmark run in a process of its own (so no subject inherits another's
// heap), subjects alternate within every round (so the machine's drift
// hits them alike), and the result is the subject's cost minus its
// baseline's in the same round, in process CPU time, wall time and
// allocations, with the median and range over the rounds.
//
// A benchmark measured this way reports cpu-ns/op with [ReportCPU] and
// allocations with b.ReportAllocs, and is named Bench/scenario/subject.
package addedcost

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/retrysafe/retrysafe/internal/cputime"
)

// ReportCPU stops b's timer and reports the process's CPU time per
// operation since start (a cputime reading), as cpu-ns/op.
func ReportCPU(b *testing.B, start time.Duration) {
	b.StopTimer()
	b.ReportMetric(float64((cputime.Process()-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// Start returns the CPU reading to give ReportCPU.
func Start() time.Duration { return cputime.Process() }

// Sample is one measurement, per operation.
type Sample struct{ NS, CPU, Allocs, Bytes float64 }

// Plan is what Run measures.
type Plan struct {
	Bench     string            // the benchmark's name, such as "BenchmarkFiber"
	Scenarios []string          // its sub-benchmarks
	Subjects  []string          // the sub-benchmarks of each scenario, measured in this order
	Baseline  map[string]string // subject -> the subject whose cost it adds to
	// Ratio, if set, names two subjects whose added CPU is compared per
	// round: Ratio[0]'s ÷ Ratio[1]'s.
	Ratio [2]string
}

// Run measures p for rounds rounds and writes the table to w.
func Run(t *testing.T, w io.Writer, rounds int, p Plan) {
	t.Helper()
	added := map[string][]Sample{}
	for round := range rounds {
		for _, sc := range p.Scenarios {
			res := map[string]Sample{}
			for _, s := range p.Subjects {
				m, err := measure(p.Bench, sc, s)
				if err != nil {
					t.Fatalf("round %d %s/%s: %v", round, sc, s, err)
				}
				res[s] = m
			}
			for s, base := range p.Baseline {
				m, b := res[s], res[base]
				added[sc+"/"+s] = append(added[sc+"/"+s], Sample{m.NS - b.NS, m.CPU - b.CPU, m.Allocs - b.Allocs, m.Bytes - b.Bytes})
			}
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "scenario\tsubject\tadded cpu µs/op (median)\trange\tadded wall µs/op (median)\trange\tadded allocs\tadded B\t\n")
	for _, sc := range p.Scenarios {
		for _, s := range p.Subjects {
			xs, ok := added[sc+"/"+s]
			if !ok {
				continue
			}
			var ns, cpu, al, by []float64
			for _, x := range xs {
				ns, cpu, al, by = append(ns, x.NS/1e3), append(cpu, x.CPU/1e3), append(al, x.Allocs), append(by, x.Bytes)
			}
			for _, v := range [][]float64{ns, cpu, al, by} {
				slices.Sort(v)
			}
			fmt.Fprintf(tw, "%s\t%s vs %s\t%+.2f\t%+.2f .. %+.2f\t%+.2f\t%+.2f .. %+.2f\t%+.0f\t%+.0f\t\n", sc, s, p.Baseline[s],
				median(cpu), cpu[0], cpu[len(cpu)-1], median(ns), ns[0], ns[len(ns)-1], median(al), median(by))
		}
	}
	_ = tw.Flush()
	if p.Ratio[0] == "" {
		return
	}
	fmt.Fprintf(tw, "\nscenario\t%s's added cpu ÷ %s's, per round (median)\trange\t\n", p.Ratio[0], p.Ratio[1])
	for _, sc := range p.Scenarios {
		a, b := added[sc+"/"+p.Ratio[0]], added[sc+"/"+p.Ratio[1]]
		var r []float64
		for i := range a {
			r = append(r, a[i].CPU/b[i].CPU)
		}
		slices.Sort(r)
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f .. %.2f\t\n", sc, median(r), r[0], r[len(r)-1])
	}
	_ = tw.Flush()
}

// measure runs bench/sc/subject once with this process's benchtime, in a
// new process of this test binary, and returns what it reported.
func measure(bench, sc, subject string) (Sample, error) {
	pattern := "^" + bench + "$/^" + regexp.QuoteMeta(sc) + "$/^" + regexp.QuoteMeta(subject) + "$"
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench="+pattern, "-test.count=1", "-test.benchmem",
		"-test.benchtime="+flag.Lookup("test.benchtime").Value.String())
	out, err := cmd.CombinedOutput()
	if err != nil {
		return Sample{}, fmt.Errorf("%v\n%s", err, out)
	}
	prefix := bench + "/" + sc + "/" + subject
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], prefix) {
			continue
		}
		var m Sample
		units := map[string]*float64{"ns/op": &m.NS, "cpu-ns/op": &m.CPU, "allocs/op": &m.Allocs, "B/op": &m.Bytes}
		found := 0
		for k := 2; k+1 < len(f); k += 2 {
			if dst := units[f[k+1]]; dst != nil {
				v, err := strconv.ParseFloat(f[k], 64)
				if err != nil {
					return Sample{}, fmt.Errorf("%q: %v", line, err)
				}
				*dst = v
				found++
			}
		}
		if found != len(units) {
			return Sample{}, fmt.Errorf("%q: %d of %d metrics", line, found, len(units))
		}
		return m, nil
	}
	return Sample{}, fmt.Errorf("no result for %s in:\n%s", prefix, out)
}

func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}
