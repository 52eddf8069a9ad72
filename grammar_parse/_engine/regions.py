"""Regions: what the parser builds as delimiters are shifted and rules reduced.

The session (:mod:`grammar_parse._engine.session`) finds delimiters and drives Lark's LALR parser; the
:class:`RegionBuilder` supplies the parser's callbacks (lark injects a tree builder the same way) and owns
what they build: the open regions (frames), component regions and the scope they fill, joins and repeats,
the typing of values at close, the message, and the region events. Lenient-mode problems go back to the
session through the ``report`` callback, so the session keeps one account of errors and spans.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from ..errors import ERROR_CODES, ParseError
from .content.xml import reads_elements, text_outside
from .delimiters import LiteralMatcher, RegexMatcher, captured
from .events import Event, Message, RegionChunk, RegionOpen
from .grammar import Grammar, Region, Terminal
from .shapes import CONTENT
from .reading import PLACEHOLDER, JsonEnd, copy_json
from .salvage import check_calls, component_errors, salvage_calls
from .tables import Callbacks, RuleHandle
from .tools import ToolTypes
from .values import fill, specialised_value

#: Lenient mode: (code, message, field, output span) of a problem, for the session to record.
Report = Callable[[str, str, "str | None", "list[int] | None"], None]


def trailing_space(chunks: list[str]) -> str:
    """The whitespace a text region's chunks end with (read from the end: chunks are not joined again)."""
    tail: list[str] = []
    for chunk in reversed(chunks):
        body = chunk.rstrip()
        tail.append(chunk[len(body):])
        if body:
            break
    return "".join(reversed(tail))


_C = TypeVar("_C")


class Frame:
    """An open region: its body chunks (joined once, at close), the open delimiter's captures, the
    values of its component regions, and where its events point (``path``, None for a message field)."""

    __slots__ = ("region", "chunks", "captures", "start", "open_text", "children", "path", "field", "size", "walk",
                 "problems", "repair", "passthrough", "settled")

    def __init__(self, region: Region, captures: dict[str, str], start: int, open_text: str,
                 field: str, path: list[str | int] | None) -> None:
        self.region = region
        self.chunks: list[str] = []
        self.captures = captures
        self.start = start  # stream offset (the replayed prompt included) of its open delimiter
        self.open_text = open_text
        self.children: dict[str, Any] = region.new_scope() if region.scope else {}
        self.field = field
        self.path = path
        self.size = 0
        self.walk: JsonEnd | None = None  # where its JSON value ends, for a region closed by that end
        self.problems: list[dict[str, str]] = []  # its components that did not parse (lenient mode)
        self.repair: str | None = None  # lenient mode: the repair.* code of the glitch its opener read
        # strict mode: a repair opener's region (and all inside it) is text of the region around it
        self.passthrough = False
        self.settled = 0  # its chunks before its last component closed (what a cut-off call is sure of)

    @property
    def entry(self) -> str:
        """The entry a keyed component's value goes under (its path's last part), "" for any other region."""
        return str(self.path[-1]) if self.region.entry_key is not None and self.path else ""

    def copy(self) -> Frame:
        """A frame with the same state that shares nothing mutable with this one."""
        frame = Frame(self.region, dict(self.captures), self.start, self.open_text, self.field,
                      None if self.path is None else list(self.path))
        frame.chunks = list(self.chunks)
        frame.children = copy_json(self.children)
        frame.size = self.size
        frame.walk = self.walk.copy() if self.walk is not None else None
        frame.problems = [dict(p) for p in self.problems]
        frame.repair, frame.passthrough, frame.settled = self.repair, self.passthrough, self.settled
        return frame


