package redis

import (
	"context"
	"sort"
	"strings"
	"sync"

	goredis "github.com/redis/go-redis/v9"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
)

// scanCount is the COUNT hint of each SCAN call.
const scanCount = 1000

// List returns up to params.Limit records ordered by (Scope, Key), strictly
// after (AfterScope, AfterKey). It implements [admin.Admin].
//
// Redis has no ordered index of the records, so every page SCANs all keys
// under the prefix (of one scope when params.Scope is set) on every master
// and sorts them: O(records) work per page. It is meant for operators, not
// for the request path. List does not know the time, so it also returns
// completed records past ExpiresAt that Redis has not dropped yet.
func (s *Store) List(ctx context.Context, params *admin.ListParams) ([]*retrysafe.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	limit := params.PageSize()
	// Any scope: the 32 hex digits of a scope hash and a slot tag must
	// follow the prefix, so a store whose prefix extends this one ("p:"
	// and "p:x:") is not listed.
	match := globEscape(s.prefix) + strings.Repeat("[0-9a-f]", scopeHashLen) + ":" + slotTagMatch + "*"
	if params.OneScope() {
		match = globEscape(s.prefix+scopeHash(params.Scope)+":") + slotTagMatch + "*"
	}
	keys, err := s.scan(ctx, match)
	if err != nil {
		return nil, s.fail(ctx, "list", err)
	}

	// Find each key's (scope, key): from the name when the scope is
	// known, else from the record.
	type entry struct{ redisKey, scope, key string }
	entries := make([]entry, 0, len(keys))
	if params.OneScope() {
		n := len(s.prefix) + scopeHashLen + 1 + slotTagLen
		for _, k := range keys {
			entries = append(entries, entry{k, params.Scope, k[n:]})
		}
	} else {
		cmds := make([]*goredis.SliceCmd, len(keys))
		_, err := s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for i, k := range keys {
				cmds[i] = p.HMGet(ctx, k, fScope, fKey)
			}
			return nil
		})
		if err != nil {
			return nil, s.fail(ctx, "list", err)
		}
		for i, cmd := range cmds {
			v := cmd.Val()
			scope, ok1 := v[0].(string)
			key, ok2 := v[1].(string)
			if !ok1 || !ok2 {
				continue // deleted meanwhile, or not a record
			}
			entries = append(entries, entry{keys[i], scope, key})
		}
	}

	page := entries[:0]
	for _, e := range entries {
		if (e.scope > params.AfterScope || (e.scope == params.AfterScope && e.key > params.AfterKey)) &&
			strings.HasPrefix(e.key, params.KeyPrefix) {
			page = append(page, e)
		}
	}
	sort.Slice(page, func(i, j int) bool {
		if page[i].scope != page[j].scope {
			return page[i].scope < page[j].scope
		}
		return page[i].key < page[j].key
	})

	fields := listFieldsNoBody
	if params.WithBodies {
		fields = recordFields
	}
	out := make([]*retrysafe.Record, 0, min(limit, len(page)))
	// Fetch in batches: records deleted since the scan are skipped, so a
	// batch may yield fewer than asked.
	// With filters, fetch at least scanCount at a time: many may not pass.
	for len(page) > 0 && len(out) < limit {
		n := limit - len(out)
		if params.Filtered() {
			n = max(n, scanCount)
		}
		n = min(n, len(page))
		batch := make([]string, n)
		for i, e := range page[:n] {
			batch[i] = e.redisKey
		}
		page = page[n:]
		recs, err := s.fetch(ctx, "list", batch, fields)
		if err != nil {
			return nil, err
		}
		for _, rec := range recs {
			if len(out) < limit && params.Matches(rec) {
				out = append(out, rec)
			}
		}
	}
	return out, nil
}

// Stats counts the records by state and finds the oldest in flight and the
// unknown outcomes. It implements [admin.Admin].
//
// Like List, it SCANs every key under the prefix and reads each record's
// fields (not its body): O(records) work per call.
func (s *Store) Stats(ctx context.Context, params *admin.StatsParams) (*admin.Stats, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	match := globEscape(s.prefix) + strings.Repeat("[0-9a-f]", scopeHashLen) + ":" + slotTagMatch + "*"
	keys, err := s.scan(ctx, match)
	if err != nil {
		return nil, s.fail(ctx, "stats", err)
	}
	fields := listFieldsNoBody
	var recs []*retrysafe.Record
	for len(keys) > 0 {
		n := min(len(keys), scanCount)
		batch, err := s.fetch(ctx, "stats", keys[:n], fields)
		if err != nil {
			return nil, err
		}
		keys = keys[n:]
		recs = append(recs, batch...)
	}
	return admin.StatsOf(recs, params), nil
}

