package torture

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe"
)

// The SPIN model of the protocol, spec/retrysafe.pml (spec/README.md).
var specModel = filepath.Join("..", "..", "spec", "retrysafe.pml")

// specCI are the sizes CI checks exhaustively: two clients, two owners, one
// request each, three ticks of requests, one crash, one cut and one failed
// upstream call. Store outages (with two clients) make the state space too
// big for CI: RETRYSAFE_SPEC_DEEP=1 runs the model's own defaults, which
// have them, on a developer machine (spec/README.md has the state counts).
var specCI = []string{"-DN=2", "-DM=2", "-DR=1", "-DMAXT=3", "-DLEASE=2", "-DTTL=2", "-DRETENTION=1",
	"-DCRASHES=1", "-DOUTAGES=0", "-DCUTS=1", "-DFAILS=1", "-DCHECKPOINTS=0"}

// specMutantSizes add a store outage: the mutants of the fencing need an
// owner that lost the store and goes on. A search stops at the first
// violation, so these sizes are cheap for a mutant; the others turn the
// outage off again (the last -D wins).
var specMutantSizes = []string{"-DN=2", "-DM=2", "-DR=1", "-DMAXT=3", "-DLEASE=2", "-DTTL=2", "-DRETENTION=1",
	"-DCRASHES=1", "-DOUTAGES=1", "-DCUTS=1", "-DFAILS=0", "-DCHECKPOINTS=0"}

func specSizes() []string {
	if os.Getenv("RETRYSAFE_SPEC_DEEP") != "" {
		return nil
	}
	return specCI
}

// specTools finds spin and gcc; without them the spec tests skip, except
// under CI=true, where they fail.
func specTools(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"spin", "gcc"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is missing: the model check needs it (apt-get install spin gcc)", tool)
			}
			t.Skipf("%s is missing: apt-get install spin gcc", tool)
		}
	}
}

// panResult is what one verification run said.
type panResult struct {
	out    string
	errors int
	states int
	trail  []byte // the counterexample, when errors > 0
}

var (
	panErrors = regexp.MustCompile(`errors: (\d+)`)
	panStates = regexp.MustCompile(`(\d+) states, stored`)
)

// verify generates, compiles and runs the verifier for the model with defs:
// the assertions (safety), or the liveness claim under weak fairness.
func verify(t *testing.T, defs []string, liveness bool) panResult {
	t.Helper()
	dir := t.TempDir()
	model, err := os.ReadFile(specModel)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "retrysafe.pml"), model, 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(name string, args ...string) string {
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("spin", append(append([]string{"-a"}, defs...), "retrysafe.pml")...)
	cflags := []string{"-O2", "-w", "-DCOLLAPSE", "-DVECTORSZ=2048", "-o", "pan", "pan.c"}
	args := []string{"-m400000", "-w26"}
	if liveness {
		args = append(args, "-a", "-f", "-N", "live")
		cflags = append([]string{"-DNFAIR=3"}, cflags...)
	} else {
		cflags = append([]string{"-DNOCLAIM"}, cflags...)
	}
	run("gcc", cflags...)
	out := run("./pan", args...)
	if strings.Contains(out, "max search depth too small") {
		t.Fatalf("pan: the search was cut short (raise -m):\n%s", out)
	}
	r := panResult{out: out}
	if m := panErrors.FindStringSubmatch(out); m != nil {
		r.errors, _ = strconv.Atoi(m[1])
	} else {
		t.Fatalf("pan said no error count:\n%s", out)
	}
	if m := panStates.FindStringSubmatch(out); m != nil {
		r.states, _ = strconv.Atoi(m[1])
	}
	if r.errors > 0 {
		r.trail, err = os.ReadFile(filepath.Join(dir, "retrysafe.pml.trail"))
		if err != nil {
			t.Fatalf("pan found %d errors but left no trail: %v", r.errors, err)
		}
	}
	return r
}

// TestSpecHolds checks every property of the model in every interleaving,
// for each unknown-outcome policy, and the liveness property.
func TestSpecHolds(t *testing.T) {
	t.Parallel()
	specTools(t)
	for _, tc := range []struct {
		name     string
		defs     []string
		liveness bool
	}{
		{"takeover", []string{"-DPOLICY=TAKEOVER"}, false},
		{"block", []string{"-DPOLICY=BLOCK"}, false},
		{"resolver", []string{"-DPOLICY=RESOLVER"}, false},
		{"takeover-liveness", []string{"-DPOLICY=TAKEOVER"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := verify(t, append(specSizes(), tc.defs...), tc.liveness)
			if r.errors != 0 {
				t.Fatalf("the model violates a property (%d errors):\n%s", r.errors, r.out)
			}
			t.Logf("%s: %d states, no violation", tc.name, r.states)
		})
	}
}