class RegionBuilder:
    """Builds regions, values and events from the parser's callbacks.

    ``position`` gives the stream offset (the replayed prompt included) the scan has reached; the session
    sets :attr:`shifting` to the delimiter it is shifting (its terminal, stream offset, text and match),
    :attr:`prefix_len` to the length of the replayed prompt, and points :attr:`events` at the list the
    current call returns.
    """

    def __init__(self, grammar: Grammar, *, tools: ToolTypes | None, strict: bool, extended: bool,
                 position: Callable[[], int], report: Report, unexpected: Callable[[str], ParseError]) -> None:
        self._grammar = grammar
        self._tools = tools
        self._strict = strict
        self.extended = extended  # region_open events also carry the open delimiter's captures
        self._position = position
        self._report = report
        self._unexpected = unexpected
        self.output: Message = copy_json(grammar.defaults)
        self.frames: list[Frame] = []
        self.events: list[Event] = []
        self.shifting: tuple[Terminal, int, str, Any] | None = None
        self.prefix_len = 0
        #: A region opened since the session last noted where open regions start (see its _mark_open_regions)
        self.opened = False
        self._loose: list[str] = []  # text of broken tool calls that names no function, for content
        self._content_chunks: list[str] = []  # the last content region's text (where loose text joins it)
        # The message's content field, by its role in the format (a grammar may call it otherwise: ``answer``).
        self._content = next(iter(grammar.format.content_fields), CONTENT)
        self._values: dict[str, Callable[..., Any]] = grammar.tables.shared.setdefault(_REGION_VALUES, {})
        self._storers: dict[str, Storer] = grammar.tables.shared.setdefault(_REGION_STORERS, {})

    def state(self) -> tuple[Any, ...]:
        """What the builder holds between events, copied: for a replayed prompt's snapshot (see
        ResponseParser._consume_prefix) or a draft to go back to (grammar_parse._engine.drafts)."""
        return (copy_json(self.output), [f.copy() for f in self.frames], self.prefix_len, list(self._content_chunks),
                list(self._loose))

    def shareable(self) -> bool:
        """Whether the state may start other parsers: not with broken calls' loose text or a value typed by
        the tools (the next parser may have other tools)."""
        return not self._loose and all(isinstance(v, str) for k, v in self.output.items()
                                       if k not in self._grammar.defaults)

    def restore(self, state: tuple[Any, ...]) -> None:
        """Take the state a :meth:`state` holds (copied: a replay's is shared by parsers)."""
        output, frames, self.prefix_len, chunks, loose = state
        self.output = copy_json(output)
        self.frames[:] = [f.copy() for f in frames]
        self._content_chunks, self._loose = list(chunks), list(loose)
        self.shifting = None

    def callbacks(self) -> Callbacks:
        """The parser's callbacks (each takes a RegionBuilder): an opener per region-opening terminal and a
        closer per region rule. Built once per grammar."""
        grammar = self._grammar
        shared = grammar.tables.shared
        callbacks: Callbacks | None = shared.get("regions")
        if callbacks is None:
            callbacks = shared["regions"] = region_callbacks(grammar, _closer, _opener)
        return callbacks

    def chunk(self, frame: Frame, text: str) -> RegionChunk:
        """Add text to an open region; the region_chunk event that streams it."""
        if frame.passthrough:
            return self._text_around(text)
        frame.chunks.append(text)
        event: RegionChunk = {"type": "region_chunk", "field": frame.field, "text": text, "dirty": frame.region.dirty}
        if frame.path is not None:
            event["path"] = frame.path
        return event

    def _loose_text(self, text: str) -> None:
        """Text of a broken tool-call region that names no function: it joins the text region the call
        was written in (content, or reasoning), or else the content, and streams as that field's text."""
        self.events.append(self._text_around(text))

    def _text_around(self, text: str) -> RegionChunk:
        """``text`` added to the text region around the open regions passed through (the innermost other
        one, if it holds text: content, or reasoning), or else to the content; the chunk that streams it."""
        frame = next((f for f in reversed(self.frames) if not f.passthrough), None)
        if frame is not None and frame.path is None and getattr(frame.region.spec, "content", None) == "text":
            frame.chunks.append(text)
            frame.size += len(text)
            field = frame.field
        else:
            self._loose.append(text)  # the next content region starts with it, or finalize adds it
            field = self._content
        return {"type": "region_chunk", "field": field, "text": text, "dirty": False}

    def settle_loose(self) -> None:
        """At the end (a no-op without loose text): loose text no content region took joins the content (as a stream concatenates it)."""
        if not self._loose:
            return
        text, self._loose = "".join(self._loose), []
        field = self._content
        existing = self.output.get(field)
        if not isinstance(existing, str) or not existing:
            self.output[field] = text.strip()
            return
        region = next((r for r in self._grammar.regions.values() if r.field == field and r.parent is None), None)
        join = region.spec.join if region is not None else None
        self.output[field] = existing + join + text.strip() if join is not None else \
            (existing + trailing_space(self._content_chunks) + text).rstrip()

    def close_open(self) -> None:
        """Close every open region, innermost first (end of output, or giving up in lenient mode)."""
        while self.frames:
            self.close(self.frames[-1].region)

    def _push(self, region: Region, captures: dict[str, str], start: int, open_text: str) -> None:
        """Open a region: a message field, or a component of the nearest open region it belongs to."""
        self.opened = True
        opener = self.shifting[0] if self.shifting is not None else None
        repair = opener.repair if opener is not None and opener.region is region else None
        if (repair is not None and self._strict) or (self.frames and self.frames[-1].passthrough):
            # Strict mode reads a glitch as the text it is (what the grammar gave before the repair): the
            # region's delimiters and text go to the text region around it as they come.
            frame = Frame(region, captures, start, open_text, region.field, None)
            frame.passthrough = True
            self.frames.append(frame)
            if open_text:
                self.events.append(self._text_around(open_text))
            return
        if region.parent is None:
            frame = Frame(region, captures, start, open_text, region.field, None)
            if self._loose and region.field == self._content:
                frame.chunks, self._loose = self._loose, []  # a broken call's text, already streamed
                frame.size = sum(map(len, frame.chunks))
            frame.repair = repair
            event: RegionOpen = {"type": "region_open", "field": region.field}
            if self.extended:
                event["captures"] = captures
                event["region"] = region.rule  # (a field of several regions: which one, for the call streamer)
            self.events.append(event)
        else:
            parent = next((f for f in reversed(self.frames) if f.region.rule == region.parent), None)
            if parent is None:
                raise self._unexpected(f"{region.rule} outside the {region.parent} it belongs to")
            path = component_path(self.output, parent.region, parent.path, region, captures)
            frame = Frame(region, captures, start, open_text, parent.field, path)
            event = {"type": "region_open", "field": frame.field, "path": path}
            if self.extended:
                event["captures"] = captures
            self.events.append(event)
        self.frames.append(frame)

    def close(self, region: Region) -> None:
        """Close ``region``: its value is parsed and typed, stored in the message or its parent's scope."""
        if not self.frames or self.frames[-1].region is not region:
            # A field without an opener opens at its first text; a rule that held none never opened it.
            if region.implicit:
                return
            # A rule reduced as this region without its open delimiter (an alternative opened by another
            # terminal): it is an empty region.
            self._push(region, {}, self._position(), "")
        frame = self.frames.pop()
        spec = region.spec
        shifting = self.shifting
        # closed by its own close delimiter (else by another delimiter, or at the end of the output)
        closing = shifting is not None and shifting[0].role == "close" and shifting[0].region is region
        close_text = shifting[2] if shifting is not None and closing else ""
        if frame.passthrough:
            if close_text:
                self.events.append(self._text_around(close_text))
            return
        if frame.repair is not None:
            start = frame.start - self.prefix_len
            # (a region its next delimiter ends, without a close of its own, ends where that delimiter starts)
            end = shifting[1] if shifting is not None and not closing else self._position()
            self._report(frame.repair, f"repaired: {ERROR_CODES[frame.repair]} ({frame.open_text[:80]!r})",
                         frame.field, [start, end - self.prefix_len])
        if region.entry_key is not None and shifting is not None and not closing \
                and not any(chunk.strip() for chunk in frame.chunks):
            # A key/value argument ended by another delimiter (the next key, the call's close) before any
            # value; at the end of the output it is cut off instead, with nothing to report.
            self._missing_value(frame)
            return
        if region.made_of_components:
            # (a call the output's end cuts off is sure of its text up to its last argument only)
            stray = stray_text(self._grammar, region, frame.chunks if shifting is not None else
                               frame.chunks[:frame.settled])
            if stray:
                self._stray_text(frame, stray)
        elif stray := text_outside(spec, "".join(frame.chunks), cut_off=shifting is None):
            self._stray_text(frame, stray)  # (the same for a call read from tags: xml-inline's report_stray)
        try:
            value_of = self._values.get(region.rule) or region_value(self._grammar, region)
            value = value_of("".join(frame.chunks), frame.captures, frame.open_text, close_text, frame.children)
            if self._tools is not None and region.parent is None:
                value = self._tools.apply(value, elements=reads_elements(spec))
            if spec.join is not None and not isinstance(value, str):
                raise ParseError(
                    f"Field '{region.field}': 'join' requires each match to parse to a string, got "
                    f"{type(value).__name__}.",
                    code="parse.join",
                )
            if region.is_call:
                check_calls(value)
        except ParseError as e:
            reason = e.detail.split("\n", 1)[0]  # what a broken call's errors say (without the region's place)
            e.locate(frame.field, frame.start - self.prefix_len, self.output)  # (a component's: its call's)
            if self._strict:
                raise e from None
            self._report(e.code, str(e), frame.field, [frame.start - self.prefix_len, self._position() - self.prefix_len])
            if region.is_call:
                self._close_broken_calls(frame, close_text, {"message": reason, "code": e.code})
                return
            value = "".join(frame.chunks).strip()  # the raw text is kept
            if region.parent is not None:  # the call it belongs to says so
                self._parent(region).problems.append({"key": region.key, "entry": frame.entry, "message": reason,
                                                      "code": e.code})
        if frame.problems and isinstance(value, dict) and region.is_call:
            value = {**value, "errors": component_errors(region, frame.problems)}
        if region.parent is not None:
            self._store_component(frame, value)
            return
        self._store(frame, value)

    def _missing_value(self, frame: Frame) -> None:
        """A key the model wrote without a value: the argument is ``""``, its call carries an error and the
        message a ``parse_errors`` entry, the same in both modes: the call is certain apart from one value,
        and a strict error would lose the calls after it (see errors.REPORTED_IN_STRICT)."""
        self._component_problem(frame, "parse.missing_value", f"argument {frame.entry!r} has no value: the next "
                                "argument or the end of the call came first")
        self._store_component(frame, "")

    def _component_problem(self, frame: Frame, code: str, message: str) -> None:
        """A problem of one argument the call keeps (errors.REPORTED_IN_STRICT): an ``errors`` entry on its
        call and a ``parse_errors`` entry over the argument's text, in both modes."""
        region = frame.region
        self._parent(region).problems.append({"key": region.key, "entry": frame.entry, "message": message,
                                              "code": code})
        start = frame.start - self.prefix_len
        self._report(code, message, frame.field, [start, start + len(frame.open_text) + sum(map(len, frame.chunks))])

    def _stray_text(self, frame: Frame, stray: str) -> None:
        """A call made of its arguments holds text outside every argument (:func:`stray_text`): its value does
        not read it, so the call carries a ``parse.stray_text`` error and the message a ``parse_errors`` entry
        over the call, in both modes (the arguments are certain; nothing is lost unsaid)."""
        message = f"text inside the call outside every argument: {stray[:STRAY_QUOTE]!r}"
        frame.problems.append({"key": "", "entry": "", "message": message, "code": "parse.stray_text"})
        self._report("parse.stray_text", message, frame.field,
                     [frame.start - self.prefix_len, self._position() - self.prefix_len])

    def _close_broken_calls(self, frame: Frame, close_text: str, problem: dict[str, str]) -> None:
        """Lenient mode, a tool-call region that did not parse: the calls it still holds are its value;
        its text that names no function (all of it, delimiters included, if it names none) is text."""
        body = "".join(frame.chunks)
        region = frame.region
        found = salvage_calls(region, body, frame.captures, frame.children, problem)
        calls, rest = found.calls, found.rest
        each = getattr(region.spec, "transform_each", False)
        if calls and not each:
            # One call per region, yet the region may hold more: a second call object in the block, or the
            # next call written without closing this one (<tool_call>{a}<tool_call>{b}</tool_call>). Each is
            # a call of its own, on the wire too (the streamer sends whole a call a region close brings).
            calls, rest = self._more_calls(region, calls, rest, problem)
        if calls:
            for value in [calls] if each else calls:
                self._store(frame, self._tools.apply(value, elements=reads_elements(region.spec))
                            if self._tools is not None else value)
        else:
            # the stream learns that the region gave no call (its text follows as content)
            self.events.append({"type": "region_close", "field": frame.field, "value": None})
        loose = rest if calls else frame.open_text + body + close_text
        if loose.strip():
            self._loose_text(loose)

    def _more_calls(self, region: Region, calls: list[Any], rest: str,
                     problem: dict[str, str]) -> tuple[list[Any], str]:
        """The calls a broken region's text after its first call holds (``rest``), each salvaged from where
        the region's opener is written again (its captures naming the call) or from the text itself; at most
        MAX_SALVAGED more (each search reads the rest again), and the text left."""
        calls = list(calls)
        terminals = self._grammar.terminals
        openers = [terminals[name].matcher for name in self._grammar.format.calls[region.rule].openers]
        for _ in range(MAX_SALVAGED):
            if not rest:
                break
            text, captures = rest, {}
            for matcher in openers:  # (the rest is stripped: an opener written again starts it)
                if isinstance(matcher, LiteralMatcher):
                    literal = next((lit for lit in matcher.literals if rest.startswith(lit)), None)
                    if literal:
                        text = rest[len(literal):]
                        break
                elif isinstance(matcher, RegexMatcher) and (match := matcher.match(rest, 0)) is not None \
                        and match.end() > 0:
                    text = rest[match.end():]
                    captures = captured(match)
                    break
            more = salvage_calls(region, text, captures, {}, problem)
            if not more.calls or len(more.rest) >= len(rest):
                break
            calls += more.calls
            rest = more.rest
        return calls, rest

    def _store(self, frame: Frame, value: Any) -> None:
        """A message field's value goes into the message (joined, appended or set) and the stream."""
        region = frame.region
        key = region.field
        store(self.output, region, value)
        if key == self._content:
            self._content_chunks = frame.chunks
        self.events.append({"type": "region_close", "field": key, "value": value})

    def _parent(self, region: Region) -> Frame:
        """The open frame a component region belongs to (most often the open one)."""
        frames = self.frames
        if frames and frames[-1].region.rule == region.parent:
            return frames[-1]
        return next(f for f in reversed(frames) if f.region.rule == region.parent)

    def _store_component(self, frame: Frame, value: Any) -> None:
        """A component's value goes into its parent's scope: by key, appended, or as a keyed entry."""
        region = frame.region
        storer = self._storers.get(region.rule) or region_storer(self._grammar, region)
        parent = self._parent(region)
        parent.settled = len(parent.chunks)
        if storer(parent.children, frame.captures, frame.children, value):
            self._component_problem(frame, "parse.duplicate_argument",
                                    f"argument {frame.entry!r} was written twice: the last value is kept")
        path = frame.path
        assert path is not None  # a component's frame always has one (see _push)
        self.events.append({"type": "region_close", "field": frame.field, "path": path, "value": value})


