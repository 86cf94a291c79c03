//go:build !retrysafe_nopostgres

package storeurl

import (
	"context"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/postgres"
)

// openPostgres opens the PostgreSQL store of rawURL.
func openPostgres(ctx context.Context, rawURL string) (retrysafe.Store, func() error, error) {
	s, err := postgres.Open(ctx, rawURL, postgres.Config{})
	if err != nil {
		return nil, nil, err
	}
	return s, s.Close, nil
}
