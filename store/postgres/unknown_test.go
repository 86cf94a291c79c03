package postgres_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/internal/batchtest"
)

// getRec reads a record at now, nil when there is none.
func getRec(t *testing.T, s retrysafe.Store, key string, now time.Time) *retrysafe.Record {
	t.Helper()
	rec, err := s.Get(t.Context(), &retrysafe.GetParams{Scope: scope, Key: key, Now: now})
	if errors.Is(err, retrysafe.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// TestUnknownOutcomes walks one record through the store contract of
// issue 30 with lone calls (each its own single statement): a checkpoint
// and an abandon ride on the fenced Extend, a takeover keeps the
// checkpoint and clears the abandon, NoTakeover and TakeoverToken refuse a
// takeover, Complete keeps the checkpoint, and Stats counts an abandoned
// record as unknown while its lease still runs.
func TestUnknownOutcomes(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	p := claimP("k", fpA, at(0))
	mustClaim(t, s, p)
	ext := func(e *retrysafe.ExtendParams) error {
		e.Scope, e.Key = scope, "k"
		return s.Extend(ctx, e)
	}
	data := bytes.Repeat([]byte{0, 0xff, 'x'}, retrysafe.MaxCheckpointData/3)
	if err := ext(&retrysafe.ExtendParams{Token: "other", Now: at(0), Lease: lease,
		Checkpoint: &retrysafe.Checkpoint{Name: "charged", Data: data}}); !errors.Is(err, retrysafe.ErrLeaseLost) {
		t.Fatalf("checkpoint under another token = %v, want ErrLeaseLost", err)
	}
	if rec := getRec(t, s, "k", at(0)); rec.Checkpoint != nil {
		t.Fatalf("a fenced-out checkpoint was stored: %+v", rec.Checkpoint)
	}
	t1 := at(time.Second)
	if err := ext(&retrysafe.ExtendParams{Token: p.Token, Now: t1, Lease: lease,
		Checkpoint: &retrysafe.Checkpoint{Name: "charged", Data: data, At: at(-time.Hour)}}); err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	rec := getRec(t, s, "k", t1)
	if cp := rec.Checkpoint; cp == nil || cp.Name != "charged" || !bytes.Equal(cp.Data, data) || !cp.At.Equal(t1) {
		t.Fatalf("checkpoint read back as %+v, want charged with %d bytes at Now", cp, len(data))
	}
	if !rec.LeaseUntil.Equal(t1.Add(lease)) || rec.Abandoned {
		t.Fatalf("after a checkpoint: lease until %v (want Now+Lease), abandoned %v", rec.LeaseUntil, rec.Abandoned)
	}
	t2 := t1.Add(time.Second)
	if err := ext(&retrysafe.ExtendParams{Token: p.Token, Now: t2, Lease: time.Hour, Abandon: true}); err != nil {
		t.Fatalf("abandon: %v", err)
	}
	rec = getRec(t, s, "k", t2)
	if !rec.Abandoned || !rec.LeaseUntil.Equal(t1.Add(lease)) || rec.Checkpoint == nil || admin.StatusOf(rec, t2) != admin.StatusUnknown {
		t.Fatalf("after abandon: abandoned %v, lease until %v (want %v), checkpoint %v", rec.Abandoned, rec.LeaseUntil, t1.Add(lease), rec.Checkpoint != nil)
	}
	st, err := s.Stats(ctx, &admin.StatsParams{Now: t2})
	if err != nil {
		t.Fatal(err)
	}
	if st.LeaseExpired != 1 || len(st.Unknown) != 1 || st.OldestInFlight != nil || !st.Unknown[0].Abandoned {
		t.Fatalf("Stats of an abandoned record: %d unknown, %d listed, oldest in flight %v", st.LeaseExpired, len(st.Unknown), st.OldestInFlight)
	}
	late := t1.Add(2 * lease)
	for name, c := range map[string]*retrysafe.ClaimParams{
		"NoTakeover":            {NoTakeover: true, TakeoverToken: p.Token, Fingerprint: fpA},
		"another TakeoverToken": {TakeoverToken: "other", Fingerprint: fpA},
		"another fingerprint":   {Fingerprint: fpB},
	} {
		c.Scope, c.Key, c.Token, c.Now, c.Lease = scope, "k", retrysafe.NewToken(), late, lease
		res := mustClaim(t, s, c)
		if res.Claimed || res.Record.Token != p.Token || !res.Record.Abandoned || res.Record.Checkpoint == nil {
			t.Fatalf("%s: claimed %v, record ours %v, abandoned %v", name, res.Claimed, res.Record.Token == p.Token, res.Record.Abandoned)
		}
	}
	c := claimP("k", fpA, late)
	c.TakeoverToken = p.Token
	res := mustClaim(t, s, c)
	if !res.Claimed || res.Record.Attempt != 2 || res.Record.Abandoned {
		t.Fatalf("takeover with the record's token: claimed %v, attempt %d, abandoned %v", res.Claimed, res.Record.Attempt, res.Record.Abandoned)
	}
	if cp := res.Record.Checkpoint; cp == nil || cp.Name != "charged" || !bytes.Equal(cp.Data, data) || !cp.At.Equal(t1) {
		t.Fatalf("takeover returned checkpoint %+v, want the kept one", cp)
	}
	if err := ext(&retrysafe.ExtendParams{Token: c.Token, Now: late, Abandon: true, Checkpoint: &retrysafe.Checkpoint{Name: "second"}}); err != nil {
		t.Fatalf("abandon with a checkpoint: %v", err)
	}
	if rec := getRec(t, s, "k", late); !rec.Abandoned || rec.Checkpoint.Name != "second" || len(rec.Checkpoint.Data) != 0 {
		t.Fatalf("abandon with a checkpoint: abandoned %v, checkpoint %+v", rec.Abandoned, rec.Checkpoint)
	}
	if err := s.Complete(ctx, &retrysafe.CompleteParams{Scope: scope, Key: "k", Token: c.Token, Now: late, TTL: time.Hour,
		Response: &retrysafe.Response{Status: 200}}); err != nil {
		t.Fatal(err)
	}
	if rec := getRec(t, s, "k", late); rec.Abandoned || rec.Checkpoint == nil || rec.Checkpoint.Name != "second" {
		t.Fatalf("after Complete: abandoned %v, checkpoint %+v", rec.Abandoned, rec.Checkpoint)
	}
	fresh := claimP("k", fpA, late.Add(2*time.Hour))
	if res := mustClaim(t, s, fresh); !res.Claimed || res.Record.Attempt != 1 || res.Record.Checkpoint != nil {
		t.Fatalf("claim of an expired record: claimed %v, attempt %d, checkpoint %+v", res.Claimed, res.Record.Attempt, res.Record.Checkpoint)
	}
}

// TestBatchUnknownOutcomes: claims with a takeover policy and extensions
// with an abandon or a checkpoint, all in one batch, decide as their lone
// calls do (TestUnknownOutcomes), in every exec mode.
func TestBatchUnknownOutcomes(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"cache_statement", "cache_describe", "exec"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			testBatchUnknownOutcomes(t, poolWithExecMode(t, mode))
		})
	}
}