// specMutants break the protocol one way each; every property must fail on
// one of them. only keeps one property (the model's ONLY), want is the
// failure pan must report, and store says the mutation is the store's, so
// that the porcupine model must reject the trail's transitions too.
var specMutants = []struct {
	name     string
	defs     []string
	liveness bool
	want     string
	store    bool
}{
	{"notoken-one-completion", []string{"-DMUT_NOTOKEN", "-DONLY=1"}, false, "assertion violated (firstResp[life]==0)", true},
	{"notoken-completed-stable", []string{"-DMUT_NOTOKEN", "-DONLY=2"}, false, "assertion violated (!(o_live)||", true},
	{"notoken-replay", []string{"-DMUT_NOTOKEN", "-DONLY=3", "-DR=2"}, false, "assertion violated (rresp==firstResp[rlife])", true},
	{"nofence-taken-over-owner", []string{"-DMUT_NOFENCE", "-DONLY=4"}, false, "assertion violated ((superseded&(1<<t))==0)", true},
	{"checkinsert-block", []string{"-DMUT_CHECKINSERT", "-DPOLICY=BLOCK", "-DONLY=5", "-DOUTAGES=0"}, false, "assertion violated (effects[l]<=1)", true},
	{"checkinsert-takeover", []string{"-DMUT_CHECKINSERT", "-DONLY=6", "-DOUTAGES=0"}, false, "assertion violated (effects[l]<=(1+unknowns[l]))", true},
	{"earlytakeover", []string{"-DMUT_EARLYTAKEOVER", "-DONLY=6", "-DOUTAGES=0"}, false, "assertion violated (effects[l]<=(1+unknowns[l]))", true},
	// Not a mutation of retrysafe: a resolver whose not_done answer does
	// not stop the upstream from doing that attempt later (spec/README.md).
	{"resolver-unfenced-upstream", []string{"-DPOLICY=RESOLVER", "-DUNFENCED_UPSTREAM", "-DONLY=5"}, false, "assertion violated (effects[l]<=1)", false},
	// The engine, not the store: a retry that takes any abandoned attempt
	// for one a resolver found not done (Record.ResolvedNotDone) re-runs
	// an attempt whose upstream may have done the effect.
	{"anymark-resolver", []string{"-DMUT_ANYMARK", "-DPOLICY=RESOLVER", "-DONLY=5"}, false, "assertion violated (effects[l]<=1)", false},
	{"noretire-liveness", []string{"-DMUT_NORETIRE", "-DOUTAGES=0"}, true, "acceptance cycle", false},
}

