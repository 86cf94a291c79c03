package redis_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	redisstore "github.com/retrysafe/retrysafe/store/redis"
)

// batchCounter is a goredis.Hook that records the largest number of the
// store's record commands in one pipeline, and counts the commands sent on
// their own.
type batchCounter struct {
	largest atomic.Int64
	single  atomic.Int64
}

func (c *batchCounter) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (c *batchCounter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		c.single.Add(1)
		return next(ctx, cmd)
	}
}

func (c *batchCounter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		n := int64(0) // record commands (not connection setup)
		for _, cmd := range cmds {
			switch cmd.Name() {
			case "hgetall", "evalsha", "eval":
				n++
			}
		}
		for {
			cur := c.largest.Load()
			if n <= cur || c.largest.CompareAndSwap(cur, n) {
				break
			}
		}
		return next(ctx, cmds)
	}
}

// TestAutoPipeline: concurrent calls of one store share round trips (the
// client's autopipeliner puts several callers' commands in one
// pipeline), unless Config.DisableAutoPipeline is set.
func TestAutoPipeline(t *testing.T) {
	t.Parallel()
	for _, disable := range []bool{false, true} {
		t.Run(fmt.Sprint("DisableAutoPipeline=", disable), func(t *testing.T) {
			t.Parallel()
			c := newClient(t, func(o *goredis.Options) { o.PoolSize = 32 })
			counter := &batchCounter{}
			c.AddHook(counter)
			s, err := redisstore.New(c, redisstore.Config{Prefix: testPrefix(t), DisableAutoPipeline: disable})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			now := time.Now()
			// Rounds of 32 overlapping new requests, until a pipeline
			// carried more than one command (or 50 rounds passed).
			for round := 0; round < 50 && counter.largest.Load() < 2; round++ {
				var wg sync.WaitGroup
				start := make(chan struct{})
				for i := range 32 {
					wg.Go(func() {
						<-start
						p := claimParams("scope", fmt.Sprint(round, "-", i), now, time.Minute)
						mustClaim(t, s, p)
						mustComplete(t, s, p, now, time.Minute)
					})
				}
				close(start)
				wg.Wait()
			}
			largest := counter.largest.Load()
			t.Logf("largest pipeline: %d commands; %d commands sent alone", largest, counter.single.Load())
			if !disable && largest < 2 {
				t.Errorf("no pipeline carried more than one command")
			}
			if disable && largest > 0 {
				t.Errorf("with DisableAutoPipeline a pipeline of %d commands was sent", largest)
			}
		})
	}
}
