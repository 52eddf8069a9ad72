"""The streaming session: scanner and Lark's LALR parser turning text into region events and a message.

The scanner finds delimiters (only those live in the current parser state) and routes the text between
them; Lark's parser state decides the structure. Lark only ever sees structure tokens: delimiters and
the first text token of a run, so its cost grows with the number of regions, not the bytes. Regions
open when their open delimiter (or, for the field without one, its first byte) is shifted and close
when their rule is reduced. After every shift, reductions that need no lookahead happen at once, so a
region closes the moment its close delimiter completes.

One-shot parsing is this session fed once: streaming and one-shot cannot disagree.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast, overload

from lark import Token
from lark.exceptions import UnexpectedToken
from lark.parsers.lalr_parser_state import ParseConf, ParserState

from .delimiters import REGEX_SPACE, Hit, JsonWalk
from .errors import ArgumentError, FinalizedError, GrammarParseError, ParseError
from .events import Event, Message, RegionChunk, RegionOpen
from .grammar import Grammar, Region, StateInfo, Terminal
from .salvage import check_calls, component_errors, is_call_region, salvage_calls
from .scanner import SearchCache
from .tables import Callbacks, ParseTable, reduce
from .tools import ToolTypes
from .values import fill

if TYPE_CHECKING:
    from lark.common import ParserCallbacks
    from lark.lexer import LexerThread

TemplateLike = dict[str, Any] | Grammar | str | Path

#: Default bound on one region's text (characters): a runaway region stops growing past it.
MAX_REGION_CHARS = 64 * 1024 * 1024
#: Seconds the regex module may search a prompt for a start_anchor_pattern before the linear matcher takes
#: over (grammar_parse.linear_regex: the same matches, so the choice never changes where the output starts).
START_ANCHOR_LIMIT = 0.25
#: Lenient errors about dropped text: a run of it is one error, whatever the chunking.
_RUN_ERRORS = frozenset({"parse.unexpected", "parse.region_too_large"})


def _lark_conf(table: ParseTable, callbacks: Callbacks) -> ParseConf[int]:
    """Lark's parser configuration over the session's table. Lark keys callbacks by rule (here a
    RuleHandle) as well as by terminal name, though its ParserCallbacks type says names only."""
    return ParseConf(table, cast("ParserCallbacks", callbacks), "start")


def _lark_state(conf: ParseConf[int], state_stack: list[int] | None = None,
                value_stack: list[Any] | None = None) -> ParserState[int]:
    """Lark's LALR parser state, driven token by token: the session is the lexer, so there is none."""
    return ParserState(conf, cast("LexerThread", None), state_stack, value_stack)


def resolve_grammar(template: TemplateLike) -> Grammar:
    """A Grammar from a template dict, a Grammar, or a built-in grammar name / ``.lark`` path."""
    if isinstance(template, Grammar):
        return template
    from .library import grammar_from_dict, load_grammar

    if isinstance(template, (str, Path)):
        return load_grammar(template)
    return grammar_from_dict(template)


def _copy_json(value: Any) -> Any:
    """A deep copy of JSON-like data (defaults), several times faster than copy.deepcopy."""
    if isinstance(value, dict):
        return {k: _copy_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy_json(v) for v in value]
    return copy.deepcopy(value) if not isinstance(value, (str, int, float, bool, type(None))) else value


def _same(a: Any, b: Any) -> bool:
    """Equality that does not let True equal 1 or 1 equal 1.0 (JSON values)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return bool(a == b)


def _is_empty(value: Any) -> bool:
    return value is None or (isinstance(value, (list, dict, str)) and not value)


def _trailing_space(chunks: list[str]) -> str:
    """The whitespace a text region's chunks end with (read from the end: chunks are not joined again)."""
    tail: list[str] = []
    for chunk in reversed(chunks):
        body = chunk.rstrip()
        tail.append(chunk[len(body):])
        if body:
            break
    return "".join(reversed(tail))


class _Frame:
    """An open region: its body chunks (joined once, at close), the open delimiter's captures, the
    values of its component regions, and where its events point (``path``, None for a message field)."""

    __slots__ = ("region", "chunks", "captures", "start", "open_text", "children", "path", "field", "size", "walk",
                 "problems")

    def __init__(self, region: Region, captures: dict[str, str], start: int, open_text: str,
                 field: str, path: list[str | int] | None) -> None:
        self.region = region
        self.chunks: list[str] = []
        self.captures = captures
        self.start = start
        self.open_text = open_text
        self.children: dict[str, Any] = {k: _copy_json(v) for k, v in region.scope.items()}
        self.field = field
        self.path = path
        self.size = 0
        self.walk: JsonWalk | None = None  # where its JSON value ends, for a region closed by that end
        self.problems: list[dict[str, str]] = []  # its components that did not parse (lenient mode)


