"""The Lua scripts the Redis storage runs on the server, and the blobs they read.

LSH buckets travel as hex blobs, not as one argument per bucket (which costs the client more than the
server's work): a bucket script gets the bucket key prefix and concatenated 16-hex-digit band keys,
and names each bucket from its band key (see below). The bucket keys are therefore not declared in
KEYS, which a standalone server allows (Redis Cluster would not; it is not supported).
"""

from __future__ import annotations

import numpy as np

__all__ = ["BUCKETS_ADD", "BUCKETS_REM", "BUCKETS_SET", "BUCKET_LOOKUP", "COMMITS_SINCE", "RELEASE", "RENEW", "SADD_PAIRS", "SREM_PAIRS", "lookup_reply", "pair_blobs", "row_blob", "set_blobs"]

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
#: lock, meta, next-group-id, groups; ARGV[1]: a commit count seen before, or -1.
#: Returns {commits, lock held, meta exists, counter exists, groups exist, covered, entries...}: the
#: log entries of the commits after ARGV[1], oldest first, when the log still holds all of them
#: (covered = 1; else covered = 0 and no entries).
COMMITS_SINCE = """
local now = tonumber(redis.call('get', KEYS[1]) or '0')
local since = tonumber(ARGV[1])
local out = {now, redis.call('exists', KEYS[3]), redis.call('exists', KEYS[4]), redis.call('exists', KEYS[5]),
             redis.call('exists', KEYS[6]), 1}
if since >= 0 and now ~= since then
  local n = now - since
  if n < 0 or n > redis.call('llen', KEYS[2]) then
    out[6] = 0
  else
    local entries = redis.call('lrange', KEYS[2], -n, -1)
    for i = 1, #entries do out[6 + i] = entries[i] end
  end
end
return out
"""
#: Bulk set writes: KEYS[i] gets (or loses) member ARGV[i] (a key may repeat).
SADD_PAIRS = "for i = 1, #KEYS do redis.call('sadd', KEYS[i], ARGV[i]) end return #KEYS"
SREM_PAIRS = "for i = 1, #KEYS do redis.call('srem', KEYS[i], ARGV[i]) end return #KEYS"
# LSH buckets (key layout 2): a band key's 16 hex digits name its bucket as hash ``prefix .. hex[1..3]``,
# field ``hex[4..16]`` (keys.Layout.bucket); the value is the bucket's group ids as little-endian uint32, concatenated.
# ARGV[2] of every bucket script is a blob of 16-hex-digit band keys.

#: ARGV[1]: the bucket key prefix; ARGV[2]: band keys, sorted (``pair_blobs`` sorts them); ARGV[3]: one
#: group id for each, as raw '<u4'. Appends each group id to its bucket. The band keys of one bucket
#: hash (their first 3 hex digits) are contiguous: each run of them is one HMGET and one HSET of all its
#: fields (a group id appended to what the field held), not a command per pair, which is what the
#: server's time goes to (a ``redis.call`` costs microseconds; the string work between them, less).
BUCKETS_ADD = """
local pfx, keys, gids = ARGV[1], ARGV[2], ARGV[3]
local n, i = #gids / 4, 0
while i < n do
  local hk = string.sub(keys, i * 16 + 1, i * 16 + 3)
  local added, names, m = {}, {}, 0
  while i < n and m < 2000 and string.sub(keys, i * 16 + 1, i * 16 + 3) == hk do
    local f, g = string.sub(keys, i * 16 + 4, i * 16 + 16), string.sub(gids, i * 4 + 1, i * 4 + 4)
    local had = added[f]
    if had then added[f] = had .. g else m = m + 1; names[m] = f; added[f] = g end
    i = i + 1
  end
  local h = pfx .. hk
  local olds = redis.call('hmget', h, unpack(names, 1, m))
  local args = {}
  for t = 1, m do
    local f, old = names[t], olds[t]
    args[2 * t - 1] = f
    if old then args[2 * t] = old .. added[f] else args[2 * t] = added[f] end
  end
  redis.call('hset', h, unpack(args, 1, 2 * m))
end
return 1
"""
#: As BUCKETS_ADD, for buckets whose values the storage knows as they are in Redis: sets them, without
#: reading them. ARGV[1]: the bucket key prefix; ARGV[2]: band keys, sorted, distinct; ARGV[3]: the byte
#: length of each one's new value ('<u4'); ARGV[4]: the new values, concatenated in that order. One HSET a
#: bucket hash (split every 2,000 fields); no HMGET, and no string built from the old value, which is
#: most of what BUCKETS_ADD costs the server.
BUCKETS_SET = """
local pfx, keys, lens, vals = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local n, i, at = #keys / 16, 0, 1
while i < n do
  local hk = string.sub(keys, i * 16 + 1, i * 16 + 3)
  local args, m = {}, 0
  while i < n and m < 4000 and string.sub(keys, i * 16 + 1, i * 16 + 3) == hk do
    local len = struct.unpack('<I4', lens, i * 4 + 1)
    args[m + 1] = string.sub(keys, i * 16 + 4, i * 16 + 16)
    args[m + 2] = string.sub(vals, at, at + len - 1)
    at = at + len; m = m + 2; i = i + 1
  end
  redis.call('hset', pfx .. hk, unpack(args, 1, m))
end
return 1
"""
#: As BUCKETS_ADD, but takes each group id out of its bucket (a bucket left empty is deleted).
BUCKETS_REM = """
local pfx, keys, gids = ARGV[1], ARGV[2], ARGV[3]
for i = 0, #gids / 4 - 1 do
  local p = i * 16 + 1
  local h, f = pfx .. string.sub(keys, p, p + 2), string.sub(keys, p + 3, p + 15)
  local g, v = string.sub(gids, i * 4 + 1, i * 4 + 4), redis.call('hget', h, f)
  if v then
    local kept, k = {}, 0
    for q = 1, #v, 4 do
      local x = string.sub(v, q, q + 3)
      if x ~= g then k = k + 1; kept[k] = x end
    end
    if k == 0 then redis.call('hdel', h, f) else redis.call('hset', h, f, table.concat(kept, '', 1, k)) end
  end
end
return 1
"""
#: ARGV[1]: the bucket key prefix; ARGV[2]: band keys (16 hex digits each). Returns two blobs: for each
#: band key whose bucket holds a group, its number in the blob and the byte length of its bucket's value
#: (two '<u4' each); and those values concatenated, key after key (group ids as '<u4'). Most buckets a
#: batch asks about are empty: the reply is two bulk strings, not one per key (which redis-py parses at
#: several microseconds each). A value that is not whole '<u4' ids is returned alone as a third element
#: instead (the storage names the damage). Keys of one bucket hash that come together in the blob (the
#: storage sends them sorted: a hash's keys are then contiguous) are read with one HMGET, split every
#: 2,000 fields, as BUCKETS_ADD writes them: a ``redis.call`` costs the server more than the field's lookup.
BUCKET_LOOKUP = """
local pfx, blob = ARGV[1], ARGV[2]
local n, i = #blob / 16, 0
local heads, parts, h, k = {}, {}, 0, 0
while i < n do
  local hk = string.sub(blob, i * 16 + 1, i * 16 + 3)
  local names, m, first = {}, 0, i
  while i < n and m < 2000 and string.sub(blob, i * 16 + 1, i * 16 + 3) == hk do
    m = m + 1; names[m] = string.sub(blob, i * 16 + 4, i * 16 + 16); i = i + 1
  end
  local values = redis.call('hmget', pfx .. hk, unpack(names, 1, m))
  for t = 1, m do
    local v = values[t]
    if v then
      if #v % 4 ~= 0 then return {'', '', v} end
      k = k + 1; parts[k] = v; h = h + 1; heads[h] = struct.pack('<I4I4', first + t - 1, #v)
    end
  end
end
return {table.concat(heads, '', 1, h), table.concat(parts, '', 1, k)}
"""


