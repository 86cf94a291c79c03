package redis

import goredis "github.com/redis/go-redis/v9"

// The scripts below are the whole of the store's write logic. Each runs
// atomically on the one key it names (KEYS[1]), so a claim is insert-if-absent
// in one step and the fenced calls compare the owner token and write in one
// step.
//
// Times are passed in as fixed-width 21-digit strings (see encodeTime):
// 12 digits of seconds since 0001-01-01 and 9 digits of nanoseconds. Lua
// numbers are doubles, which cannot hold Unix nanoseconds exactly, so
// luaLE compares the two parts as separate numbers. Expiry durations (PX) are
// computed by the caller in milliseconds.

// luaLE is shared by the scripts that compare times: le(a, b) is a <= b.
const luaLE = `
local function le(a, b)
  local as, bs = tonumber(string.sub(a, 1, 12)), tonumber(string.sub(b, 1, 12))
  if as ~= bs then return as < bs end
  return tonumber(string.sub(a, 13)) <= tonumber(string.sub(b, 13))
end
`

// claimSrc claims KEYS[1].
//
// ARGV: 1 scope, 2 key, 3 fingerprint, 4 token, 5 now, 6 lease until,
// 7 PX (ms), 8 call nonce, 9 route (stored only when not empty),
// 10 "1" for no takeover (ClaimParams.NoTakeover) or "", 11 the token a
// takeover requires (ClaimParams.TakeoverToken) or "".
//
// Returns {1} when the caller owns a fresh record (attempt 1, created now:
// the key was absent or its result had expired), {1, attempt, created}
// followed by the record's checkpoint (name, time and, unless nil, data)
// if it has one, when it took over an expired lease with the same
// fingerprint or this very call already claimed it before go-redis retried
// it, else {0, HGETALL of the blocking record}. A takeover keeps the notify
// mark of the record it replaces (see markSrc) and its checkpoint, and
// drops its abandoned mark. A fresh record costs three calls: HGETALL
// (empty), one HSET of every field, PEXPIRE.
const claimSrc = luaLE + `
local cur = redis.call('HGETALL', KEYS[1])
local attempt, created, notify, h = 1, ARGV[5], nil, nil
if #cur > 0 then
  h = {}
  for i = 1, #cur, 2 do h[cur[i]] = cur[i + 1] end
  if h['state'] == 'completed' and h['expires'] and le(h['expires'], ARGV[5]) then
    -- expired result: counts as absent
  elseif h['state'] == 'processing' and h['token'] == ARGV[4] and h['nonce'] == ARGV[8] then
    -- a retry of this very call: write again, so that a WAIT on the
    -- retry's connection covers the first run's write even on a server
    -- that records a connection's offset only after it writes
    redis.call('HSET', KEYS[1], 'nonce', ARGV[8])
    local r = {1, h['attempt'], h['created']}
    if h['cpname'] then r[4], r[5], r[6] = h['cpname'], h['cpat'], h['cpdata'] end
    return r
  elseif h['state'] == 'processing' and h['lease'] and le(h['lease'], ARGV[5]) and h['fp'] == ARGV[3]
      and ARGV[10] ~= '1' and (ARGV[11] == '' or h['token'] == ARGV[11]) then
    attempt = tonumber(h['attempt']) + 1
    created = h['created']
    notify = h['notify'] -- the waiters of the record wait for this attempt
  else
    return {0, cur}
  end
  redis.call('DEL', KEYS[1])
end
if ARGV[9] == '' then
  redis.call('HSET', KEYS[1],
    'scope', ARGV[1], 'key', ARGV[2], 'fp', ARGV[3], 'state', 'processing',
    'token', ARGV[4], 'attempt', tostring(attempt), 'created', created,
    'updated', ARGV[5], 'lease', ARGV[6], 'nonce', ARGV[8])
else
  redis.call('HSET', KEYS[1],
    'scope', ARGV[1], 'key', ARGV[2], 'fp', ARGV[3], 'state', 'processing',
    'token', ARGV[4], 'attempt', tostring(attempt), 'created', created,
    'updated', ARGV[5], 'lease', ARGV[6], 'nonce', ARGV[8], 'route', ARGV[9])
end
if notify then redis.call('HSET', KEYS[1], 'notify', notify) end
redis.call('PEXPIRE', KEYS[1], ARGV[7])
if attempt == 1 then return {1} end
-- a takeover: the new owner resumes from the last checkpoint
local r = {1, tostring(attempt), created}
if h['cpname'] then
  if h['cpdata'] then
    redis.call('HSET', KEYS[1], 'cpname', h['cpname'], 'cpat', h['cpat'], 'cpdata', h['cpdata'])
  else
    redis.call('HSET', KEYS[1], 'cpname', h['cpname'], 'cpat', h['cpat'])
  end
  r[4], r[5], r[6] = h['cpname'], h['cpat'], h['cpdata']
end
return r
`

