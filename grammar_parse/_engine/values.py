"""Region values: the content parsers and the transform templates applied when a region closes.

Each parser turns a region's raw text into one value, exactly as transformers' response parsing does
(same stripping, same JSON dialect knobs, same XML-ish and key/value splitting), so that messages compare
equal value for value. Failures raise :class:`~grammar_parse.errors.ParseError` (a ``ValueError``), or
:class:`~grammar_parse.errors.PlaceholderError` (a ``KeyError``) where transformers raises ``KeyError``.
"""

from __future__ import annotations

import ast
import copy
import io
import json
import keyword
import sys
import tokenize
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Protocol, TypeVar

import regex

from ..errors import ParseError, PlaceholderError
from .delimiters import search_budget
from .linear_regex import BoundedRegex

ContentParser = Callable[[str, Mapping[str, Any]], Any]
_T = TypeVar("_T")

#: Parsers whose value is the verbatim body (modulo stripping): their chunks stream with ``dirty=False``.
STREAMABLE_PARSERS = frozenset({"text", "int", "float", "bool"})

# Control characters stand in for custom-quoted strings while the JSON dialect is rewritten; real model
# output never contains them, and if it does we refuse rather than corrupt the value.
_SENTINEL_OPEN, _SENTINEL_CLOSE = "\x01", "\x02"
_UNQUOTED_KEY = regex.compile(r"(?<=[{,])(\w+):")  # transformers' dialect: the key right after { or ,
# Grammar-only "unquoted_keys": "spaced": also after whitespace, and before the colon (`{ a: 1,\n  b :2}`).
_SPACED_UNQUOTED_KEY = regex.compile(r"([{,]\s*)(\w+)(\s*):")
# {path}, or alternatives {a.b|c} of which the first present wins, optionally {...?} (may be absent).
PLACEHOLDER = regex.compile(r"\{(\w+(?:\.\w+)*(?:\|\w+(?:\.\w+)*)*)(\??)\}")


def _text(text: str, args: Mapping[str, Any]) -> str:
    if args.get("strip", True):
        return text.strip()
    separators = args.get("separators")
    return without_separators(text, separators) if separators else text


def without_separators(text: str, separators: Sequence[str]) -> str:
    """``text`` without the template's own text around a value: one ``separators[0]`` at its start and one
    ``separators[1]`` at its end, each where present. Qwen3-Coder writes ``<parameter=k>\\nVALUE\\n</parameter>``,
    so its ``"\\n    x\\n\\n"`` is ``"    x\\n"``: the value's own indentation and newlines stay (as vLLM's
    parser, which removes one newline at each end)."""
    lead, trail = separators
    if lead and text.startswith(lead):
        text = text[len(lead):]
    if trail and text.endswith(trail):
        text = text[:len(text) - len(trail)]
    return text


def _cast(text: str, args: Mapping[str, Any], cast: Callable[[str], _T], expected: str) -> _T:
    body = _text(text, args)
    try:
        return cast(body)
    except ValueError:
        raise ParseError(f"expected {expected}, got {body!r}", code="parse.content") from None


def _int(text: str, args: Mapping[str, Any]) -> int:
    return _cast(text, args, int, "an integer")


def _float(text: str, args: Mapping[str, Any]) -> float:
    return _cast(text, args, float, "a number")


def _bool(text: str, args: Mapping[str, Any]) -> bool:
    return _text(text, args).lower() in ("true", "1")


_HIDDEN = regex.compile(f"{_SENTINEL_OPEN}(\\d+){_SENTINEL_CLOSE}")


def _hide_strings(text: str, open_quote: str, close_quote: str, captured: list[str]) -> str:
    """``text`` with each ``open_quote ... close_quote`` string replaced by a numbered sentinel, its body
    appended to ``captured``: what ``regex.sub(open(.*?)close)`` does (the nearest close after each open),
    in linear time. That regex retried every later open when no close followed, quadratic on a run of
    opens; but when no close follows an open, none follows a later one either."""
    out: list[str] = []
    i = 0
    while (start := text.find(open_quote, i)) != -1:
        end = text.find(close_quote, start + len(open_quote))
        if end == -1:
            break
        captured.append(text[start + len(open_quote):end])
        out += (text[i:start], f"{_SENTINEL_OPEN}{len(captured) - 1}{_SENTINEL_CLOSE}")
        i = end + len(close_quote)
    out.append(text[i:])
    return "".join(out)


