//go:build !retrysafe_nodynamodb

package storeurl

import (
	"context"
	"fmt"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/dynamodb"
)

// openDynamoDB opens the DynamoDB store of rawURL: the client from the
// AWS SDK's default chain, region and endpoint from the URL.
func openDynamoDB(ctx context.Context, rawURL string, opts Options) (retrysafe.Store, func() error, error) {
	s, err := dynamodb.Open(ctx, rawURL, dynamodb.Config{ProcessingRetention: opts.ProcessingRetention})
	if err != nil {
		return nil, nil, fmt.Errorf("store %q: %w", Redact(rawURL), err)
	}
	return s, s.Close, nil
}
