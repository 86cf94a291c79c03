//go:build !retrysafe_nomysql

package storeurl

import (
	"context"
	"fmt"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/mysql"
)

// openMySQL opens the MySQL or MariaDB store of rawURL.
func openMySQL(ctx context.Context, rawURL string) (retrysafe.Store, func() error, error) {
	s, err := mysql.Open(ctx, rawURL, mysql.Config{})
	if err != nil {
		return nil, nil, fmt.Errorf("store %q: %w", Redact(rawURL), err)
	}
	return s, s.Close, nil
}
