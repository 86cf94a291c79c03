package redis_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/retrysafe/retrysafe"
	redisstore "github.com/retrysafe/retrysafe/store/redis"
)

// Example drives the store directly, the way the engine does: claim the
// key, run the operation once, store its answer; a duplicate gets the
// stored answer from its claim. (It needs a Redis server, so it is compiled
// but not run by go test.)
func Example() {
	ctx := context.Background()
	client := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()

	store, err := redisstore.New(client, redisstore.Config{Prefix: "payments:idem:"})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	handle := func(key string) *retrysafe.Response {
		now := time.Now()
		claim := &retrysafe.ClaimParams{
			Scope:       "tenant-42",
			Key:         key,
			Fingerprint: "POST /payments amount=1000",
			Token:       retrysafe.NewToken(),
			Now:         now,
			Lease:       30 * time.Second,
		}
		res, err := store.Claim(ctx, claim)
		if err != nil {
			log.Fatal(err) // errors.Is(err, retrysafe.ErrStoreUnavailable): answer 503
		}
		if !res.Claimed {
			if res.Record.State == retrysafe.StateCompleted {
				return res.Record.Response // replay
			}
			return &retrysafe.Response{Status: http.StatusConflict} // still in flight
		}
		// The operation runs once per key.
		resp := &retrysafe.Response{Status: http.StatusCreated, Body: []byte(`{"id":"pay_1"}`)}
		err = store.Complete(ctx, &retrysafe.CompleteParams{
			Scope: claim.Scope, Key: key, Token: claim.Token,
			Now: time.Now(), TTL: 24 * time.Hour, Response: resp,
		})
		if err != nil {
			log.Fatal(err)
		}
		return resp
	}

	first := handle("order-1")
	retry := handle("order-1")
	fmt.Println(first.Status, retry.Status, string(retry.Body))
}

// ExampleOpen connects from a URL, as the retrysafe CLI does for
// --store redis://…, and waits for a duplicate's original to finish with
// Subscribe, polling as the fallback.
func ExampleOpen() {
	ctx := context.Background()
	store, err := redisstore.Open(ctx, "redis://127.0.0.1:6379/0", redisstore.Config{})
	if err != nil {
		log.Fatal(err) // the server did not answer
	}
	defer store.Close()

	changed, unsubscribe, err := store.Subscribe(ctx, "tenant-42", "order-1")
	if err != nil {
		log.Fatal(err)
	}
	defer unsubscribe()
	poll := time.NewTicker(time.Second)
	defer poll.Stop()
	for {
		rec, err := store.Get(ctx, &retrysafe.GetParams{Scope: "tenant-42", Key: "order-1", Now: time.Now()})
		if err != nil || rec.State == retrysafe.StateCompleted {
			break // released (ErrNotFound: run it again), failed, or done
		}
		select {
		case <-changed:
		case <-poll.C:
		}
	}
}

// ExampleOpen_cluster opens a Redis Cluster from two of its seed nodes, as
// the CLI does for --store redis+cluster://…; the other nodes are
// discovered.
func ExampleOpen_cluster() {
	ctx := context.Background()
	store, err := redisstore.Open(ctx, "redis+cluster://10.0.0.1:6379,10.0.0.2:6379?dial_timeout=2s",
		redisstore.Config{Prefix: "payments:idem:"})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
}

// ExampleConfig_waitReplicas forwards a request only after one replica
// acknowledged its claim: a claim that no replica acknowledged within
// 100ms is released and Claim fails with ErrNotReplicated (matching
// retrysafe.ErrStoreUnavailable: the gateway and middleware answer 503).
func ExampleConfig_waitReplicas() {
	client := goredis.NewClient(&goredis.Options{Addr: "10.0.0.1:6379"})
	defer client.Close()
	store, err := redisstore.New(client, redisstore.Config{WaitReplicas: 1, WaitTimeout: 100 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	_, err = store.Claim(context.Background(), &retrysafe.ClaimParams{Scope: "tenant-42", Key: "order-1",
		Fingerprint: "fp", Token: retrysafe.NewToken(), Now: time.Now(), Lease: 30 * time.Second})
	if errors.Is(err, redisstore.ErrNotReplicated) {
		log.Print("no replica has the claim: answer 503, run nothing")
	}
}
