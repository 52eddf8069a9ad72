"""The content parsers' protocol: what a region's text becomes, and what the rest of the engine asks of the
format it is written in. One :class:`ContentParser` per format (one module each, registered in
:mod:`grammar_parse._engine.content`): how it parses a body, whether a region's chunks are already its
value's text (streamable), the :class:`CallShape` of a tool-call region written in it (how the tool-call
streamer reads its calls as they arrive, and which payload the constraint export writes), and the calls a
broken body still holds (lenient mode's salvage).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..reading import PLACEHOLDER


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


#: A call region whose calls are read when it closes (no shape the streamer follows).
WHOLE = CallShape("at_close")


@dataclass
class Piece:
    """One call's worth of a body: where its text is, whether it is complete, and the scope its
    transform is filled from (``complete``: the parsed value's; otherwise the parts that are known)."""

    start: int
    end: int | None
    scope: dict[str, Any]
    complete: bool


#: What a format's salvage gives: one Piece per call it could tell apart, and where the text after them starts.
Pieces = tuple[list[Piece], int]


@dataclass(frozen=True)
class ContentParser:
    """A content parser and what it says about calls written in its format (see the module doc)."""

    name: str
    #: The value of a region's body (``args`` are the template's ``content_args``); ParseError if it has none.
    parse: Callable[[str, Mapping[str, Any]], Any]
    #: Whether the value is the body itself (modulo stripping): its chunks stream with ``dirty=False``.
    streamable: bool = False
    #: The shape of a tool-call region written in this format, from its value spec and transform (the
    #: transform's ``function`` template and id already read, :class:`CallTemplate`); None: read whole.
    call_shape: Callable[[Any, CallTemplate], CallShape] | None = None
    #: The calls of a body that did not parse (spec, shape, body, captures); None: nothing certain.
    salvage: Callable[[Any, CallShape, str, Mapping[str, Any]], Pieces | None] | None = None
    #: ``parse`` with its args read ahead (the specialised one-shot parser runs it per region): the same value
    #: where it gives one, or an exception where ``parse`` would fail (then ``parse`` runs, for its error).
    #: None: ``parse`` itself.
    specialise: Callable[[Mapping[str, Any]], Callable[[str], Any] | None] | None = None
    #: Whether the fast form is ``parse`` itself, exceptions too (it needs no ``parse`` behind it).
    specialise_exact: bool = False

    def specialised(self, args: Mapping[str, Any]) -> Callable[[str], Any]:
        """The body's value under ``args``: the fast form where there is one, failing as ``parse`` fails."""
        fast = self.specialise(args) if self.specialise is not None else None
        parse = self.parse
        if fast is None:
            return lambda text: parse(text, args)
        if self.specialise_exact:
            return fast

        def value(text: str) -> Any:
            try:
                return fast(text)
            except Exception:  # (the slow form's error, or its value where the fast form cannot tell)
                return parse(text, args)
        return value


#: Every content parser, by the name a template gives (filled by grammar_parse._engine.content, which imports
#: each one's module).
CONTENT_PARSERS: dict[str, ContentParser] = {}


def parse_content(text: str, name: str, args: Mapping[str, Any]) -> Any:
    """Run content parser ``name`` on ``text``."""
    return CONTENT_PARSERS[name].parse(text, args)


def placeholder_path(value: Any) -> str | None:
    """The path of a whole-string ``{placeholder}``, or None."""
    m = PLACEHOLDER.fullmatch(value) if isinstance(value, str) else None
    return m.group(1) if m else None


def placeholder_keys(path: str, prefix: str) -> tuple[str, ...] | None:
    """The keys of a (``|``-separated) placeholder path whose every alternative is ``prefix`` + one key."""
    keys = []
    for alternative in path.split("|"):
        if not alternative.startswith(prefix) or "." in alternative[len(prefix):]:
            return None
        keys.append(alternative[len(prefix):])
    return tuple(keys)


@dataclass(frozen=True)
class CallTemplate:
    """What a call transform says about where a call's parts come from: its ``function`` template, the id
    placeholder, and, where ``function`` is a ``{"name": ..., "arguments": ...}`` of placeholders, the name's
    source (an open-delimiter capture or a key of the body) and the arguments' path."""

    function: Any
    id_capture: str | None
    name: str | None = None
    arguments: str | None = None
    name_capture: str | None = None
    name_key: str | None = None

    @property
    def common(self) -> CallShape | None:
        """The shape's parts every format shares (None where the name has no certain source)."""
        if self.name is None or self.arguments is None or "|" in self.name:
            return None
        if self.name_capture is None and self.name_key is None:
            return None
        id_capture = self.id_capture if self.id_capture and not self.id_capture.startswith("content") else None
        return CallShape("at_close", name_capture=self.name_capture, name_key=self.name_key, id_capture=id_capture)


def call_template(transform: dict[str, Any]) -> CallTemplate:
    """Read a call transform (``{"type": "function", "function": ..., "id": ...}``)."""
    fn = transform.get("function")
    id_capture = placeholder_path(transform.get("id"))
    if not isinstance(fn, dict):
        return CallTemplate(fn, id_capture)
    name, args = placeholder_path(fn.get("name")), placeholder_path(fn.get("arguments"))
    name_capture = name if name is not None and not name.startswith("content") else None
    name_key = name[len("content."):] if name is not None and name.startswith("content.") and name.count(".") == 1 \
        else None
    return CallTemplate(fn, id_capture, name, args, name_capture, name_key)


__all__ = ["WHOLE", "CallShape", "CallTemplate", "ContentParser", "Piece", "Pieces", "CONTENT_PARSERS", "call_template",
           "parse_content", "placeholder_keys", "placeholder_path"]
