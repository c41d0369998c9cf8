"""The canonical form of a text: what duplicate detection compares.

Keys and shingles are computed from ``canonical(text)``; the original text is what gets stored and
shown. Two texts that differ only in Unicode presentation, invisible characters, line endings,
spacing or case have the same canonical form and therefore the same :func:`exact_key`.

Example:
    >>> canonical("Hello,\\u00a0World!\\r\\n\\r\\n\\r\\n\\r\\nSoft\\u00adware  here")
    'hello, world!\\n\\nsoftware here'
    >>> exact_key("A  b") == exact_key("a b")
    True
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

__all__ = ["NORMALIZATION", "canonical", "exact_digest", "exact_key", "token_form"]

#: Name and version of the normalisation below. Persisted with every index: a saved index whose
#: keys were computed under another normalisation cannot be extended, so loading checks it.
NORMALIZATION = "nfkc-casefold-v1"

# Zero-width space, zero-width non-joiner and joiner, word joiner, BOM / zero-width no-break space,
# and the soft hyphen: invisible characters that copy-paste and PDF extraction sprinkle into text.
_INVISIBLE = "\u200b\u200c\u200d\u2060\ufeff\u00ad"
# The only whitespace characters outside ASCII that NFKC leaves alone (NBSP, em space, ideographic
# space and the rest become U+0020): next line, Ogham space mark, line and paragraph separators.
_WIDE_SPACES = "\u0085\u1680\u2028\u2029"
# ASCII whitespace other than LF (CR is handled first) maps to a space.
_ASCII_SPACES = bytes.maketrans(b"\t\x0b\x0c\x1c\x1d\x1e\x1f", b" " * 7)
_RUNS_OF_SPACES = re.compile(rb"  +")
_SPACE_AT_NEWLINE = re.compile(rb" ?\n ?")
_BLANK_LINES = re.compile(rb"\n{3,}")


def canonical(text: str) -> str:
    """Return the canonical form of ``text``.

    Steps, in order: NFKC; zero-width characters, BOM and soft hyphen removed; CRLF and CR to LF;
    every other whitespace run (spaces, tabs, NBSP, ...) folded to one space; spaces next to a
    newline dropped; three or more newlines folded to two; leading and trailing whitespace stripped;
    casefold.

    The work is done on UTF-8 bytes, where each rule first checks with a C-level scan whether it
    applies at all, so the common case (nothing to change) costs little. Multi-byte UTF-8 sequences
    contain no ASCII bytes, so the byte-level rules cannot touch them.

    Raises:
        TypeError: ``text`` is not a ``str``.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be str, got {type(text).__name__}")
    if text.isascii():
        return _fold_whitespace(text.encode("ascii")).lower().decode("ascii")
    # casefold() neither makes nor removes whitespace, so doing it before the folding is the same.
    return _fold_whitespace(_fold_unicode(text).encode("utf-8")).decode("utf-8")


def token_form(text: str) -> str:
    """:func:`canonical` without the whitespace folding: the same words, cheaper to compute.

    Words (maximal runs of non-whitespace) are what shingles are made of, and folding whitespace
    never changes them, so ``token_form(t).split() == canonical(t).split()`` for every text. For
    ASCII text this is a single ``lower()``.

    Raises:
        TypeError: ``text`` is not a ``str``.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be str, got {type(text).__name__}")
    if text.isascii():
        return text.lower()
    return _fold_unicode(text)


def _fold_unicode(text: str) -> str:
    """NFKC, invisible characters removed, the whitespace NFKC leaves alone to a space, casefold."""
    text = unicodedata.normalize("NFKC", text)
    for ch in _INVISIBLE:
        if ch in text:
            text = text.replace(ch, "")
    for ch in _WIDE_SPACES:
        if ch in text:
            text = text.replace(ch, " ")
    return text.casefold()


def _fold_whitespace(data: bytes) -> bytes:
    """CR/CRLF to LF, whitespace runs to one space, no spaces at newlines, at most one blank line, strip."""
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    data = data.translate(_ASCII_SPACES)
    if b"  " in data:
        data = _RUNS_OF_SPACES.sub(b" ", data)
    if b" \n" in data or b"\n " in data:
        data = _SPACE_AT_NEWLINE.sub(b"\n", data)
    if b"\n\n\n" in data:
        data = _BLANK_LINES.sub(b"\n\n", data)
    return data.strip(b" \n")


def exact_digest(text: str) -> bytes:
    """The 32-byte SHA-256 digest of ``canonical(text)`` (the compact form of :func:`exact_key`)."""
    return hashlib.sha256(canonical(text).encode("utf-8")).digest()


def exact_key(text: str) -> str:
    """The SHA-256 hex digest of ``canonical(text)``: equal for texts that differ only in form."""
    return exact_digest(text).hex()
