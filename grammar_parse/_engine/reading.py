"""Reading model text within limits: JSON (depth, integer digits) and Python call syntax (strings and
brackets), the pieces every content parser, the tool-call streamer and the salvage share; and the
``{placeholder}`` syntax of transforms.
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

import regex

from ..errors import ParseError

_T = TypeVar("_T")


# {path}, or alternatives {a.b|c} of which the first present wins, optionally {...?} (may be absent).
PLACEHOLDER = regex.compile(r"\{(\w+(?:\.\w+)*(?:\|\w+(?:\.\w+)*)*)(\??)\}")


_BRACKETS = regex.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', regex.DOTALL)


#: Deepest JSON nesting a json region may have by default (Python's parser would exhaust its stack far
#: sooner than real output needs; deeper input is refused with parse.json_depth). A parse sets its own
#: with ``ParseOptions(max_json_depth=...)`` (grammar_parse.options), which every adapter passes on.
JSON_MAX_DEPTH = 256


_JSON_DEPTH: ContextVar[int] = ContextVar("grammar_parse_json_depth", default=JSON_MAX_DEPTH)


DEPTH_HINT = "Raise max_json_depth (ParseOptions(max_json_depth=...), or the keyword) if such output is expected."


def json_depth() -> int:
    """The JSON nesting limit in force: that of the parser running (JSON_MAX_DEPTH unless it was given one)."""
    return _JSON_DEPTH.get()


def with_json_depth(depth: int, run: Callable[..., _T], *args: Any) -> _T:
    """``run(*args)`` under :func:`json_depth_limit` (``depth``, a parser's ``max_json_depth``); at the
    default it runs directly (the common case, on every feed: no context to enter)."""
    if depth == JSON_MAX_DEPTH:
        return run(*args)
    with json_depth_limit(depth):
        return run(*args)


@contextmanager
def json_depth_limit(depth: int) -> Iterator[None]:
    """Run the content parsers, walkers and wire checks inside with ``depth`` as the JSON nesting limit
    (a parser's ``max_json_depth``): a parameter of the parser, not a global, yet seen by every stage."""
    token = _JSON_DEPTH.set(depth)
    try:
        yield
    finally:
        _JSON_DEPTH.reset(token)


def int_digits_limit() -> int:
    """The interpreter's limit on the digits of an int parsed from text (``sys.get_int_max_str_digits()``,
    4300 by default; 0: none)."""
    return int(getattr(sys, "get_int_max_str_digits", lambda: 0)())


def load_json(text: str) -> Any:
    """``json.loads`` that fails only with a ``JSONDecodeError`` (text that is not JSON) or a ParseError
    for a limit: nesting deeper than :func:`json_depth` (``parse.json_depth``), an integer longer than
    Python converts (``parse.digits``). Python's own parser would raise RecursionError or a bare
    ValueError there, which lenient mode must never see."""
    limit = _JSON_DEPTH.get()
    deep = text.count("[") + text.count("{") > limit  # (brackets in strings count: it may still be shallow)
    try:
        value = json.loads(text)
    except (RecursionError, ValueError) as e:  # (JSONDecodeError is a ValueError)
        if deep:
            _check_depth(text, limit)  # too deep is the first thing wrong with it
        if isinstance(e, json.JSONDecodeError):
            raise
        if isinstance(e, RecursionError):
            raise ParseError("json region nests too deeply to parse", code="parse.json_depth",
                             hint=DEPTH_HINT) from None
        # only the int conversion raises a bare ValueError
        raise ParseError(f"a JSON integer has more than {int_digits_limit()} digits, more than Python converts",
                         code="parse.digits",
                         hint="Raise sys.set_int_max_str_digits() if such numbers are expected.") from None
    if deep and _nests_deeper(value, limit):
        raise ParseError(f"json region nests deeper than {limit} levels", code="parse.json_depth", hint=DEPTH_HINT)
    return value


def _nests_deeper(value: Any, limit: int) -> bool:
    """Whether parsed JSON nests deeper than ``limit`` (its containers walked, not its text: a long string
    full of brackets costs nothing)."""
    todo: list[tuple[Any, int]] = [(value, 1)]
    while todo:
        item, depth = todo.pop()
        if depth > limit:
            return True
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        todo.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def copy_json(value: Any) -> Any:
    """A deep copy of JSON-like data (defaults, wire items), several times faster than copy.deepcopy."""
    if isinstance(value, dict):
        return {k: copy_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [copy_json(v) for v in value]
    return copy.deepcopy(value) if not isinstance(value, (str, int, float, bool, type(None))) else value


def _check_depth(text: str, limit: int) -> None:
    """ParseError if the brackets of JSON ``text`` (outside its strings) nest deeper than ``limit``."""
    depth = deepest = 0
    for m in _BRACKETS.finditer(text):
        ch = m.group()
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
            if deepest > limit:
                raise ParseError(f"json region nests deeper than {limit} levels", code="parse.json_depth",
                                 hint=DEPTH_HINT)
        elif ch in "]}":
            depth -= 1


#: What Python call text is walked by (here, grammar_parse._engine.salvage and the tool-call streamer): quotes,
#: brackets and the escape.
CALL_TOKEN = regex.compile(r"""'''|\"\"\"|["'()\[\]{}\\]""")


LINE_TOKEN = regex.compile(CALL_TOKEN.pattern + r"|\n[^\S\n]+")  # (and where a line's whitespace starts)


def python_step(token: str, quote: str, depth: int) -> tuple[str, int]:
    """The string quote and bracket depth after one CALL_TOKEN of Python call text (an escape inside a
    string is the caller's to skip, with the character it escapes)."""
    if quote:
        return ("" if token == quote else quote), depth
    if token in ("'", '"', "'''", '"""'):
        return token, depth
    if token in ("(", "[", "{"):
        return quote, depth + 1
    if token in (")", "]", "}"):
        return quote, depth - 1
    return quote, depth


def python_tokens(text: str, pos: int = 0, tokens: regex.Pattern[str] = CALL_TOKEN
                  ) -> Iterator[tuple[regex.Match[str], str, int]]:
    """Each token of Python call text from ``pos`` (``tokens``: CALL_TOKEN or a pattern extending it), with
    the string quote and the bracket depth after it; an escape inside a string is skipped with the
    character it escapes. The one walk of whole call text (a stream's, which holds a chunk's edge, steps
    with :func:`python_step` itself)."""
    quote, depth = "", 0
    while (m := tokens.search(text, pos)) is not None:
        pos = m.end()
        if quote and m.group() == "\\":
            pos += 1
            continue
        quote, depth = python_step(m.group(), quote, depth)
        yield m, quote, depth


def skip_chars(text: str, pos: int, chars: str) -> int:
    """The first position from ``pos`` whose character is not one of ``chars``."""
    while pos < len(text) and text[pos] in chars:
        pos += 1
    return pos