def store(output: Message, region: Region, value: Any) -> None:
    """A message field's value goes into the message: joined, appended or set (the session's region builder
    and the specialised one-shot parser both store so)."""
    spec, key = region.spec, region.field
    if spec.join is not None:
        previous = output.get(key)
        if type(previous) is str and type(value) is str:
            if not (previous and value):
                # (an empty region adds no separator: two empty thought blocks are no "\n\n" of reasoning, as
                # the adapters' deltas never sent one)
                output[key] = previous or value
                return
            # The message lets go of the field first, so that CPython grows the string in place (as it does a
            # local's ``s += t``): with the reference kept, each join copied the whole field, quadratic over
            # a flood of small regions (inkling's ``<|message_model|>`` repeated: 0.13 s per MB at 250 KB,
            # 0.73 at 2 MB).
            output[key] = None
            previous += spec.join
            previous += value
            output[key] = previous
        else:
            output[key] = value if previous is None else previous + spec.join + value
    elif spec.repeats:
        # transformers appends each region's value, lists too; a grammar can ask that a region's list
        # extend the field instead (two blocks of calls are one list of calls).
        values = value if region.extend and isinstance(value, list) else [value]
        existing = output.get(key)
        if isinstance(existing, list):
            existing.extend(values)
        else:
            output[key] = list(values)
    else:
        output[key] = value


