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

import importlib.machinery as _machinery
import importlib.util as _util
import sys as _sys
from pathlib import Path as _Path


class _CheckoutFinder:
    """Installed, grammars/ and compat/ are the subpackages grammar_parse.grammars and grammar_parse.compat.
    In a source checkout (``python -m grammar_parse`` run from its root, no install) they sit beside this
    directory: this finder maps those two names there, as pyproject.toml's package-dir does, and nothing
    else of the checkout becomes part of the package."""

    def __init__(self, root: _Path) -> None:
        self.dirs = {f"{__name__}.{sub}": root / folder for sub, folder in (("grammars", "grammars"), ("compat", "compat"))}

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> _machinery.ModuleSpec | None:
        folder = self.dirs.get(fullname)
        if folder is None:
            return None
        return _util.spec_from_file_location(fullname, folder / "__init__.py", submodule_search_locations=[str(folder)])


_checkout = _Path(__file__).resolve().parent.parent
if (_checkout / "grammars" / "__init__.py").is_file() and not (_Path(__file__).parent / "grammars").exists():
    _sys.meta_path.append(_CheckoutFinder(_checkout))  # (after the others: an editable install's finder wins)

from . import _moved
from ._engine.compiler import compile_template
from ._engine.events import (
    CallArguments,
    CallClose,
    CallOpen,
    CallProblem,
    Correction,
    Event,
    Message,
    ParseErrorEvent,
    ParseProblem,
    RegionChunk,
    RegionClose,
    RegionOpen,
    ToolCall,
    ToolFunction,
)
from ._engine.grammar import Grammar
from ._engine.library import list_grammars, load_grammar
from ._engine.session import ResponseParser, parse_response
from .errors import (
    AnchorWarning,
    ArgumentError,
    ChatTemplateError,
    FinalizedError,
    GrammarError,
    GrammarParseError,
    ParseError,
    PlaceholderError,
    TemplateError,
)
from .options import ParseOptions
from .templates import (
    ChatTemplate,
    Detection,
    DetectionWarning,
    detect,
    load_chat_template,
    load_model_grammar,
    render_prompt,
)

__version__ = "0.1.0"

_moved.install(_sys.modules[__name__])

__all__ = [
    "AnchorWarning",
    "CallArguments",
    "CallClose",
    "CallOpen",
    "ArgumentError",
    "CallProblem",
    "ChatTemplate",
    "ChatTemplateError",
    "Correction",
    "Detection",
    "DetectionWarning",
    "Event",
    "FinalizedError",
    "Grammar",
    "GrammarError",
    "GrammarParseError",
    "Message",
    "ParseError",
    "ParseErrorEvent",
    "ParseOptions",
    "ParseProblem",
    "PlaceholderError",
    "RegionChunk",
    "RegionClose",
    "RegionOpen",
    "ResponseParser",
    "TemplateError",
    "ToolCall",
    "ToolFunction",
    "compile_template",
    "detect",
    "list_grammars",
    "load_chat_template",
    "load_grammar",
    "load_model_grammar",
    "parse_response",
    "render_prompt",
]
