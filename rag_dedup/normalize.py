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

import numpy as np

from rag_dedup.surrogates import check_unicode

__all__ = [
    "HANGUL_RUN",
    "NORMALIZATION",
    "NUMBERING",
    "SPLIT_SCRIPTS",
    "canonical",
    "exact_key",
    "gram_text",
    "is_decoration",
    "shingle_form",
    "shingle_tokens",
    "token_form",
]

#: Name and version of the normalisation below. Persisted with every index: a saved index whose
#: keys were computed under another normalisation cannot be extended, so loading checks it.
#: v2: every default-ignorable code point removed (v1 removed six), and the Unicode folding repeated
#: until it is stable, so that canonical(canonical(t)) == canonical(t).
NORMALIZATION = "nfkc-casefold-v2"

# The default-ignorable code points of Unicode (DerivedCoreProperties.txt, Default_Ignorable_Code_Point;
# the same set since Unicode 7): invisible characters that copy-paste and PDF extraction sprinkle into
# text. Among them: the soft hyphen, the combining grapheme joiner U+034F, the Arabic letter mark, the
# Hangul fillers, the Mongolian free variation selectors and vowel separator U+180E, zero-width space,
# non-joiner and joiner, LRM and RLM, the bidirectional embeddings and isolates, the word joiner and the
# invisible operators U+2061-U+2064, the variation selectors, the BOM, and the tag characters.
_IGNORABLE_RANGES = (
    (0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160), (0x17B4, 0x17B5),
    (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x206F), (0x3164, 0x3164),
    (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF),
)  # fmt: skip
_IGNORABLE = re.compile("[" + "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in _IGNORABLE_RANGES) + "]")
# The same set as a lookup table over UTF-16 code units, for texts of _TABLE_FROM characters or more:
# there a table lookup in numpy is faster than the regex search (whose cost per character is that
# of casefold itself); below, numpy's fixed cost per call is larger than the search. Surrogate code
# units (D800-DFFF: a character above U+FFFF) are marked too, and such a text is searched by the regex.
_TABLE_FROM = 512
_IGNORABLE_UNITS = np.zeros(0x10000, dtype=bool)
for _lo, _hi in ((0xD800, 0xDFFF), *_IGNORABLE_RANGES):
    _IGNORABLE_UNITS[_lo : min(_hi, 0xFFFF) + 1] = True
# Rounds of the Unicode folding before it is taken as stable (real text needs one; see _fold_unicode).
_MAX_ROUNDS = 4
# The only whitespace characters outside ASCII that NFKC leaves alone (NBSP, em space, ideographic
# space and the rest become U+0020): next line, Ogham space mark, line and paragraph separators.
_WIDE_SPACES = "\u0085\u1680\u2028\u2029"
# ASCII whitespace other than LF (CR is handled first) maps to a space.
_ASCII_SPACES = bytes.maketrans(b"\t\x0b\x0c\x1c\x1d\x1e\x1f", b" " * 7)
_RUNS_OF_SPACES = re.compile(rb"  +")