def store_component(scope: dict[str, Any], region: Region, names: Mapping[str, Any], value: Any) -> bool:
    """A component's value goes into its parent's ``scope``: by key, appended, or as a keyed entry (its key
    filled from ``names``, the component's captures and children). True where it replaced an entry of the
    same key (an argument written twice: the last one is kept, as transformers and the engines keep it)."""
    have = scope.get(region.key)
    if region.entry_key is not None:
        if isinstance(have, dict) or have is None:
            entries = scope.setdefault(region.key, {})
            entry = str(fill(region.entry_key, names))
            replaced = entry in entries
            entries[entry] = value
            return replaced
    elif region.spec.repeats:
        scope.setdefault(region.key, []).append(value)
    elif isinstance(value, dict) and isinstance(have, dict):
        scope[region.key] = {**have, **value}  # a whole object beside keyed entries
    elif not have:
        scope[region.key] = value
    # Otherwise the call's value is already something else (arguments that did not parse, where an
    # object follows; an object, where text that does not parse follows): it stays, as a stream that
    # sent it must keep it; the component's text is in the call's span, and its error on the call.
    return False


def stray_text(grammar: Grammar, region: Region, chunks: list[str]) -> str:
    """The text of a call made of its arguments (``chunks``: its own, between them) that is neither the
    whitespace between arguments nor an argument's close written again (Qwen3.6 writes ``</parameter>``
    twice), stripped: "" where there is none."""
    body = "".join(chunks)
    if not body or body.isspace():
        return ""
    closes = [m for name in grammar.format.calls[region.rule].argument_closers
              if (m := grammar.terminals[name].matcher) is not None]  # (a layout's closers all have one)
    # each close's next match, searched again only once passed (linear in the body, however many closes)
    rest, pos, ahead = [], 0, [m.search(body, 0) for m in closes]
    while True:
        for i, hit in enumerate(ahead):
            while hit is not None and (hit[0] < pos or hit[1] == hit[0]):
                hit = closes[i].search(body, max(pos, hit[0] + 1))
            ahead[i] = hit
        hits = [hit for hit in ahead if hit is not None]
        if not hits:
            rest.append(body[pos:])
            break
        start, end, _ = min(hits)
        rest.append(body[pos:start])
        pos = end
    return body.strip() if "".join(rest).strip() else ""


