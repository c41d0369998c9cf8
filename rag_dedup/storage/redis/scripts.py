"""The Lua scripts the Redis storage runs on the server.

Since key layout 4 no script touches an LSH bucket: the buckets live in each worker's mirror
(:mod:`~rag_dedup.storage.redis.mirror`), and the server only appends each commit's bucket changes to
the band log (a plain RPUSH in the commit's MULTI/EXEC) and hands out the entries a mirror lacks (:data:`COMMITS_SINCE`).
"""

from __future__ import annotations

__all__ = ["COMMITS_SINCE", "RELEASE", "RENEW", "SADD_PAIRS", "SREM_PAIRS"]

#: Compare-and-delete: only the holder of the token (ARGV[1]) may release the lock KEYS[1].
RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""
#: Compare-and-extend: only the holder of the token (ARGV[1]) may renew the lock KEYS[1] to ARGV[2] ms.
RENEW = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end
return 0
"""
#: Where the namespace stands, for an optimistic batch (read atomically). KEYS: commits, commit-log,
#: lock, meta, next-group-id, groups, band-log; ARGV[1]: a commit count seen before, or -1; ARGV[2]: the
#: band-log entries a mirror has applied, or -1 (no band-log part); ARGV[3]: the prefix (``<commit>:``)
#: of the last of them. Returns {commits, the lock's PTTL (-2: free; -1: held without expiry), meta exists, counter exists, groups exist, covered,
#: band, entries...}: ``entries`` the commit-log entries of the commits after ARGV[1], oldest first,
#: when the log still holds all of them (covered = 1; else covered = 0 and no entries); ``band`` empty
#: without ARGV[2], else {reset, more, the band-log entries after the first ARGV[2]...}, at most
#: BAND_ENTRIES_MAX of them (``more`` = 1 when the log holds more). reset = 1 when the entry ARGV[2] - 1
#: is not the one the mirror applied (the namespace was dropped since: commit numbers only grow): the
#: entries are then those from the first, and the mirror starts again.
COMMITS_SINCE = """
local now = tonumber(redis.call('get', KEYS[1]) or '0')
local since = tonumber(ARGV[1])
local out = {now, redis.call('pttl', KEYS[3]), redis.call('exists', KEYS[4]), redis.call('exists', KEYS[5]),
             redis.call('exists', KEYS[6]), 1, {}}
local have = tonumber(ARGV[2])
if have >= 0 then
  local reset = 0
  if have > 0 then
    local last = redis.call('lindex', KEYS[7], have - 1)
    if (not last) or string.sub(last, 1, #ARGV[3]) ~= ARGV[3] then reset = 1; have = 0 end
  end
  local band = redis.call('lrange', KEYS[7], have, have + tonumber(ARGV[4]) - 1)
  local more = 0
  if have + #band < redis.call('llen', KEYS[7]) then more = 1 end
  table.insert(band, 1, more)
  table.insert(band, 1, reset)
  out[7] = band
end
if since >= 0 and now ~= since then
  local n = now - since
  if n < 0 or n > redis.call('llen', KEYS[2]) then
    out[6] = 0
  else
    local entries = redis.call('lrange', KEYS[2], -n, -1)
    for i = 1, #entries do out[7 + i] = entries[i] end
  end
end
return out
"""
#: Bulk set writes: KEYS[i] gets (or loses) member ARGV[i] (a key may repeat).
SADD_PAIRS = "for i = 1, #KEYS do redis.call('sadd', KEYS[i], ARGV[i]) end return #KEYS"
SREM_PAIRS = "for i = 1, #KEYS do redis.call('srem', KEYS[i], ARGV[i]) end return #KEYS"
