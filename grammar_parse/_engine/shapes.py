"""What one region is: its role in the message and, for tool calls, the shape its calls are written in.

Both are worked out from the region's field and value spec when the grammar is built, and kept on the region
(``Region.role``, ``Region.call``); :mod:`grammar_parse._engine.format` gathers them, with what the grammar's rules
say, into the grammar's format.

A region's role is inferred from its template field (``reasoning_content``, ``thinking`` or ``reasoning`` is
reasoning; ``tool_calls``, or a transform that builds ``{"function": ...}``, is tool calls; ``content`` is
content; a region with a parent is a component); an authored ``.lark`` region may state it
(``//@ region scratchpad {"role": "reasoning", ...}``) where its field name says nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import regex

from .linear_regex import BoundedRegex
from .regex_shape import last_char, pattern_shape, required_tail
from .values import PLACEHOLDER, ValueSpec

# ---------------------------------------------------------------------------- roles
REASONING = "reasoning"
CONTENT = "content"
TOOL_CALLS = "tool_calls"
COMPONENT = "component"  # a region whose value goes into its parent's, not the message
FIELD = "field"  # any other message key
#: The roles a region may have (an authored region states one of the first four, or none).
ROLES = (REASONING, CONTENT, TOOL_CALLS, FIELD, COMPONENT)
#: The message keys read as reasoning when a region does not state its role, in the order a reader looks
#: for them.
REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


def infer_role(field: str, parent: str | None, spec: Any) -> str:
    """A region's role from its field and value (the conventions templates follow)."""
    if parent is not None:
        return COMPONENT
    if field in REASONING_FIELDS:
        return REASONING
    transform = getattr(spec, "transform", None)
    if field == "tool_calls" or (isinstance(transform, dict) and "function" in transform):
        return TOOL_CALLS
    return CONTENT if field == "content" else FIELD


# ---------------------------------------------------------------------------- one call region's shape
@dataclass(frozen=True)
class CallShape:
    """How a tool-call region carries its calls: the payload's kind and where each call's name, arguments and
    id come from (worked out once per region from its value spec, when the grammar is built)."""

    mode: str  # json_body | json_key | json_array | xml | components | pythonic | at_close (the payload's shape)
    name_capture: str | None = None  # the open delimiter's group holding the name
    name_key: str | None = None  # the body (or element) key holding the name
    args_key: str | None = None  # the body (or element) key holding the arguments
    args_alternatives: tuple[str, ...] = ()  # other keys that may hold them (a `{a|b}` placeholder)
    id_capture: str | None = None
    id_key: str | None = None  # the body (or element) key holding a model-written call id
    tag_pattern: Any = None  # xml mode
    tag_end: str | None = None  # the character every tag match ends with (None: any)
    tag_tail: str | None = None  # literal text every tag match holds, near its end (None: none known)
    tag_context: int = 0  # how far before its start a tag match may look (anchors, lookbehind)
    value_parser: Any = None
    # An ``at_close`` payload (read by its value parser when the region closes: the constraint export and
    # the salvage read the mode) that the streamer still streams: json_name_keys | lax_members | text_arg.
    reader: str | None = None
    name: str | None = None  # text_arg: the name the grammar writes for every call (None: a capture)
    content_args: Any = None  # lax_members and text_arg: the region's content options

    @property
    def kind(self) -> str:
        """How the streamer reads the region's calls."""
        return self.reader or self.mode


def _placeholder(value: Any) -> str | None:
    m = PLACEHOLDER.fullmatch(value) if isinstance(value, str) else None
    return m.group(1) if m else None


def _keys(path: str, prefix: str) -> tuple[str, ...] | None:
    """The keys of a (``|``-separated) placeholder path whose every alternative is ``prefix`` + one key."""
    keys = []
    for alternative in path.split("|"):
        if not alternative.startswith(prefix) or "." in alternative[len(prefix):]:
            return None
        keys.append(alternative[len(prefix):])
    return tuple(keys)