func testBatchUnknownOutcomes(t *testing.T, pool *pgxpool.Pool) {
	schema := newSchema(t)
	s := newBatchStore(t, pool, schema)
	ctx := t.Context()
	now := at(lease + time.Second) // the batch's time: leases claimed at 0 ran out
	// Records whose lease ran out by now, each abandoned with a checkpoint.
	stranded := map[string]*retrysafe.ClaimResult{}
	for _, k := range []string{"no-takeover", "wrong-token", "right-token", "plain"} {
		stranded[k] = mustClaim(t, s, claimP(k, fpA, at(0)))
		if err := s.Extend(ctx, &retrysafe.ExtendParams{Scope: scope, Key: k, Token: stranded[k].Record.Token, Now: at(0), Lease: lease,
			Abandon: true, Checkpoint: &retrysafe.Checkpoint{Name: "cp-" + k, Data: []byte(k)}}); err != nil {
			t.Fatal(err)
		}
	}
	// Live records extended in the batch.
	live := map[string]*retrysafe.ClaimResult{}
	for _, k := range []string{"abandon", "checkpoint", "both", "foreign", "done"} {
		live[k] = mustClaim(t, s, claimP(k, fpA, at(lease)))
	}
	if err := s.Extend(ctx, &retrysafe.ExtendParams{Scope: scope, Key: "done", Token: live["done"].Record.Token, Now: at(lease), Lease: lease,
		Abandon: true, Checkpoint: &retrysafe.Checkpoint{Name: "before"}}); err != nil {
		t.Fatal(err)
	}

	release := holdKeys(t, schema, "plug")
	plugErr, _ := plug(t, s, schema)
	before := s.BatchStats()
	claims := map[string]*retrysafe.ClaimParams{}
	for k := range stranded {
		claims[k] = claimP(k, fpA, now)
	}
	claims["no-takeover"].NoTakeover = true
	claims["no-takeover"].TakeoverToken = stranded["no-takeover"].Record.Token
	claims["wrong-token"].TakeoverToken = stranded["plain"].Record.Token
	claims["right-token"].TakeoverToken = stranded["right-token"].Record.Token
	order := []string{"no-takeover", "wrong-token", "right-token", "plain"}
	got := make(map[string]*retrysafe.ClaimResult)
	var mu sync.Mutex
	var calls []func() error
	for _, k := range order {
		calls = append(calls, func() error {
			res, err := s.Claim(ctx, claims[k])
			mu.Lock()
			got[k] = res
			mu.Unlock()
			return err
		})
	}
	extend := func(k, token string, abandon bool, cp *retrysafe.Checkpoint) func() error {
		return func() error {
			return s.Extend(ctx, &retrysafe.ExtendParams{Scope: scope, Key: k, Token: token, Now: now, Lease: lease, Abandon: abandon, Checkpoint: cp})
		}
	}
	calls = append(calls,
		extend("abandon", live["abandon"].Record.Token, true, nil),
		extend("checkpoint", live["checkpoint"].Record.Token, false, &retrysafe.Checkpoint{Name: "step", Data: []byte("ref")}),
		extend("both", live["both"].Record.Token, true, &retrysafe.Checkpoint{Name: "both"}),
		extend("foreign", "other", true, &retrysafe.Checkpoint{Name: "nope"}),
		func() error {
			return s.Complete(ctx, &retrysafe.CompleteParams{Scope: scope, Key: "done", Token: live["done"].Record.Token, Now: now, TTL: ttl,
				Response: &retrysafe.Response{Status: 200}})
		},
	)
	wait := batchtest.SendInOrder(t, s, calls)
	release()
	if err := <-plugErr; err != nil {
		t.Fatalf("plug: %v", err)
	}
	errs := wait()
	for i, err := range errs {
		want := error(nil)
		if i == len(order)+3 {
			want = retrysafe.ErrLeaseLost // the foreign extension
		}
		if !errors.Is(err, want) || (want == nil && err != nil) {
			t.Errorf("call %d: %v, want %v", i, err, want)
		}
	}
	after := s.BatchStats()
	batchtest.OneBatch(t, before, after, len(calls))
	batchtest.Alone(t, before, after, 2, "the two takeovers")
	for _, k := range []string{"no-takeover", "wrong-token"} {
		if r := got[k]; r.Claimed || r.Record.Token != stranded[k].Record.Token || !r.Record.Abandoned ||
			r.Record.Checkpoint == nil || r.Record.Checkpoint.Name != "cp-"+k {
			t.Errorf("%s: claimed %v, %+v, want the abandoned record unchanged", k, r.Claimed, r.Record)
		}
	}
	for _, k := range []string{"right-token", "plain"} {
		r := got[k]
		if !r.Claimed || r.Record.Attempt != 2 || r.Record.Abandoned || r.Record.Checkpoint == nil ||
			r.Record.Checkpoint.Name != "cp-"+k || string(r.Record.Checkpoint.Data) != k || !r.Record.Checkpoint.At.Equal(at(0)) {
			t.Errorf("%s: claimed %v, %+v, want a takeover keeping the checkpoint", k, r.Claimed, r.Record)
		}
		if rec := getRec(t, s, k, now); rec.Abandoned || rec.Token != claims[k].Token || rec.Checkpoint == nil {
			t.Errorf("%s after the takeover: %+v", k, rec)
		}
	}
	if r := getRec(t, s, "abandon", now); !r.Abandoned || !r.LeaseUntil.Equal(at(2*lease)) || r.Checkpoint != nil || !r.UpdatedAt.Equal(now) {
		t.Errorf("abandon: %+v, want abandoned with its lease until %v", r, at(2*lease))
	}
	if r := getRec(t, s, "checkpoint", now); r.Abandoned || !r.LeaseUntil.Equal(now.Add(lease)) || r.Checkpoint == nil ||
		r.Checkpoint.Name != "step" || string(r.Checkpoint.Data) != "ref" || !r.Checkpoint.At.Equal(now) {
		t.Errorf("checkpoint: %+v (checkpoint %+v)", r, r.Checkpoint)
	}
	if r := getRec(t, s, "both", now); !r.Abandoned || !r.LeaseUntil.Equal(at(2*lease)) || r.Checkpoint == nil || r.Checkpoint.Name != "both" {
		t.Errorf("both: %+v (checkpoint %+v)", r, r.Checkpoint)
	}
	if r := getRec(t, s, "foreign", now); r.Abandoned || r.Checkpoint != nil {
		t.Errorf("foreign: a fenced-out extension changed %+v", r)
	}
	if r := getRec(t, s, "done", now); r.State != retrysafe.StateCompleted || r.Abandoned || r.Checkpoint == nil || r.Checkpoint.Name != "before" {
		t.Errorf("done: %+v, want completed, not abandoned, its checkpoint kept", r)
	}
}

