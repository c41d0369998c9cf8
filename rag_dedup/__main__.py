"""``python -m rag_dedup``: the ``rag-dedup`` command."""

from rag_dedup.app.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
