package redis

// SetAfterRead makes Claim call f between its plain read and the claim
// script, so a test can change the record in that window.
func SetAfterRead(s *Store, f func()) { s.afterRead = f }

// RecordKey returns the Redis key of the record (scope, key).
func RecordKey(s *Store, scope, key string) string { return s.recordKey(scope, key) }

// Claim orders for ForceClaimOrder.
const (
	ClaimAdaptive   = orderAdaptive
	ClaimReadFirst  = orderReadFirst
	ClaimWriteFirst = orderWriteFirst
)

// ForceClaimOrder fixes the path Claim takes first (ClaimReadFirst,
// ClaimWriteFirst) or restores the adaptive choice. Call it before the
// store's first Claim.
func ForceClaimOrder(s *Store, order int) { s.order.force = order }

// ClaimReadsFirst reports whether the next Claim would read first.
func ClaimReadsFirst(s *Store) bool { return s.order.readFirst() }

// RestoreRefused reports whether the store stopped sending RESTORE because
// the server refused it.
func RestoreRefused(s *Store) bool { return s.noRestore.Load() }

// ListpackDump is the RESTORE payload of a listpack hash (dump.go).
func ListpackDump(pairs ...string) (string, bool) { return listpackDump(pairs...) }

// PlainDump reports whether the store fell back to the plain hash payload
// because the server refused the listpack one.
func PlainDump(s *Store) bool { return s.plainDump.Load() }