// TestCheckpointTx: a checkpoint written in the business transaction is
// there when it commits and absent when it rolls back; it is fenced.
func TestCheckpointTx(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	pool := sharedPool(t)
	s := newStoreOn(t, pool, schema)
	ctx := t.Context()
	payments := pgx.Identifier{schema, "payments"}.Sanitize()
	if _, err := pool.Exec(ctx, "CREATE TABLE "+payments+" (id text PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	step := func(p *retrysafe.ClaimParams, token string, commit bool) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(context.Background())
		if _, err := tx.Exec(ctx, "INSERT INTO "+payments+" (id) VALUES ($1)", "pay_"+p.Key); err != nil {
			t.Fatal(err)
		}
		err = s.CheckpointTx(ctx, tx, &retrysafe.ExtendParams{Scope: scope, Key: p.Key, Token: token, Now: at(time.Second), Lease: lease,
			Checkpoint: &retrysafe.Checkpoint{Name: "charge requested", Data: []byte("pay_" + p.Key)}})
		if err != nil {
			return err
		}
		if commit {
			return tx.Commit(ctx)
		}
		return tx.Rollback(ctx)
	}
	payment := func(key string) bool {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+payments+" WHERE id = $1", "pay_"+key).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	for _, commit := range []bool{true, false} {
		p := claimP(map[bool]string{true: "commit", false: "rollback"}[commit], fpA, at(0))
		mustClaim(t, s, p)
		if err := step(p, p.Token, commit); err != nil {
			t.Fatalf("%s: %v", p.Key, err)
		}
		rec := getRec(t, s, p.Key, at(time.Second))
		if payment(p.Key) != commit || (rec.Checkpoint != nil) != commit {
			t.Fatalf("%s: payment %v, checkpoint %+v", p.Key, payment(p.Key), rec.Checkpoint)
		}
		if commit && (rec.Checkpoint.Name != "charge requested" || string(rec.Checkpoint.Data) != "pay_commit" ||
			!rec.Checkpoint.At.Equal(at(time.Second)) || !rec.LeaseUntil.Equal(at(time.Second+lease))) {
			t.Fatalf("committed: %+v, checkpoint %+v", rec, rec.Checkpoint)
		}
		if !commit && !rec.LeaseUntil.Equal(at(lease)) {
			t.Fatalf("rolled back: lease until %v, want the claim's", rec.LeaseUntil)
		}
	}
	p := claimP("fenced", fpA, at(0))
	mustClaim(t, s, p)
	if err := step(p, "other", true); !errors.Is(err, retrysafe.ErrLeaseLost) {
		t.Fatalf("CheckpointTx under another token = %v, want ErrLeaseLost", err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	for what, bad := range map[string]*retrysafe.ExtendParams{
		"no checkpoint": {Scope: scope, Key: p.Key, Token: p.Token, Now: at(0), Lease: lease},
		"no lease":      {Scope: scope, Key: p.Key, Token: p.Token, Now: at(0), Checkpoint: &retrysafe.Checkpoint{Name: "x"}},
		"empty name":    {Scope: scope, Key: p.Key, Token: p.Token, Now: at(0), Lease: lease, Checkpoint: &retrysafe.Checkpoint{}},
		"too much data": {Scope: scope, Key: p.Key, Token: p.Token, Now: at(0), Lease: lease,
			Checkpoint: &retrysafe.Checkpoint{Name: "x", Data: make([]byte, retrysafe.CheckpointStoreLimit+1)}},
	} {
		if err := s.CheckpointTx(ctx, tx, bad); err == nil || errors.Is(err, retrysafe.ErrLeaseLost) {
			t.Errorf("CheckpointTx with %s = %v, want an error saying so", what, err)
		}
	}
}
