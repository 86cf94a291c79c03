package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/retrysafe/retrysafe/store/sealed"
)

// encryptionKeysEnv names the environment variable that may hold the key
// ring instead of --encryption-keys-file. A flag never holds key material:
// command lines are visible to every user of the machine (ps, /proc).
const encryptionKeysEnv = "RETRYSAFE_ENCRYPTION_KEYS"

// encryptionKeysUsage is the help text of --encryption-keys-file.
const encryptionKeysUsage = "`file` of keys that encrypt stored response bodies and header values (AES-256-GCM), one ID:BASE64 (32 bytes) per line, oldest first, the last one encrypting; or set " + encryptionKeysEnv + " to the same text. See docs/gateway.md"

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