def _json(text: str, args: Mapping[str, Any]) -> Any:
    """JSON, optionally in a model's dialect: custom string quotes and bare keys."""
    string_delims = args.get("string_delims") or []
    if string_delims and (_SENTINEL_OPEN in text or _SENTINEL_CLOSE in text):
        raise ParseError(
            "json region contains the reserved control characters \\x01/\\x02 and cannot be rewritten "
            "safely",
            code="parse.json",
        )
    working = text
    captured: list[str] = []
    for open_quote, close_quote in string_delims:
        working = _hide_strings(working, open_quote, close_quote, captured)
    if args.get("unquoted_keys") == "spaced":
        working = _SPACED_UNQUOTED_KEY.sub(r'\1"\2"\3:', working)
    elif args.get("unquoted_keys", False):
        working = _UNQUOTED_KEY.sub(r'"\1":', working)
    if captured:  # one pass (a replace per string was quadratic in the number of strings)
        working = _HIDDEN.sub(lambda m: json.dumps(captured[int(m.group(1))]), working)
    try:
        return load_json(working)
    except json.JSONDecodeError as e:
        if args.get("allow_non_json"):
            return _text(text, args)
        shown = f"Content: {text!r}" if working == text else f"Original: {text!r}\nTransformed: {working!r}"
        raise ParseError(
            f"could not parse region as JSON ({e.msg} at line {e.lineno} column {e.colno}).\n{shown}",
            code="parse.json",
            hint="Set content_args.allow_non_json to keep unparseable text as a string.",
        ) from e


_BRACKETS = regex.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', regex.DOTALL)

#: Deepest JSON nesting a json region may have by default (Python's parser would exhaust its stack far
#: sooner than real output needs; deeper input is refused with parse.json_depth). A parse sets its own
#: with ``ParseOptions(max_json_depth=...)`` (grammar_parse.options), which every adapter passes on.
JSON_MAX_DEPTH = 256
_JSON_DEPTH: ContextVar[int] = ContextVar("grammar_parse_json_depth", default=JSON_MAX_DEPTH)
_DEPTH_HINT = "Raise max_json_depth (ParseOptions(max_json_depth=...), or the keyword) if such output is expected."


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
                             hint=_DEPTH_HINT) from None
        # only the int conversion raises a bare ValueError
        raise ParseError(f"a JSON integer has more than {int_digits_limit()} digits, more than Python converts",
                         code="parse.digits",
                         hint="Raise sys.set_int_max_str_digits() if such numbers are expected.") from None
    if deep and _nests_deeper(value, limit):
        raise ParseError(f"json region nests deeper than {limit} levels", code="parse.json_depth", hint=_DEPTH_HINT)
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
                                 hint=_DEPTH_HINT)
        elif ch in "]}":
            depth -= 1


@lru_cache(maxsize=256)
def _bounded(pattern: str) -> BoundedRegex:
    return BoundedRegex(pattern, regex.DOTALL)


def sub_parse(raw: str | None, value_parser: Mapping[str, Any] | None) -> Any:
    """A tag's or line's value through the ``value_parser`` its content parser names (raw text without one)."""
    if value_parser is None or raw is None:
        return raw
    return parse_content(raw, value_parser.get("name", "text"), value_parser.get("args", {}))


def _xml_inline(text: str, args: Mapping[str, Any]) -> dict[str, Any]:
    """Shallow ``<key>value</key>``-style tags (any ``tag_pattern`` with groups key and value) into a dict;
    with ``elements``, nested elements (see :func:`_xml_elements`)."""
    if "elements" in args:
        return _xml_elements(text, args)
    merge = args.get("merge_duplicates", False)
    out: dict[str, Any] = {}
    for m in _tags(args["tag_pattern"], text):
        groups = m.groupdict()
        key = groups.get("key")
        if key is None:
            raise ParseError(
                f"xml-inline: tag_pattern matched without its 'key' group: {m.group(0)!r}",
                code="parse.content",
                hint="Make the key group of tag_pattern mandatory.",
            )
        _put(out, key, sub_parse(groups.get("value", ""), _value_parser(args, groups)), merge)
    return out


def _value_parser(args: Mapping[str, Any], groups: Mapping[str, Any]) -> Any:
    """The value parser for one tag: ``value_parser_when``'s where its group says so (DSML parses JSON only
    where string="false"), else ``value_parser``."""
    when = args.get("value_parser_when")
    if when is not None and groups.get(when["group"]) == when["equals"]:
        return when["parser"]
    return args.get("value_parser")