def canonical(text: str) -> str:
    """Return the canonical form of ``text``.

    Steps, in order: NFKC, casefold, NFKC again (casefolding can undo NFKC: ``"ß\u0301"`` folds to
    ``"ss\u0301"``, whose NFKC is ``"s\u015b"``), every default-ignorable code point removed (zero-width
    characters, BOM, soft hyphen, LRM/RLM, U+034F, U+180E, U+2061-U+2064, variation selectors, ...), and
    these repeated until nothing changes; then CRLF and CR to LF; every other whitespace run (spaces,
    tabs, NBSP, ...) folded to one space; spaces next to a newline dropped; three or more newlines folded
    to two; leading and trailing whitespace stripped. The result is a fixed point:
    ``canonical(canonical(t)) == canonical(t)`` for every text.

    The work is done on UTF-8 bytes, where each rule first checks with a C-level scan whether it
    applies at all, so the common case (nothing to change) costs little. Multi-byte UTF-8 sequences
    contain no ASCII bytes, so the byte-level rules cannot touch them.

    Raises:
        TypeError: ``text`` is not a ``str``.
        rag_dedup.errors.InvalidTextError: ``text`` holds a lone surrogate (see :mod:`rag_dedup.surrogates`).
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be str, got {type(text).__name__}")
    if text.isascii():
        return _fold_whitespace(text.encode("ascii")).lower().decode("ascii")
    # casefold() neither makes nor removes whitespace, so doing it before the folding is the same.
    try:
        data = _fold_unicode(text).encode("utf-8")
    except UnicodeEncodeError:
        check_unicode(text, "text")  # raises InvalidTextError naming the surrogate
        raise
    return _fold_whitespace(data).decode("utf-8")


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


# --- the tokens shingles are made of -----------------------------------------------------------
#: Scripts written without spaces between words: every character in these ranges is a token of its
#: own, so that n-token shingles are character n-grams inside such runs (and words elsewhere).
SPLIT_SCRIPTS: tuple[tuple[int, int, str], ...] = (
    (0x0E00, 0x0E7F, "Thai"),
    (0x0E80, 0x0EFF, "Lao"),
    (0x0F00, 0x0FFF, "Tibetan"),
    (0x1000, 0x109F, "Myanmar"),
    (0x1780, 0x17FF, "Khmer"),
    (0x19E0, 0x19FF, "Khmer symbols"),
    (0x3005, 0x3007, "CJK iteration marks and ideographic zero"),
    (0x3040, 0x309F, "Hiragana"),
    (0x30A0, 0x30FF, "Katakana"),
    (0x31F0, 0x31FF, "Katakana phonetic extensions"),
    (0x3400, 0x4DBF, "CJK extension A"),
    (0x4E00, 0x9FFF, "CJK unified ideographs"),
    (0xA000, 0xA4CF, "Yi"),
    (0xA9E0, 0xA9FF, "Myanmar extended-B"),
    (0xAA60, 0xAA7F, "Myanmar extended-A"),
    (0xF900, 0xFAFF, "CJK compatibility ideographs"),
    (0x20000, 0x3134F, "CJK extensions B-G"),
)
#: Korean is written with spaces between words, so Hangul syllables stay words, except in a run of at
#: least this many syllables with no space (no Korean word is that long: the text is unspaced).
HANGUL_RUN = 8
#: A line-leading list or section number (in token form, so lower case): ``1.``, ``12)``, ``(a)``,
#: ``b.``, ``iv)``, ``(xii)``; Roman numerals up to 39.
NUMBERING = r"\(?(?:[0-9]{1,3}|[a-z]|x{0,3}(?:ix|iv|v?i{0,3}))[.)]"
_NUMBERING = re.compile(NUMBERING)
_SPLIT_CLASS = "".join(f"{chr(a)}-{chr(b)}" for a, b, _ in SPLIT_SCRIPTS)
_SPLIT = re.compile(f"[{_SPLIT_CLASS}]")
_HANGUL = re.compile(f"[\uac00-\ud7a3]{{{HANGUL_RUN},}}")
_SPLIT_OR_HANGUL = re.compile(f"[{_SPLIT_CLASS}\uac00-\ud7a3]")
_ASCII_BYTES = bytes(range(128))


_SPLIT_GAP = re.compile(f"(?<=[{_SPLIT_CLASS}]) (?=[{_SPLIT_CLASS}])")


def gram_text(tokens: str) -> str:
    """The text the short-text regime takes character grams of: ``tokens`` (a text's tokens joined by
    single spaces) without the spaces between two split-script characters, so that a run of Chinese
    or Thai reads as it was written and its grams are pairs of characters, not a character and a space.
    """
    return tokens if tokens.isascii() else _SPLIT_GAP.sub("", tokens)


def is_decoration(token: str) -> bool:
    """True for a token of punctuation and symbols only (Unicode categories P* and S*): ``*``, ``//``, ``.``, ``•``."""
    return all(unicodedata.category(ch)[0] in "PS" for ch in token)


