package redis

// SetAfterRead makes Claim call f between its plain read and the claim
// script, so a test can change the record in that window.
func SetAfterRead(s *Store, f func()) { s.afterRead = f }