def _put(out: dict[str, Any], key: str, value: Any, merge: bool) -> None:
    """Store an argument; with ``merge``, a repeated key collects its values into a list."""
    if merge and key in out:
        if not isinstance(out[key], list):
            out[key] = [out[key]]
        out[key].append(value)
    else:
        out[key] = value


def _tags(pattern: str, text: str) -> list[Any]:
    """Every match of a tag pattern in ``text`` (past the search budget the linear matcher finishes the scan,
    with the same matches)."""
    try:
        return _bounded(pattern).finditer(text, search_budget(len(text)))
    except TimeoutError:
        raise ParseError(f"xml-inline: a tag pattern ran past its time limit on this region: {pattern!r}",
                         code="parse.timeout") from None


@dataclass
class _Element:
    """An element being read: its name, open tag, where its inner text starts and the children it holds
    so far (name, value, start, end)."""

    key: str
    tag: Any
    start: int
    inner: int
    children: list[tuple[str, Any, int, int]] = field(default_factory=list)


def _xml_elements(text: str, args: Mapping[str, Any]) -> dict[str, Any]:
    """Nested elements into a dict, as MiniMax-M3's template writes an object or list argument
    (``<shipping><city>Singapore</city>...</shipping>``, a list as ``<item>`` elements).

    ``elements`` gives the ``open`` and ``close`` tag patterns (each with a ``key`` group) and the list
    element's name (``item``). An element holding elements is an object, or a list when its children are
    all list elements or repeat one name; an object's repeated names collect into a list. Any other element
    is its text as written (a leaf through ``value_parser``; one with text beside its child elements keeps
    its inner markup). Typing by the tool's schema comes after (tools.ToolTypes, element by element). A
    close tag ends the innermost open element of its name (those opened inside it end there too); a stray
    close is text, and elements still open at the end (cut-off output) are left out. Arguments repeated at
    the top collect into a list with ``merge_duplicates`` (else the last one wins)."""
    spec = args["elements"]
    item = spec.get("item")
    tags = sorted([(m.start(), False, m) for m in _tags(spec["open"], text)]
                  + [(m.start(), True, m) for m in _tags(spec["close"], text)], key=lambda t: t[0])
    root = _Element("", None, 0, 0)
    stack = [root]
    open_names: dict[str, int] = {}  # how many elements of each name are open (a close finds its own in O(1))
    limit = json_depth()
    after = 0  # (an open and a close tag cannot overlap; a match inside an earlier one is skipped)
    for start, closing, m in tags:
        if start < after:
            continue
        key = m.group("key")
        if not closing:
            if len(stack) > limit:
                raise ParseError(f"xml-inline: elements nest deeper than {limit} levels", code="parse.json_depth",
                                 hint=_DEPTH_HINT)
            stack.append(_Element(key, m, start, m.end()))
            open_names[key] = open_names.get(key, 0) + 1
            after = m.end()
            continue
        if not open_names.get(key):
            continue  # a stray close: text of the element around it
        while True:
            element = stack.pop()
            open_names[element.key] -= 1
            done = element.key == key
            value = _element_value(text, element, start, item, args)
            stack[-1].children.append((element.key, value, element.start, m.end() if done else start))
            if done:
                break
        after = m.end()
    out: dict[str, Any] = {}
    merge = args.get("merge_duplicates", False)
    for key, value, _start, _end in root.children:
        _put(out, key, value, merge)
    return out


def _element_value(text: str, element: _Element, end: int, item: str | None, args: Mapping[str, Any]) -> Any:
    """The value of an element whose inner text ends at ``end`` (see :func:`_xml_elements`)."""
    children = element.children
    at = element.inner
    mixed = False
    for _key, _value, start, stop in children:
        mixed = mixed or bool(text[at:start].strip())
        at = stop
    if not children or mixed or text[at:end].strip():
        return sub_parse(text[element.inner:end], _value_parser(args, element.tag.groupdict()))
    names = [key for key, _value, _start, _stop in children]
    if (item is not None and all(n == item for n in names)) or (len(names) > 1 and len(set(names)) == 1):
        return [value for _key, value, _start, _stop in children]
    out: dict[str, Any] = {}
    for key, value, _start, _stop in children:
        _put(out, key, value, True)
    return out