def call_section_states(grammar: Grammar) -> Mapping[int, str]:
    """The parser states inside a call section (``BEGIN (tool_calls | UNCLAIMED)* END``: a call region with a
    wrapper rule, grammar_parse._engine.format.CallLayout) where a call may open, to the call region's field.
    Text read there as ``UNCLAIMED`` is in the section but in no call: a call written wrong (kimi_k2's call
    without its arguments marker), which the session reports (``parse.stray_text``) where its whitespace is
    dropped silently. Made once per grammar and process."""
    found: dict[int, str] | None = grammar.tables.shared.get(_SECTION_STATES)
    if found is None:
        fields = {name: grammar.regions[rule].field for rule, layout in grammar.format.calls.items()
                  if layout.wrapper is not None for name in layout.openers}
        found = {}
        for state, info in grammar.tables.states.items():
            field = next((fields[t.name] for t in info.watch if t.name in fields), None)
            if field is not None:
                found[state] = field
        found = grammar.tables.shared.setdefault(_SECTION_STATES, found)
    return found


_SECTION_STATES = "call_section_states"
#: A broken region that holds one call yields at most this many more (see RegionBuilder._more_calls).
MAX_SALVAGED = 64
#: How much of a call section's stray text its error quotes.
STRAY_QUOTE = 80