def shingle_form(form: str, *, ignore_decoration: bool = True) -> str:
    """The string whose whitespace-separated words, after the decoration rule, are a text's tokens.

    ``form`` is a :func:`token_form` (or :func:`canonical`) string. Characters of
    :data:`SPLIT_SCRIPTS` (and Hangul syllables in runs of :data:`HANGUL_RUN` or more) are set apart
    by spaces. With ``ignore_decoration``, ``https://`` becomes ``http://``. Text with neither is
    returned as is (the same object). Line breaks are kept, so the line-leading rule of :func:`shingle_tokens` still applies.
    """
    if form.isascii():
        # (":" first: a one-character search is a memchr, "https://" a scan that costs ten times more)
        return form.replace("https://", "http://") if ignore_decoration and ":" in form and "https://" in form else form
    return _shape(form, None, ignore_decoration)


def _shape(form: str, wide: str | None, ignore_decoration: bool) -> str:
    """:func:`shingle_form` of a non-ASCII ``form``; ``wide``, if given, holds every non-ASCII character
    of ``form`` (and maybe ASCII ones), which spares finding them."""
    if ignore_decoration and ":" in form and "https://" in form:
        form = form.replace("https://", "http://")
    if wide is None:  # the non-ASCII characters alone, cheaply: deleting the ASCII bytes of UTF-8 leaves whole characters
        wide = form.encode("utf-8").translate(None, _ASCII_BYTES).decode("utf-8")
    if _SPLIT_OR_HANGUL.search(wide):
        form = _SPLIT.sub(r" \g<0> ", form)
        form = _HANGUL.sub(lambda m: " " + " ".join(m.group()) + " ", form)  # apart from the letters around the run too
    return form


def _token_and_shingle_form(text: str, ignore_decoration: bool = True) -> tuple[str, str]:
    """``(token_form(text), shingle_form(token_form(text), ignore_decoration=...))`` in one pass over the
    non-ASCII characters (the second is the first, the same object, when the shingle form changes nothing).

    Raises:
        TypeError: ``text`` is not a ``str``.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be str, got {type(text).__name__}")
    if text.isascii():
        form = text.lower()
        return form, shingle_form(form, ignore_decoration=ignore_decoration)
    form, wide = _fold_unicode_hinted(text)
    if form.isascii():  # ("Straße" folds to ASCII)
        return form, shingle_form(form, ignore_decoration=ignore_decoration)
    return form, _shape(form, wide, ignore_decoration)


def shingle_tokens(text: str, *, ignore_decoration: bool = True) -> list[str]:
    """The tokens a text's shingles are made of: the rule, one character at a time (plain Python).

    1. Words are the whitespace-separated words of :func:`token_form`; inside a word, each character
       of :data:`SPLIT_SCRIPTS` is a token of its own, and so is each Hangul syllable of a run of
       :data:`HANGUL_RUN` or more; the rest of the word between such characters is a token.
    2. With ``ignore_decoration`` (the default): ``https://`` reads as ``http://``; tokens of punctuation and symbols only (:func:`is_decoration`)
       are dropped; and so are the list and section numbers (:data:`NUMBERING`) that begin a line, or
       follow only dropped tokens on it. Lines end at LF and CR, as in :func:`canonical`. A text that
       would lose every token keeps them all (it is compared as written).

    The shingling in :mod:`rag_dedup.shingles` computes the same tokens in bulk; this function is
    its specification (and its reference in the tests).
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be str, got {type(text).__name__}")
    tokens: list[str] = []
    every: list[str] = []
    for line in token_form(text).replace("\r", "\n").split("\n"):
        leading = True
        for word in line.split():
            if ignore_decoration:
                word = word.replace("https://", "http://")
            for token in _split_word(word):
                every.append(token)
                if ignore_decoration and (is_decoration(token) or (leading and _NUMBERING.fullmatch(token))):
                    continue
                leading = False
                tokens.append(token)
    return tokens or every  # a text of decoration only is compared as written


