// Package dynamodb is a retrysafe store on one Amazon DynamoDB table,
// through the caller's own *dynamodb.Client (aws-sdk-go-v2):
//
//	client := dynamodb.NewFromConfig(awsCfg)
//	store, err := dynamodb.New(client, dynamodb.Config{Table: "retrysafe"})
//
// # The table
//
// One table, created by [CreateTable] (or `retrysafe migrate --store
// dynamodb://TABLE`, or the CloudFormation and Terraform of
// docs/dynamodb.md): partition key "pk" of type binary, no sort key, Time
// to Live on the attribute "ttl". A record is one item. Its partition key
// is the scope's length as a uvarint, then the scope's bytes, then the
// key's, so that scope and key never collide ("ab"+"c" differs from
// "a"+"bc") and any bytes are kept. The other attributes: st (state: p or
// c), tok, fp, rt, att, ca/ua/lu/ex (created, updated, lease end,
// expiry: Unix nanoseconds from the caller's clock), ab (abandoned),
// cpn/cpd/cpa (checkpoint), rs/rh/rb (status, headers in
// internal/headercodec's binary encoding, body) and ttl (Unix seconds).
//
// # The calls
//
// Claim is one conditional PutItem (the key is absent, or its result has
// expired) that asks for the item it failed against
// (ReturnValuesOnConditionCheckFailure=ALL_OLD): a duplicate costs one
// round trip and gets the stored record from it. A server that does not
// return that item (dynalite, older DynamoDB Local) gets a strongly
// consistent GetItem instead. Taking over an expired lease is a second
// call, an UpdateItem conditional on the old token and lease, which keeps
// the creation time, the attempt count (plus one) and the checkpoint.
// Extend, Complete and Release are one conditional write each, fenced by
// "tok = :token AND st = processing". Get and the admin reads are strongly
// consistent.
//
// # Limits and failures
//
// An item holds at most 400 KB ([ItemLimit]): a response body of up to
// [MaxResponseBody] is always kept; Complete refuses a larger response
// with [ErrItemTooLarge] and leaves the record processing. Set the
// engine's Config.MaxResponseBody to MaxResponseBody or less (retrysafe
// serve does so for dynamodb:// stores), so that an oversized answer
// reaches its first caller and is never stored.
//
// Throttling (ProvisionedThroughputExceededException, ThrottlingException,
// RequestLimitExceeded), server errors, a missing table and network
// failures are returned wrapping [retrysafe.ErrStoreUnavailable], after
// the client's own retryer has retried them. A throttled claim never
// reaches the table, so it is never reported as claimed; a write whose
// answer was lost and that the SDK retried is recognised by its token
// (the retry's failed condition shows the caller's own record), so it is
// reported as done. Context errors are returned as they are.
//
// # Expiry
//
// Expiry is decided on every read from the caller's time (params.Now).
// DynamoDB's Time to Live is a backstop that deletes items some time
// (up to days) after their "ttl": a completed record an hour after its
// ExpiresAt ([Config.ExpiredRetention]), a processing record
// [Config.ProcessingRetention] after its lease ran out. [Store.Sweep]
// deletes the same records at once, for tables without TTL.
//
// # Notifications
//
// There is no change feed a process can wait on cheaply (DynamoDB Streams
// is for consumers, not per-key waits), so the store implements no
// [retrysafe.Notifier]: a waiting duplicate polls.
//
// # Global tables
//
// A global table replicates between regions asynchronously, last writer
// wins: two claims of one key in two regions can both win. Send every
// claim to one region; [Store.CheckDurability] warns about a table with
// replicas.
package dynamodb