class SectionRun:
    """The run of text under way that goes into no field, where it stands in a call section (``field``: the call
    region's, set where the run starts; None elsewhere, see call_section_states): what of it is not whitespace,
    from its first such character to its last, and the first STRAY_QUOTE characters from there. Ended at the next
    delimiter, run or the end of the output (:meth:`close`), it gives the same problem whatever the chunking. The
    session's ledger and the specialised one-shot parser's builder each keep one."""

    __slots__ = ("field", "start", "end", "quote")

    def __init__(self) -> None:
        self.field: str | None = None
        self.start: int | None = None  # (None: nothing but whitespace so far)
        self.end = 0
        self.quote = ""

    def add(self, text: str, start: int) -> None:
        """Text of the run, at output offset ``start`` (none of it kept outside a call section)."""
        if self.field is None:
            return
        if self.start is None:
            body = text.lstrip()
            if not body:
                return
            start += len(text) - len(body)
            self.start = self.end = start
            text = body
        if len(self.quote) < STRAY_QUOTE:
            self.quote += text[:STRAY_QUOTE - len(self.quote)]
        tail = len(text.rstrip())
        if tail:
            self.end = start + tail

    def close(self) -> dict[str, Any] | None:
        """The run ends: its ``parse.stray_text`` problem (a parse_errors entry), None where it held only
        whitespace, was in no call section, or began in the replayed prompt (negative offsets: not the
        output's). Ready for the next run."""
        field, start, end, quote = self.field, self.start, self.end, self.quote
        self.field, self.start, self.end, self.quote = None, None, 0, ""
        if field is None or start is None or start < 0:
            return None
        return {"code": "parse.stray_text", "field": field, "span": [start, end],
                "message": f"text inside the {field} section outside every call was dropped: "
                           f"{quote[:end - start]!r}"}

    def copy(self) -> SectionRun:
        run = SectionRun()
        run.field, run.start, run.end, run.quote = self.field, self.start, self.end, self.quote
        return run


