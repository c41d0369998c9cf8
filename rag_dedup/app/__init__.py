"""The ``rag-dedup`` command: corpus reading, reports (text, JSON, HTML) and argument handling."""
