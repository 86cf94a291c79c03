package redis_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/retrysafe/retrysafe/internal/redisserver"
	redisstore "github.com/retrysafe/retrysafe/store/redis"
)

// listpackTricky are values at the edges of the listpack encodings: every
// integer width and its neighbours, strings that look like integers but are
// not canonical (HSET keeps those as strings), the 6-bit/12-bit string
// boundary, and bytes that are not text.
var listpackTricky = []string{
	"", "0", "1", "-1", "-0", "00", "01", "+5", " 1", "1 ", "1e3", "0x10", "-",
	"127", "128", "-128", "4095", "4096", "-4096", "-4097",
	"32767", "32768", "-32768", "-32769", "8388607", "8388608", "-8388608", "-8388609",
	"2147483647", "2147483648", "-2147483648", "-2147483649",
	"9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
	"99999999999999999999", "-99999999999999999999", "123456789012345678901",
	strings.Repeat("x", 63), strings.Repeat("y", 64), strings.Repeat("7", 20),
	"\x00", "\xff\xfe", "k\r\n\x00", "tenant/ü", "000063902419200123456789",
}

// TestListpackDumpMatchesHSET: the listpack payload RESTORE gets is the
// hash HSET builds from the same fields, byte for byte: DUMP of a key
// restored from it equals DUMP of a key written by HSET, for the record's
// fields and for values at the edges of every listpack encoding. The
// server runs with sanitize-dump-payload yes, so it validates every element
// of the payload (and its fields' uniqueness) before taking it.
func TestListpackDumpMatchesHSET(t *testing.T) {
	t.Parallel()
	srv := redisserver.Start(t, "--sanitize-dump-payload", "yes")
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	defer c.Close()
	ctx := t.Context()

	cases := map[string][]string{
		"record": {"scope", "tenant", "key", "order-17", "fp", strings.Repeat("ab", 32), "state", "processing",
			"token", "0123456789abcdef0123456789abcdef", "attempt", "1", "created", "000063902419200123456789",
			"updated", "000063902419200123456789", "lease", "000063902419230123456789", "nonce", "1234567890123456",
			"route", "POST /orders"},
	}
	for i, v := range listpackTricky {
		cases[fmt.Sprintf("value %d %q", i, v)] = []string{"f", v, "g", "2"}
		if v != "" {
			cases[fmt.Sprintf("field %d %q", i, v)] = []string{v, "x"}
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 100 {
		seen := map[string]bool{}
		var pairs []string
		for range 1 + r.IntN(20) {
			f := listpackTricky[r.IntN(len(listpackTricky))]
			if seen[f] {
				continue
			}
			seen[f] = true
			pairs = append(pairs, f, listpackTricky[r.IntN(len(listpackTricky))])
		}
		cases[fmt.Sprintf("random %d", i)] = pairs
	}
	for name, pairs := range cases {
		payload, ok := redisstore.ListpackDump(pairs...)
		if !ok {
			t.Fatalf("%s: no listpack payload", name)
		}
		if err := c.HSet(ctx, "hset", pairs).Err(); err != nil {
			t.Fatalf("%s: HSET: %v", name, err)
		}
		if err := c.Restore(ctx, "restored", 0, payload).Err(); err != nil {
			t.Fatalf("%s: RESTORE: %v", name, err)
		}
		if enc := c.ObjectEncoding(ctx, "restored").Val(); enc != "listpack" {
			t.Errorf("%s: restored as %q", name, enc)
		}
		want, got := c.Dump(ctx, "hset").Val(), c.Dump(ctx, "restored").Val()
		if got != want {
			t.Errorf("%s: DUMP of the restored key\n%q\nwant (HSET)\n%q", name, got, want)
		}
		if got, want := c.HGetAll(ctx, "restored").Val(), c.HGetAll(ctx, "hset").Val(); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: restored %v, HSET %v", name, got, want)
		}
		c.Del(ctx, "hset", "restored")
	}

	// Beyond the listpack limits HSET builds a hashtable: no listpack
	// payload (the plain one lets the server choose).
	if _, ok := redisstore.ListpackDump("f", strings.Repeat("z", 65)); ok {
		t.Error("listpack payload for a 65-byte value")
	}
	if _, ok := redisstore.ListpackDump(strings.Repeat("z", 65), "v"); ok {
		t.Error("listpack payload for a 65-byte field")
	}
	many := make([]string, 0, 2*129)
	for i := range 129 {
		many = append(many, fmt.Sprint("f", i), "v")
	}
	if _, ok := redisstore.ListpackDump(many...); ok {
		t.Error("listpack payload for 129 pairs")
	}
}

// TestRestoreListpackRefused: a server that refuses the listpack payload
// with an error (as one older than Redis 7.0 does: "DUMP payload version or
// checksum are wrong"; here a hook answers so) gets the plain payload in
// the same Claim, which wins, and every later Claim sends only the plain
// one. RESTORE stays on.
func TestRestoreListpackRefused(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	var listpacks, plains atomic.Int64
	c.AddHook(refuseListpack{&listpacks, &plains})
	s, err := redisstore.New(c, redisstore.Config{Prefix: testPrefix(t), DisableAutoPipeline: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	redisstore.ForceClaimOrder(s, redisstore.ClaimWriteFirst)
	now := time.Now()
	for i, want := range [][2]int64{{1, 1}, {1, 2}} {
		p := claimParams("scope", fmt.Sprint("k", i), now, time.Minute)
		res, err := s.Claim(t.Context(), p)
		if err != nil || !res.Claimed {
			t.Fatalf("claim %d: %+v, %v", i, res, err)
		}
		if got := [2]int64{listpacks.Load(), plains.Load()}; got != want {
			t.Fatalf("after claim %d: %d listpack and %d plain RESTOREs, want %v", i, got[0], got[1], want)
		}
		if !redisstore.PlainDump(s) || redisstore.RestoreRefused(s) {
			t.Fatalf("after claim %d: plain payload %v, RESTORE refused %v; want true, false", i, redisstore.PlainDump(s), redisstore.RestoreRefused(s))
		}
		mustComplete(t, s, p, now, time.Minute)
	}
}

// refuseListpack is a goredis.Hook that answers a RESTORE of a listpack
// payload with the error a server older than 7.0 gives, and counts the
// RESTOREs of each payload.
type refuseListpack struct{ listpacks, plains *atomic.Int64 }

func (refuseListpack) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (r refuseListpack) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if cmd.Name() != "restore" {
			return next(ctx, cmd)
		}
		if payload, _ := cmd.Args()[3].(string); payload != "" && payload[0] == 16 {
			r.listpacks.Add(1)
			err := serverError("ERR DUMP payload version or checksum are wrong")
			cmd.SetErr(err)
			return err
		}
		r.plains.Add(1)
		return next(ctx, cmd)
	}
}

// serverError is an error reply of the server, as go-redis reports one.
type serverError string

func (e serverError) Error() string { return string(e) }

func (serverError) RedisError() {}

func (refuseListpack) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}
