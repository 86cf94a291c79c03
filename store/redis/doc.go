// Package redis is a [retrysafe.Store] backed by Redis (go-redis v9), for
// several service or gateway instances that share one Redis.
//
// # Data model
//
// Each idempotency record is one Redis HASH under one key:
//
//	<prefix><hex(sha256(scope))[:32]>:{<hex(fnv1a(scope, key))>}<key>
//
// The scope is hashed to a fixed-width 32-hex-digit field, so no scope or key
// can forge another scope's key name: whatever the key contains, the part
// before the first ':' after the prefix is always the scope's hash. The
// "{…}" after it is the store's own Redis Cluster hash tag, 8 hex digits
// derived from scope and key: it is the first "{…}" of the name, so braces
// in a client's key never choose the slot, and records spread over all
// slots. The raw key stays readable for operators (redis-cli --scan). The
// hash holds plain fields (scope, key, fp, state, token, attempt, created,
// updated, lease, expires, and once completed status, header and body);
// the response body is stored as a binary-safe field, the headers in the
// length-prefixed binary encoding of internal/headercodec, which keeps
// every byte.
//
// Every operation touches exactly one key, so the store works unchanged on a
// Redis Cluster, with the same key names as on one server ([Open] takes
// redis+cluster://HOST:PORT,HOST:PORT seed URLs; listing scans every
// master). A *redis.Ring is refused: it moves keys between shards when one
// looks down (see [New]).
//
// # Atomicity and round trips
//
// Claim first reads the record with one plain HGETALL; a record that
// blocks the claim (a replay, an in-flight or a mismatching duplicate) is
// returned from that read, without a script. Otherwise (an absent key, an
// expired result, a takeover) Claim runs the claim script, which re-checks
// the record atomically. Extend, Complete and Release are Lua scripts, one
// round trip each. All of them run with EVALSHA (falling back to EVAL,
// which caches the script, when the server answers NOSCRIPT). Complete,
// Release and Extend are fenced by the owner token inside the script. Get
// is one HGETALL. With a *redis.Client, concurrent calls share round trips
// through the client's autopipeliner (see [Config.DisableAutoPipeline]).
// The scripts only use HGETALL, HGET, HMGET, HSET, DEL, PEXPIRE and
// PUBLISH, and nothing a real Redis 7 rejects. See docs/redis.md for the
// round trips of each path.
//
// A Redis that refuses a write with OOM (maxmemory under noeviction) is
// full, not down: those errors match [retrysafe.ErrStoreFull].
//
// # Time and expiry
//
// Every state decision uses params.Now, passed to the scripts as an argument;
// the server clock (TIME) is never consulted. lease_until and expires_at are
// stored in the record and checked against params.Now on every read. Native
// expiry only reclaims memory: a completed record gets PX = TTL, a processing
// record gets PX = Lease + [Config.ProcessingRetention] (7 days by default,
// [admin.DefaultProcessingRetention], as the other stores' sweeps), so a
// record whose lease ran out stays in Redis for a takeover (Attempt+1, same
// CreatedAt) or a late Complete by its owner. A processing record that nobody
// touches for that long disappears as if released. Because of native expiry
// the store needs no sweeper.
//
// # Retries of lost replies
//
// go-redis retries a command whose connection broke (MaxRetries, 3 by
// default). When the first attempt had already run on the server, the retry
// must not change the answer, so Claim and Complete carry a random per-call
// nonce: a Claim retried after its reply was lost still reports Claimed=true,
// and a retried Complete still succeeds. A retried Release whose first attempt
// deleted the record reports [retrysafe.ErrLeaseLost]; the record is gone
// either way.
//
// # Change notification
//
// Release and Delete PUBLISH on a per-record channel whose name is the
// record's key, and so does Complete for a record that a waiter marked (a
// notify field that [Store.Subscribe] sets on a processing record; most
// completions have no waiter). Subscribe multiplexes all waiters of a Store
// over one shared pub/sub connection, with SUBSCRIBE and UNSUBSCRIBE per
// channel as waiters come and go; it returns only after Redis confirmed the
// subscription and the record is marked, or, when the record changed
// before the mark, with a value already sent. Redis pub/sub is fire-and-forget: a message sent while the
// connection is down is lost. After a reconnect every waiter gets a wake-up
// so it re-reads the record, and waiters must keep their fallback poll as the
// [retrysafe.Notifier] contract says.
//
// # Durability
//
// Redis acknowledges writes before they are durable; see docs/redis.md for
// what that means for the guarantees and when to choose PostgreSQL instead.
// [Config.WaitReplicas] makes a claim count only once that many replicas
// acknowledged it (WAIT): a claim they did not acknowledge in time is
// released and the request gets 503 without running. WAIT narrows the
// failover window; it is not consensus.
package redis
