package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/sealed"
)

// encryptionKeysEnv names the environment variable that may hold the key
// ring instead of --encryption-keys-file. A flag never holds key material:
// command lines are visible to every user of the machine (ps, /proc).
const encryptionKeysEnv = "RETRYSAFE_ENCRYPTION_KEYS"

// encryptionKeysUsage is the help text of --encryption-keys-file.
const encryptionKeysUsage = "`file` of keys that encrypt stored response bodies and header values (AES-256-GCM), one ID:BASE64 (32 bytes) per line, oldest first, the last one encrypting, and one hmac:BASE64 line that keys the stored scopes and fingerprints (never rotated); or set " + encryptionKeysEnv + " to the same text. See docs/gateway.md"

// loadKeyRing returns the key ring from the file at path, or from the
// environment variable (getenv reads it; os.Getenv in the binary); nil
// when neither is given. Giving both is an error, so that it is never
// unclear which keys are in use.
func loadKeyRing(path string, getenv func(string) string) (*sealed.KeyRing, error) {
	env := getenv(encryptionKeysEnv)
	switch {
	case path != "" && strings.TrimSpace(env) != "":
		return nil, usagef("keys are given twice, by --encryption-keys-file and by %s: keep one", encryptionKeysEnv)
	case path != "":
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("--encryption-keys-file: %w", err)
		}
		ring, err := sealed.ParseKeyRing(data)
		if err != nil {
			return nil, fmt.Errorf("--encryption-keys-file %s: %w", path, err)
		}
		return ring, nil
	case env != "":
		ring, err := sealed.ParseKeyRing([]byte(env))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", encryptionKeysEnv, err)
		}
		return ring, nil
	}
	return nil, nil
}

// describeKeyRing says which keys are in use, for the startup line.
func describeKeyRing(ring *sealed.KeyRing) string {
	if ring == nil {
		return "off"
	}
	return fmt.Sprintf("on, key %s encrypts (ring: %s)", ring.Newest(), strings.Join(ring.IDs(), ", "))
}

// checkEncryption runs sealed.Check on the wrapped store at start: a
// gateway without the key ring, or with another hmac key, over a store
// whose records were kept under the HMAC would find none of them, and
// every retry would run again, so it refuses to start. A store that does
// not answer yet is only logged: the gateway then answers 503 until it
// does, and the check runs at the next start.
func checkEncryption(ctx context.Context, store retrysafe.Store, logger *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := sealed.Check(ctx, store)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, retrysafe.ErrStoreUnavailable), errors.Is(err, context.DeadlineExceeded):
		logger.Warn("encryption check skipped: the store does not answer", "err", err)
		return nil
	}
	return err
}
