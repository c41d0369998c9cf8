"""The Lua scripts the Redis storage runs on the server, and the blobs they read.

LSH buckets travel as hex blobs, not as one argument per bucket (which costs the client more than the
server's work): a bucket script gets the bucket key prefix and concatenated 16-hex-digit band keys,
and names bucket i as ``prefix .. hex_i``. The bucket keys are therefore not declared in KEYS, which a
standalone server allows (Redis Cluster would not; it is not supported).
"""

from __future__ import annotations

import numpy as np

__all__ = ["BUCKETS_ADD", "BUCKETS_REM", "BUCKET_UNIONS", "RELEASE", "RENEW", "SADD_PAIRS", "SREM_PAIRS", "pair_blobs"]

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
#: Bulk set writes: KEYS[i] gets (or loses) member ARGV[i] (a key may repeat).
SADD_PAIRS = "for i = 1, #KEYS do redis.call('sadd', KEYS[i], ARGV[i]) end return #KEYS"
SREM_PAIRS = "for i = 1, #KEYS do redis.call('srem', KEYS[i], ARGV[i]) end return #KEYS"
#: ARGV[1]: the bucket key prefix; ARGV[2]: (band key, group id) pairs, 32 hex digits each. Files
#: (BUCKETS_ADD) or takes out (BUCKETS_REM) each group id, as a decimal member, in each bucket.
BUCKETS_ADD = """
local pfx, blob, last, member = ARGV[1], ARGV[2], nil, nil
for i = 1, #blob, 32 do
  local g = string.sub(blob, i + 16, i + 31)
  if g ~= last then last, member = g, string.format('%d', tonumber(g, 16)) end
  redis.call('sadd', pfx .. string.sub(blob, i, i + 15), member)
end
return 1
"""
BUCKETS_REM = BUCKETS_ADD.replace("'sadd'", "'srem'")
#: ARGV[1]: the bucket key prefix; ARGV[2]: rows of ARGV[3] band keys (16 hex digits each). Returns,
#: for each row, the union of its buckets.
BUCKET_UNIONS = """
local pfx, blob, b = ARGV[1], ARGV[2], tonumber(ARGV[3])
local out, keys = {}, {}
for i = 1, #blob, 16 * b do
  for j = 0, b - 1 do keys[j + 1] = pfx .. string.sub(blob, i + 16 * j, i + 16 * j + 15) end
  out[#out + 1] = redis.call('sunion', unpack(keys, 1, b))
end
return out
"""


def pair_blobs(keys: np.ndarray, gids: np.ndarray, per_blob: int = 65536) -> list[str]:
    """(band key, group id) pairs as hex blobs for BUCKETS_ADD/BUCKETS_REM, ``per_blob`` pairs each."""
    pairs = np.stack((keys, gids), axis=1).astype(">u8")
    return [pairs[i : i + per_blob].tobytes().hex() for i in range(0, len(pairs), per_blob)]


def row_blob(rows: np.ndarray) -> str:
    """Rows of band keys as one hex blob for BUCKET_UNIONS."""
    return rows.astype(">u8").tobytes().hex()
