"""File formats for the ``rag-dedup`` command: bytes on disk to text, strictly UTF-8.

:func:`read_text` turns one file into text, or raises :class:`Unreadable` with the reason a person
reads in the "Skipped" list. The rules, in order:

1. A name ending in ``.gz`` is decompressed (gzip), and the name without ``.gz`` chooses the format:
   ``intro.2.gz`` is read like ``intro.2``, ``changelog.Debian.gz`` like ``changelog.Debian``. It is
   decompressed a block at a time: its first 8 KiB are sniffed (rule 2) before the rest, and one that
   decompresses to more than :data:`GZIP_MAX_BYTES` is skipped (a gzip bomb costs no more memory).
2. A byte order mark chooses the encoding: UTF-32 or UTF-16 (either byte order) is decoded strictly as
   that encoding, and a UTF-8 mark is dropped; the mark is not part of the text.
3. Without a mark, a NUL byte in the first 8 KiB means a binary file, and the bytes must decode as UTF-8
   (strict).
4. The suffix chooses the conversion: HTML is reduced to its visible text with the standard library's
   parser, JSON to the string values that hold prose, ``.txt .md .rst .text .markdown`` are taken as
   they are. Any other suffix, or none (Debian's ``copyright``, ``README``, man pages), is *sniffed*:
   a file that passed rules 2 and 3 is text, and is taken as it is.

PDF is not read here: it needs ``llama-index-readers-file`` and ``pypdf`` (``pip install
rag-dedup[pdf]``), see :func:`pdf_reader_available`.

:func:`file_extractor` gives the same rules to LlamaIndex's ``SimpleDirectoryReader``, so an
application (``examples/quickstart.py``) reads a folder exactly as ``rag-dedup scan`` does::

    SimpleDirectoryReader("examples/data", recursive=True, file_extractor=file_extractor())
"""

from __future__ import annotations

import codecs
import gzip
import io
import json
import os
import re
import stat
import zlib
from html.parser import HTMLParser
from typing import Any

__all__ = [
    "Unreadable",
    "file_extractor",
    "html_to_text",
    "json_to_text",
    "pdf_reader_available",
    "read_text",
    "text_format",
]

#: Bytes looked at for a NUL that marks a binary file.
SNIFF_BYTES = 8192

