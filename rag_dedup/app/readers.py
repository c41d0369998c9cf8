"""File readers for the ``rag-dedup`` command: plain text, HTML and JSON, strictly UTF-8.

LlamaIndex's ``SimpleDirectoryReader`` takes these as ``file_extractor``. HTML is reduced to its visible
text with the standard library's parser; JSON to the string values that hold prose. PDF needs
``llama-index-readers-file`` and ``pypdf`` (``pip install rag-dedup[pdf]``).
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

__all__ = ["html_to_text", "json_to_text", "make_readers", "pdf_reader_available"]



def _reader_base() -> type:
    from llama_index.core.readers.base import BaseReader

    return BaseReader


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
    if isinstance(value, str):
        if " " in value.strip():
            out.append(html_to_text(value) if "<" in value and ">" in value else value.strip())
    elif isinstance(value, dict):
        for v in value.values():
            _json_prose(v, out)
    elif isinstance(value, list):
        for v in value:
            _json_prose(v, out)


def json_to_text(raw: str) -> str:
    """The prose in a JSON document: string values containing a space, in order, one per paragraph.

    HTML inside those strings is reduced to its text. Raises ``ValueError`` for invalid JSON.
    """
    out: list[str] = []
    _json_prose(json.loads(raw), out)
    return "\n\n".join(s for s in out if s)


def make_readers() -> dict[str, Any]:
    """File extractors for SimpleDirectoryReader: plain text, HTML and JSON read strictly as UTF-8."""
    from llama_index.core.schema import Document

    base = _reader_base()

    class TextFileReader(base):  # type: ignore[misc, valid-type]
        """Reads a file as UTF-8 text (strict: a decoding error skips the file)."""

        convert = staticmethod(lambda s: s)

        def load_data(self, file: Path, extra_info: dict | None = None, **_: Any) -> list[Document]:
            raw = Path(file).read_bytes().decode("utf-8")
            return [Document(text=self.convert(raw), metadata=dict(extra_info or {}))]

    class HTMLFileReader(TextFileReader):
        convert = staticmethod(html_to_text)

    class JSONFileReader(TextFileReader):
        convert = staticmethod(json_to_text)

    plain, htm, js = TextFileReader(), HTMLFileReader(), JSONFileReader()
    return {".txt": plain, ".md": plain, ".rst": plain, ".text": plain, ".markdown": plain,
            ".html": htm, ".htm": htm, ".json": js}


def pdf_reader_available() -> bool:
    try:
        import pypdf  # noqa: F401
        from llama_index.readers.file import PDFReader  # noqa: F401
    except ImportError:
        return False
    return True