#: What feed() needs to route a quiet chunk without scanning (see ResponseParser._fast_path): the one
#: trigger character or the search for several, whether a trailing whitespace run is held back, and
#: the open region (None: the text belongs to no field).
_FastPath = tuple[str, Callable[[str], object] | None, bool, _Frame | None]


class ResponseParser:
    """Streaming parser for one model response.

    ``template`` is a response_template dict, a compiled Grammar, or a built-in grammar name (or a path to
    a ``.lark`` file). ``prefix`` is the prompt the model continued (pass ``""`` if the output is
    complete on its own): it is truncated after the last start anchor and replayed, so a region the
    template pre-opened (``<think>`` in the prompt) is parsed correctly; its events are ``initial_events``.

    ``strict=False`` (lenient mode) never raises because of model output: a region whose text cannot be
    parsed keeps its raw text as its value, and the problem is recorded in :attr:`errors`, in the
    message under ``"parse_errors"``, and as a ``parse_error`` event. A tool-call region that cannot be
    parsed still gives its calls (``grammar_parse.salvage``): each named one is a call dict, with the
    raw text of arguments that did not parse and an ``errors`` list; its text that names no function
    goes to the text around it (content, or the reasoning it was written in). ``discarded_spans`` lists the
    output text that belongs to no field; ``trace=True`` records every span (:attr:`spans`).
    ``max_region_chars`` bounds one region's text. With ``extended_events=True`` each ``region_open``
    also carries ``captures``, the named groups of its open delimiter.

    >>> p = ResponseParser("qwen3", prefix="")
    >>> events = p.feed("<think>hm</think>Hi")
    >>> message, final_events = p.finalize()
    >>> message["content"]
    'Hi'
    """

    def __init__(self, template: TemplateLike, prefix: str | None = None, *, tools: Iterable[Any] | None = None,
                 strict: bool = True, extended_events: bool = False, trace: bool = False,
                 max_region_chars: int = MAX_REGION_CHARS):
        self._grammar = grammar = resolve_grammar(template)
        self._legacy_log: list[str] | None = None
        if grammar.legacy_schema is not None:
            # transformers <= 5.14 parsed the generated text alone; there is no anchor to cut a prompt at.
            if prefix:
                raise ArgumentError(
                    "a legacy response_schema parses the generated text only and has no start anchor to find "
                    "it in a prompt", code="usage.prefix", hint="Pass prefix=None (or \"\") with a legacy schema.")
            prefix = ""
            self._legacy_log = []
        if prefix is None:
            raise ArgumentError(
                "ResponseParser/parse_response requires `prefix` (the chat prompt sent to the model before "
                "generation), because chat templates often pre-write part of the assistant message (e.g. an "
                "opening `<think>` tag) that the parser must see to parse the output correctly. If the "
                'generation already contains the complete message, pass `prefix=""` to opt out explicitly.',
                code="usage.prefix",
            )
        self._tools = ToolTypes.from_tools(tools)
        self._strict = strict
        self._extended = extended_events  # region_open events also carry the open delimiter's captures
        self._trace: list[dict[str, Any]] | None = [] if trace else None
        self._max_region = max_region_chars
        self.errors: list[dict[str, Any]] = []  # lenient mode: what could not be parsed (see _record)
        self._discarded: list[list[int]] = []
        self._degraded = False  # lenient mode after an unrecoverable error: the rest is discarded
        self._states = grammar.tables.states
        self._output: Message = _copy_json(grammar.defaults)
        self._buf = ""
        # A whitespace run the fast path holds for a leading \s* (the buffer's tail, not yet joined into
        # it): joining each chunk into the buffer would copy the whole run per chunk, quadratic in a flood.
        self._held: list[str] = []
        self._pos = 0
        self._base = 0  # stream offset of _buf[0]
        self._prefix_len = 0
        self._frames: list[_Frame] = []
        self._run: Terminal | None = None  # text terminal whose run Lark has already seen
        self._hit: Hit | None = None  # the delimiter hit being fed (for the callbacks' captures and texts)
        self._hit_term: Terminal | None = None
        self._events: list[Event] = []
        self._cache = SearchCache()
        self._last_empty: tuple[int, str] | None = None
        self._fast: _FastPath | None = None
        self._finalized = False
        self._loose: list[str] = []  # text of broken tool calls that names no function, for content
        self._content_chunks: list[str] = []  # the last content region's text (where loose text joins it)
        callbacks = dict(grammar.tables.base_callbacks)
        for rule, region in grammar.tables.rule_regions.items():
            callbacks[rule] = self._closer(region)
        for term in grammar.terminals.values():
            if term.region is not None and term.role in ("open", "text"):
                callbacks[term.name] = self._opener(term)
        self._callbacks = callbacks
        self._parser = _lark_state(_lark_conf(grammar.tables.parse_table, callbacks))
        self.initial_events: list[Event] = []
        if prefix:
            self._consume_prefix(prefix)

    # ------------------------------------------------------------------ public API
    @property
    def grammar(self) -> Grammar:
        """The compiled grammar this parser runs."""
        return self._grammar

    @property
    def message(self) -> Message:
        """The message as parsed so far (closed regions only)."""
        return self._output

    @property
    def discarded_spans(self) -> list[tuple[int, int]]:
        """[start, end) offsets of output text that went into no field (text outside every region)."""
        return [(a, b) for a, b in self._discarded]

    @property
    def spans(self) -> list[dict[str, Any]]:
        """With ``trace=True``: every consumed piece of the output in order, as ``{"kind": "text" |
        "delimiter" | "discarded", "start", "end", "field" or "terminal"}`` (prompt replay excluded)."""
        if self._trace is None:
            raise RuntimeError("create the parser with trace=True to record spans")
        return self._trace

    @property
    def finalized(self) -> bool:
        return self._finalized

    def feed(self, text: str) -> list[Event]:
        """Add the next piece of model output; return the events it completes."""
        if self._finalized:
            raise FinalizedError("ResponseParser already finalized", code="usage.finalized",
                                 hint="Create a new ResponseParser for the next response.")
        if text:
            if self._legacy_log is not None:
                self._legacy_log.append(text)
            fast = self._fast
            if fast is not None:
                trigger, search, hold_space, frame = fast
                if not (text.find(trigger) >= 0 if search is None else search(text)):
                    # Fast path (most chunks): no delimiter can start in this chunk, so all of it is text,
                    # except a trailing whitespace run that a leading \s* may still claim. Text that would
                    # pass the region size limit takes the general route, which applies it.
                    if hold_space and (frame is None or frame.walk is None) and not text.strip(REGEX_SPACE):
                        self._held.append(text)  # the held run grows; nothing is decided yet
                        return []
                    combined = self._join_held() + text
                    kept = combined.rstrip(REGEX_SPACE) if hold_space else combined
                    # (a region that ends with its JSON value takes the general route once the value ends)
                    if (frame is None or frame.size + len(kept) <= self._max_region and
                            (frame.walk is None or frame.walk.advance(combined, self._base) is None)):
                        self._buf = combined[len(kept):]
                        if not kept:
                            return []
                        start = self._offset(0)
                        self._base += len(kept)
                        if frame is None:
                            self._note_discard(start, start + len(kept))
                            return []
                        frame.size += len(kept)
                        frame.chunks.append(kept)
                        return [{"type": "region_chunk", "field": frame.field, "text": kept,
                                 "dirty": frame.region.dirty}]
            self._buf = self._join_held() + text
        events: list[Event] = []
        self._guarded(events, eos=False)
        return events

    def _join_held(self) -> str:
        """The buffer with the held whitespace run joined in (one copy for the whole run)."""
        if not self._held:
            return self._buf
        buf = self._buf + "".join(self._held)
        self._held.clear()
        return buf

    def _guarded(self, events: list[Event], eos: bool) -> None:
        """Process the buffer; in lenient mode an error the parser cannot recover from is recorded and
        the rest of the output is discarded (reported), instead of raising."""
        self._fast = None  # set again by a _process that completes; an error leaves no fast path behind
        if self._degraded:
            self._events = events
            self._discard(len(self._buf))
            if eos:
                self._close_open()
            return
        try:
            self._process(events, eos)
        except GrammarParseError as e:
            if self._strict:
                raise
            self._events = events
            self._record(e.code, str(e), getattr(e, "field", None), None)
            self._degraded = True
            self._discard(len(self._buf))
            if eos:
                self._close_open()

    def finalize(self, text: str = "") -> tuple[Message, list[Event]]:
        """End the stream: close open regions, return the message and the last events.

        ``text``, if given, is a last piece of output; ``finalize(text)`` gives the same message as
        ``feed(text)`` followed by ``finalize()`` but skips the streaming decisions (one-shot parsing).
        """
        if self._finalized:
            raise FinalizedError("ResponseParser already finalized", code="usage.finalized",
                                 hint="Create a new ResponseParser for the next response.")
        self._finalized = True
        self._fast = None
        self._buf = self._join_held() + text
        if text:
            if self._legacy_log is not None:
                self._legacy_log.append(text)
        events: list[Event] = []
        self._guarded(events, eos=True)
        if self._loose:
            self._settle_loose()
        if self._legacy_log is not None:
            return self._settle_legacy(events)
        missing = [r.field for r in self._grammar.regions.values() if not r.spec.optional and r.field not in self._output]
        if missing:
            error = ParseError(
                f"Required response_template fields missing from parsed output: {missing}",
                code="parse.missing_field",
                message_so_far=self._output,
                hint="The model did not produce them; mark the fields optional if that is acceptable.",
            )
            if self._strict:
                raise error
            self._record(error.code, str(error), missing[0], None)
        defaults = self._grammar.defaults
        self._output = {k: v for k, v in self._output.items() if k in defaults or not _is_empty(v)}
        if self.errors:
            self._output["parse_errors"] = self.errors
        return self._output, events

    # ------------------------------------------------------------------ lenient mode and accounting
    def _offset(self, buffer_pos: int) -> int:
        """Offset in the model output (negative inside the replayed prompt) of a buffer position."""
        return self._base + buffer_pos - self._prefix_len

    def _record(self, code: str, message: str, field: str | None, span: list[int] | None) -> None:
        """Lenient mode: keep a problem with its stable code, field and output span, and tell the stream."""
        last = self.errors[-1] if self.errors else None
        if code in _RUN_ERRORS and last and last["code"] == code and last["field"] == field and span \
                and last["span"] and last["span"][1] == span[0]:
            last["span"][1] = span[1]  # one run of dropped text is one problem, however it was chunked
            return
        self.errors.append({"code": code, "field": field, "span": span, "message": message})
        # the span list is shared: a run that grows later grows in the event too
        self._events.append({"type": "parse_error", "code": code, "field": field, "span": span, "message": message})

    def _discard(self, end: int) -> None:
        """Drop buffer text up to ``end`` (it belongs to no field), and report its span."""
        start = self._pos
        if end > start:
            self._note_discard(self._offset(start), self._offset(end))
            self._pos = end

    def _note_discard(self, start: int, end: int) -> None:
        if end <= start or end <= 0:
            return
        start = max(start, 0)
        if self._discarded and self._discarded[-1][1] == start:
            self._discarded[-1][1] = end
        else:
            self._discarded.append([start, end])
        if self._trace is not None:
            self._trace.append({"kind": "discarded", "start": start, "end": end})

    def _loose_text(self, text: str) -> None:
        """Text of a broken tool-call region that names no function: it joins the text region the call
        was written in (content, or reasoning), or else the content, and streams as that field's text."""
        frame = self._frames[-1] if self._frames else None
        if frame is not None and frame.path is None and getattr(frame.region.spec, "content", None) == "text":
            frame.chunks.append(text)
            frame.size += len(text)
            field = frame.field
        else:
            self._loose.append(text)  # the next content region starts with it, or finalize adds it
            field = "content"
        self._events.append({"type": "region_chunk", "field": field, "text": text, "dirty": False})

    def _settle_loose(self) -> None:
        """At the end: loose text no content region took joins the content (as a stream concatenates it)."""
        text, self._loose = "".join(self._loose), []
        existing = self._output.get("content")
        if not isinstance(existing, str) or not existing:
            self._output["content"] = text.strip()
            return
        region = next((r for r in self._grammar.regions.values() if r.field == "content" and r.parent is None), None)
        join = region.spec.join if region is not None else None
        self._output["content"] = existing + join + text.strip() if join is not None else \
            (existing + _trailing_space(self._content_chunks) + text).rstrip()

    def _close_open(self) -> None:
        """Close every open region, innermost first (end of output, or giving up in lenient mode)."""
        while self._frames:
            self._close(self._frames[-1].region)

    def _settle_legacy(self, events: list[Event]) -> tuple[Message, list[Event]]:
        """Run the whole legacy schema once; where the streamed regions disagree, say so in one event."""
        from grammar_parse.compat.legacy import recursive_parse

        self._events = events
        try:
            final = recursive_parse("".join(self._legacy_log or []), self._grammar.legacy_schema or {},
                                    timeout=self._grammar.legacy_timeout)
        except GrammarParseError as e:
            if self._strict:
                raise
            self._record(e.code, str(e), None, None)  # lenient: the regions' message stands
            final = {k: v for k, v in self._output.items() if not _is_empty(v) or k in self._grammar.defaults}
            final["parse_errors"] = self.errors
            self._output = final
            return final, events
        if self._tools is not None and isinstance(final, dict):
            for key, value in final.items():
                final[key] = self._tools.apply(value)
        streamed = {k: v for k, v in self._output.items() if not _is_empty(v) or k in self._grammar.defaults}
        if not isinstance(final, dict):
            changed = sorted(streamed)
        else:
            changed = sorted(k for k in set(final) | set(streamed)
                             if k not in final or k not in streamed or not _same(final[k], streamed[k]))
        if changed:
            events.append({"type": "correction", "fields": changed, "message": final})
        self._output = final
        return final, events

    # ------------------------------------------------------------------ the loop
    def _consume_prefix(self, prefix: str) -> None:
        anchor = self._grammar.start_anchor
        truncated = prefix
        if anchor is not None:
            last_end = None
            # A pattern anchor searches the whole prompt, which a user controls: past START_ANCHOR_LIMIT the
            # linear matcher finishes the search (same matches); literal anchors are linear already.
            limit = None if anchor.literals is not None else START_ANCHOR_LIMIT
            for m in anchor.bounded.finditer(prefix, limit):
                last_end = m.end()
            if last_end is not None:
                truncated = prefix[last_end:]
        if not truncated:
            return
        self._prefix_len = len(truncated)
        self._buf = truncated
        self._process(self.initial_events, eos=False)

    def _process(self, events: list[Event], eos: bool) -> None:
        self._events = events
        states = self._states
        parser_stack = self._parser.state_stack
        while True:
            info = states[parser_stack[-1]]
            buf, pos = self._buf, self._pos
            scanner = info.scanner
            term, hit, hold = scanner.scan(buf, pos, eos, self._cache,
                                           -1 if scanner.value_end is None else self._value_end(scanner.value_end))
            if term is not None and hit is not None:  # (the scanner gives both or neither)
                start, end, _ = hit
                if start > pos and self._route(info, start):
                    continue
                if term.role == "repeat":
                    self._repeat(term, hit)
                    continue
                self._pos = end
                if start == end:
                    # A zero-width close of a region that never opened does nothing and ends the pass
                    # (transformers); any zero-width delimiter firing twice in one place would loop.
                    marker = (self._base + start, term.name)
                    idle = term.role == "close" and not (self._frames and self._frames[-1].region is term.region)
                    if term.role == "open" and self._frames and self._frames[-1].region is term.region \
                            and end < len(buf):
                        # A lookahead opener inside its own open region (a `{` in the JSON it opened) is
                        # the region's text: it would end the region and open another at the same place.
                        self._route(info, end + 1)
                        continue
                    if idle or marker == self._last_empty:
                        if eos:
                            self._discard(len(buf))  # transformers leaves the rest unparsed
                            self._end()
                        break
                    self._last_empty = marker
                self._token(term, hit)
                continue
            if eos:
                if pos < len(buf) and self._route(info, len(buf)):
                    continue
                self._end()
                break
            if hold > pos and self._route(info, hold):
                continue
            break
        self._trim()
        self._fast = self._fast_path()

    def _value_end(self, region: Region) -> int:
        """Where the open ``region``'s JSON value ends in the buffer (-1: not yet, or it is not on top).
        The walk goes on from where the last scan left it, so the cost is linear in the region's text."""
        frame = self._frames[-1] if self._frames else None
        if frame is None or frame.region is not region:
            return -1
        walk = frame.walk
        if walk is None:
            walk = frame.walk = JsonWalk(frame.start + len(frame.open_text))
        end = walk.advance(self._buf, self._base)
        return -1 if end is None else end - self._base

    def _fast_path(self) -> _FastPath | None:
        """What feed() needs to route a quiet chunk without scanning, if the current state allows it:
        a run of text is under way, nothing is held back, and the live delimiters are all literal."""
        info = self._states[self._parser.state_stack[-1]]
        quiet, text = info.scanner.quiet, info.text
        if quiet is None or text is None or self._grammar.tables.context or self._pos != len(self._buf) \
                or self._run is not text or self._trace is not None:
            return None
        if text.role != "text":
            return (quiet.trigger, quiet.hits, quiet.hold_space, None)
        frame = self._frames[-1]
        if frame.path is not None:
            return None  # component chunks carry a path; the general route adds it
        if info.scanner.value_end is not None and frame.walk is None:
            return None  # the walk to the value's end has not started
        return (quiet.trigger, quiet.hits, quiet.hold_space, frame)

    def _route(self, info: StateInfo, end: int) -> bool:
        """Route buffer text up to ``end`` into the current region; True when the delimiters that are
        live changed on the way (an ordered grammar), so the caller must scan again from the new place."""
        pos, wanted = self._pos, end
        if info.text_sensitive and self._run is not info.text and end - pos > 1:
            end = pos + 1  # the first character decides the new state; scan the rest under it
        self._text(info.text, self._buf[pos:end])
        self._pos = end
        return end < wanted or self._states[self._parser.state_stack[-1]].scanner is not info.scanner

    def _trim(self) -> None:
        """Drop consumed text, keeping what delimiters may look back at."""
        cut = self._pos - self._grammar.tables.context
        if cut > 0:
            self._buf = self._buf[cut:]
            self._pos -= cut
            self._base += cut
            self._cache.clear()

    def _text(self, term: Terminal | None, text: str) -> None:
        start = self._offset(self._pos)
        if term is None:
            term = self._accepted_text()
        if term is None:
            if self._strict:
                raise self._unexpected(f"text {text[:40]!r} where the grammar allows none")
            # the message names no text: a run of stray text is one error however it was chunked
            self._record("parse.unexpected", "text where the grammar allows none was discarded (see the span)",
                         None, [start, start + len(text)])
            self._note_discard(start, start + len(text))
            return
        if self._run is not term:
            self._run = None
            self._shift(Token(term.name, ""))  # the text itself stays out of Lark (no copy)
            self._run = term
        if term.role != "text":
            self._note_discard(start, start + len(text))
            return
        frame = self._frames[-1]
        frame.size += len(text)
        if frame.size > self._max_region:
            if self._strict:
                raise ParseError(f"region {frame.field} is longer than {self._max_region} characters",
                                 code="parse.region_too_large", field=frame.field,
                                 position=frame.start - self._prefix_len,
                                 hint="Raise max_region_chars if such output is expected.")
            keep = max(0, len(text) - (frame.size - self._max_region))
            if keep < len(text):
                self._record("parse.region_too_large", f"region {frame.field} is longer than {self._max_region} "
                             "characters; the rest of it is discarded", frame.field, [start + keep, start + len(text)])
            self._note_discard(start + keep, start + len(text))
            text = text[:keep]
            if not text:
                return
        if self._trace is not None:
            self._trace.append({"kind": "text", "field": frame.field, "start": start, "end": start + len(text)})
        frame.chunks.append(text)
        event: RegionChunk = {"type": "region_chunk", "field": frame.field, "text": text, "dirty": frame.region.dirty}
        if frame.path is not None:
            event["path"] = frame.path
        self._events.append(event)

    def _accepted_text(self) -> Terminal | None:
        """Which of several text terminals the parser accepts here (tried on a copy of its state)."""
        conf = _lark_conf(self._grammar.tables.parse_table, {})  # no callbacks: a trial changes nothing
        for term in self._states[self._parser.state_stack[-1]].text_candidates:
            trial = _lark_state(conf, list(self._parser.state_stack), list(self._parser.value_stack))
            try:
                trial.feed_token(Token(term.name, ""))
            except UnexpectedToken:
                continue
            return term
        return None

    def _repeat(self, term: Terminal, hit: Hit) -> None:
        """An opener written again at the start of its region is markup: consumed, no token. (Text that
        reached the region first, whitespace of the prompt, makes it text after all.)"""
        frame = self._frames[-1] if self._frames else None
        if frame is None or frame.region is not term.region or any(chunk.strip() for chunk in frame.chunks):
            self._text(None, self._buf[hit[0]:hit[1]])
        elif self._trace is not None:
            self._trace.append({"kind": "delimiter", "terminal": term.name, "start": self._offset(hit[0]),
                                "end": self._offset(hit[1])})
        self._pos = hit[1]

    def _token(self, term: Terminal, hit: Any) -> None:
        self._run = None
        if self._trace is not None and hit[1] > hit[0]:
            self._trace.append({"kind": "delimiter", "terminal": term.name, "start": self._offset(hit[0]),
                                "end": self._offset(hit[1])})
        self._hit, self._hit_term = hit, term
        self._shift(Token(term.name, self._buf[hit[0]:hit[1]]))
        self._hit, self._hit_term = None, None

    def _shift(self, token: Token) -> None:
        parser = self._parser
        try:
            parser.feed_token(token)
        except UnexpectedToken as e:
            raise self._unexpected(f"{token.type} is not allowed here (expected {sorted(e.expected)})") from None
        # Reduce at once where no lookahead is needed, so regions close when their delimiter completes.
        states = self._states
        stack, values = parser.state_stack, parser.value_stack
        table = parser.parse_conf.states
        callbacks = self._callbacks  # the parser's own (Lark types them by terminal name only)
        while (rule := states[stack[-1]].default_rule) is not None:
            reduce(table, stack, values, rule, callbacks[rule])

    def _end(self) -> None:
        self._run = None
        try:
            self._parser.feed_token(Token("$END", ""), is_end=True)
        except UnexpectedToken:
            # The output stopped where the grammar wanted more (a region's close delimiter, a required
            # part): close what is open, innermost first, as a truncated stream should be.
            self._close_open()

    def _unexpected(self, what: str) -> ParseError:
        return ParseError(
            f"unexpected input at offset {self._base + self._pos - self._prefix_len}: {what}",
            code="parse.content",
            position=self._base + self._pos - self._prefix_len,
            message_so_far=self._output,
        )

    # ------------------------------------------------------------------ Lark callbacks
    def _push(self, region: Region, captures: dict[str, str], start: int, open_text: str) -> None:
        """Open a region: a message field, or a component of the nearest open region it belongs to."""
        if region.parent is None:
            frame = _Frame(region, captures, start, open_text, region.field, None)
            if self._loose and region.field == "content":
                frame.chunks, self._loose = self._loose, []  # a broken call's text, already streamed
                frame.size = sum(map(len, frame.chunks))
            event: RegionOpen = {"type": "region_open", "field": region.field}
            if self._extended:
                event["captures"] = captures
            self._events.append(event)
        else:
            parent = next((f for f in reversed(self._frames) if f.region.rule == region.parent), None)
            if parent is None:
                raise self._unexpected(f"{region.rule} outside the {region.parent} it belongs to")
            path: list[str | int] = [*(parent.path if parent.path is not None else self._message_path(parent)),
                                     region.key]
            if region.entry_key is not None:
                try:
                    path.append(str(fill(region.entry_key, captures)))
                except (KeyError, ValueError):
                    pass  # the entry's key comes from a component not parsed yet
            frame = _Frame(region, captures, start, open_text, parent.field, path)
            event = {"type": "region_open", "field": frame.field, "path": path}
            if self._extended:
                event["captures"] = captures
            self._events.append(event)
        self._frames.append(frame)

    def _message_path(self, frame: _Frame) -> list[str | int]:
        """Where a message field's value will go: [field] or, for a repeated field, [field, index]."""
        if not frame.region.spec.repeats:
            return [frame.field]
        existing = self._output.get(frame.field)
        return [frame.field, len(existing) if isinstance(existing, list) else 0]

    def _opener(self, term: Terminal) -> Callable[[Token], Token]:
        region = term.region
        assert region is not None
        if term.role == "open":
            def on_open(token: Token) -> Token:
                hit = self._hit
                match = hit[2] if hit is not None else None
                captures = {k: v for k, v in match.groupdict().items() if v is not None} if match is not None else {}
                start = self._base + (hit[0] if hit is not None else self._pos)
                self._push(region, captures, start, self._buf[hit[0]:hit[1]] if hit is not None else "")
                return token
            return on_open

        def on_text(token: Token) -> Token:
            frames = self._frames
            if not frames or frames[-1].region is not region:
                self._push(region, {}, self._base + self._pos, "")
            return token
        return on_text

    def _closer(self, region: Region) -> Callable[[list[Any]], None]:
        def on_close(children: list[Any]) -> None:
            self._close(region)
        return on_close

    def _close(self, region: Region) -> None:
        if not self._frames or self._frames[-1].region is not region:
            # A field without an opener opens at its first text; a rule that held none never opened it.
            if region.implicit:
                return
            # A rule reduced as this region without its open delimiter (an alternative opened by another
            # terminal): it is an empty region.
            self._push(region, {}, self._offset(self._pos) + self._prefix_len, "")
        frame = self._frames.pop()
        spec = region.spec
        hit, closing = self._hit, self._hit_term
        close_text = self._buf[hit[0]:hit[1]] if hit is not None and closing is not None and \
            closing.role == "close" and closing.region is region else ""
        try:
            value = spec.value("".join(frame.chunks), frame.captures, frame.open_text, close_text, frame.children)
            if self._tools is not None and region.parent is None:
                value = self._tools.apply(value)
            if spec.join is not None and not isinstance(value, str):
                raise ParseError(
                    f"Field '{region.field}': 'join' requires each match to parse to a string, got "
                    f"{type(value).__name__}.",
                    code="parse.join",
                )
            if is_call_region(region):
                check_calls(value)
        except ParseError as e:
            reason = e.detail.split("\n", 1)[0]  # what a broken call's errors say (without the region's place)
            e.locate(frame.field, frame.start - self._prefix_len, self._output)  # (a component's: its call's)
            if self._strict:
                raise e from None
            self._record(e.code, str(e), frame.field, [frame.start - self._prefix_len, self._offset(self._pos)])
            if is_call_region(region):
                self._close_broken_calls(frame, close_text, {"message": reason, "code": e.code})
                return
            value = "".join(frame.chunks).strip()  # the raw text is kept
            if region.parent is not None:  # the call it belongs to says so
                self._parent(region).problems.append({"key": region.key, "entry": str(frame.path[-1]) if
                                                       region.entry_key is not None and frame.path else "",
                                                       "message": reason, "code": e.code})
        if frame.problems and isinstance(value, dict) and is_call_region(region):
            value = {**value, "errors": component_errors(region, frame.problems)}
        if region.parent is not None:
            self._store_component(frame, value)
            return
        self._store(frame, value)

    def _close_broken_calls(self, frame: _Frame, close_text: str, problem: dict[str, str]) -> None:
        """Lenient mode, a tool-call region that did not parse: the calls it still holds are its value;
        its text that names no function (all of it, delimiters included, if it names none) is text."""
        body = "".join(frame.chunks)
        found = salvage_calls(frame.region, body, frame.captures, frame.children, problem)
        if found.calls:
            value: Any = found.calls if getattr(frame.region.spec, "transform_each", False) else found.calls[0]
            self._store(frame, self._tools.apply(value) if self._tools is not None else value)
        else:
            # the stream learns that the region gave no call (its text follows as content)
            self._events.append({"type": "region_close", "field": frame.field, "value": None})
        loose = found.rest if found.calls else frame.open_text + body + close_text
        if loose.strip():
            self._loose_text(loose)

    def _store(self, frame: _Frame, value: Any) -> None:
        """A message field's value goes into the message (joined, appended or set) and the stream."""
        region = frame.region
        spec = region.spec
        output = self._output
        key = region.field
        if spec.join is not None:
            previous = output.get(key)
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
        if key == "content":
            self._content_chunks = frame.chunks
        self._events.append({"type": "region_close", "field": key, "value": value})

    def _parent(self, region: Region) -> _Frame:
        """The open frame a component region belongs to."""
        return next(f for f in reversed(self._frames) if f.region.rule == region.parent)

    def _store_component(self, frame: _Frame, value: Any) -> None:
        """A component's value goes into its parent's scope: by key, appended, or as a keyed entry."""
        region = frame.region
        scope = self._parent(region).children
        have = scope.get(region.key)
        if region.entry_key is not None:
            if isinstance(have, dict) or have is None:
                entry = fill(region.entry_key, {**frame.captures, **frame.children})
                scope.setdefault(region.key, {})[str(entry)] = value
        elif region.spec.repeats:
            scope.setdefault(region.key, []).append(value)
        elif isinstance(value, dict) and isinstance(have, dict):
            scope[region.key] = {**have, **value}  # a whole object beside keyed entries
        elif not have:
            scope[region.key] = value
        # Otherwise the call's value is already something else (arguments that did not parse, where an
        # object follows; an object, where text that does not parse follows): it stays, as a stream that
        # sent it must keep it; the component's text is in the call's span, and its error on the call.
        path = frame.path
        assert path is not None  # a component's frame always has one (see _push)
        self._events.append({"type": "region_close", "field": frame.field, "path": path, "value": value})