// TestSpecMutants shows each property has teeth: each mutant fails with
// the expected assertion or claim, its trail is the one kept in
// spec/trails (RETRYSAFE_SPEC_UPDATE=1 rewrites them), and a store
// mutant's trail holds a transition the porcupine model refuses.
func TestSpecMutants(t *testing.T) {
	t.Parallel()
	specTools(t)
	for _, mu := range specMutants {
		t.Run(mu.name, func(t *testing.T) {
			defs := append(append([]string{}, specMutantSizes...), mu.defs...)
			r := verify(t, defs, mu.liveness)
			if r.errors == 0 || !strings.Contains(strings.ReplaceAll(r.out, " ", ""), strings.ReplaceAll(mu.want, " ", "")) {
				t.Fatalf("the mutant is not caught: want %q, pan said:\n%s", mu.want, r.out)
			}
			t.Logf("%s: %s", mu.name, firstLine(r.out, mu.want))
			kept := filepath.Join("..", "..", "spec", "trails", mu.name+".trail")
			if os.Getenv("RETRYSAFE_SPEC_UPDATE") != "" {
				if err := os.WriteFile(kept, r.trail, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			// The kept trail still leads the model to the same failure.
			sim := simulate(t, append(defs, "-t", "-k", absPath(t, kept)))
			if !strings.Contains(sim, "assertion violated") && !strings.Contains(sim, "START OF CYCLE") {
				t.Fatalf("the kept trail %s no longer ends in a violation (rerun with RETRYSAFE_SPEC_UPDATE=1):\n%s", kept, tail(sim))
			}
			if mu.store {
				if err := replaySpec(sim, defs); err == nil {
					t.Fatalf("the porcupine model accepts every transition of the %s trail", mu.name)
				} else {
					t.Logf("the porcupine model refuses the mutant: %v", err)
				}
			}
		})
	}
}

// TestSpecTransitions replays random runs of the model against the
// porcupine model's storeStep: every store transition the spec makes,
// under every policy, is one the porcupine model makes.
func TestSpecTransitions(t *testing.T) {
	t.Parallel()
	specTools(t)
	steps := 0
	for _, policy := range []string{"TAKEOVER", "BLOCK", "RESOLVER"} {
		for seed := 1; seed <= 40; seed++ {
			defs := []string{"-DPOLICY=" + policy, "-DN=3", "-DM=3", "-DR=3", "-DCRASHES=2", "-DOUTAGES=2", "-DMAXT=8"}
			out := simulate(t, append(defs, "-n"+strconv.Itoa(seed), "-B"))
			if strings.Contains(out, "assertion violated") {
				t.Fatalf("%s seed %d: the simulation violates a property:\n%s", policy, seed, tail(out))
			}
			if err := replaySpec(out, defs); err != nil {
				t.Fatalf("%s seed %d: %v", policy, seed, err)
			}
			steps += strings.Count(out, "STORE ")
		}
	}
	if steps < 500 {
		t.Fatalf("only %d store transitions replayed: the simulations print no STORE lines?", steps)
	}
	t.Logf("%d store transitions of the spec replayed against the porcupine model", steps)
}

func absPath(t *testing.T, p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// simulate runs spin (a random or a guided simulation) on the model.
func simulate(t *testing.T, args []string) string {
	t.Helper()
	dir := t.TempDir()
	model, err := os.ReadFile(specModel)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "retrysafe.pml"), model, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("spin", append(args, "retrysafe.pml")...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("spin %s: %v", strings.Join(args, " "), err)
	}
	return string(out)
}

// firstLine returns the line of out that holds want's first word.
func firstLine(out, want string) string {
	word, _, _ := strings.Cut(want, " ")
	for line := range strings.Lines(out) {
		if strings.Contains(line, word) {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

func tail(s string) string {
	if len(s) > 4000 {
		return "…" + s[len(s)-4000:]
	}
	return s
}

// The model's store operations (OP_* in retrysafe.pml) and results.
var specOps = map[int]string{1: opClaim, 2: opGet, 3: opExtend, 4: opComplete, 5: opRelease, 6: opSweep}
var specErrs = map[int]string{0: errNone, 1: errLeaseLost, 2: errNotFound, 3: errUnknown}

// specDef reads a -DNAME=value the model was run with, or its default.
func specDef(defs []string, name string, def int64) int64 {
	for _, d := range defs {
		if v, ok := strings.CutPrefix(d, "-D"+name+"="); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err == nil {
				return n
			}
		}
	}
	return def
}

func specToken(t int) string {
	if t == 0 {
		return ""
	}
	return "t" + strconv.Itoa(t)
}

// replaySpec replays the STORE lines of a spin run against storeStep,
// and says where the two first differ. CreatedAt is not in the spec.
func replaySpec(out string, defs []string) error {
	lease, ttl, retention := specDef(defs, "LEASE", 3), specDef(defs, "TTL", 3), specDef(defs, "RETENTION", 2)
	var s recordView
	sc := bufio.NewScanner(strings.NewReader(out))
	n := 0
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "STORE ") {
			continue
		}
		n++
		var op, now, tok, nt, tt, ab, ck, r, res, claimed int
		var rs, rtok, ratt, rlease, rexp, rab, rck, rresp int
		_, err := fmt.Sscanf(line, "STORE %d now=%d t=%d nt=%d tt=%d ab=%d ck=%d r=%d res=%d claimed=%d rec=%d,%d,%d,%d,%d,%d,%d,%d",
			&op, &now, &tok, &nt, &tt, &ab, &ck, &r, &res, &claimed, &rs, &rtok, &ratt, &rlease, &rexp, &rab, &rck, &rresp)
		if err != nil {
			return fmt.Errorf("unreadable line %q: %v", line, err)
		}
		in := storeInput{Op: specOps[op], Key: "k", Token: specToken(tok), Now: int64(now)}
		switch in.Op {
		case opClaim:
			in.FP, in.Dur, in.NoTakeover, in.TakeoverToken = "A", lease, nt != 0, specToken(tt)
		case opExtend:
			in.Dur, in.Abandon = lease, ab != 0
			if ck != 0 {
				in.Checkpoint = specToken(tok)
			}
		case opComplete:
			in.Dur, in.Body = ttl, specToken(r)
		case opSweep:
			in.Dur = retention
		case "":
			return fmt.Errorf("unknown operation in %q", line)
		}
		post := recordView{}
		if rs != 0 {
			post = recordView{Present: true, FP: "A", State: retrysafe.StateProcessing, Token: specToken(rtok), Attempt: ratt,
				LeaseUntil: int64(rlease), Abandoned: rab != 0, Checkpoint: specToken(rck)}
			if rs == 2 {
				post.State, post.LeaseUntil, post.ExpiresAt, post.Status, post.Body = retrysafe.StateCompleted, 0, int64(rexp), 200, specToken(rresp)
			}
		}
		next, want := storeStep(s, in)
		post.CreatedAt = next.CreatedAt
		got := storeOutput{Err: specErrs[res]}
		switch {
		case in.Op == opClaim:
			got.Claimed, got.Rec = claimed != 0, post
		case in.Op == opGet && res == 0:
			got.Rec = post
		}
		if got != want || post != next {
			return fmt.Errorf("store transition %d, %s: the spec answers %+v and leaves %s; the porcupine model answers %+v and leaves %s",
				n, storeModel.DescribeOperation(in, got), got, post, want, next)
		}
		s = next
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if n == 0 && !bytes.Contains([]byte(out), []byte("STORE")) {
		return nil
	}
	return nil
}