def lookup_reply(reply: list[bytes]) -> tuple[np.ndarray, np.ndarray, bytes | None]:
    """BUCKET_LOOKUP's reply as (row number of each group id found, the group ids, a bad value or None)."""
    if len(reply) > 2:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64), reply[2]
    heads = np.frombuffer(reply[0], dtype="<u4").reshape(-1, 2).astype(np.int64)
    gids = np.frombuffer(reply[1], dtype="<u4").astype(np.int64)
    return np.repeat(heads[:, 0], heads[:, 1] >> 2), gids, None


def pair_blobs(keys: np.ndarray, gids: np.ndarray, per_blob: int = 65536) -> list[tuple[str, bytes]]:
    """(band key, group id) pairs for BUCKETS_ADD/BUCKETS_REM: (hex band keys, raw '<u4' ids), ``per_blob``
    each, sorted by band key (a pair's order within its key kept).

    Raises:
        ValueError: A group id does not fit in 32 bits (the layout stores them as uint32).
    """
    if len(gids) and int(np.max(gids)) >= 2**32:
        raise ValueError(f"group id {int(np.max(gids))} does not fit the bucket layout (uint32)")
    order = np.argsort(np.asarray(keys, dtype=np.uint64), kind="stable")  # a bucket hash's keys together
    hexes = np.asarray(keys, dtype=">u8")[order].tobytes().hex()
    raw = np.asarray(gids, dtype="<u4")[order].tobytes()
    return [(hexes[16 * i : 16 * (i + per_blob)], raw[4 * i : 4 * (i + per_blob)]) for i in range(0, len(keys), per_blob)]


def set_blobs(keys: np.ndarray, starts: np.ndarray, gids: np.ndarray, per_blob: int = 65536) -> list[tuple[str, bytes, bytes]]:
    """Buckets for BUCKETS_SET: distinct sorted band ``keys``, key i's new value the group ids
    ``gids[starts[i] : starts[i + 1]]``; as (hex band keys, '<u4' byte lengths, '<u4' values), ``per_blob`` keys each.

    Raises:
        ValueError: A group id does not fit in 32 bits (the layout stores them as uint32).
    """
    if len(gids) and int(np.max(gids)) >= 2**32:
        raise ValueError(f"group id {int(np.max(gids))} does not fit the bucket layout (uint32)")
    hexes = np.asarray(keys, dtype=">u8").tobytes().hex()
    lens = (np.diff(starts) * 4).astype("<u4")
    raw = np.asarray(gids, dtype="<u4").tobytes()
    out = []
    for i in range(0, len(keys), per_blob):
        j = min(i + per_blob, len(keys))
        out.append((hexes[16 * i : 16 * j], lens[i:j].tobytes(), raw[4 * int(starts[i]) : 4 * int(starts[j])]))
    return out


def row_blob(rows: np.ndarray) -> str:
    """Band keys (any shape, read in row order) as one hex blob for BUCKET_LOOKUP."""
    return np.ascontiguousarray(rows, dtype=">u8").tobytes().hex()
