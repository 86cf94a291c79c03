//go:build retrysafe_nodynamodb

package storeurl

import (
	"context"
	"fmt"

	"github.com/retrysafe/retrysafe"
)

// openDynamoDB refuses: this binary was built without the DynamoDB store.
func openDynamoDB(ctx context.Context, rawURL string, opts Options) (retrysafe.Store, func() error, error) {
	return nil, nil, fmt.Errorf("store %s: DynamoDB is %w (built with -tags retrysafe_nodynamodb)", Redact(rawURL), ErrNotBuiltIn)
}