// extendSrc moves the lease of KEYS[1] if ARGV[1] owns it, or marks the
// attempt abandoned, and records a checkpoint, in one step.
//
// ARGV: 1 token, 2 now, 3 lease until, 4 PX (ms), 5 "1" to abandon (the
// lease and the key's expiry stay as they are) or "", and with a
// checkpoint 6 its name, 7 its time and, unless its data is nil, 8 the
// data: 5, 7 or 8 arguments. Returns 1 or 0 (lease lost).
const extendSrc = `
local st = redis.call('HMGET', KEYS[1], 'state', 'token')
if st[1] ~= 'processing' or st[2] ~= ARGV[1] then return 0 end
if ARGV[5] == '1' then
  redis.call('HSET', KEYS[1], 'updated', ARGV[2], 'abandoned', '1')
else
  redis.call('HSET', KEYS[1], 'updated', ARGV[2], 'lease', ARGV[3])
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
end
if #ARGV == 8 then
  redis.call('HSET', KEYS[1], 'cpname', ARGV[6], 'cpat', ARGV[7], 'cpdata', ARGV[8])
elseif #ARGV == 7 then
  redis.call('HSET', KEYS[1], 'cpname', ARGV[6], 'cpat', ARGV[7])
  redis.call('HDEL', KEYS[1], 'cpdata')
end
return 1
`

// completeSrc stores the response in KEYS[1] if ARGV[1] owns it and sets
// its expiry; when a waiter marked the record (the notify field, see
// markSrc) it publishes on the record's channel (the key's name).
//
// ARGV: 1 token, 2 now, 3 expires at, 4 PX (ms), 5 call nonce, and with a
// response 6 status, 7 header (binary encoding), and with a body 8 body:
// 5, 7 or 8 arguments.
// Returns 1, or 0 (lease lost). A retry of a call that already completed the
// record (same token and nonce) returns 1. The common path reads four
// fields with one HMGET; the nonce of an earlier completion (cnonce, absent
// from a processing record, where looking it up scans the whole listpack)
// only when the record is completed. The result is known now, so an
// abandoned mark goes; a checkpoint stays.
const completeSrc = `
local st = redis.call('HMGET', KEYS[1], 'state', 'token', 'notify', 'abandoned')
if st[2] ~= ARGV[1] then return 0 end
if st[1] == 'completed' then
  -- a retry of this very call, or the owner completing twice
  if redis.call('HGET', KEYS[1], 'cnonce') ~= ARGV[5] then return 0 end
  redis.call('HSET', KEYS[1], 'cnonce', ARGV[5]) -- as in claimSrc: for WAIT
  return 1
end
if st[1] ~= 'processing' then return 0 end
if #ARGV == 8 then
  redis.call('HSET', KEYS[1], 'state', 'completed', 'updated', ARGV[2], 'expires', ARGV[3], 'cnonce', ARGV[5],
    'status', ARGV[6], 'header', ARGV[7], 'body', ARGV[8])
elseif #ARGV == 7 then
  redis.call('HSET', KEYS[1], 'state', 'completed', 'updated', ARGV[2], 'expires', ARGV[3], 'cnonce', ARGV[5],
    'status', ARGV[6], 'header', ARGV[7])
else
  redis.call('HSET', KEYS[1], 'state', 'completed', 'updated', ARGV[2], 'expires', ARGV[3], 'cnonce', ARGV[5])
end
if st[4] then redis.call('HDEL', KEYS[1], 'abandoned') end
redis.call('PEXPIRE', KEYS[1], ARGV[4])
if st[3] then redis.call('PUBLISH', KEYS[1], 'completed') end
return 1
`

// markSrc marks KEYS[1] as waited for (the notify field), if it is
// processing, so that its completion is published. Returns 1, or 0 when
// the record is absent or completed.
const markSrc = `
if redis.call('HGET', KEYS[1], 'state') ~= 'processing' then return 0 end
redis.call('HSET', KEYS[1], 'notify', '1')
return 1
`

// releaseSrc deletes KEYS[1] if ARGV[1] owns it and publishes on the
// record's channel.
//
// ARGV: 1 token, 2 channel. Returns 1 or 0 (lease lost).
const releaseSrc = `
local st = redis.call('HMGET', KEYS[1], 'state', 'token')
if st[1] ~= 'processing' or st[2] ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], 'released')
return 1
`

// deleteSrc deletes KEYS[1] unconditionally (admin) and publishes on the
// record's channel. ARGV: 1 channel. Returns the number of keys deleted.
const deleteSrc = `
local n = redis.call('DEL', KEYS[1])
if n > 0 then redis.call('PUBLISH', ARGV[1], 'deleted') end
return n
`

var (
	claimScript    = goredis.NewScript(claimSrc)
	extendScript   = goredis.NewScript(extendSrc)
	completeScript = goredis.NewScript(completeSrc)
	releaseScript  = goredis.NewScript(releaseSrc)
	deleteScript   = goredis.NewScript(deleteSrc)
	markScript     = goredis.NewScript(markSrc)

	allScriptSources = []string{claimSrc, extendSrc, completeSrc, releaseSrc, deleteSrc, markSrc}
)