@overload
def parse_response(
    text: str,
    template: TemplateLike,
    *,
    prefix: str | None = None,
    tools: Iterable[Any] | None = None,
    strict: bool = True,
) -> Message: ...


@overload
def parse_response(
    text: list[str],
    template: TemplateLike,
    *,
    prefix: str | list[str] | None = None,
    tools: Iterable[Any] | None = None,
    strict: bool = True,
) -> list[Message]: ...


def parse_response(
    text: str | list[str],
    template: TemplateLike,
    *,
    prefix: str | list[str] | None = None,
    tools: Iterable[Any] | None = None,
    strict: bool = True,
) -> Message | list[Message]:
    """Parse a complete model output (or a list of them) into a message (or a list of messages).

    Equivalent to feeding the whole text to a :class:`ResponseParser` and finalizing it. For a batch,
    ``prefix`` is one prompt for all texts or a list with one per text. ``strict=False`` is lenient
    mode (see :class:`ResponseParser`): problems are reported under ``"parse_errors"``, never raised.
    """
    if isinstance(text, (list, tuple)):
        prefixes: list[str | None]
        if isinstance(prefix, (list, tuple)):
            if len(prefix) != len(text):
                raise ArgumentError(
                    f"got {len(text)} texts but {len(prefix)} prefixes",
                    code="usage.batch",
                    hint="Pass one prefix per text, or a single prefix string for all of them.",
                )
            prefixes = list(prefix)
        else:
            prefixes = [prefix] * len(text)
        return [parse_response(t, template, prefix=p, tools=tools, strict=strict) for t, p in zip(text, prefixes)]
    if isinstance(prefix, (list, tuple)):
        raise ArgumentError("a list of prefixes needs a list of texts", code="usage.batch")
    parser = ResponseParser(template, prefix, tools=tools, strict=strict)
    if parser.grammar.legacy_schema is not None:
        # One-shot legacy parsing needs no streaming regions: the schema's own run is the result.
        parser._legacy_log = [text]
        parser._finalized = True
        return parser._settle_legacy([])[0]
    return parser.finalize(text)[0]


__all__ = ["ResponseParser", "parse_response", "resolve_grammar"]