def reads_elements(spec: Any) -> bool:
    """Whether a region's value is read from nested elements (xml-inline ``elements``): its tool calls'
    arguments are then typed element by element (see tools.ToolTypes.apply)."""
    args = getattr(spec, "content_args", None)
    return getattr(spec, "content", None) == "xml-inline" and isinstance(args, Mapping) and "elements" in args


def _kv_lines(text: str, args: Mapping[str, Any]) -> dict[str, Any]:
    """``key<kv_sep>value`` lines into a dict; lines without the separator are skipped."""
    kv_sep = args.get("kv_sep", ":")
    value_parser = args.get("value_parser")
    out: dict[str, Any] = {}
    for line in text.split(args.get("line_sep", "\n")):
        line = _text(line, args)
        if not line or kv_sep not in line:
            continue
        key, value = line.split(kv_sep, 1)
        out[_text(key, args)] = sub_parse(_text(value, args), value_parser)
    return out


_PY_CONSTANTS = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}


class _NotJson(ValueError):
    """A Python literal with no JSON value (a set, bytes, a complex number, ``...``, a non-string key)."""


def _literal(node: ast.expr) -> Any:
    """A Python literal from the AST as a JSON value, never evaluated as code (true/false/null are accepted
    too). Literals JSON has no value for (sets, bytes, complex numbers, ``...``, keys that are not strings)
    are refused: a call's arguments go to clients as JSON."""
    if isinstance(node, ast.Name) and node.id in _PY_CONSTANTS:
        return _PY_CONSTANTS[node.id]
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.Dict):
        out = {}
        for k, v in zip(node.keys, node.values):
            if k is None:
                continue  # a ** spread names nothing literal
            key = _literal(k)
            if not isinstance(key, str):
                raise _NotJson(f"a dict key must be a string, not {key!r}")
            out[key] = _literal(v)
        return out
    if isinstance(node, ast.Constant) and type(node.value) in (str, int, float, bool, type(None)):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)) and isinstance(node.operand, ast.Constant):
        number = node.operand.value
        if isinstance(number, (int, float)) and not isinstance(number, bool):
            return -number if isinstance(node.op, ast.USub) else number
    raise _NotJson(f"{ast.unparse(node)[:100]!r} is not a JSON value")


# A Python keyword where an argument name goes: `(from=`, `, class =` (not `==`). A cheap first look; the
# tokenizer decides, so that a keyword inside a string value is left alone.
_KEYWORD_ARGUMENT = regex.compile(r"[(,]\s*(?:%s)\s*=(?!=)" % "|".join(keyword.kwlist))


#: What Python call text is walked by (here, grammar_parse._engine.salvage and the tool-call streamer): quotes,
#: brackets and the escape.
CALL_TOKEN = regex.compile(r"""'''|\"\"\"|["'()\[\]{}\\]""")
_LINE_TOKEN = regex.compile(CALL_TOKEN.pattern + r"|\n[^\S\n]+")  # (and where a line's whitespace starts)


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


def _unindented(text: str) -> str:
    """Calls written one a line, without the whitespace that starts a line: whitespace around the newline
    between two calls belongs to the separator, but Python reads an indented line as a block
    ("unexpected indent"). Whitespace inside brackets and strings is left as written."""
    out: list[str] = []
    kept = 0
    for m, quote, depth in python_tokens(text, 0, _LINE_TOKEN):
        if m.group()[0] == "\n" and not quote and depth <= 0:
            out.append(text[kept:m.start() + 1])
            kept = m.end()
    out.append(text[kept:])
    return "".join(out)


def _rename_keyword_arguments(body: str) -> tuple[str, dict[str, str]]:
    """Models name arguments after Python keywords (``search_flights(from="SFO", to="JFK")``), which
    Python's own parser rejects: such names are renamed to placeholders before parsing, and the map
    gives them back."""
    if not _KEYWORD_ARGUMENT.search(body):
        return body, {}
    try:
        tokens = [tok for tok in tokenize.generate_tokens(io.StringIO(body).readline)
                  if tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT)]
    except (tokenize.TokenError, SyntaxError):
        return body, {}  # ast reports the syntax error
    line_starts = [0] + [i + 1 for i, c in enumerate(body) if c == "\n"]
    edits = [(line_starts[tok.start[0] - 1] + tok.start[1], tok.string)
             for before, tok, after in zip(tokens, tokens[1:], tokens[2:])
             if tok.type == tokenize.NAME and keyword.iskeyword(tok.string)
             and before.string in ("(", ",") and after.string == "="]
    names: dict[str, str] = {}
    for start, word in reversed(edits):
        placeholder = f"_gp_{word}_"
        while placeholder in body and placeholder not in names:
            placeholder += "_"
        names[placeholder] = word
        body = body[:start] + placeholder + body[start + len(word):]
    return body, names


