"""JSON, and the JSON dialects models write (bare keys, their own string quotes, text that is not JSON):
the parser, the incremental walker every reader of JSON bodies shares (the tool-call streamer, the salvage),
the call shapes of JSON call payloads, and what a broken JSON body still holds.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import regex

from ...errors import ParseError
from ..reading import JsonWalker, json_depth, load_json
from .base import WHOLE, CallShape, CallTemplate, ContentParser, Piece, Pieces, parse_content, placeholder_keys
from .text import text_value

# Control characters stand in for custom-quoted strings while the JSON dialect is rewritten; real model
# output never contains them, and if it does we refuse rather than corrupt the value.
_SENTINEL_OPEN, _SENTINEL_CLOSE = "\x01", "\x02"


_UNQUOTED_KEY = regex.compile(r"(?<=[{,])(\w+):")  # transformers' dialect: the key right after { or ,


# Grammar-only "unquoted_keys": "spaced": also after whitespace, and before the colon (`{ a: 1,\n  b :2}`), and
# any text up to the colon that holds no JSON structure (Gemma 4 writes every key bare: `{Basic LLM Chain: ...}`,
# `{Content-Type: ...}`). The run is possessive: each try reads to the next structural character, and tries
# start only at one, so the rewrite is linear.
_SPACED_UNQUOTED_KEY = regex.compile(r'([{,]\s*)([^\s"{}\[\],:][^"{}\[\],:]*+):')
# A JSON string written with plain double quotes inside such a dialect (`{q: "a,b:c"}`): hidden from the key
# rewrite like the dialect's own strings.
_JSON_STRING = regex.compile(r'"(?:[^"\\]|\\.)*+"')


def _quoted_key(match: regex.Match[str]) -> str:
    key = match.group(2).rstrip()
    return f'{match.group(1)}"{key}"{match.group(2)[len(key):]}:'


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
        out += (text[i:start], _hidden(text[start + len(open_quote):end], captured))
        i = end + len(close_quote)
    out.append(text[i:])
    return "".join(out)


def _hidden_json_string(text: str, captured: list[str]) -> str:
    """A plain JSON string, hidden as the dialect's strings are (its value, restored as JSON); left as written
    where it does not decode (the parse then says why)."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return _hidden(value, captured)


def _hidden(value: str, captured: list[str]) -> str:
    """The sentinel a hidden string stands as while the dialect is rewritten (its value kept in ``captured``)."""
    captured.append(value)
    return f"{_SENTINEL_OPEN}{len(captured) - 1}{_SENTINEL_CLOSE}"


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
        if '"' in working:  # (a plain JSON string stays as written: its text is no key)
            working = _JSON_STRING.sub(lambda m: _hidden_json_string(m.group(), captured), working)
        working = _SPACED_UNQUOTED_KEY.sub(_quoted_key, working)
    elif args.get("unquoted_keys", False):
        working = _UNQUOTED_KEY.sub(r'"\1":', working)
    if captured:  # one pass (a replace per string was quadratic in the number of strings)
        working = _HIDDEN.sub(lambda m: json.dumps(captured[int(m.group(1))]), working)
    try:
        return load_json(working)
    except json.JSONDecodeError as e:
        if args.get("allow_non_json"):
            return text_value(text, args)
        shown = f"Content: {text!r}" if working == text else f"Original: {text!r}\nTransformed: {working!r}"
        raise ParseError(
            f"could not parse region as JSON ({e.msg} at line {e.lineno} column {e.colno}).\n{shown}",
            code="parse.json",
            hint="Set content_args.allow_non_json to keep unparseable text as a string.",
        ) from e




def loads_within_limit(text: str) -> tuple[bool, Any]:
    """(True, value) if ``text`` is JSON within the depth limit."""
    try:
        return True, parse_content(text, "json", {})
    except ParseError:
        return False, None


# ---------------------------------------------------------------------------- JSON bodies
class TooDeep(Exception):
    """A walk went past the depth a JSON body may have: nothing more is certain."""


class _Outline:
    """Walker listener: the call objects at ``depth`` of a JSON body, each with its name and id strings
    and its arguments' span (the first of the argument keys written, as the streamer takes it)."""

    def __init__(self, body: str, depth: int, plan: CallShape) -> None:
        self.body = body
        self.depth = depth
        self.names = {k: a for k, a in ((plan.name_key, "name"), (plan.id_key, "id")) if k is not None}
        self.args_keys = (plan.args_key, *plan.args_alternatives)
        self.objects: list[dict[str, Any]] = []
        self.key_at: dict[int, str | None] = {}
        self.member: tuple[str | None, int] | None = None
        self.top_end: int | None = None

    def on_key(self, depth: int, key: str, pos: int) -> None:
        self.key_at[depth] = key

    def on_value_start(self, depth: int, pos: int) -> None:
        if depth > json_depth():
            raise TooDeep  # the rest is raw text: walking on would cost time and find nothing certain
        if depth == self.depth:
            self.objects.append({"start": pos, "end": None})
            self.key_at[depth + 1] = None
        elif depth == self.depth + 1 and self.objects and self.objects[-1]["end"] is None:
            key = self.key_at.get(depth)
            self.member = (key, pos)
            if key in self.args_keys and "args_start" not in self.objects[-1]:
                self.objects[-1].update(args_key=key, args_start=pos)

    def on_value_end(self, depth: int, pos: int) -> None:
        if depth == 0:
            self.top_end = pos
        if depth == self.depth and self.objects:
            self.objects[-1]["end"] = pos
        elif depth == self.depth + 1 and self.member is not None and self.objects:
            (key, start), self.member, obj = self.member, None, self.objects[-1]
            if obj.get("args_start") == start:
                obj["args_end"] = pos
            elif key in self.names and self.names[key] not in obj:
                ok, value = loads_within_limit(self.body[start:pos])
                if ok and isinstance(value, str):
                    obj[self.names[key]] = value


