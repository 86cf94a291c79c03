//go:build retrysafe_nomysql

package storeurl

import (
	"context"
	"fmt"

	"github.com/retrysafe/retrysafe"
)

// openMySQL refuses: this binary was built without the MySQL store.
func openMySQL(ctx context.Context, rawURL string) (retrysafe.Store, func() error, error) {
	return nil, nil, fmt.Errorf("store %s: MySQL is %w (built with -tags retrysafe_nomysql)", Redact(rawURL), ErrNotBuiltIn)
}