# Lone surrogates (broken UTF-8 from a tokenizer) stand in as private-use characters while Python's parser,
# which encodes its input as UTF-8, reads the text; values get them back.
_SURROGATES = regex.compile(r"[\ud800-\udfff]")
_STAND_INS = regex.compile(r"[\U000f0000-\U000f07ff]")


def _surrogate_stand_ins(body: str) -> tuple[str, Callable[[Any], Any]]:
    """``body`` with its lone surrogates replaced by stand-ins, and the function that puts them back into
    a parsed value (identity when there were none)."""
    if not _SURROGATES.search(body):
        return body, lambda value: value
    if _STAND_INS.search(body):
        raise ParseError("pythonic region holds both lone surrogates and the private-use characters that "
                         "would stand in for them", code="parse.content")

    def restore(value: Any) -> Any:
        if isinstance(value, str):
            return _STAND_INS.sub(lambda m: chr(ord(m.group()) - 0xF0000 + 0xD800), value)
        if isinstance(value, list):
            return [restore(v) for v in value]
        if isinstance(value, dict):
            return {restore(k): restore(v) for k, v in value.items()}
        return value

    return _SURROGATES.sub(lambda m: chr(ord(m.group()) - 0xD800 + 0xF0000), body), restore


def _pythonic(text: str, args: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Python call syntax: ``[f(a=1), g(b="x")]`` or one call per line, into ``{"name", "arguments"}``.

    The text is parsed, never executed: only keyword arguments with literal JSON values are accepted.
    Argument names may be Python keywords (``from="SFO"``). Whatever the text, the result is calls or a
    ParseError: Python's parser raises RecursionError or MemoryError on long chains (``a.a.a...``,
    ``1+1+...``) and refuses over-long integers; those are ``parse.depth`` and ``parse.digits``.
    """
    body, restore = _surrogate_stand_ins(text.strip())
    try:
        return [restore(call) for call in _python_calls(body)]
    except (RecursionError, MemoryError):
        raise ParseError("pythonic region nests (or chains operators) deeper than Python's parser goes",
                         code="parse.depth") from None


def _python_calls(text: str) -> list[dict[str, Any]]:
    if not text.startswith("["):
        text = _unindented(text)
    body, renamed = _rename_keyword_arguments(text)
    tree: ast.expr | list[ast.stmt]
    try:
        tree = ast.parse(body, mode="eval").body if body.startswith("[") else ast.parse(body).body
    except SyntaxError as e:
        # (the parser converts integer literals itself, and refuses those past Python's digit limit)
        code = "parse.digits" if "integer string conversion" in str(e.msg) else \
            "parse.depth" if "too many nested" in str(e.msg) else "parse.content"
        raise ParseError(f"not Python call syntax ({e.msg}): {body[:200]!r}", code=code) from None
    calls: list[ast.AST]
    if isinstance(tree, ast.List):
        calls = list(tree.elts)
    elif isinstance(tree, list):
        calls = [stmt.value if isinstance(stmt, ast.Expr) else stmt for stmt in tree]
    else:
        calls = [tree]
    out = []
    for call in calls:
        if not isinstance(call, ast.Call) or call.args:
            raise ParseError(f"expected f(key=value, ...) calls, got {ast.unparse(call)[:100]!r}",
                             code="parse.content", hint="Positional arguments and expressions are not accepted.")
        try:
            arguments = {renamed.get(kw.arg, kw.arg): _literal(kw.value) for kw in call.keywords if kw.arg is not None}
        except _NotJson as e:
            raise ParseError(f"argument values must be JSON literals (strings, numbers, True/False/None, lists, "
                             f"dicts with string keys): {e}", code="parse.content") from None
        out.append({"name": ast.unparse(call.func), "arguments": arguments})
    return out


def _json_name_keys(text: str, args: Mapping[str, Any]) -> list[dict[str, Any]]:
    """JSON calls keyed by name (``[{"get_weather": {...}}]`` or ``{"f": {...}}``) as name/arguments."""
    data = _json(text, args)
    items = data if isinstance(data, list) else [data]
    out: list[dict[str, Any]] = []
    for item in items:
        if not isinstance(item, dict):
            raise ParseError(f"expected objects keyed by tool name, got {item!r}", code="parse.content")
        out.extend({"name": name, "arguments": arguments} for name, arguments in item.items())
    return out


CONTENT_PARSERS: dict[str, ContentParser] = {
    "text": _text,
    "int": _int,
    "float": _float,
    "bool": _bool,
    "json": _json,
    "xml-inline": _xml_inline,
    "kv-lines": _kv_lines,
    "pythonic": _pythonic,
    "json-name-keys": _json_name_keys,
}


def parse_content(text: str, name: str, args: Mapping[str, Any]) -> Any:
    """Run content parser ``name`` on ``text``."""
    return CONTENT_PARSERS[name](text, args)


_MISSING = object()  # an optional placeholder with nothing to fill in: its key or element is left out


def _fill(template: Any, scope: Mapping[str, Any], partial: bool = False) -> Any:
    """Rebuild ``template`` with every whole-string ``{path}`` replaced by the value it names.

    Beyond transformers' ``{path}``: ``{a|b}`` takes the first path that exists, and a trailing ``?``
    (``{id?}``) leaves the key (or list element) out when none does. ``partial`` treats every placeholder
    as optional (a broken tool call is built from the parts that exist).
    """
    return _filler(template)(scope, partial)


#: A template's filler is a function of (scope, partial); dicts and lists are rebuilt on every fill.
_Filler = Callable[[Mapping[str, Any], bool], Any]
#: Fillers by template object (grammar data: a region's transform, filled at every close), each kept
#: with its template so that the id is not reused while the entry lives.
_FILLERS: dict[int, tuple[Any, _Filler]] = {}


def _filler(template: Any) -> _Filler:
    """The template read once into nested functions: no type tests or placeholder matching per fill."""
    known = _FILLERS.get(id(template))
    if known is not None and known[0] is template:
        return known[1]
    filler = _build_filler(template)
    if len(_FILLERS) >= 4096:
        _FILLERS.clear()  # (bounded, whatever templates a process uses)
    _FILLERS[id(template)] = (template, filler)
    return filler


def _build_filler(template: Any) -> _Filler:
    if isinstance(template, dict):
        items = [(key, _build_filler(item)) for key, item in template.items()]

        def fill_dict(scope: Mapping[str, Any], partial: bool) -> Any:
            out = {}
            for key, fill_item in items:
                if (value := fill_item(scope, partial)) is not _MISSING:
                    out[key] = value
            return out
        return fill_dict
    if isinstance(template, list):
        elements = [_build_filler(item) for item in template]
        return lambda scope, partial: [v for v in (f(scope, partial) for f in elements) if v is not _MISSING]
    placeholder = _placeholder(template) if isinstance(template, str) else None
    if placeholder is None:
        return lambda scope, partial: template
    paths, optional = placeholder

    def fill_placeholder(scope: Mapping[str, Any], partial: bool) -> Any:
        first_error: ParseError | None = None
        for path in paths:
            try:
                return _lookup(path, scope)
            except ParseError as e:  # PlaceholderError too
                first_error = first_error or e
        if optional or partial:
            return _MISSING
        assert first_error is not None
        raise first_error
    return fill_placeholder


def _placeholder(template: str) -> tuple[list[str], bool] | None:
    """A whole-string placeholder's paths and whether it is optional (None: the string is literal)."""
    whole = PLACEHOLDER.fullmatch(template)
    return None if whole is None else (whole.group(1).split("|"), whole.group(2) == "?")


