"""Tool calls as a server streams them: each call's name first, then fragments of its arguments string.

:class:`ToolCallStreamer` reads a parser's events and emits :class:`ToolCallDelta` dicts. For one call,
the ``arguments`` fragments only ever append, and their concatenation is the call's final arguments
string, whose JSON is the call's typed ``arguments`` (the ``done`` delta carries that value).

How the arguments are read depends on the grammar region of the call:

* **JSON** (Hermes, Llama, Mistral, ...): the model's own bytes of the arguments value are streamed as
  they arrive, through an incremental JSON scanner (strings, escapes and depth; exact when an escape or
  a multi-byte character is split across chunks). A value that ``tools=`` may retype (the string
  ``"3"`` for an integer parameter) is held until it is complete and sent typed, so the text stays the
  JSON of the typed arguments; one whose schema admits strings only streams as it arrives (typing leaves it
  as written: a file's content goes out as the model writes it). Cost per chunk is proportional to the chunk,
  not the arguments.
* **XML-like parameters** (``xml-inline`` regions, parameter components): each argument is sent, typed,
  as soon as it is complete: ``{"city": "Paris"``, then ``, "days": 3``, then ``}``.
* **Python call syntax** (``[f(a=1), g(b="x")]`` or one call a line): each call's name as soon as ``NAME(``
  is written, and its arguments, typed, as ``json.dumps`` once its closing parenthesis and what follows it (a
  comma, ``]``, ``;`` or a newline) show the call is complete, the way a lenient one-shot parse of the output
  so far reads it (``grammar_parse._engine.salvage``). A call that does not parse on its own, and what follows text
  that is not a call, are sent from the region's value when it closes. Behind a strict parser
  (``lenient=False``) each keyword argument is sent, typed, as soon as the comma or parenthesis after it
  arrives, parsed on its own as the call would be.
* **Calls keyed by name** (``[{"get_weather": {...}}]``, JSON): each key is a call's head, its value streams
  as the JSON shapes' do.
* **A JSON dialect** (bare keys, the model's own string quotes: Gemma): behind a strict parser, each member,
  typed, once the comma or brace after it arrives; behind a lenient one, the call when its region closes.
* **Text as the one argument** (``{"code": "{content}"}``, Functionary's python call): the text as a JSON
  string as it arrives (what the region's strip removes held back).
* **Everything else**: the call is sent when its region closes, as ``json.dumps`` of the parsed arguments.
  Two shapes cannot do better: a model-written id after the arguments (Mistral, Apriel: the head carries the
  id, and arguments never go before their head), and xml parameters that merge when repeated (MiniMax-M3:
  ``<a>1</a><a>2</a>`` is ``"a": [1, 2]``, so no parameter is final before the call closes).

Why lenient streams keep Python and dialect calls whole: a broken call (lenient mode) keeps its raw text, and
its wire text is the valid JSON part of that text; members sent before the break would not be part of it.

A field with several call regions (LFM2's Python list or JSON list) reads each region by its own plan when
the parser's events name the region (``extended_events=True``, as the wire adapters ask); otherwise its
calls are sent when their region closes.

Every fragment passes through :class:`~grammar_parse._engine.wire.WireArguments`, so the arguments string is
strict JSON by construction: a JSON object text that a strict parser accepts (``NaN`` sent as ``null``,
invalid text left out and what was sent closed; each change is a problem on the call, see
``grammar_parse._engine.wire``). A broken call (lenient mode, see ``grammar_parse._engine.salvage``) is streamed like any
other: its name, then as much of its arguments text as is valid JSON, closed when the call ends. A call that
never got a name sent nothing; when its region closes without it, it is dropped (:meth:`ToolCallStreamer.
sent_calls` are the calls of the wire, in order), and a value the wire cannot carry as a call (its name
is not a string) is a problem in :attr:`ToolCallStreamer.problems`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypedDict

import regex

from .content import parse_content
from .content.base import WHOLE
from .content.xml import sub_parse
from .delimiters import search_budget
from .events import Event, RegionChunk, RegionClose, RegionOpen
from .grammar import Grammar, Region
from .reading import (
    CALL_TOKEN,
    JSON_MAX_DEPTH,
    LONE_SURROGATE,
    JsonWalker,
    json_depth,
    load_json,
    may_nest_deeper,
    python_step,
    skip_chars,
    with_json_depth,
)
from .regex_shape import UNBOUNDED
from .shapes import CallShape
from .tools import ToolTypes, call_function
from .values import ValueSpec, fill
from .wire import WireArguments, dumps


class ToolCallDelta(TypedDict, total=False):
    """One step of one call: ``index`` always; ``id``/``name`` once, first; then ``arguments`` fragments;
    finally ``done: True`` once the call is complete, with ``value``, the arguments' typed value (the JSON
    value of the whole arguments text), and ``problems``, what the wire filter changed or left out of the
    model's arguments (``{"path", "message", "code"}``, as a call's ``errors``)."""

    index: int
    id: str
    name: str
    arguments: str
    done: bool
    value: Any
    problems: list[dict[str, str]]


_WS = " \t\n\r"


def _not_strict(constant: str) -> Any:
    raise ValueError(f"{constant} is not strict JSON")


_STRICT_JSON = json.JSONDecoder(parse_constant=_not_strict)
_SCAN_STRING: Any = getattr(json.decoder, "scanstring")
_WS_RUN = regex.compile(r"[ \t\n\r]*")
# An object's members, one match per step: its first key's quote (or its end), a colon, what follows a value.
_FIRST = regex.compile(r'[ \t\n\r]*(["}])')
_COLON = regex.compile(r"[ \t\n\r]*:[ \t\n\r]*")
_NEXT = regex.compile(r'[ \t\n\r]*(?:(})|,[ \t\n\r]*")')
#: Whether a call whose region opens and closes within one feed is read whole (``_JsonCallReader.whole``)
#: rather than walked value by value: the same deltas' sum, a tenth of the work. Off to compare the two.
WHOLE_CALLS = True


def _object_members(text: str, start: int) -> tuple[list[tuple[str, int, int, Any]], int] | None:
    """The members of the strict JSON object at ``text[start]``, each (key, value start, value end, value),
    and where the object ends; None where the text there is not one."""
    members: list[tuple[str, int, int, Any]] = []
    if text[start:start + 1] != "{":
        return None
    m = _FIRST.match(text, start + 1)
    if m is None:
        return None
    i = m.end()
    if m.group(1) == "}":
        return members, i
    try:
        while True:
            key, i = _SCAN_STRING(text, i, True)
            m = _COLON.match(text, i)
            if m is None:
                return None
            value, end = _STRICT_JSON.raw_decode(text, m.end())
            members.append((key, m.end(), end, value))
            m = _NEXT.match(text, end)
            if m is None:
                return None
            if m.group(1) == "}":
                return members, m.end()
            i = m.end()
    except ValueError:  # (JSONDecodeError, and an integer past the digits limit)
        return None


def call_name(value: Any) -> str | None:
    """The name of a call value (``{"function": {"name": ...}}``) if it is a non-empty string: the calls the
    wire can carry."""
    fn = call_function(value)
    name = fn.get("name") if fn is not None else None
    return name if isinstance(name, str) and name else None


def call_regions(grammar: Grammar, field: str | None = None) -> list[Region]:
    """The grammar's tool-call regions (its format's), those of one message ``field`` if given (none: its
    output has no tool calls)."""
    return [grammar.regions[rule] for rule in grammar.format.calls
            if field is None or grammar.regions[rule].field == field]


# ---------------------------------------------------------------------------- one call being streamed
_UNREAD = object()  # (a _Call's typed value not read yet)


@dataclass
class _Call:
    index: int
    name: str | None = None
    id: str | None = None
    sent_head: bool = False
    parts: list[str] = field(default_factory=list)  # arguments fragments sent so far
    given: list[str] = field(default_factory=list)  # the arguments text the readers gave (before the wire filter)
    wire: WireArguments = field(default_factory=WireArguments)
    value: Any = None  # the call's value in the region's final value, once it closed (None: not known)
    typed: Any = _UNREAD  # the value of the whole arguments text, where reading it whole already parsed it
    members: int | None = None  # arguments sent member by member: how many so far
    closed: bool = False
    wants_id: bool = False  # the model writes an id for this call somewhere in its body
    dropped: bool = False  # it named no function and its region is closed: no call of the message
    broken: bool = False  # lenient mode: its text did not parse; ``final`` is the message's arguments
    final: Any = None

    @property
    def arguments(self) -> str:
        """The arguments string sent so far (all of it once the call is closed)."""
        return "".join(self.parts)


class _JsonCallReader:
    """Follows one region's JSON body, finding names and streaming argument values (see module doc)."""

    def __init__(self, streamer: ToolCallStreamer, plan: CallShape, captures: dict[str, str]) -> None:
        self.streamer = streamer
        self.plan = plan
        self.kind = plan.kind  # (read on every value)
        self.captures = captures
        self.walker: JsonWalker | None = None  # (made when text is first walked: a call read whole needs none)
        self.text: list[str] = []  # the body seen so far, for slicing (only what is still needed is kept)
        self.text_base = 0
        self.key_at: dict[int, str] = {}
        self.call: _Call | None = None
        self.args_depth = 1 if self.kind == "json_body" else 2 if self.kind == "json_key" else 3
        self.name_depth = 0  # json_name_keys: the depth of the keys naming calls (1 or 2, once the text shows it)
        self.capturing = False
        self.captured = False  # the call's arguments were captured: a later value is not them
        self.sent_to = 0  # absolute offset up to which argument bytes were sent
        self.name_start = -1
        self.id_start = -1
        self.held: tuple[int, str] | None = None  # (start, key) of a value held for retyping
        self.encoded = -1  # where arguments the model wrote as a JSON string start (held whole; -1: none)
        self.pending: list[str] = []  # text not walked yet (walked at the end of the feed, or read whole)
        self.read_whole = False
        if self.kind not in ("json_array", "json_name_keys"):
            self.call = streamer._new_call(captures, plan)

    # the text window
    def feed(self, text: str) -> None:
        """Take a piece of the body; it is walked when the feed ends (:meth:`walk`), unless the region closes
        in the same feed and the call is read whole."""
        self.pending.append(text)

    def walk(self) -> None:
        """Walk the text taken so far, sending what it completes."""
        if not self.pending:
            return
        text = "".join(self.pending)
        self.pending = []
        self.take(text)

    def take(self, text: str) -> None:
        """Walk the next piece of the body now (nothing taken is waiting), sending what it completes."""
        self.text.append(text)
        walker = self.walker or self._walker()
        walker.feed(text)
        if self.capturing and self.held is None and self.encoded < 0:
            self._send_until(walker.offset)
        if walker.offset > self.text_base + 4096:
            self._compact()

    def _walker(self) -> JsonWalker:
        if self.walker is None:
            self.walker = JsonWalker(self)
        return self.walker

    def settle(self, values: list[Any]) -> None:
        """The region closes: read the call whole where it can be (one strict JSON object, nothing walked
        yet, a clean call value), else walk what is left."""
        if not (WHOLE_CALLS and self.pending and self.walker is None and self.call is not None
                and self.kind in ("json_body", "json_key") and self.whole("".join(self.pending), values)):
            self.walk()
        self.pending = []

    def whole(self, body: str, values: list[Any]) -> bool:
        """Send a whole call from its body as the walk would (the head, the arguments as the model wrote them,
        a value that typing changes retyped); False, sending nothing, where the body is not plain enough to
        be sure of that (the walk reads it then)."""
        call, plan, streamer = self.call, self.plan, self.streamer
        if len(values) != 1 or call is None or not isinstance(values[0], dict) or values[0].get("errors") \
                or may_nest_deeper(body) or LONE_SURROGATE.search(body):
            return False
        start = _WS_RUN.match(body).end()  # type: ignore[union-attr]
        found = _object_members(body, start)
        if found is None or body[found[1]:].strip(_WS):
            return False
        if self.kind == "json_body":
            members = [("", start, found[1], dict((k, v) for k, _, _, v in found[0]))]
        else:
            members = found[0]
        sends: list[tuple[str, Any]] = []  # ("head", None) or ("args", text), in the walk's order
        named, args_taken, parsed = call.name, False, None
        for key, value_start, value_end, value in members:
            if self.kind == "json_key" and key == plan.name_key and named is None and isinstance(value, str):
                named = value
                sends.append(("name", value))
            elif self.kind == "json_key" and key == plan.id_key and isinstance(value, str):
                sends.append(("id", value))
            if not args_taken and (self.kind == "json_body" or key == plan.args_key or key in plan.args_alternatives):
                args_taken = True
                if not isinstance(value, dict):
                    return False
                # (an integer past the digits limit, which the wire filter refuses, failed the strict parse)
                sends.append(("args", body[value_start:value_end]))
                parsed = value
        for what, value in sends:
            if what == "args":
                streamer._start_arguments(call)
                text = self._retyped_members(value, call.name) if streamer.types is not None and call.name else value
                if text == value:
                    # (checked strict JSON above: the wire filter would pass it as it is)
                    call.given.append(value)
                    streamer._send_wire(call, call.wire.whole(value))
                    call.typed = parsed
                else:
                    streamer._send_arguments(call, text)
            elif getattr(call, what) is None:
                setattr(call, what, value)
                streamer._send_head(call)
        self.read_whole = True
        return True

    def _retyped_members(self, raw: str, name: str) -> str:
        """The arguments text with each member that typing changes written typed (as the walk sends it)."""
        assert self.call is not None and self.streamer.types is not None
        found = _object_members(raw, 0)
        assert found is not None  # (the arguments read as one strict object already)
        out, at = [], 0
        for key, value_start, value_end, value in found[0]:
            if self.streamer.types.types_of(name, key):
                # (the member's value as the strict parse read it: what load_json would give, within every
                # limit, as whole() checked)
                out += [raw[at:value_start], self.streamer._typed_text(self.call, key, raw[value_start:value_end],
                                                                       value)]
                at = value_end
        return "".join(out) + raw[at:]

    def _slice(self, start: int, end: int) -> str:
        whole = "".join(self.text)
        self.text = [whole]
        return whole[start - self.text_base:end - self.text_base]

    def _compact(self) -> None:
        offset = self._walker().offset
        if offset <= self.text_base + 4096:
            return  # nothing to drop yet (every position still needed is at most the walker's)
        keep = min(self.sent_to if self.capturing else offset,
                   self.name_start if self.name_start >= 0 else offset,
                   self.id_start if self.id_start >= 0 else offset,
                   self.held[0] if self.held else offset, self.encoded if self.encoded >= 0 else offset)
        if keep > self.text_base + 4096:
            whole = "".join(self.text)
            self.text = [whole[keep - self.text_base:]]
            self.text_base = keep

    def _send_encoded(self, end: int) -> None:
        """Arguments the model wrote as a JSON string whose text is a JSON object (Granite 4 writes them so): the
        wire sends that object text, as a client reads the message's string arguments (one-shot, arguments_text
        sends the string's text); other strings go as written, which the wire filter refuses."""
        assert self.call is not None
        raw, start = self._slice(self.encoded, end), self.encoded
        self.encoded = -1
        try:
            inner = load_json(raw)
            object_text = isinstance(inner, str) and isinstance(load_json(inner), dict)
        except ValueError:  # (a ParseError for a limit too)
            object_text = False
        if object_text:
            self._send_until(start)
            self.streamer._send_arguments(self.call, inner)
            self.sent_to = end

    def _send_until(self, end: int) -> None:
        if end > self.sent_to and self.call is not None:
            self.streamer._send_arguments(self.call, self._slice(self.sent_to, end))
            self.sent_to = end

    # walker callbacks
    def on_key(self, depth: int, key: str, pos: int) -> None:
        self.key_at[depth] = key
        if self.kind == "json_name_keys" and depth == self.name_depth:
            # a key names a call; its value, the call's arguments, streams as the other JSON shapes' do
            if self.call is not None:
                self.streamer._close_call(self.call)
            self.call = self.streamer._new_call(self.captures, self.plan)
            self.call.name = key
            self.streamer._send_head(self.call)
            self.captured = False
            return
        if self.capturing and depth == self.args_depth and self.call is not None:
            if self.streamer.types is not None and self.streamer.types.castable_of(self.call.name, key):
                # up to the key; its value, which typing may change, is held until complete, then retyped (a
                # string-only argument streams as it arrives: typing leaves it as written)
                self._send_until(pos)
                self.held = (-1, key)

    def on_value_start(self, depth: int, pos: int) -> None:
        if depth > json_depth():
            # Past the depth a JSON body may have nothing more is certain: the walk stops here, where the
            # salvage of a broken region stops too (a call found after it would be one the message lacks).
            self._walker().done = True
            return
        plan = self.plan
        if self.kind == "json_name_keys" and self.name_depth == 0:
            # a list of objects keyed by name, or one such object
            self.name_depth = 2 if self._slice(pos, pos + 1) == "[" else 1
            self.args_depth = self.name_depth + 1
            return
        if self.kind == "json_array" and depth == 1:
            self.call = self.streamer._new_call(self.captures, plan)
            self.captured = False
            self.key_at.pop(2, None)  # the last element's keys name nothing in this one
            return
        key = self.key_at.get(depth)
        name_depth = 1 if self.kind != "json_array" else 2
        if plan.name_key is not None and depth == name_depth and key == plan.name_key:
            self.name_start = pos
        if plan.id_key is not None and depth == name_depth and key == plan.id_key:
            self.id_start = pos
        # With alternative keys, the first one written carries the arguments (models write one of them).
        args_here = (self.kind == "json_body" and depth == 0) or (
            self.kind != "json_body" and depth == self.args_depth - 1
            and (key == plan.args_key or key in plan.args_alternatives or self.kind == "json_name_keys"))
        if args_here and self.call is not None and not self.captured:
            self.streamer._start_arguments(self.call)
            self.capturing = self.captured = True
            self.sent_to = pos
            if self._slice(pos, pos + 1) == '"':
                self.encoded = pos  # arguments written as a JSON string ("{\"city\": ...}"): held to their end
        if self.held is not None and self.held[0] == -1 and depth == self.args_depth:
            self.held = (pos, self.held[1])

    def on_value_end(self, depth: int, pos: int) -> None:
        name_depth = 1 if self.kind != "json_array" else 2
        for attr in ("name", "id") if self.name_start >= 0 or self.id_start >= 0 else ():  # (most values: neither)
            start = getattr(self, f"{attr}_start")
            if start >= 0 and depth == name_depth and self.call is not None:
                setattr(self, f"{attr}_start", -1)
                try:
                    value = load_json(self._slice(start, pos))
                except ValueError:  # (a ParseError for a limit too)
                    value = None
                if isinstance(value, str) and getattr(self.call, attr) is None:
                    setattr(self.call, attr, value)
                    self.streamer._send_head(self.call)
        if self.held is not None and depth == self.args_depth and self.held[0] >= 0 and self.call is not None:
            start, key = self.held
            raw = self._slice(start, pos)
            self.held = None
            self._send_until(start)
            self.streamer._send_arguments(self.call, self.streamer._retyped(self.call, key, raw))
            self.sent_to = pos
        if self.capturing and depth == self.args_depth - 1:
            if self.encoded >= 0:
                self._send_encoded(pos)
            self._send_until(pos)
            self.capturing = False
        if self.call is not None and (self.kind == "json_array" and depth == 1
                                      or self.kind == "json_name_keys" and depth == self.name_depth):
            self.streamer._close_call(self.call)
            self.call = None

    def close(self) -> None:
        if self.read_whole:
            assert self.call is not None
            self.streamer._close_call(self.call)
            return
        self.walk()
        walker = self._walker()
        walker.finish()
        if self.call is not None:
            if self.call.broken and self.capturing:
                self.held = None  # a value held for retyping never completed: send the model's bytes
                self._send_until(walker.offset)
            self.streamer._close_call(self.call)


