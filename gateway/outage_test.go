package gateway_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"
	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/gateway"
	"github.com/retrysafe/retrysafe/store/mysql"
	"github.com/retrysafe/retrysafe/store/postgres"
	"github.com/retrysafe/retrysafe/store/redis"
	"github.com/retrysafe/retrysafe/store/sealed"
)

// tcpProxy forwards TCP connections to a server and can cut them all, as a
// network outage between the gateway and its store would.
type tcpProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	down  bool
	conns map[net.Conn]struct{}
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.setDown(true)
	})
	return p
}

func (p *tcpProxy) addr() string { return p.ln.Addr().String() }

func (p *tcpProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.down {
			p.mu.Unlock()
			c.Close()
			continue
		}
		s, err := net.DialTimeout("tcp", p.target, 2*time.Second)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		p.mu.Unlock()
		go func() { _, _ = io.Copy(s, c); s.Close() }()
		go func() { _, _ = io.Copy(c, s); c.Close() }()
	}
}

// setDown cuts every connection and refuses new ones (true), or lets them
// through again (false).
func (p *tcpProxy) setDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for c := range p.conns {
			c.Close()
		}
		clear(p.conns)
	}
}

// TestRealStoreOutage cuts the network between the gateway and a real
// PostgreSQL or Redis: requests get 503 and nothing reaches the upstream;
// /readyz says 503; once the network is back, both recover.
func TestRealStoreOutage(t *testing.T) {
	t.Parallel()
	for name, open := range map[string]func(t *testing.T) (retrysafe.Store, *tcpProxy){
		"postgres": func(t *testing.T) (retrysafe.Store, *tcpProxy) {
			dsn := postgresURL(t)
			u, err := url.Parse(dsn)
			if err != nil {
				t.Fatal(err)
			}
			port := u.Port()
			if port == "" {
				port = "5432"
			}
			p := newTCPProxy(t, net.JoinHostPort(u.Hostname(), port))
			t.Cleanup(func() { p.setDown(false) })
			u.Host = p.addr()
			schema := "gw_outage_" + randomHex(6)
			t.Cleanup(func() { dropSchema(dsn, schema) })
			s, err := postgres.Open(context.Background(), u.String(), postgres.Config{Schema: schema})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s, p
		},
		"redis": func(t *testing.T) (retrysafe.Store, *tcpProxy) {
			p := newTCPProxy(t, redisAddr(t))
			s, err := redis.Open(context.Background(), "redis://"+p.addr()+"/0", redis.Config{Prefix: "retrysafe-gwtest:" + randomHex(6) + ":"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s, p
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			store, p := open(t)
			up := newUpstream(t)
			gw := startGateway(t, gateway.Config{Upstream: mustURL(t, up.URL), Store: store, StoreTimeout: 2 * time.Second})
			key := newKey()
			if res := send(t, gw.URL, "POST", "/payments", newKey(), `{"amount":1}`); res.Status != 201 {
				t.Fatalf("before the outage = %s", res)
			}

			p.setDown(true)
			res := send(t, gw.URL, "POST", "/payments", key, `{"amount":2}`)
			if res.Status != 503 || problemType(t, res) != retrysafe.ProblemStoreUnavailable || res.Header.Get("Retry-After") == "" {
				t.Fatalf("during the outage = %s", res)
			}
			if ready := send(t, gw.AdminURL, "GET", "/readyz", "", ""); ready.Status != 503 {
				t.Fatalf("/readyz during the outage = %s", ready)
			}
			if n := up.calls.Load(); n != 1 {
				t.Fatalf("upstream calls = %d, want 1 (nothing forwarded during the outage)", n)
			}

			p.setDown(false)
			eventually(t, 20*time.Second, "/readyz to recover", func() bool {
				return send(t, gw.AdminURL, "GET", "/readyz", "", "").Status == 200
			})
			// A 503 ran nothing, so retrying it is safe; the first calls
			// after the outage may still meet a dead pooled connection.
			eventually(t, 20*time.Second, "requests to recover", func() bool {
				res = send(t, gw.URL, "POST", "/payments", key, `{"amount":2}`)
				return res.Status != 503
			})
			if res.Status != 201 {
				t.Fatalf("after the outage = %s", res)
			}
			if again := send(t, gw.URL, "POST", "/payments", key, `{"amount":2}`); again.Header.Get(retrysafe.HeaderReplayed) != "true" {
				t.Fatalf("replay after the outage = %s", again)
			}
			if n := up.calls.Load(); n != 2 {
				t.Fatalf("upstream calls = %d, want 2", n)
			}
		})
	}
}

// TestReadyRefused: /readyz answers 503 promptly, well under ReadyTimeout,
// when the store's server refuses connections, also behind the sealed
// wrapper. The Redis client keeps its default retries (a refused dial is
// tried 5 times 100 ms apart, the command 4 times: about 1.7 s); the probe
// must not wait them out. Each store is checked several times, because
// go-redis stops dialing for a while after PoolSize failed dials.
func TestReadyRefused(t *testing.T) {
	t.Parallel()
	for name, open := range map[string]func(t *testing.T, addr string) retrysafe.Store{
		"redis": func(t *testing.T, addr string) retrysafe.Store {
			c := goredis.NewClient(&goredis.Options{Addr: addr}) // default retries
			t.Cleanup(func() { _ = c.Close() })
			s, err := redis.New(c, redis.Config{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
		"postgres": func(t *testing.T, addr string) retrysafe.Store {
			pool, err := pgxpool.New(context.Background(), "postgres://postgres@"+addr+"/test?sslmode=disable")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			s, err := postgres.New(pool, postgres.Config{})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		"mysql": func(t *testing.T, addr string) retrysafe.Store {
			// mysql.Open migrates, which fails on a refused port: the
			// store is built on a pool, as a gateway whose database went
			// away after it started has one.
			dc := mysqldriver.NewConfig()
			dc.Net, dc.Addr, dc.User, dc.DBName = "tcp", addr, "root", "test"
			conn, err := mysqldriver.NewConnector(dc)
			if err != nil {
				t.Fatal(err)
			}
			db := sql.OpenDB(conn)
			t.Cleanup(func() { _ = db.Close() })
			ms, err := mysql.New(db, mysql.Config{})
			if err != nil {
				t.Fatal(err)
			}
			return ms
		},
	} {
		for _, wrapped := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/sealed=%v", name, wrapped), func(t *testing.T) {
				t.Parallel()
				store := open(t, freeAddr(t))
				if wrapped {
					s, err := sealed.New(store, nil, sealed.Config{})
					if err != nil {
						t.Fatal(err)
					}
					store = s
				}
				log := &syncBuffer{}
				gw := startGateway(t, gateway.Config{Upstream: mustURL(t, "http://"+freeAddr(t)), Store: store, Logger: slog.New(slog.NewTextHandler(log, nil))})
				const bound = gateway.ReadyTimeout / 2
				for i := range 3 {
					start := time.Now()
					res := send(t, gw.AdminURL, "GET", "/readyz", "", "")
					took := time.Since(start)
					// The answer says not ready; the log says why.
					if res.Status != 503 || !strings.Contains(string(res.Body), "not ready") || !strings.Contains(log.String(), "refused") {
						t.Fatalf("/readyz #%d with the server refusing = %s; log:\n%s", i+1, res, log)
					}
					if took >= bound {
						t.Fatalf("/readyz #%d took %s to answer 503, want < %s (ReadyTimeout/2)", i+1, took, bound)
					}
					t.Logf("/readyz #%d: 503 in %s", i+1, took)
				}
			})
		}
	}
}