def _split_word(word: str) -> list[str]:
    """One word's tokens: split-script characters alone, the rest between them together."""
    hangul = [0xAC00 <= ord(ch) <= 0xD7A3 for ch in word]
    alone = [False] * len(word)
    i = 0
    while i < len(word):
        j = i
        while j < len(word) and hangul[j]:
            j += 1
        if j - i >= HANGUL_RUN:
            alone[i:j] = [True] * (j - i)
        i = max(j, i + 1)
    for k, ch in enumerate(word):
        if any(a <= ord(ch) <= b for a, b, _ in SPLIT_SCRIPTS):
            alone[k] = True
    out: list[str] = []
    rest = ""
    for ch, single in zip(word, alone):
        if single:
            if rest:
                out.append(rest)
            out.append(ch)
            rest = ""
        else:
            rest += ch
    if rest:
        out.append(rest)
    return out


# The fast path of the Unicode folding (_fold_islands): a text whose UTF-8 form has at most one extra
# byte per _ISLANDS_FROM characters (a few accents, dashes or quotes in ASCII prose; more non-ASCII
# than that, and the per-island work costs more than folding the whole text at once). Islands of
# non-ASCII characters less than _ISLAND_GAP bytes apart are folded as one.
_ISLANDS_FROM = 8
_ISLAND_GAP = 32
# A byte's class for bytes.find: 0 for ASCII, 1 for the bytes of multi-byte UTF-8 characters.
_HIGH_BYTES = bytes(int(b >= 128) for b in range(256))
_ISLAND_SEP = "\x00"


def _fold_unicode(text: str) -> str:
    """:func:`_fold_unicode_reference`'s value, by :func:`_fold_islands` when the text is mostly ASCII."""
    return _fold_unicode_hinted(text)[0]


def _fold_unicode_hinted(text: str) -> tuple[str, str | None]:
    """:func:`_fold_unicode` of ``text``, and a string that holds every non-ASCII character of it (and
    ASCII ones) when the islands found them, else None."""
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (which canonical() rejects, token_form() keeps)
        return _fold_unicode_reference(text), None
    if (len(data) - len(text)) * _ISLANDS_FROM <= len(text):
        found = _fold_islands(data)
        if found is not None:
            return found
    return _fold_unicode_reference(text), None


def _fold_islands(data: bytes) -> tuple[str, str] | None:
    """The Unicode folding of a mostly ASCII text, done on its non-ASCII *islands* alone, and the folded
    islands (joined by U+0000: every non-ASCII character of the result is in them); None when the
    text needs more than one round of the folding (or holds U+0000): the caller then takes the
    reference, :func:`_fold_unicode_reference`. ``data`` is the text in UTF-8.

    The text is cut before ASCII characters only: each island is a run of non-ASCII characters with the
    one character before it (an ``e`` that a following U+0301 composes with), runs less than
    :data:`_ISLAND_GAP` bytes apart taken together; the ASCII between islands is only lower-cased.
    Why a cut before an ASCII character changes nothing: with ``y`` a text whose NFKD begins with an
    ASCII character, NFKC(x + y) = NFKC(x) + NFKC(y) (an ASCII character is a starter, which canonical
    reordering never moves a mark across, and is never the second character of a canonical
    composition), and NFKC(y), casefold(y) and y without ignorables begin with such a character again
    (the tests check these properties of every code point); casefold, the removal of ignorables and the
    wide spaces are character by character. So one round of the folding is the rounds of its pieces,
    joined; the islands are folded together, joined by U+0000 (which nothing folds to or from), and
    when that round is stable so is the whole text's (its equalities hold piece by piece).
    """
    if b"\x00" in data:
        return None
    marks = data.translate(_HIGH_BYTES)
    spans: list[int] = []  # lo, end of each island in data
    start = marks.find(1)
    while start >= 0:
        end = marks.find(0, start)
        while end >= 0:  # take the next run too when it is near
            after = marks.find(1, end)
            if after < 0 or after - end >= _ISLAND_GAP:
                break
            end = marks.find(0, after)
        if end < 0:
            end = len(data)
        spans.append(start - 1 if start > 0 else 0)  # (the byte before a run is ASCII, but at the start)
        spans.append(end)
        start = marks.find(1, end)
    joined = b"\x00".join([data[lo:end] for lo, end in zip(spans[::2], spans[1::2])]).decode("utf-8")
    normal = unicodedata.normalize("NFKC", joined)
    folded = normal.casefold()
    if folded != normal:
        renormal = unicodedata.normalize("NFKC", folded)
        if renormal != folded:
            return None  # a second round is due (rare: "ß\u0301")
    if _IGNORABLE.search(folded) is not None:
        return None  # removing it calls for a second round
    for ch in _WIDE_SPACES:
        if ch in folded:
            folded = folded.replace(ch, " ")
    parts = folded.encode("utf-8").split(b"\x00")
    if len(parts) * 2 != len(spans):  # (cannot happen: U+0000 is in no island and comes from none)
        return None
    lowered = data.lower()  # (bytes.lower() changes ASCII letters only)
    out: list[bytes] = []
    pos = 0
    for lo, end, part in zip(spans[::2], spans[1::2], parts):
        out.append(lowered[pos:lo])
        out.append(part)
        pos = end
    out.append(lowered[pos:])
    return b"".join(out).decode("utf-8"), folded


