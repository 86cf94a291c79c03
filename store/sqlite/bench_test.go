package sqlite_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/cputime"
)

// benchKeys hands out unique keys across parallel goroutines.
var benchKeys atomic.Int64

func nextKey() string { return fmt.Sprint("bench-", benchKeys.Add(1)) }

// bothModes runs op serially, with b.RunParallel (GOMAXPROCS goroutines),
// and with 32 goroutines per GOMAXPROCS ("parallel-many": many callers
// queue for the single writer, as under a busy gateway, so group commit
// puts many writes in one transaction), failing on its first error.
func bothModes(b *testing.B, op func() error) {
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			if err := op(); err != nil {
				b.Fatal(err)
			}
		}
	})
	parallel := func(b *testing.B) {
		cpu0 := cputime.Process()
		defer func() {
			b.ReportMetric(float64((cputime.Process()-cpu0).Nanoseconds())/float64(b.N)/1000, "cpu-µs/op")
		}()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := op(); err != nil {
					b.Error(err) // not Fatal: this is not the benchmark's goroutine
					return
				}
			}
		})
	}
	b.Run("parallel", parallel)
	b.Run("parallel-many", func(b *testing.B) {
		b.SetParallelism(32)
		parallel(b)
	})
}

// BenchmarkClaimComplete: a new key claimed and completed (the path of
// every first request).
func BenchmarkClaimComplete(b *testing.B) {
	s, _ := openStore(b)
	ctx := context.Background()
	resp := &retrysafe.Response{Status: 201, Body: []byte(`{"id":"pay_1","amount":4200}`)}
	bothModes(b, func() error {
		p := claimParams(nextKey(), "fp", base)
		res, err := s.Claim(ctx, p)
		if err != nil || !res.Claimed {
			return fmt.Errorf("Claim: %v, %v", res, err)
		}
		err = s.Complete(ctx, &retrysafe.CompleteParams{Scope: p.Scope, Key: p.Key, Token: p.Token, Now: base, TTL: time.Hour, Response: resp})
		if err != nil {
			return fmt.Errorf("Complete: %v", err)
		}
		return nil
	})
}

// BenchmarkReplay: a claim that finds the completed record (the path of
// every retry).
func BenchmarkReplay(b *testing.B) {
	s, _ := openStore(b)
	ctx := context.Background()
	p := claimParams("replayed", "fp", base)
	if _, err := s.Claim(ctx, p); err != nil {
		b.Fatal(err)
	}
	resp := &retrysafe.Response{Status: 201, Body: []byte(`{"id":"pay_1","amount":4200}`)}
	if err := s.Complete(ctx, &retrysafe.CompleteParams{Scope: p.Scope, Key: p.Key, Token: p.Token, Now: base, TTL: time.Hour, Response: resp}); err != nil {
		b.Fatal(err)
	}
	bothModes(b, func() error {
		res, err := s.Claim(ctx, claimParams("replayed", "fp", base.Add(time.Second)))
		if err != nil || res.Claimed {
			return fmt.Errorf("replay Claim: %v, %v", res, err)
		}
		return nil
	})
}

// BenchmarkRawInsertUpdate is the same-run baseline: a plain prepared
// INSERT then UPDATE of one row in a table shaped like the records table,
// on a database opened the same way (WAL, synchronous=FULL), with no
// conflict handling, fencing or retry.
func BenchmarkRawInsertUpdate(b *testing.B) {
	s, _ := openStore(b)
	ctx := context.Background()
	db := s.DB()
	_, err := db.ExecContext(ctx, `CREATE TABLE raw (
	scope TEXT NOT NULL, idem_key TEXT NOT NULL, fingerprint TEXT NOT NULL, state TEXT NOT NULL,
	token TEXT NOT NULL, attempt INTEGER NOT NULL, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL,
	lease_until INTEGER NOT NULL, expires_at INTEGER, status INTEGER, headers TEXT, body BLOB,
	PRIMARY KEY (scope, idem_key))`)
	if err != nil {
		b.Fatal(err)
	}
	ins, err := db.PrepareContext(ctx, `INSERT INTO raw (scope, idem_key, fingerprint, state, token, attempt,
	created_at, updated_at, lease_until) VALUES (?, ?, ?, 'processing', ?, 1, ?, ?, ?)`)
	if err != nil {
		b.Fatal(err)
	}
	defer ins.Close()
	upd, err := db.PrepareContext(ctx, `UPDATE raw SET state = 'completed', updated_at = ?, expires_at = ?,
	status = ?, headers = ?, body = ? WHERE scope = ? AND idem_key = ?`)
	if err != nil {
		b.Fatal(err)
	}
	defer upd.Close()
	now := base.UnixNano()
	body := []byte(`{"id":"pay_1","amount":4200}`)
	bothModes(b, func() error {
		key := nextKey()
		if _, err := ins.ExecContext(ctx, "tenant", key, "fp", "token", now, now, now); err != nil {
			return fmt.Errorf("INSERT: %v", err)
		}
		if _, err := upd.ExecContext(ctx, now, now, 201, "{}", body, "tenant", key); err != nil {
			return fmt.Errorf("UPDATE: %v", err)
		}
		return nil
	})
}