def _lookup(path: str, scope: Mapping[str, Any]) -> Any:
    root, *keys = path.split(".")
    if root not in scope:
        raise PlaceholderError(
            f"transform placeholder '{{{path}}}' is not defined. Available: {sorted(scope)}",
            code="parse.placeholder",
        )
    value = scope[root]
    for key in keys:
        if not isinstance(value, dict):
            raise ParseError(
                f"transform placeholder '{{{path}}}' cannot index into {type(value).__name__} at '{key}'",
                code="parse.transform",
            )
        if key not in value:
            raise ParseError(
                f"transform placeholder '{{{path}}}' is missing key '{key}'. Available: {sorted(value)}",
                code="parse.transform",
            )
        value = value[key]
    return value


def fill(template: Any, scope: Mapping[str, Any]) -> Any:
    """``template`` with its whole-string ``{path}`` placeholders replaced from ``scope``."""
    value = _fill(template, scope)
    if value is _MISSING:
        raise PlaceholderError(f"nothing to fill in for {template!r}", code="parse.placeholder")
    return value


def fill_known(template: Any, scope: Mapping[str, Any]) -> Any:
    """``template`` filled from ``scope`` with every placeholder that names nothing left out (None if
    nothing is left at all): the parts of a value that are known when the rest could not be parsed."""
    value = _fill(template, scope, partial=True)
    return None if value is _MISSING else value