#: Byte order marks and their encodings, the UTF-32 ones first (UTF-32-LE's mark begins with UTF-16-LE's).
_BOMS = ((codecs.BOM_UTF32_LE, "utf-32-le"), (codecs.BOM_UTF32_BE, "utf-32-be"),
         (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"), (codecs.BOM_UTF8, "utf-8"))

#: The most a ``.gz`` file may decompress to (256 MiB); a larger one is skipped.
GZIP_MAX_BYTES = 256 << 20

_FORMATS = {".txt": "text", ".md": "text", ".rst": "text", ".text": "text", ".markdown": "text",
            ".html": "html", ".htm": "html", ".json": "json"}


class Unreadable(Exception):
    """A file that is not read, with the reason (``str(e)``), e.g. ``"binary file"``."""

class _HTMLText(HTMLParser):
    """Collects the visible text of an HTML page: no script, style or head; blocks become lines."""

    _SKIP = {"script", "style", "head", "noscript", "template", "svg"}
    _BLOCK = {"p", "div", "br", "li", "ul", "ol", "dl", "dt", "dd", "tr", "table", "section", "article",
              "header", "footer", "nav", "aside", "main", "pre", "blockquote", "hr", "title",
              "h1", "h2", "h3", "h4", "h5", "h6", "details", "summary", "figure", "figcaption"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skip = 0
        self._pre = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._SKIP:
            self._skip += 1
        elif tag in self._BLOCK:
            self.parts.append("\n\n" if tag in {"p", "pre", "h1", "h2", "h3", "h4", "h5", "h6"} else "\n")
        if tag == "pre":
            self._pre += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in self._SKIP:
            self._skip = max(0, self._skip - 1)
        elif tag in self._BLOCK:
            self.parts.append("\n")
        if tag == "pre":
            self._pre = max(0, self._pre - 1)

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        self.parts.append(data if self._pre else re.sub(r"\s+", " ", data))

    def text(self) -> str:
        text = "".join(self.parts)
        text = re.sub(r"[ \t]*\n[ \t]*", "\n", text)
        return re.sub(r"\n{3,}", "\n\n", text).strip()


def html_to_text(markup: str) -> str:
    """The visible text of an HTML document or fragment (stdlib parser; tolerant of bad markup)."""
    parser = _HTMLText()
    parser.feed(markup)
    parser.close()
    return parser.text()


def _json_prose(value: Any, out: list[str]) -> None:
    """Append the prose strings of ``value`` to ``out`` in document order (a stack, not recursion:
    the depth of a JSON document is not bounded by Python's)."""
    stack = [value]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            if " " in value.strip():
                out.append(html_to_text(value) if "<" in value and ">" in value else value.strip())
        elif isinstance(value, dict):
            stack.extend(reversed(list(value.values())))
        elif isinstance(value, list):
            stack.extend(reversed(value))


def json_to_text(raw: str) -> str:
    """The prose in a JSON document: string values containing a space, in order, one per paragraph.

    HTML inside those strings is reduced to its text. Raises ``ValueError`` for invalid JSON.
    """
    out: list[str] = []
    try:
        value = json.loads(raw)
    except RecursionError:
        raise ValueError("nested too deeply for the JSON parser") from None
    _json_prose(value, out)
    return "\n\n".join(s for s in out if s)


def text_format(name: str) -> tuple[str, bool]:
    """The conversion for a file name and whether it is gzipped: ``("html", False)``, ``("text", True)``.

    The format is ``"text"``, ``"html"``, ``"json"``, ``"pdf"``, or ``"sniff"`` (any other suffix or
    none: text if the bytes are UTF-8 without NUL).
    """
    lower = name.lower()
    gz = lower.endswith(".gz")
    if gz:
        lower = lower[:-3]
    suffix = os.path.splitext(lower)[1]
    if suffix == ".pdf":
        return "pdf", gz
    return _FORMATS.get(suffix, "sniff"), gz


def _read_regular(path: str) -> bytes:
    """The bytes of ``path`` if it is a regular file; never blocks on a FIFO or a device."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise Unreadable(f"unreadable: {e.strerror or e}") from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise Unreadable("not a regular file")
        try:
            return fh.read()
        except OSError as e:
            raise Unreadable(f"unreadable: {e.strerror or e}") from None


def read_text(path: str) -> str:
    """The text of the file at ``path`` under the rules of the module docstring (not for PDF).

    Raises:
        Unreadable: not a regular file, unreadable, not gzip though named ``.gz``, binary, not UTF-8
            (nor the encoding its byte order mark names), or invalid JSON; the message is the reason.
    """
    fmt, gz = text_format(os.path.basename(path))
    raw = _read_regular(path)
    if gz:
        raw = _gunzip(raw)
    text = _decode(raw)
    if fmt == "html":
        return html_to_text(text)
    if fmt == "json":
        try:
            text = json_to_text(text)
        except json.JSONDecodeError as e:
            raise Unreadable(f"invalid JSON: {e.msg} at line {e.lineno}") from None
        except ValueError as e:
            raise Unreadable(f"invalid JSON: {e}") from None
        try:  # an escape such as "\ud800" is valid JSON and no text: a lone surrogate
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise Unreadable(f"not valid Unicode: its JSON holds a lone surrogate (\\u{ord(text[e.start]):04x}) "
                             f"at character {e.start} of its text") from None
    return text


def _binary(head: bytes) -> bool:
    """Whether a file that begins with ``head`` (its first SNIFF_BYTES) is binary: a NUL and no byte order
    mark of an encoding whose text holds NUL bytes (UTF-16, UTF-32)."""
    return b"\x00" in head and not any(head.startswith(bom) for bom, encoding in _BOMS if encoding != "utf-8")


def _decode(raw: bytes) -> str:
    """``raw`` as text under rules 2 and 3 of the module docstring."""
    for bom, encoding in _BOMS:
        if raw.startswith(bom):
            try:
                return raw[len(bom):].decode(encoding)
            except UnicodeDecodeError as e:
                name = encoding.upper()
                raise Unreadable(f"not {name} text though it begins with a {name} byte order mark "
                                 f"(byte {len(bom) + e.start})") from None
    if _binary(raw[:SNIFF_BYTES]):
        raise Unreadable("binary file")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Unreadable(f"not UTF-8 text (byte {e.start})") from None


def _gunzip(raw: bytes) -> bytes:
    """``raw`` decompressed, a block at a time: refused as binary as soon as its first SNIFF_BYTES hold
    a NUL, and as too large past GZIP_MAX_BYTES, before more is decompressed (see the module docstring)."""
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(raw)) as fh:
            head = fh.read(SNIFF_BYTES)
            if _binary(head):
                raise Unreadable("binary file")
            parts, size = [head], len(head)
            while block := fh.read(1 << 20):
                size += len(block)
                if size > GZIP_MAX_BYTES:
                    raise Unreadable(f"decompresses to more than {GZIP_MAX_BYTES >> 20} MiB")
                parts.append(block)
    except (OSError, EOFError, zlib.error) as e:
        raise Unreadable(f"not gzip data: {e}") from None
    return b"".join(parts)


def file_extractor() -> dict[str, Any]:
    """``SimpleDirectoryReader(file_extractor=...)`` for the suffixes :func:`read_text` converts, and ``.gz``.

    Each reader returns one Document with :func:`read_text`'s text and the metadata LlamaIndex passes;
    a file it cannot read raises :class:`Unreadable` (``SimpleDirectoryReader`` reports it or, with
    ``raise_on_error=True``, raises it).
    """
    from llama_index.core.readers.base import BaseReader
    from llama_index.core.schema import Document

    class TextReader(BaseReader):
        """A file's text under the rules of :mod:`rag_dedup.app.readers` (HTML and JSON reduced to prose)."""

        def load_data(self, file: Any, extra_info: dict[str, Any] | None = None, **_: Any) -> list[Document]:
            return [Document(text=read_text(str(file)), metadata=dict(extra_info or {}))]

    reader = TextReader()
    return {suffix: reader for suffix in (*_FORMATS, ".gz")}


def pdf_reader_available() -> bool:
    try:
        import pypdf  # noqa: F401
        from llama_index.readers.file import PDFReader  # noqa: F401
    except ImportError:
        return False
    return True
