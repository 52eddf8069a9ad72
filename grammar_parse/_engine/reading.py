"""Reading model text within limits: JSON (depth, integer digits) and Python call syntax (strings and
brackets), the pieces every content parser, the tool-call streamer and the salvage share; and the
``{placeholder}`` syntax of transforms.
"""

from __future__ import annotations

import copy
import json
import json.scanner
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar
from urllib.parse import unquote

import regex

from ..errors import ParseError
from .regex_shape import is_regex_space

_T = TypeVar("_T")


# {path}, or alternatives {a.b|c} of which the first present wins, optionally {...?} (may be absent).
PLACEHOLDER = regex.compile(r"\{(\w+(?:\.\w+)*(?:\|\w+(?:\.\w+)*)*)(\??)\}")


_BRACKETS = regex.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', regex.DOTALL)

#: A lone surrogate (``\ud800`` written alone in JSON, a byte that is not UTF-8 read with surrogateescape): text
#: that holds one cannot be encoded as UTF-8 as it is.
LONE_SURROGATE = re.compile("[\ud800-\udfff]")


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


#: json.loads's own scanner (its C one where there is one): (text, index) -> (value, end), StopIteration where
#: no value starts at index.
_SCAN_JSON: Callable[[str, int], tuple[Any, int]] = \
    json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]
_JSON_SPACE = " \t\n\r"


def may_nest_deeper(text: str, limit: int | None = None) -> bool:
    """Whether JSON ``text`` may nest deeper than ``limit`` (:func:`json_depth` by default): its brackets
    bound its depth (brackets in strings count too, so it may still be shallow)."""
    return text.count("[") + text.count("{") > (_JSON_DEPTH.get() if limit is None else limit)


def load_json(text: str) -> Any:
    """``json.loads`` that fails only with a ``JSONDecodeError`` (text that is not JSON) or a ParseError
    for a limit: nesting deeper than :func:`json_depth` (``parse.json_depth``), an integer longer than
    Python converts (``parse.digits``). Python's own parser would raise RecursionError or a bare
    ValueError there, which lenient mode must never see.

    Text whose brackets keep it within the limit is read by ``json.loads``'s own scanner directly (no
    decoder wrapper, no whitespace regexes: a region closes many times in a parse); where that fails,
    ``json.loads`` reads it again, for its error."""
    limit = _JSON_DEPTH.get()
    deep = may_nest_deeper(text, limit)
    if not deep:
        try:
            value, end = _SCAN_JSON(text, len(text) - len(text.lstrip(_JSON_SPACE)))
            if end == len(text) or not text[end:].strip(_JSON_SPACE):
                return value
        except (StopIteration, RecursionError, ValueError):
            pass
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


#: What :func:`json_pointer` gives for a reference that names nothing (a value may be null).
NOWHERE: Any = object()


def json_pointer(root: Any, ref: str) -> Any:
    """What a local JSON pointer reference (``#/$defs/Location``; a URI fragment, so percent-encoded as it may
    be) names in ``root``: NOWHERE where it names nothing or points outside the document."""
    if ref == "#":
        return root
    if not ref.startswith("#/"):
        return NOWHERE
    node = root
    for raw in ref[2:].split("/"):
        part = unquote(raw).replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return NOWHERE
    return node


# ---------------------------------------------------------------------------- the incremental JSON reader
_STRING_STOP = regex.compile(r'["\\]')
# What ends a number or literal: whitespace, or any character JSON gives structure to.
_SCALAR_END = frozenset(',:[]{}" \t\n\r')
_LAX_JSON = json.JSONDecoder(strict=False)  # (json.loads with an option builds a decoder per call)
_DECODER = json.JSONDecoder()
_STRUCTURE = regex.compile(r'[\[\]{}"]')
#: The character a JSON value that starts with the key ends with.
_LAST_CHAR = {"{": "}", "[": "]", '"': '"'}