#: Where a grammar keeps its regions' value functions (see region_value), per process.
_REGION_VALUES = "region_values"


def region_value(grammar: Grammar, region: Region) -> Callable[..., Any]:
    """``region.spec.value`` with what the spec decides read once (values.specialised_value), made once per
    region and process: the session's region builder and the specialised one-shot parser close the same regions."""
    made: dict[str, Callable[..., Any]] = grammar.tables.shared.setdefault(_REGION_VALUES, {})
    found = made.get(region.rule)
    if found is None:
        found = made[region.rule] = specialised_value(region.spec)
    return found


#: How a component's value is stored: (its parent's scope, its captures, its children, the value) -> whether it
#: replaced an entry of the same key (store_component).
Storer = Callable[[dict[str, Any], Mapping[str, Any], Mapping[str, Any], Any], bool]
#: Where a grammar keeps its component regions' storers (see region_storer), per process.
_REGION_STORERS = "region_storers"


def region_storer(grammar: Grammar, region: Region) -> Storer:
    """:func:`component_storer` of ``region``, made once per region and process (the session's region builder
    and the specialised one-shot parser store the same components)."""
    made: dict[str, Storer] = grammar.tables.shared.setdefault(_REGION_STORERS, {})
    found = made.get(region.rule)
    if found is None:
        found = made[region.rule] = component_storer(region)
    return found


def component_storer(region: Region) -> Storer:
    """``store_component`` for one component region, as (scope, captures, children, value): a keyed entry
    whose key is one capture or child (``{key}``) is stored without filling a template; the rest as
    store_component stores it."""
    whole = PLACEHOLDER.fullmatch(region.entry_key) if isinstance(region.entry_key, str) else None
    name = whole.group(1) if whole is not None and whole.group(2) != "?" else None
    if name is None or "|" in name or "." in name:
        return lambda scope, captures, children, value: store_component(scope, region, {**captures, **children}, value)
    key = region.key

    def keyed(scope: dict[str, Any], captures: Mapping[str, Any], children: Mapping[str, Any], value: Any) -> bool:
        have = scope.get(key)
        if not (isinstance(have, dict) or have is None):
            return False  # (as store_component: the call's value is already something else)
        if name in children:
            entry = children[name]
        elif name in captures:
            entry = captures[name]
        else:  # (nothing names the entry: store_component's error)
            return store_component(scope, region, {**captures, **children}, value)
        entries = scope.setdefault(key, {}) if have is None else have
        entry = str(entry)
        replaced = entry in entries
        entries[entry] = value
        return replaced
    return keyed


