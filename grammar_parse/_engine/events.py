"""The event and message dicts the parser produces (plain dicts with transformers' exact keys).

Every event the parser emits is one of the :data:`Event` members, told apart by ``type``; narrowing on
``event["type"]`` gives the member's keys. Keys that only some events carry (a component's ``path``,
``captures`` with ``extended_events=True``) are optional keys of their member.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, TypedDict, TypeVar, Union, overload

_T = TypeVar("_T")

# Optional keys come from a ``total=False`` subclass (not NotRequired) so the required/optional key sets
# are right at run time on Python 3.10 too, without typing_extensions.


class _RegionOpenKeys(TypedDict):
    type: Literal["region_open"]
    field: str


class RegionOpen(_RegionOpenKeys, total=False):
    """A field's region began (its open delimiter completed, or its first byte arrived).

    ``path`` (components only): where the component's value goes inside the field's value, e.g.
    ``["tool_calls", 0, "arguments", "city"]``. ``captures`` (with ``extended_events=True``): the named
    groups of the open delimiter. ``region`` (with ``extended_events=True``, message fields only): the grammar
    rule of the region, where several fill the field (LFM2's Python and JSON call lists).
    """

    path: list[str | int]
    captures: dict[str, str]
    region: str


class _RegionChunkKeys(TypedDict):
    type: Literal["region_chunk"]
    field: str
    text: str
    dirty: bool


class RegionChunk(_RegionChunkKeys, total=False):
    """Text routed into the open region. ``dirty`` marks raw bytes of a structured value (json, ...);
    ``path`` as in :class:`RegionOpen`."""

    path: list[str | int]


class _RegionCloseKeys(TypedDict):
    type: Literal["region_close"]
    field: str
    value: Any


class RegionClose(_RegionCloseKeys, total=False):
    """A region ended; ``value`` is what the field received (after content parsing, transform, typing);
    ``path`` as in :class:`RegionOpen`. In lenient mode a tool-call region that names no function gives
    None (nothing was added), and its text follows as a chunk of the content or reasoning around it."""

    path: list[str | int]


class ParseProblem(TypedDict):
    """A problem lenient mode recorded instead of raising: an entry of the message's ``parse_errors`` and
    of ``ResponseParser.errors``. ``code`` is a stable error code, ``field`` the field it concerns (or
    None), ``span`` the [start, end) output offsets it covers (or None)."""

    code: str
    field: str | None
    span: list[int] | None
    message: str


class ParseErrorEvent(ParseProblem):
    """Lenient mode (``strict=False``): a problem was recorded instead of raised (the
    :class:`ParseProblem`, with its ``type``)."""

    type: Literal["parse_error"]


class CallProblem(TypedDict):
    """An entry of a tool call's ``errors`` (lenient mode, or ``tools=`` checks): where in the call
    (``$.function.arguments.city``), what is wrong, and a stable code."""

    path: str
    message: str
    code: str


class ToolFunction(TypedDict):
    """A tool call's ``function``: the name, and the arguments as parsed (a dict for JSON-object
    arguments; in lenient mode, arguments that did not parse are the model's text)."""

    name: str
    arguments: Any


class _ToolCallKeys(TypedDict):
    type: str
    function: ToolFunction


class ToolCall(_ToolCallKeys, total=False):
    """An entry of the message's ``tool_calls``: ``{"type": "function", "function": {"name",
    "arguments"}}``, with ``id`` where the format writes one and ``errors`` where something was wrong."""

    id: str
    errors: list[CallProblem]


#: The message keys whose values have a known type (every built-in grammar's fields), for the overloads below.
_TextKey = Literal["role", "content", "reasoning_content", "thinking"]

if TYPE_CHECKING:
    # A plain dict at run time (transformers' keys, and whatever other fields a grammar fills); for a type
    # checker, a dict whose well-known keys read as their types. Not a TypedDict: mypy has no TypedDict with
    # extra keys (PEP 728), and the other keys must stay readable. Without these overloads every value was
    # Any, and pyright strict turns ``msg.get("tool_calls") or []`` into a partially unknown type (an error).

    class Message(dict[str, Any]):
        """A parsed assistant message: ``{"role": "assistant", "content": ..., "tool_calls": [...], ...}``."""

        @overload
        def __getitem__(self, key: _TextKey) -> str: ...
        @overload
        def __getitem__(self, key: Literal["tool_calls"]) -> list[ToolCall]: ...
        @overload
        def __getitem__(self, key: Literal["parse_errors"]) -> list[ParseProblem]: ...
        @overload
        def __getitem__(self, key: str) -> Any: ...
        def __getitem__(self, key: str) -> Any:
            return super().__getitem__(key)

        # (both checkers refuse any narrowing of get's overloads as an override: reading a well-known key
        # through get() with these types is sound, and the last overload takes what dict.get takes)
        @overload  # type: ignore[override]
        def get(self, key: _TextKey, default: None = None, /) -> str | None: ...
        @overload
        def get(self, key: _TextKey, default: _T, /) -> str | _T: ...
        @overload
        def get(self, key: Literal["tool_calls"], default: None = None, /) -> list[ToolCall] | None: ...
        @overload
        def get(self, key: Literal["tool_calls"], default: list[ToolCall] | _T, /) -> list[ToolCall] | _T: ...
        @overload
        def get(self, key: Literal["parse_errors"], default: None = None, /) -> list[ParseProblem] | None: ...
        @overload
        def get(self, key: Literal["parse_errors"], default: list[ParseProblem] | _T, /) -> list[ParseProblem] | _T: ...
        @overload
        def get(self, key: str, default: Any = None, /) -> Any: ...
        def get(self, key: str, default: Any = None, /) -> Any:  # pyright: ignore[reportIncompatibleMethodOverride]
            return super().get(key, default)

else:
    Message = dict[str, Any]


class Correction(TypedDict):
    """Legacy ``response_schema`` only, at finalize: the schema's run over the whole output disagrees
    with the regions streamed so far. ``message`` is the final message (what ``finalize`` returns);
    ``fields`` the keys that differ."""

    type: Literal["correction"]
    fields: list[str]
    message: Message


class _CallOpenKeys(TypedDict):
    type: Literal["call_open"]
    index: int
    name: str


class CallOpen(_CallOpenKeys, total=False):
    """A tool call's head (``call_events=True``): its index among the calls (in output order), its name, and
    its id where the model wrote one. It comes once per call, before its arguments."""

    id: str


class CallArguments(TypedDict):
    """A piece of a call's arguments text (``call_events=True``): the pieces only append, and together they
    are the call's arguments as strict JSON (the model's own text, a value typing changed written typed)."""

    type: Literal["call_arguments"]
    index: int
    arguments: str


class CallClose(TypedDict):
    """A call is complete (``call_events=True``): its arguments text is whole; ``value`` is its typed value
    (the JSON value of that text), ``problems`` what the wire filter changed or left out of the model's
    arguments to keep them strict JSON (a broken call's and the tools' checks are in the message's call)."""

    type: Literal["call_close"]
    index: int
    done: Literal[True]
    value: Any
    problems: list[dict[str, str]]


Event = Union[RegionOpen, RegionChunk, RegionClose, ParseErrorEvent, Correction, CallOpen, CallArguments, CallClose]


def merge_chunks(events: list[Event]) -> list[Event]:
    """Events with adjacent chunks of the same field merged: the view that does not depend on chunking."""
    merged: list[Event] = []
    for event in events:
        last = merged[-1] if merged else None
        if (
            event["type"] == "region_chunk"
            and last is not None
            and last["type"] == "region_chunk"
            and last["field"] == event["field"]
        ):
            joined = last.copy()
            joined["text"] = last["text"] + event["text"]
            merged[-1] = joined
        else:
            merged.append(event)
    return merged


__all__ = [
    "CallArguments",
    "CallClose",
    "CallOpen",
    "CallProblem",
    "Correction",
    "Event",
    "Message",
    "ParseErrorEvent",
    "ParseProblem",
    "RegionChunk",
    "RegionClose",
    "RegionOpen",
    "ToolCall",
    "ToolFunction",
    "merge_chunks",
]