// Find returns the records with params.Key ordered by scope, in every
// scope or in the one params selects. It implements [admin.Admin].
//
// With a scope it reads one hash. Without one it SCANs for the key's name
// under every scope hash, on every master: O(records) work on the server,
// but only the matching records travel. Like List, it also returns
// completed records past ExpiresAt that Redis has not dropped yet.
func (s *Store) Find(ctx context.Context, params *admin.FindParams) ([]*retrysafe.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	fields := listFieldsNoBody
	if params.WithBodies {
		fields = recordFields
	}
	if params.OneScope() {
		return s.fetch(ctx, "find", []string{s.recordKey(params.Scope, params.Key)}, fields)
	}
	match := globEscape(s.prefix) + strings.Repeat("[0-9a-f]", scopeHashLen) + ":" + slotTagMatch + globEscape(params.Key)
	keys, err := s.scan(ctx, match)
	if err != nil {
		return nil, s.fail(ctx, "find", err)
	}
	recs, err := s.fetch(ctx, "find", keys, fields)
	if err != nil {
		return nil, err
	}
	out := recs[:0]
	for _, rec := range recs {
		if rec.Key == params.Key { // not a record of another store's layout
			out = append(out, rec)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Scope < out[j].Scope })
	return out, nil
}

// fetch reads the given fields of the records redisKeys in one pipeline,
// skipping keys that no longer exist.
func (s *Store) fetch(ctx context.Context, op string, redisKeys []string, fields []string) ([]*retrysafe.Record, error) {
	cmds := make([]*goredis.SliceCmd, len(redisKeys))
	_, err := s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, k := range redisKeys {
			cmds[i] = p.HMGet(ctx, k, fields...)
		}
		return nil
	})
	if err != nil {
		return nil, s.fail(ctx, op, err)
	}
	out := make([]*retrysafe.Record, 0, len(cmds))
	for _, cmd := range cmds {
		h := make(map[string]string, len(fields))
		for i, v := range cmd.Val() {
			if str, ok := v.(string); ok {
				h[fields[i]] = str
			}
		}
		if len(h) == 0 {
			continue
		}
		rec, err := decodeRecord(h)
		if err != nil {
			return nil, retrysafe.Unavailable(op, err)
		}
		out = append(out, rec)
	}
	return out, nil
}

// Delete removes the record (scope, key) unconditionally and notifies
// subscribers. It returns [retrysafe.ErrNotFound] when there was none. It
// implements [admin.Admin].
func (s *Store) Delete(ctx context.Context, scope, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	k := s.recordKey(scope, key)
	n, err := deleteScript.Run(ctx, s.client, []string{k}, k).Int64()
	if err != nil {
		return s.fail(ctx, "delete", err)
	}
	if n == 0 {
		return retrysafe.ErrNotFound
	}
	return nil
}

// scan returns every key matching match, on every master of a cluster or
// shard of a ring.
func (s *Store) scan(ctx context.Context, match string) ([]string, error) {
	scanOne := func(ctx context.Context, c goredis.Cmdable) ([]string, error) {
		var keys []string
		iter := c.Scan(ctx, 0, match, scanCount).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		return keys, iter.Err()
	}
	var (
		mu   sync.Mutex
		all  []string
		each func(ctx context.Context, fn func(ctx context.Context, c *goredis.Client) error) error
	)
	switch c := s.client.(type) {
	case *goredis.ClusterClient:
		each = c.ForEachMaster
	case *goredis.Ring:
		each = c.ForEachShard
	default:
		return scanOne(ctx, s.client)
	}
	err := each(ctx, func(ctx context.Context, c *goredis.Client) error {
		keys, err := scanOne(ctx, c)
		if err != nil {
			return err
		}
		mu.Lock()
		all = append(all, keys...)
		mu.Unlock()
		return nil
	})
	return all, err
}
