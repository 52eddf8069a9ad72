"""Python call syntax (``[f(a=1), g(b='x')]`` or one call a line): literals only, never executed; the
call shape of such a list, and the calls a cut-off list still holds.
"""

from __future__ import annotations

import ast
import io
import keyword
import re
import tokenize
from collections.abc import Callable, Mapping
from typing import Any

import regex

from ...errors import ParseError
from ..reading import CALL_TOKEN, LINE_TOKEN, LONE_SURROGATE, python_tokens, skip_chars
from .base import WHOLE, CallShape, CallTemplate, ContentParser, Piece, Pieces, parse_content

_JSON_CONSTANTS = frozenset((str, int, float, bool, type(None)))
_PY_CONSTANTS = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}


class _NotJson(ValueError):
    """A Python literal with no JSON value (a set, bytes, a complex number, ``...``, a non-string key)."""


def _literal(node: ast.expr) -> Any:
    """A Python literal from the AST as a JSON value, never evaluated as code (true/false/null are accepted
    too). Literals JSON has no value for (sets, bytes, complex numbers, ``...``, keys that are not strings)
    are refused: a call's arguments go to clients as JSON."""
    if isinstance(node, ast.Constant) and type(node.value) in _JSON_CONSTANTS:  # (the most common, first)
        return node.value
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
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)) and isinstance(node.operand, ast.Constant):
        number = node.operand.value
        if isinstance(number, (int, float)) and not isinstance(number, bool):
            return -number if isinstance(node.op, ast.USub) else number
    raise _NotJson(f"{ast.unparse(node)[:100]!r} is not a JSON value")


# A Python keyword where an argument name goes: `(from=`, `, class =` (not `==`). A cheap first look; the
# tokenizer decides, so that a keyword inside a string value is left alone.
# (the stdlib engine: twice as fast as the regex module on this pattern)
_KEYWORD_ARGUMENT = re.compile(r"[(,]\s*(?:%s)\s*=(?!=)" % "|".join(keyword.kwlist))


def _unindented(text: str) -> str:
    """Calls written one a line, without the whitespace that starts a line: whitespace around the newline
    between two calls belongs to the separator, but Python reads an indented line as a block
    ("unexpected indent"). Whitespace inside brackets and strings is left as written."""
    out: list[str] = []
    kept = 0
    for m, quote, depth in python_tokens(text, 0, LINE_TOKEN):
        if m.group()[0] == "\n" and not quote and depth <= 0:
            out.append(text[kept:m.start() + 1])
            kept = m.end()
    out.append(text[kept:])
    return "".join(out)


# A line break, and the tokens python_tokens walks (so that one inside a string is seen as such).
_BREAK_TOKEN = regex.compile(CALL_TOKEN.pattern + r"|[\r\n]")
_ESCAPED = {"\n": "\\n", "\r": "\\r"}


def _escaped_line_breaks(text: str) -> str:
    """Line breaks written raw inside a one-line string (``'cat > f.py << EOF\n...'`` with real newlines, as
    LFM2 writes a multi-line shell command) as the escapes they stand for: Python's parser refuses them
    (an unterminated string), so this only ever reads text that would not parse, and reads it as written."""
    if "\n" not in text and "\r" not in text:
        return text
    out: list[str] = []
    kept = 0
    for m, quote, _ in python_tokens(text, 0, _BREAK_TOKEN):
        if quote in ("'", '"') and m.group() in _ESCAPED:
            out += (text[kept:m.start()], _ESCAPED[m.group()])
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
_STAND_INS = regex.compile(r"[\U000f0000-\U000f07ff]")


def _surrogate_stand_ins(body: str) -> tuple[str, Callable[[Any], Any]]:
    """``body`` with its lone surrogates replaced by stand-ins, and the function that puts them back into
    a parsed value (identity when there were none)."""
    if not LONE_SURROGATE.search(body):
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

    return LONE_SURROGATE.sub(lambda m: chr(ord(m.group()) - 0xD800 + 0xF0000), body), restore


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
    text = _escaped_line_breaks(text)
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
        func = call.func  # (a plain name as written; a dotted one as Python writes it back)
        out.append({"name": func.id if isinstance(func, ast.Name) else ast.unparse(func), "arguments": arguments})
    return out


# ---------------------------------------------------------------------------- Python call syntax
_CALLEE = regex.compile(r"[A-Za-z_][\w.]*")


def _call_end(text: str, open_paren: int) -> int | None:
    """The offset after the parenthesis that closes the one at ``open_paren`` (strings and nested
    brackets skipped), or None if the text ends first."""
    for m, quote, depth in python_tokens(text, open_paren):
        if depth == 0 and not quote and m.group() in ")]}":
            return m.end()
    return None


def _pythonic_pieces(body: str, captures: Mapping[str, Any]) -> tuple[list[Piece], int]:
    """Calls in Python call syntax (``[f(a=1), g(b="x")]`` or one per line): a complete call parses as
    the content parser would; a cut-off one keeps the text after its ``(``."""
    pos = skip_chars(body, 0, " \t\r\n")
    pos = skip_chars(body, pos, "[")
    pieces: list[Piece] = []
    parse: Callable[[str], Any] = lambda text: parse_content(text, "pythonic", {})  # noqa: E731
    while True:
        pos = skip_chars(body, pos, " \t\r\n,;")
        if pos >= len(body) or body[pos] == "]":
            return pieces, pos + 1 if pos < len(body) else pos
        m = _CALLEE.match(body, pos)
        paren = skip_chars(body, m.end(), " \t") if m is not None else pos
        if m is None or paren >= len(body) or body[paren] != "(":
            return pieces, pos  # no name followed by "(": nothing certain from here on
        end = _call_end(body, paren)
        if end is not None:
            try:
                (item,) = parse(body[pos:end])
            except (ParseError, ValueError):
                pass
            else:
                pieces.append(Piece(pos, end, {**captures, **item}, True))
                pos = end
                continue
        if end is None:
            arguments = body[paren + 1:]
        else:  # (a call its ")" ends leaves that out; one a mismatched "]" or "}" ends keeps it: no text is lost)
            arguments = body[paren + 1:end - 1 if body[end - 1] == ")" else end]
        pieces.append(Piece(pos, end, {**captures, "name": m.group(), "arguments": arguments}, False))
        if end is None:
            return pieces, len(body)
        pos = end


def _call_shape(spec: Any, call: CallTemplate) -> CallShape:
    """A list of Python-style calls, each its own value."""
    return CallShape("pythonic") if spec.transform_each else WHOLE


def _salvage(spec: Any, shape: CallShape, body: str, captures: Mapping[str, Any]) -> Pieces | None:
    return _pythonic_pieces(body, captures)


PYTHONIC = ContentParser("pythonic", _pythonic, call_shape=_call_shape, salvage=_salvage)
PARSERS = (PYTHONIC,)

__all__ = ["PARSERS", "PYTHONIC"]
