package retrysafelambda

import (
	"container/list"
	"sync"
	"time"
)

// cache keeps the most recently used completed results of one wrapped
// handler in memory (Config.CacheSize): what a warm execution environment
// remembers between invocations. It holds a result only until the
// record's own expiry, so it never answers for a record the store would
// no longer replay.
type cache struct {
	max int

	mu    sync.Mutex
	order *list.List // of *cacheItem, most recently used first
	items map[cacheKey]*list.Element
}

type cacheKey struct{ scope, key string }

type cacheItem struct {
	k cacheKey
	e cacheEntry
}

// cacheEntry is one completed result: the stored body (read-only: it may
// be shared with the store), the fingerprint it was claimed with, and when
// the record expires.
type cacheEntry struct {
	fingerprint string
	body        []byte
	expires     time.Time
}

func newCache(max int) *cache {
	return &cache{max: max, order: list.New(), items: make(map[cacheKey]*list.Element, max)}
}

// get returns the live entry for (scope, key) at now, and drops an
// expired one.
func (c *cache) get(scope, key string, now time.Time) (cacheEntry, bool) {
	k := cacheKey{scope, key}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[k]
	if !ok {
		return cacheEntry{}, false
	}
	it := el.Value.(*cacheItem)
	if !now.Before(it.e.expires) {
		c.order.Remove(el)
		delete(c.items, k)
		return cacheEntry{}, false
	}
	c.order.MoveToFront(el)
	return it.e, true
}

// put adds or replaces the entry for (scope, key), evicting the least
// recently used entries beyond max.
func (c *cache) put(scope, key string, e cacheEntry) {
	k := cacheKey{scope, key}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[k]; ok {
		el.Value.(*cacheItem).e = e
		c.order.MoveToFront(el)
		return
	}
	c.items[k] = c.order.PushFront(&cacheItem{k: k, e: e})
	for c.order.Len() > c.max {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.items, last.Value.(*cacheItem).k)
	}
}

// len returns the number of entries (for tests).
func (c *cache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
