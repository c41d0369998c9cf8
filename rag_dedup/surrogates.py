"""The one rule for strings that are not valid Unicode: lone surrogates are refused, never carried.

Python makes strings with lone surrogates (code points U+D800-U+DFFF) out of bytes that are not UTF-8:
``os.listdir`` gives ``"caf\\udce9.txt"`` for the Latin-1 file name ``caf\\xe9.txt``, and so does
``bytes.decode("utf-8", "surrogateescape")``. Such a string has no UTF-8 form, so it cannot be saved,
sent to Redis, embedded, or written to JSON or HTML. rag-dedup therefore refuses it wherever a key, a
source or a text comes in (:class:`~rag_dedup.index.DedupIndex`, :func:`~rag_dedup.normalize.canonical`),
with an :class:`~rag_dedup.errors.InvalidTextError` that names the argument and the item, before anything
is written. A caller that must keep such a name (a file scanner) makes it valid first with
:func:`escape_surrogates`, which is also how it is shown.

Example:
    >>> escape_surrogates("caf\\udce9.txt")
    'caf\\\\xe9.txt'
    >>> check_unicode("caf\\udce9.txt", "source of items[3]")
    Traceback (most recent call last):
    ...
    rag_dedup.errors.InvalidTextError: source of items[3] holds a lone surrogate ('\\udce9' at position 3 of 'caf\\\\xe9.txt'), so it is not valid Unicode; decode bytes with errors='replace', or pass the string through rag_dedup.escape_surrogates()
"""

from __future__ import annotations

import re

from rag_dedup.errors import InvalidTextError

__all__ = ["check_unicode", "escape_surrogates"]

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
# How much of a refused string the message shows.
_PREVIEW = 60


def check_unicode(value: str, what: str, *args: object) -> None:
    """Raise :class:`~rag_dedup.errors.InvalidTextError` if ``value`` holds a lone surrogate.

    Args:
        value: The string to check (ASCII is checked in O(1)).
        what: How the message names it, e.g. ``"key of items[537]"``; with ``args``, a ``%`` format
            of them, formatted only when the check fails (as logging does), so that a caller in a loop
            pays nothing for the message.
    """
    if value.isascii():
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        if args:
            what = what % args
        preview = escape_surrogates(value[:_PREVIEW]) + ("..." if len(value) > _PREVIEW else "")
        raise InvalidTextError(
            f"{what} holds a lone surrogate ({value[exc.start]!r} at position {exc.start} of {preview!r}), so it is "
            "not valid Unicode; decode bytes with errors='replace', or pass the string through "
            "rag_dedup.escape_surrogates()"
        ) from None


def escape_surrogates(value: str) -> str:
    """``value`` with each lone surrogate written out as a visible escape; a valid string comes back unchanged.

    A surrogate in U+DC80-U+DCFF (what ``surrogateescape`` makes of the byte 0x80-0xFF) becomes ``\\xNN``,
    the byte it stands for, as ``bytes.decode(errors="backslashreplace")`` would show it; any other lone
    surrogate becomes ``\\uDXXX``. The result is valid Unicode, so it can serve as a key or a source.
    """
    if value.isascii() or not _LONE_SURROGATE.search(value):
        return value
    return _LONE_SURROGATE.sub(_escape_one, value)


def _escape_one(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"
