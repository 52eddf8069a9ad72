"""XML-like parameters (``xml-inline``): tag matches, or nested elements, read into an object; the call
shape of a call region whose parameters are tags.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

import regex

from ...errors import ParseError
from ..delimiters import search_budget
from ..linear_regex import BoundedRegex
from ..reading import DEPTH_HINT, json_depth
from ..regex_shape import last_char, pattern_shape, required_tail
from .base import WHOLE, CallShape, CallTemplate, ContentParser, parse_content


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
    return _read(text, args)[0]


def text_outside(spec: Any, text: str, cut_off: bool) -> str:
    """For a region read as xml-inline with ``report_stray`` (a built-in grammar's: transformers ignores such
    text, and a template's grammar must read as it does): its text in no argument (outside every tag, or every
    top-level element), stripped; "" where there is none, or the region is not such. A value with a wrong or
    missing close tag (``<city>Beijing</wrong>``) leaves its element open, and its text lands here instead of
    vanishing. ``cut_off``: the output's end cut the region off, so its text after the last argument is
    unfinished, not stray."""
    if not reports_stray(spec):
        return ""
    spans = _read(text, spec.content_args)[1]
    pieces, at = [], 0
    for start, end in spans:
        pieces.append(text[at:start])
        at = end
    if not cut_off:
        pieces.append(text[at:])
    return "".join(pieces).strip()


def reports_stray(spec: Any) -> bool:
    """Whether a region's spec reads xml-inline with ``report_stray`` (see text_outside)."""
    args = getattr(spec, "content_args", None)
    return getattr(spec, "content", None) == "xml-inline" and isinstance(args, Mapping) and \
        bool(args.get("report_stray"))


def _read(text: str, args: Mapping[str, Any]) -> tuple[dict[str, Any], list[tuple[int, int]]]:
    """The arguments, and the spans of the tags (or top-level elements) they were read from, in order."""
    if "elements" in args:
        return _xml_elements(text, args)
    merge = args.get("merge_duplicates", False)
    out: dict[str, Any] = {}
    spans = []
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
        spans.append(m.span())
    return out, spans


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


def _xml_elements(text: str, args: Mapping[str, Any]) -> tuple[dict[str, Any], list[tuple[int, int]]]:
    """Nested elements into a dict, as MiniMax-M3's template writes an object or list argument
    (``<shipping><city>Singapore</city>...</shipping>``, a list as ``<item>`` elements).

    ``elements`` gives the ``open`` and ``close`` tag patterns (each with a ``key`` group) and the list
    element's name (``item``). An element holding elements is an object, or a list when its children are
    all list elements or repeat one name; an object's repeated names collect into a list. Any other element
    is its text as written (a leaf through ``value_parser``; one with text beside its child elements keeps
    its inner markup). Typing by the tool's schema comes after (tools.ToolTypes, element by element). A
    close tag ends the innermost open element of its name (those opened inside it end there too); a stray
    close is text, and elements still open at the end (cut-off output) are left out. Arguments repeated at
    the top collect into a list with ``merge_duplicates`` (else the last one wins). The spans of the top-level
    elements come with the arguments (see text_outside)."""
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
                                 hint=DEPTH_HINT)
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
    return out, [(start, end) for _key, _value, start, end in root.children]


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


def _call_shape(spec: Any, call: CallTemplate) -> CallShape:
    """Parameters as tags, each sent typed as it completes: not where repeated tags merge into a list, nor
    where another parser takes some values (no member is final before the call closes then)."""
    common = call.common if not spec.transform_each and isinstance(call.function, dict) else None
    if common is None or call.arguments != "content" or not common.name_capture or spec.content_args.get(
            "merge_duplicates") or "value_parser_when" in spec.content_args:
        return WHOLE
    pattern = spec.content_args["tag_pattern"]
    return replace(common, mode="xml", tag_pattern=BoundedRegex(pattern, regex.DOTALL), tag_end=last_char(pattern),
                   tag_tail=required_tail(pattern), tag_context=pattern_shape(pattern).context,
                   value_parser=spec.content_args.get("value_parser"))


XML_INLINE = ContentParser("xml-inline", _xml_inline, call_shape=_call_shape)
PARSERS = (XML_INLINE,)

__all__ = ["PARSERS", "XML_INLINE", "reads_elements", "reports_stray", "sub_parse",
           "text_outside"]