class _XmlCallReader:
    """Streams each parameter of an xml-inline body as its tag completes."""

    def __init__(self, streamer: ToolCallStreamer, plan: CallShape, captures: dict[str, str]) -> None:
        self.streamer = streamer
        self.plan = plan
        self.call = streamer._new_call(captures, plan)
        self.body: list[str] = []  # the text after the last tag sent (and the context before it)
        self.scanned = 0  # where in it the next tag may start (no tag starts before it)
        self.waiting = False  # a tag matched at the end of the text and could still grow
        self.armed = plan.tag_tail is None  # the literal every tag holds appeared after `scanned`
        self.edge = ""  # the body's last characters, where that literal may have begun
        streamer._start_arguments(self.call, partial_object=True)

    def feed(self, text: str) -> None:
        self.body.append(text)
        tail = self.plan.tag_tail
        if not self.waiting and not self.armed and tail is not None:
            # No tag can complete before its required literal appears (a flood of "<arg_key>" never
            # makes the streamer retry a tag whose lazy value runs to the end of the body).
            window = self.edge + text
            self.edge = window[len(window) - len(tail) + 1:] if len(tail) > 1 else ""
            if tail not in window:
                return
            self.armed = True
        # A new tag can only end in text holding its last character: scan then (or to settle a waiting
        # one), so a long value costs its length, not its length times its chunks.
        if self.waiting or self.plan.tag_end is None or self.plan.tag_end in text:
            self._scan(final=False)

    def _scan(self, final: bool) -> None:
        body = "".join(self.body)
        scanned = self.scanned
        self.waiting = False
        pattern = self.plan.tag_pattern
        while True:
            # (streaming: a partial tag at the leftmost live start stops the scan there, and the starts
            # before it are dead for good, so the next scan starts from it)
            m = pattern.search_from(body, scanned, search_budget(len(body) - scanned), partial=not final)
            if m is None:
                scanned = len(body) if not final else scanned
                break
            if m.partial:
                scanned = m.start()
                break
            if not final and m.end() >= len(body):
                self.waiting = True  # it could still grow
                scanned = m.start()
                break
            scanned = max(m.end(), scanned + 1)
            groups = m.groupdict()
            key = groups.get("key")
            if key is None:
                continue
            try:
                value = sub_parse(groups.get("value", ""), self.plan.value_parser)
            except Exception:  # noqa: BLE001 - the region's own parse reports it at close
                value = groups.get("value", "")
            self.streamer._send_member(self.call, key, value)
        keep = 0 if self.plan.tag_context >= UNBOUNDED else max(0, scanned - self.plan.tag_context)
        self.body, self.scanned = [body[keep:]], scanned - keep
        tail = self.plan.tag_tail
        if tail is not None and not final:
            rest = self.body[0]
            self.armed = tail in rest[self.scanned:]
            self.edge = rest[len(rest) - len(tail) + 1:] if len(tail) > 1 else ""

    def close(self) -> None:
        self._scan(final=True)
        self.streamer._close_call(self.call)