def _fold_unicode_reference(text: str) -> str:
    """NFKC, casefold, NFKC, default-ignorables removed, until stable; wide whitespace to a space.

    One round is stable when casefolding changed nothing, or when the second NFKC changed nothing
    (casefold is idempotent, so its output stays folded), and no ignorable was removed; then a second
    round would return its input. Real text needs one round; a round that removed an ignorable or
    recomposed characters is followed by another (``"s\u034f\u0301"`` loses U+034F, and the ``s`` and
    the accent then compose), at most :data:`_MAX_ROUNDS` in all.
    """
    for _ in range(_MAX_ROUNDS):
        normal = unicodedata.normalize("NFKC", text)
        folded = normal.casefold()
        stable = folded == normal
        if not stable:
            renormal = unicodedata.normalize("NFKC", folded)
            stable = renormal == folded
            folded = renormal
        if _has_ignorable(folded):
            folded = _IGNORABLE.sub("", folded)
            stable = False
        text = folded
        if stable:
            break
    for ch in _WIDE_SPACES:
        if ch in text:
            text = text.replace(ch, " ")
    return text


def _has_ignorable(text: str) -> bool:
    """Whether ``text`` holds a default-ignorable code point (or, for a long text, any above U+FFFF)."""
    if len(text) < _TABLE_FROM:
        return _IGNORABLE.search(text) is not None
    units = np.frombuffer(text.encode("utf-16-le", "surrogatepass"), dtype=np.uint16)
    return bool(_IGNORABLE_UNITS[units].any()) and _IGNORABLE.search(text) is not None


def _fold_whitespace(data: bytes) -> bytes:
    """CR/CRLF to LF, whitespace runs to one space, no spaces at newlines, at most one blank line, strip."""
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    data = data.translate(_ASCII_SPACES)
    if b"  " in data:
        data = _RUNS_OF_SPACES.sub(b" ", data)
    # With runs of spaces folded, a newline has at most one space on each side; bytes.replace drops
    # them (a regex substitution visits every newline, and costs ten times more on real text).
    if b" \n" in data:
        data = data.replace(b" \n", b"\n")
    if b"\n " in data:
        data = data.replace(b"\n ", b"\n")
    while b"\n\n\n" in data:  # each pass turns a run of k >= 3 newlines into one of k - k // 3
        data = data.replace(b"\n\n\n", b"\n\n")
    return data.strip(b" \n")


def exact_key(text: str) -> str:
    """The SHA-256 hex digest of ``canonical(text)``: equal for texts that differ only in form."""
    return hashlib.sha256(canonical(text).encode("utf-8")).hexdigest()
