"""``BoundedMemo``: a dict memo whose memory stays bounded on any corpus.

The chunker memoises pure functions of short strings (token counts, cut scores, punkt decisions):
real text repeats its sentences, words and "word. Next" contexts, so most lookups hit. A memo that
kept every key would grow with the corpus; this one is cleared when it holds ``limit`` entries and
never keeps a key longer than ``max_key`` characters, so it holds at most ``limit * max_key``
characters of keys, whatever it is fed.
"""

from __future__ import annotations

from typing import TypeVar

__all__ = ["MEMO_LIMIT", "MEMO_MAX_KEY", "BoundedMemo"]

K = TypeVar("K")
V = TypeVar("V")

#: Entries a memo holds before it is cleared.
MEMO_LIMIT = 1 << 16
#: Keys longer than this many characters are computed each time, never kept.
MEMO_MAX_KEY = 2048


class BoundedMemo(dict[K, V]):
    """A ``dict`` (read it with ``.get``, which is as fast as a plain dict's) written through :meth:`put`.

    Example:
        >>> memo: BoundedMemo[str, int] = BoundedMemo(limit=2)
        >>> memo.put("a", 1, 1), memo.put("b", 2, 1), memo.put("c", 3, 1)
        (1, 2, 3)
        >>> sorted(memo)
        ['c']
    """

    __slots__ = ("limit", "max_key")

    def __init__(self, limit: int = MEMO_LIMIT, max_key: int = MEMO_MAX_KEY) -> None:
        if limit < 1 or max_key < 0:
            raise ValueError(f"BoundedMemo needs limit >= 1 and max_key >= 0, got limit={limit}, max_key={max_key}")
        super().__init__()
        self.limit = limit
        self.max_key = max_key

    def put(self, key: K, value: V, key_size: int) -> V:
        """Keep ``value`` under ``key`` (of ``key_size`` characters) unless the key is too long;
        clear the memo first when it is full. Returns ``value``."""
        if key_size <= self.max_key:
            if len(self) >= self.limit:
                self.clear()
            self[key] = value
        return value
