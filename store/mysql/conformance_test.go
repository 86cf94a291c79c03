package mysql_test

import (
	"database/sql"
	"errors"
	"time"

	driver "github.com/go-sql-driver/mysql"
	"net"
	"strconv"
	"testing"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/testenv"
	"github.com/retrysafe/retrysafe/store/mysql"
	"github.com/retrysafe/retrysafe/store/storetest"
)

// TestConformance runs the shared store suite, each scenario with a table
// of its own.
func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) retrysafe.Store { return newStore(t) })
}

// TestShared runs the two-instance suite: two stores on independent
// *sql.DB (as two processes would have) over one table, 200 rounds.
func TestShared(t *testing.T) {
	t.Parallel()
	storetest.RunShared(t, func(t *testing.T) (a, b retrysafe.Store) {
		table := newTable(t)
		return newStoreOn(t, newDB(t, 8), table), newStoreOn(t, newDB(t, 8), table)
	})
}

// TestUnavailable runs the unreachable-store suite twice: a store that was
// opened and closed, and a store whose *sql.DB dials a port nobody listens
// on.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	t.Run("closed", func(t *testing.T) {
		t.Parallel()
		storetest.RunUnavailable(t, func(t *testing.T) retrysafe.Store {
			sharedDB(t)
			table := newTable(t)
			s, err := mysql.Open(t.Context(), testenv.MySQLURL(), mysql.Config{Table: table})
			if err != nil {
				t.Fatal(err)
			}
			s.Close()
			return s
		})
	})
	t.Run("dead port", func(t *testing.T) {
		t.Parallel()
		storetest.RunUnavailable(t, func(t *testing.T) retrysafe.Store {
			return deadStore(t)
		})
	})
}

// deadStore returns a store whose database dials a local port that was
// just free, so every connection attempt is refused.
func deadStore(t *testing.T) *mysql.Store {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	s, err := mysql.Open(t.Context(), "mysql://root@127.0.0.1:"+strconv.Itoa(port)+"/test?timeout=1s", mysql.Config{})
	if !errors.Is(err, retrysafe.ErrStoreUnavailable) {
		s.Close()
		t.Fatalf("Open of a dead port: %v, want ErrStoreUnavailable", err)
	}
	// Open migrates, which fails: build the store on a *sql.DB instead.
	db := openDead(t, port)
	s, err = mysql.New(db, mysql.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// openDead returns a *sql.DB that dials 127.0.0.1:port with a one-second
// timeout, closed when the test ends.
func openDead(t *testing.T, port int) *sql.DB {
	t.Helper()
	dc := driver.NewConfig()
	dc.User, dc.Net, dc.Addr, dc.DBName = "root", "tcp", "127.0.0.1:"+strconv.Itoa(port), "test"
	dc.Timeout = time.Second
	connector, err := driver.NewConnector(dc)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(connector)
	t.Cleanup(func() { db.Close() })
	return db
}