class _TextArgReader:
    """Streams a call whose arguments are one key holding the region's text: ``{"key": "`` first, then the
    text as a JSON string as it arrives (what ``strip`` removes held back: leading whitespace dropped,
    trailing whitespace held until more text follows it), then what closes it."""

    def __init__(self, streamer: ToolCallStreamer, plan: CallShape, captures: dict[str, str]) -> None:
        self.streamer = streamer
        self.call = streamer._new_call(captures, plan)
        if plan.name is not None and self.call.name is None:
            self.call.name = plan.name
            streamer._send_head(self.call)
        self.strip = bool((plan.content_args or {}).get("strip", True))
        self.started = not self.strip  # the first character that strip keeps came
        self.pending: list[str] = []  # trailing whitespace held (strip)
        streamer._send_arguments(self.call, "{" + dumps(plan.args_key) + ': "')

    def feed(self, text: str) -> None:
        if self.strip:
            if not self.started:
                text = text.lstrip()
                if not text:
                    return
                self.started = True
            body = text.rstrip()
            if not body:
                self.pending.append(text)
                return
            text, self.pending = "".join(self.pending) + body, [text[len(body):]]
        if text:
            self.streamer._send_arguments(self.call, dumps(text)[1:-1])  # (JSON escapes one character at a time)

    def close(self) -> None:
        self.streamer._finish_from_value(self.call)
        self.streamer._close_call(self.call)


