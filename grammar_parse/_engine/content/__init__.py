"""Content parsers: what a region's text becomes, one registered :class:`ContentParser` per format, each in
its own module (text and scalars, JSON, XML-like parameters, key/value lines, Python call syntax, JSON calls
keyed by name), behind one protocol (grammar_parse._engine.content.base): parse, stream shape, salvage.

Each parser turns a region's raw text into one value exactly as transformers' response parsing does (same
stripping, same JSON dialect knobs, same XML-ish and key/value splitting), so that messages compare equal
value for value. Failures raise :class:`~grammar_parse.errors.ParseError` (a ``ValueError``).
"""

from __future__ import annotations

from . import json, json_name_keys, kv_lines, pythonic, text, xml
from .base import CONTENT_PARSERS, CallShape, CallTemplate, ContentParser, Piece, Pieces, call_template, parse_content

for _module in (text, json, xml, kv_lines, pythonic, json_name_keys):
    CONTENT_PARSERS.update((parser.name, parser) for parser in _module.PARSERS)

#: The parsers whose value is the verbatim body (modulo stripping): their chunks stream with ``dirty=False``.
STREAMABLE_PARSERS = frozenset(name for name, parser in CONTENT_PARSERS.items() if parser.streamable)

__all__ = ["CONTENT_PARSERS", "STREAMABLE_PARSERS", "CallShape", "CallTemplate", "ContentParser", "Piece", "Pieces",
           "call_template", "parse_content"]
