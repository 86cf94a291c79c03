package redis

// SetAfterRead makes Claim call f between its plain read and the claim
// script, so a test can change the record in that window.
func SetAfterRead(s *Store, f func()) { s.afterRead = f }

// RecordKey returns the Redis key of the record (scope, key).
func RecordKey(s *Store, scope, key string) string { return s.recordKey(scope, key) }