class _LaxMembersReader:
    """Streams the members of a JSON object written in a model's dialect (bare keys, its own string quotes):
    a member is sent once the comma or closing brace after it at the object's top level arrives, parsed on
    its own as the region's parser reads the whole. The walk follows the parser's own reading: the dialect's
    quoted strings first (anywhere, as the parser hides them before reading the JSON), then JSON strings
    and brackets. A member that does not parse stops the walk; the call's value completes it at close."""

    _SPECIAL = '"\\{}[],'

    def __init__(self, streamer: ToolCallStreamer, plan: CallShape, captures: dict[str, str]) -> None:
        self.streamer = streamer
        self.content_args = plan.content_args or {}
        delims = self.content_args.get("string_delims") or []
        self.open: str = delims[0][0] if delims else ""
        self.close_quote: str = delims[0][1] if delims else ""
        self.call = streamer._new_call(captures, plan)
        streamer._start_arguments(self.call, partial_object=True)
        self.member: list[str] = []  # the current member's text
        self.carry = ""  # the window's end where a quote may have begun
        self.state = "lead"  # lead (before "{") | members | end (the object closed, or the walk stopped)
        self.depth = 0
        self.in_json = False  # in a JSON string
        self.escape = False
        self.in_quote = False  # in one of the dialect's strings
        chars = self._SPECIAL + self.open[:1]
        self.stops = regex.compile("|".join(regex.escape(c) for c in chars))

    def feed(self, text: str) -> None:
        if self.state == "end":
            return
        window, self.carry = self.carry + text, ""
        i, n, start = 0, len(window), 0  # start: where this window's part of the member begins
        while i < n and self.state != "end":
            if self.state == "lead":
                i = skip_chars(window, i, _WS)
                if i < n:
                    if window[i] != "{":
                        self.state = "end"
                        break
                    self.state, self.depth, start = "members", 1, i + 1
                    i += 1
                continue
            if self.in_quote:
                j = window.find(self.close_quote, i)
                if j < 0:
                    keep = max(i, n - len(self.close_quote) + 1)  # (a close quote may be cut at the end)
                    self.member.append(window[start:keep])
                    self.carry, start, i = window[keep:], n, n
                    break
                self.in_quote, i = False, j + len(self.close_quote)
                continue
            if self.escape:
                self.escape, i = False, i + 1
                continue
            m = self.stops.search(window, i)
            if m is None:
                i = n
                break
            j = m.start()
            if self.open and window.startswith(self.open[:n - j], j) and n - j < len(self.open):
                self.member.append(window[start:j])  # the window ends in what may begin a quote
                self.carry, start, i = window[j:], n, n
                break
            if self.open and window.startswith(self.open, j):
                self.in_quote, i = True, j + len(self.open)
                continue
            ch, i = window[j], j + 1
            if self.in_json:
                if ch == "\\":
                    self.escape = True
                elif ch == '"':
                    self.in_json = False
            elif ch == '"':
                self.in_json = True
            elif ch in "{[":
                self.depth += 1
            elif ch in "}]":
                self.depth -= 1
            if not self.in_json and self.depth == 0 or (ch == "," and self.depth == 1 and not self.in_json):
                self.member.append(window[start:j])
                self._send("".join(self.member))
                self.member, start = [], i
                if self.depth == 0:
                    self.state = "end"
        if start < n and self.state == "members":
            self.member.append(window[start:n])

    def _send(self, member: str) -> None:
        if not member.strip(_WS) or self.state == "end":
            return
        try:
            value = parse_content("{" + member + "}", "json", self.content_args)
        except Exception:  # noqa: BLE001 - the region's own parse reports it at close
            value = None
        if not isinstance(value, dict):
            self.state = "end"
            return
        for key, member_value in value.items():
            self.streamer._send_member(self.call, key, member_value)

    def close(self) -> None:
        self.streamer._finish_from_value(self.call)
        self.streamer._close_call(self.call)


