//go:build retrysafe_nopostgres

package storeurl

import (
	"context"
	"fmt"

	"github.com/retrysafe/retrysafe"
)

// openPostgres refuses: this binary was built without the PostgreSQL store.
func openPostgres(ctx context.Context, rawURL string) (retrysafe.Store, func() error, error) {
	return nil, nil, fmt.Errorf("store %s: PostgreSQL is %w (built with -tags retrysafe_nopostgres)", Redact(rawURL), ErrNotBuiltIn)
}