def component_path(output: Message, parent: Region, parent_path: list[str | int] | None, region: Region,
                   captures: Mapping[str, Any]) -> list[str | int]:
    """Where the events of component ``region`` point: its parent's path (a message field's is [field], or
    [field, index] for a repeated field), its key, and its entry's key where the captures give it."""
    if parent_path is not None:
        path: list[str | int] = [*parent_path, region.key]
    elif not parent.spec.repeats:
        path = [parent.field, region.key]
    else:
        existing = output.get(parent.field)
        path = [parent.field, len(existing) if isinstance(existing, list) else 0, region.key]
    if region.entry_key is not None:
        try:
            path.append(str(fill(region.entry_key, captures)))
        except (KeyError, ValueError):
            pass  # the entry's key comes from a component not parsed yet
    return path


def region_callbacks(grammar: Grammar, closer: Callable[[Region], _C], opener: Callable[[Terminal], _C]
                     ) -> dict[RuleHandle | str, _C]:
    """The parser's callbacks that act on regions: ``closer(region)`` for each rule whose reduction closes a
    region, ``opener(terminal)`` for each terminal that opens one (its delimiter, or its first text)."""
    built: dict[RuleHandle | str, _C] = {rule: closer(region) for rule, region in grammar.tables.rule_regions.items()}
    for term in grammar.terminals.values():
        if term.region is not None and term.role in ("open", "text"):
            built[term.name] = opener(term)
    return built


def idle_close(term: Terminal, frames: Sequence[Any]) -> bool:
    """Whether a zero-width ``term`` does nothing where it matched: a close of a region not open at all (which
    ends the pass, and leaves the rest of the output unparsed, as transformers does). A close of a region open
    below the top (an argument whose own close is optional) is not idle: the regions above it close first. The
    session's walk, the specialised parser's and its compiled walk (generated._shift) share the rule."""
    return term.role == "close" and all(f.region is not term.region for f in frames)


def missing_fields(grammar: Grammar, output: Message) -> list[str]:
    """The required fields ``output`` does not give."""
    return [r.field for r in grammar.regions.values() if not r.spec.optional and r.field not in output]


def without_empty(output: Message, defaults: Mapping[str, Any], errors: list[dict[str, Any]]) -> Message:
    """``output`` without its empty fields (the template's defaults kept), with ``errors`` under
    ``parse_errors`` when there are any."""
    final = Message((k, v) for k, v in output.items() if k in defaults or not _is_empty(v))
    if errors:
        final["parse_errors"] = errors
    return final


def _is_empty(value: Any) -> bool:
    return value is None or (isinstance(value, (list, dict, str)) and not value)


def _opener(term: Terminal) -> Callable[[RegionBuilder], None]:
    """The callback of a terminal that opens ``term.region`` (its delimiter, or its first text)."""
    region = term.region
    assert region is not None
    if term.role == "open":
        def on_open(builder: RegionBuilder) -> None:
            shifting = builder.shifting
            if shifting is None:
                builder._push(region, {}, builder._position(), "")
                return
            _, start, opened, match = shifting
            builder._push(region, captured(match), start, opened)
        return on_open

    def on_text(builder: RegionBuilder) -> None:
        frames = builder.frames
        if not frames or frames[-1].region is not region:
            builder._push(region, {}, builder._position(), "")
    return on_text


def _closer(region: Region) -> Callable[[RegionBuilder], None]:
    """The callback of a rule that closes ``region`` when it is reduced."""
    def on_close(builder: RegionBuilder) -> None:
        builder.close(region)
    return on_close


__all__ = ["MAX_SALVAGED", "STRAY_QUOTE", "Frame", "RegionBuilder", "Report", "SectionRun", "Storer",
           "call_section_states", "component_path", "component_storer", "idle_close", "missing_fields", "region_callbacks",
           "region_storer", "region_value", "store", "store_component", "trailing_space", "without_empty"]