# ---------------------------------------------------------------------------- Python call syntax
_NAME_START = regex.compile(r"[A-Za-z_]")
_NAME_CHARS = regex.compile(r"[\w.]*")


_ARG_TOKEN = regex.compile(CALL_TOKEN.pattern + "|,")  # (and the commas between a call's arguments)


class _PythonicCallReader:
    """Streams Python-style calls as they complete (see the module doc), cutting the body into calls as
    grammar_parse._engine.salvage cuts a broken one: a name then ``(`` starts a call, the parenthesis that closes it
    (strings and brackets skipped) ends it. Each piece of text is walked once; a call's text is kept until
    it ends and is parsed then, on its own, as the region's value parser reads it."""

    def __init__(self, streamer: ToolCallStreamer, spec: ValueSpec, captures: dict[str, str]) -> None:
        self.streamer = streamer
        self.transform = spec.transform
        self.captures = captures
        # lead (whitespace) | brackets (the list's "[") | sep (between calls) | callee | gap (before "(") | args |
        # after (the call's text ended: is it complete?) | done (not a call: the region's close decides the rest)
        self.state = "lead"
        self.held = ""  # a quote that may open three, or an escape whose character has not come
        self.text: list[str] = []  # the current call's text, from its name on
        self.name: list[str] = []
        self.depth = 0
        self.quote = ""
        self.call: _Call | None = None
        self.arg: list[str] = []  # the current argument's text (from the "(" or comma before it)
        self.arg_ok = False  # its arguments so far parsed one by one: the next one may be sent as it completes

    def feed(self, text: str) -> None:
        window, self.held = self.held + text, ""
        i, n = 0, len(window)
        while i < n and self.state != "done":
            state = self.state
            if state == "args":
                i = self._args(window, i)
            elif state in ("lead", "brackets"):
                j = skip_chars(window, i, " \t\r\n" if state == "lead" else "[")
                if j < n:
                    self.state = "brackets" if state == "lead" else "sep"
                i = j
            elif state == "sep":
                j = skip_chars(window, i, " \t\r\n,;")
                if j < n:
                    self.state = "done" if window[j] == "]" else "callee"
                    self.text, self.name = [], []
                i = j
            elif state == "callee":
                i = self._callee(window, i)
            elif state == "gap":
                i = self._gap(window, i)
            else:  # after
                j = skip_chars(window, i, " \t\r")
                if j < n:
                    if window[j] in ",];\n":
                        self._complete()
                        self.state = "sep"
                    else:
                        self.state = "done"  # (f(a=1)(b=2), f(a=1).x: not a call list the parser reads)
                i = j

    def _callee(self, window: str, i: int) -> int:
        """Read the called name from ``i``; where the text is not a name, the list is done."""
        if not self.name and _NAME_START.match(window, i) is None:
            self.state = "done"
            return len(window)
        m = _NAME_CHARS.match(window, i + (not self.name))
        assert m is not None  # (it matches the empty string)
        self.name.append(window[i:m.end()])
        self.text.append(window[i:m.end()])
        if m.end() < len(window):
            self.state = "gap"
        return m.end()

    def _gap(self, window: str, i: int) -> int:
        """Read the spaces between the name and its ``(``, which starts the call's arguments."""
        j = skip_chars(window, i, " \t")
        self.text.append(window[i:j])
        if j < len(window):
            if window[j] != "(":
                self.state = "done"
                return len(window)
            self._start("".join(self.name))
            self.text.append("(")
            self.depth, self.quote, self.state = 1, "", "args"
            self.arg, self.arg_ok = [], not self.streamer.lenient
            j += 1
        return j

    def _args(self, window: str, i: int) -> int:
        """Walk the arguments' text from ``i`` to the parenthesis that closes the call; where the walk stops."""
        n = len(window)
        while True:
            m = _ARG_TOKEN.search(window, i)
            if m is None:
                self.text.append(window[i:])
                self.arg.append(window[i:])
                return n
            token, start, end = m.group(), m.start(), m.end()
            if (len(token) == 1 and token in "\"'" and start + 3 > n) or (token == "\\" and self.quote and end >= n):
                self.text.append(window[i:start])
                self.arg.append(window[i:start])
                self.held = window[start:]  # (at most two characters)
                return n
            if token == "\\" and self.quote:
                end += 1  # the escaped character
            self.text.append(window[i:end])
            self.arg.append(window[i:end])
            i = end
            if token == "\\":
                continue
            self.quote, self.depth = python_step(token, self.quote, self.depth)
            if not self.quote and (self.depth == 1 and token == "," or self.depth == 0 and token == ")"):
                self._argument("".join(self.arg)[:-1])  # (an argument ends at a top-level comma or the ")")
                self.arg = []
            if self.depth == 0 and not self.quote and token in ")]}":
                self.state = "after"
                return i

    def _argument(self, text: str) -> None:
        """One argument's text is complete: parsed on its own as a call of one argument, as the region's
        parser reads the call, it is sent as a member (a positional argument or any text that does not
        parse stops this for the call: its arguments go out when the call completes)."""
        call = self.call
        if call is None or not self.arg_ok or not text.strip():
            return
        try:
            items = parse_content(f"{call.name}({text})", "pythonic", {})
            value = fill(self.transform, {**self.captures, **items[0]}) if len(items) == 1 else None
        except ValueError:  # (a ParseError; Python's parser raises ValueError for some text too)
            value = None
        if value is not None and self.streamer.types is not None:
            value = self.streamer.types.apply(value)
        fn = call_function(value)
        arguments = fn.get("arguments") if fn is not None else None
        if not isinstance(arguments, dict):
            self.arg_ok = False
            return
        self.streamer._start_arguments(call, partial_object=True)
        for key, member in arguments.items():
            self.streamer._send_member(call, key, member)

    def _start(self, name: str) -> None:
        streamer = self.streamer
        self.call = _Call(index=len(streamer.calls), name=name)
        streamer.calls.append(self.call)
        streamer._send_head(self.call)

    def _complete(self) -> None:
        """The call's text ended before a separator: parsed on its own, it is sent whole (else its value at
        the region's close is)."""
        call, text = self.call, "".join(self.text)
        self.call, self.text = None, []
        try:
            items = parse_content(text, "pythonic", {})
            value = fill(self.transform, {**self.captures, **items[0]}) if len(items) == 1 else None
        except ValueError:  # (a ParseError; Python's parser raises ValueError for some text too)
            return
        if self.streamer.types is not None:
            value = self.streamer.types.apply(value)
        fn = call_function(value)
        if call is None or fn is None or not isinstance(fn.get("arguments"), dict):
            return
        call.value = value
        if call.members is None:
            self.streamer._send_arguments(call, dumps(fn["arguments"]))
        else:
            self.streamer._finish_from_value(call)
        self.streamer._close_call(call)

    def close(self, values: list[Any]) -> None:
        """The region closed with ``values``: the calls streamed take them in order (those not complete
        are sent from them), and the calls the walk did not reach are sent whole."""
        streamer = self.streamer
        calls = streamer.calls[streamer.region_start:]
        for k, call_value in enumerate(values):
            if k >= len(calls):
                streamer._send_whole(call_value)
            elif calls[k].closed:
                calls[k].value = call_value
            elif calls[k].members is not None:  # some arguments went out: the value sends what they lack
                calls[k].value = call_value
                streamer._mark_broken(calls[k], call_value)
                streamer._finish_from_value(calls[k])
                streamer._close_call(calls[k])
            else:
                streamer._send_whole(call_value, calls[k])
        for call in calls[len(values):]:
            streamer._close_call(call)