def walk(body: str, listener: Any) -> None:
    """Walk a whole JSON body with ``listener`` (see :class:`JsonWalker`), up to where it is too deep."""
    walker = JsonWalker(listener)
    try:
        walker.feed(body)
        walker.finish()
    except TooDeep:
        pass


def _json_pieces(plan: CallShape, body: str, captures: Mapping[str, Any]) -> tuple[list[Piece], int]:
    """Calls of a JSON body: the body is the arguments (``json_body``), one call object (``json_key``),
    or a list of call objects (``json_array``). Returns the pieces and where the text after the body's
    JSON value starts."""
    outline = _Outline(body, 1 if plan.mode == "json_array" else 0, plan)
    walk(body, outline)
    tail = outline.top_end if outline.top_end is not None else len(body)
    if plan.mode == "json_body":
        if not outline.objects:
            return [], tail
        start, end = outline.objects[0]["start"], outline.objects[0]["end"]
        ok, value = loads_within_limit(body[start:end]) if end is not None else (False, None)
        if ok and isinstance(value, dict):
            return [Piece(start, end, {**captures, "content": value}, True)], tail
        return [Piece(start, None, {**captures, "content": body[start:]}, False)], len(body)  # all of it, raw
    pieces = []
    for obj in outline.objects:
        start, end = obj["start"], obj["end"]
        ok, value = loads_within_limit(body[start:end]) if end is not None else (False, None)
        known: dict[str, Any] = {}
        if ok and isinstance(value, dict):
            known = value
        else:
            ok = False
            for key, found in ((plan.name_key, "name"), (plan.id_key, "id")):
                if key is not None and obj.get(found):  # the first one written, if it says something
                    known[key] = obj[found]
            if "args_start" in obj:
                args_end = obj.get("args_end")
                raw = body[obj["args_start"]:args_end]
                parsed, value = loads_within_limit(raw) if args_end is not None else (False, None)
                # arguments are an object; any other value in a broken call stays the text written
                known[obj["args_key"]] = value if parsed and isinstance(value, dict) else raw
        scope = {**captures, "content": known} if plan.mode == "json_key" else {**captures, **known}
        pieces.append(Piece(start, end, scope, ok))
    return pieces, tail


def _pure(spec: Any) -> bool:
    """Strict JSON: no dialect option (what the streamer can follow byte by byte)."""
    args = spec.content_args
    return not args.get("string_delims") and not args.get("unquoted_keys") and not args.get("allow_non_json")


def _call_shape(spec: Any, call: CallTemplate) -> CallShape:
    """A JSON body of arguments, a ``{"name", "arguments"}`` object, a list of them, or (a model's dialect)
    members read one at a time."""
    fn, id_capture, pure = call.function, call.id_capture, _pure(spec)
    if spec.transform_each:
        if pure and isinstance(fn, dict):
            name, args = call.name, call.arguments
            id_key = id_capture if id_capture and "." not in id_capture else None
            keys = placeholder_keys(args, "") if args else None
            if name and keys and "." not in name and "|" not in name:
                return CallShape("json_array", name_key=name, args_key=keys[0], args_alternatives=keys[1:], id_key=id_key)
        return WHOLE
    if fn == "{content}" and pure:
        return CallShape("json_key", name_key="name", args_key="arguments",
                         id_capture=id_capture if id_capture and "." not in id_capture else None)
    common = call.common if isinstance(fn, dict) else None
    if common is None or call.arguments is None:
        return WHOLE
    args = call.arguments
    if pure and args == "content" and common.name_capture:
        return replace(common, mode="json_body")
    if pure and (keys := placeholder_keys(args, "content.")):
        return replace(common, mode="json_key", args_key=keys[0], args_alternatives=keys[1:])
    delims = spec.content_args.get("string_delims") or []
    if args == "content" and common.name_capture and len(delims) <= 1 and not spec.content_args.get("allow_non_json"):
        # JSON in a model's dialect (bare keys, its own string quotes): each member, parsed as the region's
        # parser reads the whole, is sent once the comma or brace after it shows it complete. (Two quote
        # pairs are hidden one pair after the other over the whole text, which a left-to-right walk cannot
        # follow; text that is not JSON at all becomes a string, which members cannot become.)
        return replace(common, reader="lax_members", content_args=dict(spec.content_args))
    return WHOLE


def _salvage(spec: Any, shape: CallShape, body: str, captures: Mapping[str, Any]) -> Pieces | None:
    return _json_pieces(shape, body, captures) if shape.mode in ("json_body", "json_key", "json_array") else None


def _specialise(args: Mapping[str, Any]) -> Callable[[str], Any] | None:
    """Plain JSON (no dialect to rewrite) is load_json's value, without the dialect's checks."""
    return None if args.get("string_delims") or args.get("unquoted_keys") else load_json


JSON = ContentParser("json", _json, call_shape=_call_shape, salvage=_salvage, specialise=_specialise)
PARSERS = (JSON,)

__all__ = ["JSON", "PARSERS", "JsonWalker", "TooDeep", "loads_within_limit", "walk"]