def call_shape(spec: Any) -> CallShape:
    """The CallShape of a tool-call region's value spec; ``at_close`` whenever the shape is not recognised."""
    if not isinstance(spec, ValueSpec) or spec.transform is None or not isinstance(spec.transform, dict):
        return CallShape("at_close")
    call = spec.transform
    fn = call.get("function")
    id_capture = _placeholder(call.get("id"))
    pure_json = spec.content == "json" and not spec.content_args.get("string_delims") \
        and not spec.content_args.get("unquoted_keys") and not spec.content_args.get("allow_non_json")
    if spec.transform_each:
        if spec.content == "json-name-keys" and not spec.content_args:
            return CallShape("at_close", reader="json_name_keys")  # ([{"f": {...}}, ...] or {"f": {...}}: each key a call's name)
        if spec.content == "pythonic":
            return CallShape("pythonic")  # (a list of Python-style calls, each its own value)
        if pure_json and isinstance(fn, dict):
            name, args = _placeholder(fn.get("name")), _placeholder(fn.get("arguments"))
            id_key = id_capture if id_capture and "." not in id_capture else None
            keys = _keys(args, "") if args else None
            if name and keys and "." not in name and "|" not in name:
                return CallShape("json_array", name_key=name, args_key=keys[0], args_alternatives=keys[1:], id_key=id_key)
        return CallShape("at_close")
    if fn == "{content}" and pure_json:
        return CallShape("json_key", name_key="name", args_key="arguments",
                        id_capture=id_capture if id_capture and "." not in id_capture else None)
    if not isinstance(fn, dict):
        return CallShape("at_close")
    if (text_shape := _text_arg_shape(spec, fn, id_capture)) is not None:
        return text_shape
    name, args = _placeholder(fn.get("name")), _placeholder(fn.get("arguments"))
    if name is None or args is None or "|" in name:
        return CallShape("at_close")
    name_capture = name if not name.startswith("content") else None
    name_key = name[len("content."):] if name.startswith("content.") and name.count(".") == 1 else None
    if name_capture is None and name_key is None:
        return CallShape("at_close")
    id_capture = id_capture if id_capture and not id_capture.startswith("content") else None
    common = CallShape("at_close", name_capture=name_capture, name_key=name_key, id_capture=id_capture)
    if pure_json and args == "content" and name_capture:
        return replace(common, mode="json_body")
    if pure_json and (keys := _keys(args, "content.")):
        return replace(common, mode="json_key", args_key=keys[0], args_alternatives=keys[1:])
    if spec.content == "xml-inline" and args == "content" and name_capture and not spec.content_args.get(
            "merge_duplicates") and "value_parser_when" not in spec.content_args:
        pattern = spec.content_args["tag_pattern"]
        return replace(common, mode="xml", tag_pattern=BoundedRegex(pattern, regex.DOTALL), tag_end=last_char(pattern), tag_tail=required_tail(pattern),
                       tag_context=pattern_shape(pattern).context, value_parser=spec.content_args.get("value_parser"))
    if name_capture and "." not in args and spec.content in ("text",):
        return replace(common, mode="components", args_key=args)
    delims = spec.content_args.get("string_delims") or []
    if spec.content == "json" and args == "content" and name_capture and len(delims) <= 1 \
            and not spec.content_args.get("allow_non_json"):
        # JSON in a model's dialect (bare keys, its own string quotes): each member, parsed as the region's
        # parser reads the whole, is sent once the comma or brace after it shows it complete. (Two quote
        # pairs are hidden one pair after the other over the whole text, which a left-to-right walk cannot
        # follow; text that is not JSON at all becomes a string, which members cannot become.)
        return replace(common, reader="lax_members", content_args=dict(spec.content_args))
    # Left whole: xml-inline with merged duplicates (a repeated tag turns the member sent into a list, so no
    # member is final before the call closes), or shapes not recognised.
    return CallShape("at_close")


def _text_arg_shape(spec: ValueSpec, fn: dict[str, Any], id_capture: str | None) -> CallShape | None:
    """The plan of a call whose arguments are one key holding the region's text (Functionary's ``python``
    call: ``{"code": "{content}"}``), or None."""
    args, name = fn.get("arguments"), fn.get("name")
    if spec.content != "text" or spec.content_args.get("separators") or not isinstance(args, dict) \
            or len(args) != 1 or _placeholder(next(iter(args.values()))) != "content" or not isinstance(name, str):
        return None
    capture = _placeholder(name)
    if capture is None and "{" in name or capture is not None and capture.startswith("content"):
        return None
    return CallShape("at_close", reader="text_arg", name_capture=capture, name=name if capture is None else None, args_key=next(iter(args)),
                    id_capture=id_capture if id_capture and not id_capture.startswith("content") else None,
                    content_args=dict(spec.content_args))


__all__ = ["COMPONENT", "CONTENT", "FIELD", "REASONING", "REASONING_FIELDS", "ROLES", "TOOL_CALLS", "CallShape",
           "call_shape", "infer_role"]