# ---------------------------------------------------------------------------- the streamer
class ToolCallStreamer:
    """Turns a ResponseParser's events into OpenAI-style tool-call deltas.

    Feed it every event list the parser returns (``initial_events``, each ``feed()``, ``finalize()``);
    it returns the deltas those events complete. ``tools`` are the same tool schemas given to the
    parser (or the parser's :class:`ToolTypes`, read from them); they type arguments as they stream.
    """

    def __init__(self, grammar: Grammar, tools: Any = None, *, field: str | None = None,
                 max_json_depth: int = JSON_MAX_DEPTH, lenient: bool = True) -> None:
        regions = call_regions(grammar, field)
        #: The message fields whose regions hold calls (the grammar's format says which; ``field`` keeps one).
        self.fields = frozenset(r.field for r in regions)
        #: The field of the call region open last (its calls' and problems' field).
        self.field = regions[0].field if regions else field or "tool_calls"
        # A lenient parser keeps a broken call, whose wire text must then be the valid JSON of its raw text:
        # arguments whose raw text is not JSON (Python calls, a JSON dialect) cannot go out member by member
        # before the call is known whole. A strict parser (``lenient=False``) raises on a broken call instead.
        self.lenient = lenient
        self.max_json_depth = max_json_depth  # (the parser's: see ResponseParser)
        # (a parser's own ToolTypes, read already, or the tools to read)
        self.types = tools if isinstance(tools, ToolTypes) else ToolTypes.from_tools(tools)
        # Each region's shape, found by the rule an extended region_open names; without it, a grammar of several
        # call regions cannot tell which one opened: their calls go out when the region closes.
        self.regions = {r.rule: r for r in regions}
        self.default = regions[0] if len(regions) == 1 else None
        self.plan = self.default.shape if self.default is not None else WHOLE  # the open region's
        self.calls: list[_Call] = []
        self.out: list[ToolCallDelta] = []
        self.reader: _JsonCallReader | _XmlCallReader | _TextArgReader | _LaxMembersReader | _PythonicCallReader | \
            None = None
        self.component_call: _Call | None = None
        self.region_start = 0  # index of the open region's first call
        self.done_upto = 0  # calls before this index were reported done
        #: Values of the field the wire cannot carry as calls (no name that is a non-empty string), as
        #: ``{"code", "field", "span", "message"}`` problems: they were not sent.
        self.problems: list[dict[str, Any]] = []

    # public
    def feed(self, events: Iterable[Event]) -> list[ToolCallDelta]:
        """The deltas these events complete, in order."""
        events = events if isinstance(events, list) else list(events)
        fields = self.fields
        for event in events:
            if event.get("field") in fields:
                if self.max_json_depth == JSON_MAX_DEPTH:
                    return self._feed(events)  # (with_json_depth's own shortcut, a call fewer on every piece)
                return with_json_depth(self.max_json_depth, self._feed, events)
        return []  # (most feeds: text of another field, which moves no call)

    def _feed(self, events: list[Event]) -> list[ToolCallDelta]:
        self.out = []
        if len(events) == 1 and type(reader := self.reader) is _JsonCallReader and not reader.pending \
                and (event := events[0])["type"] == "region_chunk" and "path" not in event:
            # (most feeds inside a JSON call: a piece of its text, walked now; it closes no call of its own)
            reader.take(event["text"])
            calls, first = self.calls, self.done_upto
            if first < len(calls) and (calls[first].closed or calls[first].dropped):  # (see _flush_done)
                self._flush_done()
            return self.out
        for event in events:
            # only the call regions' events move calls (the rest would flush nothing new)
            if event["type"] != "region_open" and event["type"] != "region_chunk" and event["type"] != "region_close" \
                    or event["field"] not in self.fields:
                continue
            if "path" in event:
                self._component(event)
            elif event["type"] == "region_open":
                self._open(event)
            elif event["type"] == "region_chunk":
                if self.reader is not None:
                    self.reader.feed(event["text"])
            else:
                self._close(event)
            self._flush_done()
        if isinstance(self.reader, _JsonCallReader) and self.reader.pending:
            self.reader.walk()  # (what this feed completes goes out now)
            self._flush_done()
        return self.out

    def sent_calls(self) -> list[_Call]:
        """The calls a client was sent (a name, then their arguments), in order: what the wire message holds."""
        return [call for call in self.calls if call.sent_head]

    # region events
    def _open(self, event: RegionOpen) -> None:
        captures = event.get("captures", {})
        region = self.regions.get(event.get("region", ""), self.default)
        self.plan, self.field = region.shape if region is not None else WHOLE, event["field"]
        mode = self.plan.kind
        self.region_start = len(self.calls)
        if mode == "pythonic" and region is not None and isinstance(region.spec, ValueSpec):
            self.reader = _PythonicCallReader(self, region.spec, captures)
        elif mode in ("json_body", "json_key", "json_array", "json_name_keys"):
            self.reader = _JsonCallReader(self, self.plan, captures)
        elif mode == "xml":
            self.reader = _XmlCallReader(self, self.plan, captures)
        elif mode == "text_arg":
            self.reader = _TextArgReader(self, self.plan, captures)
        elif mode == "lax_members" and not self.lenient:
            self.reader = _LaxMembersReader(self, self.plan, captures)
        elif mode == "components":
            self.component_call = self._new_call(captures, self.plan)
            self._start_arguments(self.component_call, partial_object=True)
        else:
            self.reader = None

    def _close(self, event: RegionClose) -> None:
        value = event["value"]
        # None: a lenient parse found no call in the region
        values = [] if value is None else value if isinstance(value, list) else [value]
        if isinstance(self.reader, _JsonCallReader):
            self.reader.settle(values)
        for call_value in values:
            if call_name(call_value) is None:
                self.problems.append({"code": "parse.tool_call", "field": self.field, "span": None, "message":
                                      f"a {self.field} value that is not a call with a name was not sent: "
                                      f"{dumps(call_value)[:200]}"})
        if isinstance(self.reader, _PythonicCallReader):
            self.reader.close(values)
            self.reader = None
        elif self.reader is not None or self.component_call is not None:
            pairs = self._match(values)
            if self.reader is not None:
                self.reader.close()
                self.reader = None
            elif self.component_call is not None:
                self._close_call(self.component_call)
                self.component_call = None
            self._reconcile(pairs)
        else:
            for call_value in values:
                self._send_whole(call_value)
        for call in self.calls[self.region_start:]:
            call.dropped = call.dropped or not call.sent_head  # closed without a name: it sent nothing

    def _send_whole(self, call_value: Any, call: _Call | None = None) -> None:
        """Send a call from its value in a closed region: its head (unless ``call``, streamed, sent it), its
        arguments as the value has them (the model's text for a broken call), and its end."""
        if (fn := call_function(call_value)) is None:
            return
        if call is None:
            call = _Call(index=len(self.calls), name=fn.get("name") if isinstance(fn.get("name"), str) else None,
                         id=call_value.get("id") if isinstance(call_value.get("id"), str) else None)
            self.calls.append(call)
        call.value = call_value
        self._mark_broken(call, call_value)
        self._send_head(call)
        arguments = fn.get("arguments", {})
        self._send_arguments(call, arguments if isinstance(arguments, str) else dumps(arguments))
        self._close_call(call)

    def _component(self, event: RegionOpen | RegionChunk | RegionClose) -> None:
        call = self.component_call
        path = event["path"]
        if call is None or event["type"] != "region_close" or len(path) < 3 or path[2] != self.plan.args_key:
            return
        value = event["value"]
        if call.members is None:
            return  # the arguments went out as text (see ResponseParser._store_component)
        if len(path) > 3:
            self._send_member(call, str(path[3]), value)
        elif isinstance(value, dict):  # the whole arguments object (DSML's JSON body)
            for key, member in value.items():
                self._send_member(call, key, member)
        elif not call.members:
            # arguments that did not parse (the model's text, as the message keeps it), or a JSON value
            # that is not an object
            call.members = None
            self._send_arguments(call, value if isinstance(value, str) else dumps(value))

    def _match(self, values: list[Any]) -> list[tuple[_Call, Any]]:
        """Pair the closing region's streamed calls with its value's calls. Where a lenient parse left
        calls out (they named no function, so they never sent anything), the named ones pair in order."""
        calls = self.calls[self.region_start:]
        if len(calls) != len(values):
            for call in calls:
                call.dropped = not call.name
            calls = [call for call in calls if not call.dropped]
        pairs = list(zip(calls, values))
        for call, call_value in pairs:
            call.value = call_value
            self._mark_broken(call, call_value)
        return pairs

    @staticmethod
    def _mark_broken(call: _Call, call_value: Any) -> None:
        if (fn := call_function(call_value)) is not None and call_value.get("errors"):
            call.broken, call.final = True, fn.get("arguments")

    def _reconcile(self, pairs: list[tuple[_Call, Any]]) -> None:
        """The region's final value names the calls; a name or id not seen while streaming is sent now."""
        for call, call_value in pairs:
            fn = call_function(call_value)
            if fn is not None and call.name is None and isinstance(fn.get("name"), str):
                call.name = fn["name"]
                self._send_head(call)

    # the pieces every reader uses
    def _new_call(self, captures: dict[str, str], plan: CallShape) -> _Call:
        call = _Call(index=len(self.calls), wants_id=plan.id_key is not None)
        self.calls.append(call)
        if plan.name_capture and plan.name_capture in captures:
            call.name = captures[plan.name_capture]
        if plan.id_capture and plan.id_capture in captures:
            call.id = captures[plan.id_capture]
        if call.name is not None:
            self._send_head(call)
        return call

    def _send_head(self, call: _Call) -> None:
        # The head carries the id too: where the model writes it after the arguments, wait for it.
        # (an empty name names nothing: such a call is never sent)
        if call.sent_head or not call.name or (call.wants_id and call.id is None and not call.closed):
            return
        if self.types is not None:
            call.name = self.types.resolve(call.name)  # the request's name for it (as the message has it)
        call.sent_head = True
        delta: ToolCallDelta = {"index": call.index}
        if call.id is not None:
            delta["id"] = call.id
        delta["name"] = call.name
        self.out.append(delta)
        if call.parts:  # arguments arrived before the name: send them now, after it
            self.out.append({"index": call.index, "arguments": call.arguments})

    def _send_arguments(self, call: _Call, text: str, member: tuple[str, str, str] | None = None) -> None:
        """Send ``text`` of the arguments through the call's wire filter (``member``: the text is an object member
        the streamer wrote, its prefix, key and value, which the filter may pass unread: WireArguments.member)."""
        if not text or call.closed:
            return
        call.given.append(text)
        self._send_wire(call, call.wire.feed(text) if member is None else call.wire.member(*member))

    def _send_wire(self, call: _Call, text: str) -> None:
        """Send text the wire filter let through (held until the name is out)."""
        if not text:
            return
        call.parts.append(text)
        if call.sent_head:
            self.out.append({"index": call.index, "arguments": text})

    def _start_arguments(self, call: _Call, partial_object: bool = False) -> None:
        if partial_object and call.members is None:
            call.members = 0

    def _send_member(self, call: _Call, key: str, value: Any) -> None:
        value = self._retype_value(call, key, value)
        prefix = "{" if not call.members else ", "
        call.members = (call.members or 0) + 1
        key_text, value_text = dumps(key), dumps(value)
        self._send_arguments(call, f"{prefix}{key_text}: {value_text}", (prefix, key_text, value_text))

    def _finish_from_value(self, call: _Call) -> None:
        """At the region's close: send what the call's arguments text, as its value has it, still lacks after
        what was streamed, when what was streamed begins it (else the call closes as its reader left it:
        a repeated key, say, whose members were sent as they came)."""
        fn = call_function(call.value) if call.value is not None else None
        if fn is None or call.broken or not isinstance(fn.get("arguments", {}), dict):
            return
        final, given = dumps(fn.get("arguments", {})), "".join(call.given)
        if final.startswith(given):
            call.members = None  # (the text is whole: no closing brace to add)
            self._send_arguments(call, final[len(given):])

    def _close_call(self, call: _Call) -> None:
        if call.closed:
            return
        if call.members is not None:
            self._send_arguments(call, "{}" if call.members == 0 else "}")
        elif call.broken:
            # the message keeps the raw text: give the wire what of it is missing (nothing where typing
            # rewrote a value: the client keeps what it was sent, and so does the Chat Completions message)
            final, given = call.final, "".join(call.given)
            if isinstance(final, str) and final.startswith(given):
                self._send_arguments(call, final[len(given):])
            elif not given and final is not None and not isinstance(final, str):
                self._send_arguments(call, dumps(final))
        self._send_wire(call, call.wire.finish())  # (``{}`` if nothing was sent)
        call.closed = True
        self._send_head(call)

    def _flush_done(self) -> None:
        """A closed call whose name is out is done: say so once (consumers finish its item)."""
        for call in self.calls[self.done_upto:]:
            if not call.dropped:
                if not (call.closed and call.sent_head):
                    break
                value = json.loads(call.arguments) if call.typed is _UNREAD else call.typed
                self.out.append({"index": call.index, "done": True, "value": value,
                                 "problems": list(call.wire.problems)})
            self.done_upto += 1

    # typing
    def _retype_value(self, call: _Call, key: str, value: Any) -> Any:
        return value if self.types is None else self.types.retype(call.name, key, value)

    def _retyped(self, call: _Call, key: str, raw: str) -> str:
        """A held value's text: the model's bytes, or the typed value's JSON where typing changed it."""
        try:
            value = load_json(raw)
        except ValueError:  # not JSON, or past a limit (ParseError): the wire filter judges the text
            return raw
        return self._typed_text(call, key, raw, value)

    def _typed_text(self, call: _Call, key: str, raw: str, value: Any) -> str:
        """The text of a value written ``raw`` and read as ``value``: as written, unless typing changes it."""
        typed = self._retype_value(call, key, value)
        return raw if typed == value and type(typed) is type(value) else dumps(typed)


__all__ = ["ToolCallDelta", "ToolCallStreamer", "call_name", "call_regions"]
