package redis

import (
	"sync"
	"testing"
)

// TestScopePrefix: the remembered scope never leaks into another scope's
// key, also when callers with different scopes interleave.
func TestScopePrefix(t *testing.T) {
	s := &Store{prefix: "p:"}
	scopes := []string{"a", "b", "", "a", "a", "c", "b"}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 200 {
				for _, sc := range scopes {
					if got, want := s.recordKey(sc, "k"), "p:"+scopeHash(sc)+":"+slotTag(sc, "k")+"k"; got != want {
						t.Errorf("recordKey(%q, k) = %q, want %q", sc, got, want)
						return
					}
				}
			}
		})
	}
	wg.Wait()
}