class JsonWalker:
    """The one incremental reader of JSON structure: it walks JSON text arriving in pieces and calls back
    at what its users need (the session: where a value ends; the tool-call streamer: names and argument
    spans; the salvage: the call objects of a broken body).

    It keeps only a stack of containers and the string/escape state, so each piece costs its length, and
    it is lax: it follows brackets and strings and never refuses text (the wire filter judges arguments).
    ``on_key(depth, key, pos)`` names the value about to start at ``depth``; ``on_value_start(depth, pos)``
    and ``on_value_end(depth, pos)`` bracket every value (positions are absolute offsets: ``offset`` is
    where the text fed so far ends). A listener may set ``done`` to stop the walk.
    """

    __slots__ = ("listener", "stack", "expect_key", "in_string", "escape", "string_is_key", "key_chars",
                 "scalar_start", "offset", "done")

    def __init__(self, listener: Any, offset: int = 0) -> None:
        self.listener = listener
        self.stack: list[str] = []  # "{" or "["
        self.expect_key: list[bool] = []
        self.in_string = False
        self.escape = False
        self.string_is_key = False
        self.key_chars: list[str] = []
        self.scalar_start = -1  # a number/literal being read
        self.offset = offset
        self.done = False

    def copy(self, listener: Any) -> JsonWalker:
        """A walker in the same state, calling back ``listener``, that shares nothing mutable with this one."""
        walker = JsonWalker(listener, self.offset)
        walker.stack, walker.expect_key, walker.key_chars = list(self.stack), list(self.expect_key), list(self.key_chars)
        walker.in_string, walker.escape, walker.string_is_key = self.in_string, self.escape, self.string_is_key
        walker.scalar_start, walker.done = self.scalar_start, self.done
        return walker

    def feed(self, text: str) -> None:
        i, n, base = 0, len(text), self.offset
        listener = self.listener
        while i < n and not self.done:
            if self.in_string:
                if self.escape:
                    self.escape = False
                    if self.string_is_key:
                        self.key_chars.append("\\" + text[i])
                    i += 1
                    continue
                m = _STRING_STOP.search(text, i)
                j = m.start() if m else n
                if self.string_is_key:
                    self.key_chars.append(text[i:j])
                if m is None:
                    i = n
                    break
                if text[j] == "\\":
                    self.escape = True
                    i = j + 1
                    continue
                self.in_string = False
                i = j + 1
                self._string_end(base + i)
                continue
            ch = text[i]
            if self.scalar_start >= 0:
                if ch in _SCALAR_END:
                    self.scalar_start = -1
                    listener.on_value_end(len(self.stack), base + i)
                    self._after_value()
                else:
                    i += 1  # (numbers and literals are short: a step costs less than a regex call)
                continue
            if ch in _WS or ch == ":":
                i += 1
            elif ch == ",":
                if self.stack and self.stack[-1] == "{":
                    self.expect_key[-1] = True
                i += 1
            elif ch == '"':
                self._string_start(base + i)
                i += 1
            elif ch in "{[":
                listener.on_value_start(len(self.stack), base + i)
                self.stack.append(ch)
                self.expect_key.append(ch == "{")
                i += 1
            elif ch in "}]":
                if not self.stack:
                    self.done = True
                    break
                self.stack.pop()
                self.expect_key.pop()
                i += 1
                listener.on_value_end(len(self.stack), base + i)
                self._after_value()
            else:
                self.scalar_start = base + i  # number, true, false, null
                listener.on_value_start(len(self.stack), base + i)
                i += 1
        self.offset = base + n

    def _string_start(self, pos: int) -> None:
        """A string opens at ``pos``: a key where an object expects one, else a value."""
        self.in_string = True
        self.escape = False
        if self.stack and self.stack[-1] == "{" and self.expect_key[-1]:
            self.string_is_key = True
            self.key_chars = []
            self.expect_key[-1] = False
        else:
            self.string_is_key = False
            self.listener.on_value_start(len(self.stack), pos)

    def _string_end(self, pos: int) -> None:
        """A string closed just before ``pos``: a key names the value to come, a value has ended."""
        if self.string_is_key:
            raw = "".join(self.key_chars)
            try:  # (a key without escapes is itself; raw control characters are allowed)
                key = raw if "\\" not in raw else _LAX_JSON.decode('"' + raw + '"')
            except ValueError:
                key = raw  # a broken escape: the key as written (the value's parse reports it)
            self.listener.on_key(len(self.stack), key, pos)
        else:
            self.listener.on_value_end(len(self.stack), pos)
            self._after_value()

    def finish(self) -> None:
        """End of text: a number still being read ends here."""
        if self.scalar_start >= 0:
            self.scalar_start = -1
            self.listener.on_value_end(len(self.stack), self.offset)

    def _after_value(self) -> None:
        if not self.stack:
            self.done = True


_WS = " \t\n\r"


class JsonEnd:
    """Where a JSON value that starts at an offset ends, found incrementally as text arrives (a region
    closed by its value's end: the session asks on every scan). The walker finds it; only the characters up
    to the end decide it, so any chunking finds the same end. A value that does not start with ``{``, ``[``
    or ``"`` after whitespace never ends (``dead``): its region then runs on as if it had no close, and
    nothing is cut."""

    __slots__ = ("at", "walker", "dead", "end")

    def __init__(self, at: int) -> None:
        self.at = at  # absolute offset up to which the text was read
        self.walker: JsonWalker | None = None  # (once the value started)
        self.dead = False
        self.end: int | None = None

    def copy(self) -> JsonEnd:
        """The same state, sharing nothing mutable."""
        twin = JsonEnd(self.at)
        twin.dead, twin.end = self.dead, self.end
        twin.walker = self.walker.copy(twin) if self.walker is not None else None
        return twin

    def advance(self, buf: str, base: int) -> int | None:
        """Read ``buf`` (which starts at absolute offset ``base`` and holds the text from ``at`` on) to its
        end; the value's absolute end, if seen."""
        if self.end is not None or self.dead:
            return self.end
        i, n = self.at - base, len(buf)
        if self.walker is None:
            while i < n and is_regex_space(buf[i]):
                i += 1
            if i == n:
                self.at = base + n
                return None
            if buf[i] not in '{["':
                self.dead = True
                return None
            # one-shot parsing has all of it: where valid JSON ends, the walk would end too (not tried where the
            # value's last character is not there yet, a stream's first piece: its failure costs an exception)
            if buf.find(_LAST_CHAR[buf[i]], i + 1) >= 0:
                try:
                    self.end = base + _DECODER.raw_decode(buf, i)[1]
                    return self.end
                except (ValueError, RecursionError):
                    pass
            self.walker = JsonWalker(self, base + i)  # (tried once: text still arriving is walked)
        walker = self.walker
        self.at = base + n
        if not walker.in_string and _STRUCTURE.search(buf, i) is None:
            # (most chunks of numbers and literals: nothing that moves the depth; the walker's scalar and
            # key state, which only its other users read, may go stale here)
            walker.offset = base + n
            return None
        walker.feed(buf[i:] if i else buf)
        return self.end

    def on_key(self, depth: int, key: str, pos: int) -> None:
        pass

    def on_value_start(self, depth: int, pos: int) -> None:
        pass

    def on_value_end(self, depth: int, pos: int) -> None:
        if depth == 0:
            self.end = pos
