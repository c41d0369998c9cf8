"""The Lua scripts the Redis storage runs on the server, and the blobs they read.

LSH buckets travel as hex blobs, not as one argument per bucket (which costs the client more than the
server's work): a bucket script gets the bucket key prefix and concatenated 16-hex-digit band keys,
and names each bucket from its band key (see below). The bucket keys are therefore not declared in
KEYS, which a standalone server allows (Redis Cluster would not; it is not supported).
"""

from __future__ import annotations

import numpy as np

__all__ = ["BUCKETS_ADD", "BUCKETS_REM", "BUCKETS_SET", "BUCKET_LOOKUP", "COMMITS_SINCE", "RELEASE", "RENEW", "SADD_PAIRS", "SREM_PAIRS", "bucket_runs", "lookup_reply", "pair_blobs", "row_blob", "set_blobs"]

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
#: reading them. ARGV[1]: the bucket key prefix; ARGV[2]: band keys, sorted, distinct; ARGV[3]: the number
#: of group ids of each one's new value, one byte each, or '<u4' each when ARGV[5] is '4'; ARGV[4]: the new
#: values, concatenated in that order; ARGV[6]: the runs of band keys, '<u2' each (``bucket_runs``). One
#: HSET a run; no HMGET, and no string built from the old value, which is most of what BUCKETS_ADD costs
#: the server. The runs and the one-byte counts spare the server a substring and a ``struct.unpack`` a
#: band key (a third of this script's own time, beside the HSETs'; measured by bench_redis_server).
BUCKETS_SET = """
local pfx, keys, counts, vals, wide, runs = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5] == '4', ARGV[6]
local sub, byte = string.sub, string.byte
local i, at = 0, 1
for r = 1, #runs, 2 do
  local m = struct.unpack('<I2', runs, r)
  local args = {}
  for t = 1, 2 * m, 2 do
    local p, e = i * 16, nil
    if wide then e = at + struct.unpack('<I4', counts, i * 4 + 1) * 4 else e = at + byte(counts, i + 1) * 4 end
    args[t] = sub(keys, p + 4, p + 16)
    args[t + 1] = sub(vals, at, e - 1)
    at = e; i = i + 1
  end
  redis.call('hset', pfx .. sub(keys, i * 16 - 15, i * 16 - 13), unpack(args, 1, 2 * m))
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
#: ARGV[1]: the bucket key prefix; ARGV[2]: band keys (16 hex digits each); ARGV[3]: their runs, '<u2'
#: each (``bucket_runs``). Returns two blobs: for each band key whose bucket holds a group, its number in
#: the blob and the byte length of its bucket's value (two '<u4' each); and those values concatenated, key
#: after key (group ids as '<u4'). Most buckets a batch asks about are empty: the reply is two bulk
#: strings, not one per key (which redis-py parses at several microseconds each). A value that is not
#: whole '<u4' ids is returned alone as a third element instead (the storage names the damage). Each run
#: (keys of one bucket hash that come together in the blob: the storage sends them sorted) is one HMGET:
#: a ``redis.call`` costs the server more than the field's lookup.
BUCKET_LOOKUP = """
local pfx, blob, runs = ARGV[1], ARGV[2], ARGV[3]
local sub = string.sub
local i, heads, parts, h, k = 0, {}, {}, 0, 0
for r = 1, #runs, 2 do
  local m = struct.unpack('<I2', runs, r)
  local names = {}
  for t = 1, m do local p = (i + t) * 16; names[t] = sub(blob, p - 12, p) end
  local values = redis.call('hmget', pfx .. sub(blob, i * 16 + 1, i * 16 + 3), unpack(names, 1, m))
  for t = 1, m do
    local v = values[t]
    if v then
      if #v % 4 ~= 0 then return {'', '', v} end
      k = k + 1; parts[k] = v; h = h + 1; heads[h] = struct.pack('<I4I4', i + t - 1, #v)
    end
  end
  i = i + m
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


def set_blobs(keys: np.ndarray, starts: np.ndarray, gids: np.ndarray, per_blob: int = 65536) -> list[tuple[str, bytes, bytes, bytes, bytes]]:
    """Buckets for BUCKETS_SET: distinct sorted band ``keys``, key i's new value the group ids
    ``gids[starts[i] : starts[i + 1]]``; as (hex band keys, the id count of each, the counts' width
    b"1" or b"4", '<u4' values, ``bucket_runs``), ``per_blob`` keys each.

    Raises:
        ValueError: A group id does not fit in 32 bits (the layout stores them as uint32).
    """
    if len(gids) and int(np.max(gids)) >= 2**32:
        raise ValueError(f"group id {int(np.max(gids))} does not fit the bucket layout (uint32)")
    keys = np.asarray(keys, dtype=np.uint64)
    hexes = keys.astype(">u8").tobytes().hex()
    counts = np.diff(starts)
    raw = np.asarray(gids, dtype="<u4").tobytes()
    out = []
    for i in range(0, len(keys), per_blob):
        j = min(i + per_blob, len(keys))
        part = counts[i:j]
        wide = bool(len(part)) and int(part.max()) > 255
        packed = part.astype("<u4" if wide else "u1").tobytes()
        out.append((hexes[16 * i : 16 * j], packed, b"4" if wide else b"1", raw[4 * int(starts[i]) : 4 * int(starts[j])], bucket_runs(keys[i:j])))
    return out


def bucket_runs(keys: np.ndarray, most: int = 2000) -> bytes:
    """The runs of band ``keys`` (in the order sent) that name one bucket hash (the same first 12 bits),
    at most ``most`` keys each (what one HMGET or HSET of a bucket script takes), as '<u2' key counts."""
    keys = np.asarray(keys, dtype=np.uint64).reshape(-1)
    n = len(keys)
    if not n:
        return b""
    hashes = keys >> np.uint64(52)
    first = np.concatenate(([True], hashes[1:] != hashes[:-1]))
    starts = np.flatnonzero(first)
    lens = np.diff(np.append(starts, n))
    if (lens > most).any():
        extra = [np.arange(s + most, s + length, most) for s, length in zip(starts[lens > most].tolist(), lens[lens > most].tolist())]
        starts = np.sort(np.concatenate([starts, *extra]))
        lens = np.diff(np.append(starts, n))
    return lens.astype("<u2").tobytes()


def row_blob(rows: np.ndarray) -> str:
    """Band keys (any shape, read in row order) as one hex blob for BUCKET_LOOKUP."""
    return np.ascontiguousarray(rows, dtype=">u8").tobytes().hex()
