package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/internal/storeurl"
	"github.com/retrysafe/retrysafe/store/postgres"
)

var (
	fleetSize = flag.Int("fleet", 2, "`retrysafe serve` processes sharing one PostgreSQL in the fleet scenarios (measured with 1 and with this many); 0 leaves them out")
	serveBin  = flag.String("retrysafe-bin", "", "`path` of a built retrysafe command for the fleet scenarios (default: go build it)")
)

// fleet is a number of `retrysafe serve` processes, each in front of the
// same upstream, on the same store: gateways scaled out, as a team runs
// them when one machine is not enough.
type fleet struct {
	urls  []string
	cmds  []*exec.Cmd
	errs  []*syncBuffer
	waits []chan error
}

// syncBuffer is a bytes.Buffer safe for a process's writer and a reader.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// retrysafeBinary returns the retrysafe command to run: -retrysafe-bin,
// or one built from this workspace into a temporary directory.
func retrysafeBinary(tb testing.TB) (string, error) {
	if *serveBin != "" {
		return *serveBin, nil
	}
	out := filepath.Join(tb.TempDir(), "retrysafe")
	cmd := exec.Command("go", "build", "-o", out, "github.com/retrysafe/retrysafe/cmd/retrysafe")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build cmd/retrysafe: %v: %s", err, msg)
	}
	return out, nil
}

// startFleet starts n `retrysafe serve` processes of bin on storeURL in
// front of upstream, with the serve defaults except: any free port, no
// admin listener, no sweeper (the in-process gateway of the other rows
// runs none) and warnings only in the log.
func startFleet(bin string, n int, upstream, storeURL string) (*fleet, error) {
	f := &fleet{}
	for range n {
		cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--admin-listen", "off",
			"--upstream", upstream, "--store", storeURL, "--sweep-interval", "0", "--log-level", "warn")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			f.close()
			return nil, err
		}
		stderr := &syncBuffer{}
		cmd.Stderr = stderr
		if err := cmd.Start(); err != nil {
			f.close()
			return nil, err
		}
		wait := make(chan error, 1)
		f.cmds, f.errs, f.waits = append(f.cmds, cmd), append(f.errs, stderr), append(f.waits, wait)
		addr := make(chan string, 1)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				if rest, ok := strings.CutPrefix(sc.Text(), "retrysafe: listening on "); ok {
					u, _, _ := strings.Cut(rest, ",")
					addr <- u
					break
				}
			}
			_, _ = io.Copy(io.Discard, stdout)
			wait <- cmd.Wait()
		}()
		select {
		case u := <-addr:
			f.urls = append(f.urls, u)
		case err := <-wait:
			wait <- err
			f.close()
			return nil, fmt.Errorf("retrysafe serve exited: %v: %s", err, stderr.String())
		case <-time.After(30 * time.Second):
			f.close()
			return nil, fmt.Errorf("retrysafe serve did not start in 30s: %s", stderr.String())
		}
	}
	return f, nil
}

// cpu returns the CPU time (user + system) the fleet's processes have
// used so far, from /proc/PID/stat (clock ticks of 10 ms).
func (f *fleet) cpu() time.Duration {
	var total time.Duration
	for _, cmd := range f.cmds {
		d, err := procCPU(cmd.Process.Pid)
		if err == nil {
			total += d
		}
	}
	return total
}

// procCPU reads utime + stime of process pid.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: fields are counted
	// after its closing parenthesis, from field 3 (state).
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("malformed /proc stat")
	}
	fields := strings.Fields(string(b[i+1:]))
	if len(fields) < 13 {
		return 0, errors.New("short /proc stat")
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64) // field 14
	stime, err2 := strconv.ParseInt(fields[12], 10, 64) // field 15
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	const tick = 10 * time.Millisecond // USER_HZ is 100 on Linux
	return time.Duration(utime+stime) * tick, nil
}

// close stops the processes (SIGTERM, then SIGKILL after 10 s) and waits
// for them.
func (f *fleet) close() {
	for i, cmd := range f.cmds {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-f.waits[i]:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-f.waits[i]
		}
	}
}

// fleetStore returns the URL of a fresh PostgreSQL schema with the
// store's migrations applied (so that the fleet's processes do not race
// to apply them) and a function that drops it; ok is false when
// PostgreSQL is unreachable.
func fleetStore(tb testing.TB) (storeURL string, drop func(), ok bool) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u, err := url.Parse(cmpEnv("RETRYSAFE_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"))
	if err != nil {
		tb.Fatal(err)
	}
	schema := "rs_bench_fleet_" + randomSuffix(tb)
	q := u.Query()
	q.Set(postgres.URLParamSchema, schema)
	u.RawQuery = q.Encode()
	s, closeStore, err := storeurl.Open(ctx, u.String())
	if err != nil {
		unreachable(tb, "PostgreSQL", err)
		return "", nil, false
	}
	pg := s.(*postgres.Store)
	return u.String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = pg.Pool().Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
		_ = closeStore()
	}, true
}

// TestProcCPU: the CPU reading of this very process grows as it works.
func TestProcCPU(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	before, err := procCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	x := 1
	for time.Now().Before(deadline) {
		for i := range 1_000_000 {
			x = x*31 + i
		}
		after, err := procCPU(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if after > before {
			return
		}
	}
	t.Fatalf("CPU of this process did not grow from %v in 5 s of work (%d)", before, x)
}