def mixed_placeholder(template: Any) -> str | None:
    """The first string in ``template`` that mixes a placeholder with literal text, if any."""
    if isinstance(template, dict):
        template = list(template.values())
    if isinstance(template, list):
        for item in template:
            found = mixed_placeholder(item)
            if found is not None:
                return found
        return None
    if isinstance(template, str) and PLACEHOLDER.search(template) and not PLACEHOLDER.fullmatch(template):
        return template
    return None


class RegionValue(Protocol):
    """What a region asks of its value spec: a :class:`ValueSpec`, or compat's ``LegacyValue`` (a legacy
    response_schema node)."""

    @property
    def repeats(self) -> bool: ...

    @property
    def join(self) -> str | None: ...

    @property
    def optional(self) -> bool: ...

    @property
    def dirty(self) -> bool: ...

    def directive(self) -> dict[str, Any]:
        """The region options as a ``//@ region`` directive writes them."""
        ...

    def value(self, body: str, captures: Mapping[str, Any], open_text: str = "", close_text: str = "",
              children: Mapping[str, Any] | None = None) -> Any:
        """The region's value from its body, open-delimiter captures, delimiter texts and components."""
        ...


@dataclass(frozen=True)
class ValueSpec:
    """How a region's body becomes the value stored under its field."""

    content: str = "text"
    content_args: Mapping[str, Any] = field(default_factory=dict)
    repeats: bool = False
    join: str | None = None
    optional: bool = True
    transform: Any = None
    transform_each: bool = False

    @property
    def dirty(self) -> bool:
        """Whether chunks are raw bytes of a structured value (only meaningful once the region closes)."""
        return self.content not in STREAMABLE_PARSERS

    def directive(self) -> dict[str, Any]:
        """The region options as a grammar's ``//@ region`` directive writes them (defaults left out)."""
        out: dict[str, Any] = {"content": self.content}
        if self.content_args:
            out["content_args"] = self.content_args
        if self.repeats:
            out["repeats"] = True
        if self.join is not None:
            out["join"] = self.join
        if not self.optional:
            out["optional"] = False
        if self.transform is not None:
            out["transform"] = self.transform
        if self.transform_each:
            out["transform_each"] = True
        return out

    def value(self, body: str, captures: Mapping[str, Any], open_text: str = "", close_text: str = "",
              children: Mapping[str, Any] | None = None) -> Any:
        """Parse ``body`` and apply the transform (per element with ``transform_each``).

        ``children`` are the values of component regions inside this one: they join the captures in the
        transform's scope, and without a transform they are the value. ``open_text`` and ``close_text``
        (the delimiters' text) are for value functions that need them.
        """
        if children:
            captures = {**captures, **children}
            if self.transform is None:
                return dict(children)
        parsed = parse_content(body, self.content, self.content_args)
        if self.transform is None:
            return parsed
        if not self.transform_each:
            return _fill(self.transform, {**captures, "content": parsed})
        if not isinstance(parsed, list):
            raise ParseError(
                f"transform_each requires the parsed content to be a list, got {type(parsed).__name__}.",
                code="parse.transform",
            )
        out = []
        for item in parsed:
            if not isinstance(item, dict):
                raise ParseError(
                    f"transform_each requires each list element to be a dict, got {type(item).__name__}.",
                    code="parse.transform",
                )
            out.append(_fill(self.transform, {**captures, **item}))
        return out


__all__ = ["CALL_TOKEN", "CONTENT_PARSERS", "STREAMABLE_PARSERS", "RegionValue", "ValueSpec", "copy_json", "fill", "fill_known", "json_depth", "json_depth_limit", "with_json_depth", "mixed_placeholder", "sub_parse",
           "parse_content", "python_step", "python_tokens", "reads_elements", "skip_chars", "without_separators"]
