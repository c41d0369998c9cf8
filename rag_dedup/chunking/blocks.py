"""Structural blocks of a text: paragraphs, Markdown headings, rules and list items.

Blank lines, Markdown headings (``# ...``), rules (``----``) and list items (``-``, ``*``, ``1.``,
``a)``, ...) separate blocks; no sentence spans two blocks. Every block is a trimmed
``(start, end)`` span into the original text, so offsets stay exact for CRLF and every script.

Comment prose is not a list. A licence in a C comment is a paragraph whose every line begins with
``" * "``; read as list items, each line would be a block of its own, short blocks that are grouped
with whatever precedes them, so the same licence would be cut differently behind another prefix. A
line that begins with ``*`` therefore continues the block when the line before it began with ``*`` in
the same column and either was a wrapped line (at least :data:`WRAPPED_LINE` characters, its text not
ending in ``. ! ? : ;``: a list of short items stays a list) or a bare ``*`` line came before in this
comment (a list has no empty items; a comment's paragraphs are separated by them). A bare ``*`` line after a starred line ends its block, as a blank
line would (it stays in the block it ends, so no character of the text falls outside every block).
Each decision depends on the line and the one before it, so the blocks of a comment do not depend on
what precedes it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

__all__ = [
    "CONTINUES",
    "NEWLINE",
    "STARTS_BLOCK",
    "STARTS_HEADING",
    "Span",
    "WRAPPED_LINE",
    "blocks",
    "split_after_cjk_stops",
]

#: A ``(start, end)`` character span into a text.
Span = tuple[int, int]

# Unit kinds: a unit continues its block, starts a block (paragraph, list item, rule), or starts a
# Markdown heading.
CONTINUES, STARTS_BLOCK, STARTS_HEADING = 0, 1, 2

# Line structure. Lines end at \n, \r\n, \r and the Unicode line and paragraph separators.
NEWLINE = re.compile(r"\r\n|[\n\r\u2028\u2029]")
LEADING_SPACE = re.compile(r"\s*")
HEADING = re.compile(r"[ \t]{0,3}#{1,6}(?:[ \t]|$)")  # Markdown: 4+ spaces of indent is code
RULE = re.compile(r"[ \t]*([-=*_~#+.])[ \t]*(?:\1[ \t]*){2,}$")
LIST_ITEM = re.compile(
    r"[ \t]*(?:[-*+\u2022\u2023\u25e6\u2043\u2219]|\d{1,9}[.)]|\(\d{1,9}\)|\(?(?:[a-zA-Z]|[ivxlcdm]{1,6})\))"
    r"[ \t]+\S"
)
# The line break before the next line that may not simply continue the current block: a line that
# is blank, or starts with anything but an ASCII letter, or with a letter and a ")" within its first
# eight characters (maybe "a) item"). Lines skipped over by one search are plain text: not blank,
# not a heading, rule or list item, whatever the rules above say (each needs another first
# character); the line found is examined by those rules.
NEXT_NOT_PLAIN = re.compile(
    r"(?:\r\n|\r(?!\n)|[\n\u2028\u2029])"  # a CRLF is one break: never match its CR alone
    r"(?=[^\S\n\r\u2028\u2029]*(?:[^A-Za-z\s]|[A-Za-z][^\n\r\u2028\u2029]{0,6}\)|[\n\r\u2028\u2029]|\Z))"
)
# The fewest characters of a starred line that wraps prose (comment text is filled to 70-80 columns).
WRAPPED_LINE = 50
# The text of a line that ends a list item (a sentence or a clause), closing quotes or brackets after it.
ENDS_ITEM = re.compile(r"[.!?:;][\"'\u201d\u2019)\]]*$")
# Characters a rule line, and a list item that is not numbered or lettered, can start with.
RULE_CHARS = frozenset("-=*_~#+.")
LIST_CHARS = frozenset("-*+(\u2022\u2023\u25e6\u2043\u2219")
# After a CJK full stop (punkt does not know them; blocks are split after them before punkt runs).
CJK_END = re.compile(r"(?<=[\u3002\uff01\uff1f\uff61])\s*(?=\S)")


def blocks(text: str) -> Iterator[tuple[int, int, bool]]:
    """Trimmed ``(start, end, is_heading)`` spans of the structural blocks of ``text``, in order.

    A block is a run of non-blank lines; a Markdown heading or a rule line is a block of its own,
    and a list item starts a new block. Linear in ``len(text)``: lines are examined one by one,
    except runs of plain lines inside a block, which one search skips (see ``NEXT_NOT_PLAIN``).
    """
    block_start = block_end = -1
    line_start = 0
    n = len(text)
    # Comment prose (module docstring): the column of the "*" that began the line before (-1: it did
    # not), whether that line wrapped prose, and the column of a bare "*" line seen in this comment.
    star_column, wrapped, comment_column = -1, False, -1
    while line_start <= n:
        m = NEWLINE.search(text, line_start)
        line_end = m.start() if m else n
        next_start = m.end() if m else n + 1
        first = LEADING_SPACE.match(text, line_start, line_end).end()
        if first < line_end:  # a non-blank line
            last = line_end
            while text[last - 1].isspace():
                last -= 1
            c = text[first]  # most lines start with a letter and are none of the below: skip the regexes
            column = first - line_start
            if c == "*" and last == first + 1 and star_column == column and block_start >= 0:
                # A bare "*" in a starred comment: a paragraph break, kept in the block it ends.
                yield block_start, last, False
                block_start, comment_column = -1, column
                line_start = next_start
                continue
            heading = c == "#" and HEADING.match(text, line_start, line_end) is not None
            starred = False
            if heading or (c in RULE_CHARS and RULE.match(text, first, line_end)):
                if block_start >= 0:
                    yield block_start, block_end, False
                    block_start = -1
                yield first, last, heading
            else:
                item = (
                    (c in LIST_CHARS or c.isdigit() or (c.isalpha() and ")" in text[first + 1 : first + 8]))
                    and LIST_ITEM.match(text, first, line_end) is not None
                )
                starred = item and c == "*"
                prose = starred and star_column == column and (comment_column == column or wrapped)
                if block_start >= 0 and item and not prose:
                    yield block_start, block_end, False
                    block_start = -1
                if block_start < 0:
                    block_start = first
                block_end = last
                if m is not None and not starred:  # skip the plain lines that follow, with one search
                    plain_end = NEXT_NOT_PLAIN.search(text, line_end)
                    if plain_end is None:  # plain lines to the end of the text
                        last = n
                        next_start = n + 1
                    elif plain_end.start() > line_end:
                        last = plain_end.start()
                        next_start = plain_end.end()
                    if last > block_end:
                        while text[last - 1].isspace():
                            last -= 1
                        block_end = last
            if starred:
                star_column = column
                wrapped = last - first >= WRAPPED_LINE and ENDS_ITEM.search(text, first, last) is None
            else:
                star_column = comment_column = -1
        else:
            star_column = comment_column = -1
            if block_start >= 0:
                yield block_start, block_end, False
                block_start = -1
        line_start = next_start
    if block_start >= 0:
        yield block_start, block_end, False


def split_after_cjk_stops(text: str, start: int, end: int) -> Iterator[Span]:
    """Split ``[start, end)`` after CJK full stops; the parts stay trimmed."""
    pos = start
    for m in CJK_END.finditer(text, start, end):
        yield pos, m.start()
        pos = m.end()
    yield pos, end
