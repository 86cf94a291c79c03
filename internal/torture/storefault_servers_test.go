package torture

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"

	"github.com/retrysafe/retrysafe/internal/testenv"
)

// The store servers of the store-level fault runs (storefault_test.go):
// each is a process of the test's own, on a free port of 127.0.0.1 and in
// a temp directory, that the run crashes and starts again on the same
// port and data. The machine's shared servers are never touched.

// ownServer is a server process that can be crashed and restarted.
type ownServer struct {
	name string
	port int
	// command returns the command that runs the server in the foreground.
	command func() *exec.Cmd
	// ready reports whether the server answers.
	ready func(ctx context.Context) error
	// crashSignal ends the process the way a crash would (SIGKILL; for
	// PostgreSQL SIGQUIT, its immediate shutdown, which kills every
	// backend without a checkpoint and leaves crash recovery to the next
	// start).
	crashSignal syscall.Signal
	logPath     string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Addr is the server's own address (the fault proxy's target).
func (s *ownServer) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// start runs the server and waits until it answers.
func (s *ownServer) start(ctx context.Context) error {
	cmd := s.command()
	if s.logPath != "" {
		f, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		cmd.Stdout, cmd.Stderr = f, f
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: %w", s.name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		select {
		case <-done:
			return fmt.Errorf("%s exited at start: %s", s.name, s.logTail())
		default:
		}
		err := s.ready(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not answer within 60s: %v: %s", s.name, err, s.logTail())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// crash ends the process with crashSignal and waits for it to exit.
func (s *ownServer) crash() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(s.crashSignal)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// stop ends the server for good (at the end of the test).
func (s *ownServer) stop() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

func (s *ownServer) logTail() string {
	b, _ := os.ReadFile(s.logPath)
	if len(b) > 1500 {
		b = b[len(b)-1500:]
	}
	return string(b)
}

// ownFreePort returns a port of 127.0.0.1 that was free a moment ago.
func ownFreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// ownBinary finds a server binary on PATH or in the given directories, or
// reports it unreachable (a failure under CI=true).
func ownBinary(t testing.TB, name string, globs ...string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, g := range globs {
		if m, _ := filepath.Glob(filepath.Join(g, name)); len(m) > 0 {
			return m[len(m)-1] // the newest version directory
		}
	}
	testenv.Unreachable(t, name+" binary", errors.New("not on PATH nor in "+strings.Join(globs, ", ")))
	return ""
}

// ownServiceDir makes a temp directory that the service's own user owns
// (when the test runs as root the server runs as that user), removed at
// the end of the test. t.TempDir is not used: its parents are root's,
// mode 0700.
func ownServiceDir(t testing.TB, owner string) (string, *syscall.Credential) {
	t.Helper()
	dir, err := os.MkdirTemp("", "retrysafe-storefault-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if os.Geteuid() != 0 || owner == "" {
		return dir, nil
	}
	u, err := user.Lookup(owner)
	if err != nil {
		testenv.Unreachable(t, "user "+owner, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	return dir, &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
}

// startOwn starts s, stopping it at the end of the test; a server that
// does not start is unreachable (a failure under CI=true).
func startOwn(t testing.TB, s *ownServer) *ownServer {
	t.Helper()
	t.Cleanup(s.stop)
	if err := s.start(context.Background()); err != nil {
		testenv.Unreachable(t, s.name, err)
	}
	return s
}

// ownRedis starts a redis-server with the append-only file on and fsynced
// before every reply (--appendonly yes --appendfsync always), so that a
// SIGKILL loses no acknowledged write.
func ownRedis(t testing.TB) *ownServer {
	t.Helper()
	bin := ownBinary(t, "redis-server")
	dir, _ := ownServiceDir(t, "")
	s := &ownServer{name: "redis-server", port: ownFreePort(t), crashSignal: syscall.SIGKILL, logPath: filepath.Join(dir, "redis.log")}
	s.command = func() *exec.Cmd {
		return exec.Command(bin, "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--dir", dir,
			"--appendonly", "yes", "--appendfsync", "always", "--save", "", "--protected-mode", "no")
	}
	s.ready = func(ctx context.Context) error {
		c := goredis.NewClient(&goredis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: time.Second})
		defer c.Close()
		// Redis answers LOADING while it replays the AOF.
		return c.Ping(ctx).Err()
	}
	return startOwn(t, s)
}

// ownPostgres makes a cluster with initdb in a temp directory and runs
// postgres on a free port (as the postgres user when the test runs as
// root). fsync is off: the run crashes the server process, never the
// machine, so what was written before a commit's reply is in the page cache
// whatever fsync does; crash recovery replays the WAL at every start.
func ownPostgres(t testing.TB) *ownServer {
	t.Helper()
	globs := []string{"/usr/lib/postgresql/*/bin"}
	initdb, postgres := ownBinary(t, "initdb", globs...), ownBinary(t, "postgres", globs...)
	dir, cred := ownServiceDir(t, "postgres")
	data := filepath.Join(dir, "data")
	init := exec.Command(initdb, "-D", data, "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8")
	init.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := init.CombinedOutput(); err != nil {
		testenv.Unreachable(t, "initdb", fmt.Errorf("%v: %s", err, out))
	}
	s := &ownServer{name: "postgres", port: ownFreePort(t), crashSignal: syscall.SIGQUIT, logPath: filepath.Join(dir, "postgres.log")}
	s.command = func() *exec.Cmd {
		cmd := exec.Command(postgres, "-D", data, "-p", strconv.Itoa(s.port),
			"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+dir,
			"-c", "fsync=off", "-c", "max_connections=40", "-c", "shared_buffers=16MB")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		return cmd
	}
	s.ready = func(ctx context.Context) error {
		c, err := pgx.Connect(ctx, ownPostgresURL(s))
		if err != nil {
			return err
		}
		return c.Close(ctx)
	}
	return startOwn(t, s)
}

func ownPostgresURL(s *ownServer) string {
	return "postgres://postgres@" + s.Addr() + "/postgres?sslmode=disable&connect_timeout=2"
}

// ownMariaDB makes a data directory with mariadb-install-db and runs
// mariadbd on a free port and its own socket (as the mysql user when the
// test runs as root). A crash is SIGKILL; InnoDB recovers at the next
// start (innodb_flush_log_at_trx_commit=1, the default).
//
// The binary log is on, with sync_binlog=1. Without it InnoDB makes a
// commit visible to other transactions before its redo log is written
// (MySQL bug #74303): a crash in that window loses a record that another
// caller has already read. A fault run without it recorded that once (a
// claim that another claim had read, gone after the restart; not seen
// again in five runs). With the binary log, a
// commit is in the binary log, on disk, before InnoDB commits and others
// see it, and recovery commits it. RETRYSAFE_STOREFAULT_MARIADB_NOBINLOG=1
// runs without it, to see the anomaly.
func ownMariaDB(t testing.TB) *ownServer {
	t.Helper()
	install := ownBinary(t, "mariadb-install-db")
	mariadbd := ownBinary(t, "mariadbd", "/usr/sbin")
	dir, cred := ownServiceDir(t, "mysql")
	data, tmp := filepath.Join(dir, "data"), filepath.Join(dir, "tmp")
	// A tmpdir of its own: two bootstraps at once in /tmp collide on
	// their temporary tables' names.
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	if cred != nil {
		if err := os.Chown(tmp, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"--no-defaults", "--datadir=" + data, "--tmpdir=" + tmp, "--auth-root-authentication-method=normal", "--skip-test-db"}
	if cred != nil {
		args = append(args, "--user=mysql")
	}
	if out, err := exec.Command(install, args...).CombinedOutput(); err != nil {
		testenv.Unreachable(t, "mariadb-install-db", fmt.Errorf("%v: %s", err, out))
	}
	s := &ownServer{name: "mariadbd", port: ownFreePort(t), crashSignal: syscall.SIGKILL, logPath: filepath.Join(dir, "mariadbd.log")}
	s.command = func() *exec.Cmd {
		a := []string{"--no-defaults", "--datadir=" + data, "--tmpdir=" + tmp, "--port=" + strconv.Itoa(s.port),
			"--socket=" + filepath.Join(dir, "mariadbd.sock"), "--pid-file=" + filepath.Join(dir, "mariadbd.pid"),
			"--bind-address=127.0.0.1", "--innodb-buffer-pool-size=32M", "--innodb-log-file-size=16M",
			"--max-connections=60"} // errors go to stderr, into logPath
		if os.Getenv("RETRYSAFE_STOREFAULT_MARIADB_NOBINLOG") != "1" {
			a = append(a, "--log-bin="+filepath.Join(data, "binlog"), "--sync-binlog=1", "--server-id=1")
		}
		if cred != nil {
			a = append(a, "--user=mysql")
		}
		return exec.Command(mariadbd, a...)
	}
	s.ready = func(ctx context.Context) error {
		cfg := mysqldriver.NewConfig()
		cfg.User, cfg.Net, cfg.Addr, cfg.Timeout = "root", "tcp", s.Addr(), 2*time.Second
		conn, err := mysqldriver.NewConnector(cfg)
		if err != nil {
			return err
		}
		db := sql.OpenDB(conn)
		defer db.Close()
		_, err = db.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS test")
		return err
	}
	return startOwn(t, s)
}

func ownMariaDBURL(s *ownServer) string {
	return "mysql://root@" + s.Addr() + "/test?timeout=2s&readTimeout=2s&writeTimeout=2s"
}
