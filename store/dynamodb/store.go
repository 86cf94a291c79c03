package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
)

// DefaultProcessingRetention is the default of [Config.ProcessingRetention]
// ([admin.DefaultProcessingRetention], 7 days).
const DefaultProcessingRetention = admin.DefaultProcessingRetention

// ItemLimit is DynamoDB's limit on the size of one item (400 KB, attribute
// names and values together).
const ItemLimit = 400 << 10

// MaxResponseBody is the largest response body this store keeps: the
// item limit less room for the record's own attributes, its stored
// headers (up to 16 KiB) and a checkpoint (up to
// [retrysafe.CheckpointStoreLimit], 65 KiB), which a completed record keeps.
// Set the engine's Config.MaxResponseBody (the gateway's
// --max-response-body, which retrysafe serve lowers to it for
// dynamodb:// stores) to it or less: a larger body is then never stored,
// and its key replays a 502 problem, never a second run.
const MaxResponseBody = ItemLimit - retrysafe.CheckpointStoreLimit - 16<<10 - 2<<10

// ErrItemTooLarge is returned (wrapped) by Complete when the record with
// its response would exceed DynamoDB's 400 KB item limit ([ItemLimit]).
// Nothing is written: the record stays processing, and its owner may
// release it or complete it with a smaller response. It matches neither
// [retrysafe.ErrStoreUnavailable] nor [retrysafe.ErrLeaseLost].
var ErrItemTooLarge = errors.New("retrysafe/dynamodb: record exceeds DynamoDB's 400 KB item limit")

// Config configures a [Store]. The zero value is valid except for Table.
type Config struct {
	// Table is the name of the table (required). Its partition key is the
	// binary attribute "pk" and it has no sort key ([CreateTable]).
	Table string
	// ProcessingRetention is how long a processing record whose lease
	// ran out is kept before DynamoDB's TTL may delete it (and before
	// Sweep retires it with the default SweepParams). Zero means
	// [DefaultProcessingRetention]; negative is an error.
	ProcessingRetention time.Duration
	// ExpiredRetention is how long after its ExpiresAt a completed record
	// may be deleted by DynamoDB's TTL (zero: one hour). Expiry is decided
	// on read from the caller's time; this only delays the backstop, so
	// that a caller's clock a little behind DynamoDB's still sees the
	// record when it should.
	ExpiredRetention time.Duration
	// Logger receives warnings; nil means slog.Default().
	Logger *slog.Logger
}

// Store is a [retrysafe.Store] on one DynamoDB table. It is safe for
// concurrent use by many goroutines and many processes.
type Store struct {
	client    *dynamodb.Client
	table     *string
	retention time.Duration
	expired   time.Duration
	log       *slog.Logger
}

var (
	_ retrysafe.Store         = (*Store)(nil)
	_ admin.Admin             = (*Store)(nil)
	_ admin.Sweeper           = (*Store)(nil)
	_ admin.Pinger            = (*Store)(nil)
	_ admin.ReadyChecker      = (*Store)(nil)
	_ admin.DurabilityChecker = (*Store)(nil)
)

// New returns a store on cfg.Table through client, the caller's own
// DynamoDB client (its credentials, region, endpoint and HTTP client).
// The table must exist ([CreateTable]). New makes no call.
func New(client *dynamodb.Client, cfg Config) (*Store, error) {
	if client == nil {
		return nil, errors.New("retrysafe/dynamodb: nil client")
	}
	if cfg.Table == "" {
		return nil, errors.New("retrysafe/dynamodb: Config.Table is empty")
	}
	if cfg.ProcessingRetention < 0 {
		return nil, fmt.Errorf("retrysafe/dynamodb: negative ProcessingRetention %s", cfg.ProcessingRetention)
	}
	if cfg.ExpiredRetention < 0 {
		return nil, fmt.Errorf("retrysafe/dynamodb: negative ExpiredRetention %s", cfg.ExpiredRetention)
	}
	s := &Store{client: client, table: aws.String(cfg.Table), retention: cfg.ProcessingRetention, expired: cfg.ExpiredRetention, log: cfg.Logger}
	if s.retention == 0 {
		s.retention = DefaultProcessingRetention
	}
	if s.expired == 0 {
		s.expired = time.Hour
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	return s, nil
}

// Client returns the client the store calls DynamoDB through.
func (s *Store) Client() *dynamodb.Client { return s.client }

// Close does nothing (the client is the caller's); it exists so that the
// store closes like the others.
func (s *Store) Close() error { return nil }

// conditionFailed reports whether err is a failed condition, and returns
// the item as it stood when DynamoDB sent it (ALL_OLD; nil when the item
// was absent or the server did not send it).
func conditionFailed(err error) (map[string]types.AttributeValue, bool) {
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return ccf.Item, true
	}
	return nil, false
}

// translate maps a call's error to the core's sentinels: context errors
// as they are, an oversized item to ErrItemTooLarge, everything else
// (throttling, ProvisionedThroughputExceeded, a missing table, a network
// error, a server error) to ErrStoreUnavailable.
func translate(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var api smithy.APIError
	if errors.As(err, &api) && api.ErrorCode() == "ValidationException" && isSizeMessage(api.ErrorMessage()) {
		return fmt.Errorf("%w: %s: %v", ErrItemTooLarge, op, err)
	}
	return retrysafe.Unavailable(op, err)
}

// isSizeMessage recognises DynamoDB's ValidationException for an item
// over the size limit.
func isSizeMessage(msg string) bool {
	return strings.Contains(strings.ToLower(msg), "item size")
}

// noRetry makes one call without the client's retries (CheckReady).
func noRetry(o *dynamodb.Options) { o.RetryMaxAttempts = 1 }

// MaxResponseBody returns [MaxResponseBody] (store/storetest.BodyLimiter):
// the largest body Complete stores.
func (s *Store) MaxResponseBody() int64 { return MaxResponseBody }
