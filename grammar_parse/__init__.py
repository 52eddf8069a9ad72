"""grammar_parse: turn raw LLM output into structured chat messages, one-shot or token by token.

A response template (transformers' ``response_template`` format), an authored ``.lark`` grammar, or a
built-in grammar name is compiled into a Lark LALR grammar; a streaming session walks it and emits
``region_open`` / ``region_chunk`` / ``region_close`` events as delimiters complete (and ``parse_error``
in lenient mode, ``correction`` for a legacy schema): the :data:`Event` TypedDicts.

>>> from grammar_parse import parse_response
>>> parse_response("<think>hm</think>Hello!", "qwen3", prefix="")
{'role': 'assistant', 'reasoning_content': 'hm', 'content': 'Hello!'}
"""

from __future__ import annotations

from pathlib import Path as _Path

# Installed, grammars/ and compat/ are the subpackages grammar_parse.grammars and grammar_parse.compat.
# In a source checkout (python -m run from its root) they sit beside this directory: look there too.
_checkout = _Path(__file__).resolve().parent.parent
if (_checkout / "grammars" / "__init__.py").is_file() and not (_Path(__file__).parent / "grammars").exists():
    __path__.append(str(_checkout))  # noqa: F821 - the package's own __path__

from .compiler import compile_template
from .errors import (
    ArgumentError,
    FinalizedError,
    GrammarError,
    GrammarParseError,
    ParseError,
    PlaceholderError,
    TemplateError,
)
from .events import Correction, Event, Message, ParseErrorEvent, RegionChunk, RegionClose, RegionOpen
from .grammar import Grammar
from .library import list_grammars, load_grammar
from .session import ResponseParser, parse_response

__version__ = "0.1.0"

__all__ = [
    "ArgumentError",
    "Correction",
    "Event",
    "FinalizedError",
    "Grammar",
    "GrammarError",
    "GrammarParseError",
    "Message",
    "ParseError",
    "ParseErrorEvent",
    "PlaceholderError",
    "RegionChunk",
    "RegionClose",
    "RegionOpen",
    "ResponseParser",
    "TemplateError",
    "compile_template",
    "list_grammars",
    "load_grammar",
    "parse_response",
]
