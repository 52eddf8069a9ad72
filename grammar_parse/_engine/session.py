"""The streaming session: scanner and LALR parser turning text into region events and a message.

The scanner finds delimiters (only those live in the current parser state) and routes the text between
them; the parser state decides the structure. The parser walks Lark's LALR table itself
(:func:`grammar_parse._engine.tables.feed`, on a stack of states alone) and only ever sees structure tokens:
delimiters and the first text token of a run, so its cost grows with the number of regions, not the
bytes. Regions
open when their open delimiter (or, for the field without one, its first byte) is shifted and close
when their rule is reduced. After every shift, reductions that need no lookahead happen at once, so a
region closes the moment its close delimiter completes.

One-shot parsing is this session fed once: streaming and one-shot cannot disagree.

Inside, :class:`ResponseParser` is the scan (the buffer, the delimiters, the fast path for quiet chunks);
``_Syntax`` the LALR parser and the region builder under it; ``_Ledger`` what is reported beside the
message (problems, discarded spans, the trace, lines); ``_DraftReading`` how calls written inside
reasoning are read; module functions replay the prompt and assemble the message at the end.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, overload

from ..errors import AnchorWarning, ArgumentError, FinalizedError, GrammarParseError, ParseError, UsageError
from ..options import MAX_REGION_CHARS, START_ANCHOR_LIMIT, ParseOptions, merge_options
from .arguments import caller_stacklevel, expect_text
from .delimiters import REGEX_SPACE
from .drafts import closes_at, draft_states, interrupts, reading_of
from .events import Event, Message, RegionChunk
from .grammar import Grammar, Region, StateInfo, Terminal
from . import generated, oneshot
from .library import grammar_from_dict, load_grammar
from .reading import JsonEnd, copy_json, with_json_depth
from .regions import (Frame, RegionBuilder, SectionRun, call_section_states, idle_close, missing_fields,
                      without_empty)
from .scanner import HeadsTest, Scanner, Search, SearchCache, any_of
from .tables import feed, reduce
from .tools import ToolTypes
from .toolstream import ToolCallStreamer

TemplateLike = dict[str, Any] | Grammar | str | Path

# MAX_REGION_CHARS (a region's default bound) and START_ANCHOR_LIMIT (seconds of regex search for a start
# anchor) are the defaults of ParseOptions, defined with it (grammar_parse.options) and kept importable here.
#: Prompt tails longer than this (a grammar without a start anchor sees the whole prompt) are replayed
#: for each parser, not kept; at most MAX_REPLAYS are kept per grammar.
MAX_REPLAY_CHARS = 4096
MAX_REPLAYS = 256
#: Lenient errors about dropped text: a run of it is one error, whatever the chunking.
_RUN_ERRORS = frozenset({"parse.unexpected", "parse.region_too_large"})


class _State(NamedTuple):
    """A parser's state between two scans, to start again from: a replayed prompt's (shared by the parsers
    that start from it, so taken and restored as copies) or a draft's."""

    stack: list[int]
    buf: str
    pos: int
    base: int
    run: Terminal | None
    last_empty: tuple[int, str] | None
    ledger: tuple[Any, ...]  # (see _Ledger.state)
    regions: tuple[Any, ...]


class _Replay(NamedTuple):
    """A parser's state after replaying a prompt tail (see _replay_prompt)."""

    state: _State
    prefix_len: int
    events: list[Event]


@dataclass
class _Draft:
    """Where a delimiter that interrupts an open reasoning block was found (grammar_parse._engine.drafts): the state
    to go back to, and what happened since, the output from there on (to read again) and the events held
    back."""

    region: Region
    state: _State  # (its buffer ends at the delimiter)
    trace: int | None  # how many spans were traced before it
    raw: list[str]  # the output from the delimiter on, as it arrives
    held: list[Event] = field(default_factory=list)
    closed: bool = False  # the block has closed (the "fallback" reading waits for a call after it)


def resolve_grammar(template: TemplateLike) -> Grammar:
    """A Grammar from a template dict, a Grammar, or a built-in grammar name / ``.lark`` path."""
    if isinstance(template, Grammar):
        return template
    if isinstance(template, (str, Path)):
        return load_grammar(template)
    return grammar_from_dict(template)


def _same(a: Any, b: Any) -> bool:
    """Equality that does not let True equal 1 or 1 equal 1.0 (JSON values)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return bool(a == b)


#: What feed() needs to route a quiet chunk without scanning (see _fast_path): the one
#: trigger character or the search for several, whether a trailing whitespace run is held back, and
#: the open region (None: the text belongs to no field).
_FastPath = tuple[str, Callable[[str], object] | None, bool, Frame | None, JsonEnd | None, HeadsTest | None, int]


# ---------------------------------------------------------------------------- reported beside the message
class _Ledger:
    """What a parser reports beside the message, kept in one place so that a draft or a replayed prompt
    takes and restores it whole: the lenient-mode problems (``errors``), the output text that went into no
    field (``discarded``), every span with ``trace=True``, the lines of the output that have left the
    buffer (for an error's line and column), and the run of text in a call section under way."""

    __slots__ = ("errors", "discarded", "trace", "lines_before", "line_start", "section", "marks")

    def __init__(self, trace: bool) -> None:
        self.errors: list[dict[str, Any]] = []
        self.discarded: list[list[int]] = []
        self.trace: list[dict[str, Any]] | None = [] if trace else None
        # How many newlines the output before the buffer held, and the output offset where its last line starts.
        self.lines_before = 0
        self.line_start = 0
        #: The line and column of each open region's start that has left the buffer (see _mark_open_regions)
        self.marks: dict[int, tuple[int, int]] = {}
        self.section = SectionRun()  # the run of text under way that goes into no field (see _Syntax.text)

    def record(self, code: str, message: str, field: str | None, span: list[int] | None) -> Event | None:
        """Keep a problem with its stable code, field and output span: the ``parse_error`` event that tells
        the stream, or None when the problem only lengthens the run of dropped text before it."""
        last = self.errors[-1] if self.errors else None
        if code in _RUN_ERRORS and last and last["code"] == code and last["field"] == field and span \
                and last["span"] and last["span"][1] == span[0]:
            last["span"][1] = span[1]  # one run of dropped text is one problem, however it was chunked
            return None
        self.errors.append({"code": code, "field": field, "span": span, "message": message})
        # the span list is shared: a run that grows later grows in the event too
        return {"type": "parse_error", "code": code, "field": field, "span": span, "message": message}

    def discard(self, start: int, end: int, text: str | None = None) -> None:
        """Note output text ``[start, end)`` that went into no field (the prompt's part of it excluded); ``text``:
        what it is, where it may be part of a call section's run (``section``)."""
        if text is not None and self.section.field is not None:
            self.section.add(text, start)
        if end <= start or end <= 0:
            return
        start = max(start, 0)
        if self.discarded and self.discarded[-1][1] == start:
            self.discarded[-1][1] = end
        else:
            self.discarded.append([start, end])
        if self.trace is not None:
            self.trace.append({"kind": "discarded", "start": start, "end": end})

    def count_lines(self, text: str, lo: int, hi: int, start: int) -> None:
        """Note the lines of output ``text[lo:hi]`` as it leaves the buffer (``start``: the output offset
        of ``text[0]``); counted in place, not copied."""
        last = text.rfind("\n", lo, hi)
        if last >= 0:
            self.lines_before += text.count("\n", lo, hi)
            self.line_start = start + last + 1

    def line_column(self, offset: int, buf: str, start: int) -> tuple[int, int] | None:
        """1-based line and column of an output offset still in ``buf`` (``start``: the output offset of
        ``buf[0]``, negative while it holds the replayed prompt); None before it, or in the prompt."""
        q = offset - start
        if offset < 0 or not 0 <= q <= len(buf):
            return None
        lo = max(-start, 0)  # (the replayed prompt has no lines of the output)
        newline = buf.rfind("\n", lo, q)
        line = self.lines_before + buf.count("\n", lo, q) + 1
        line_start = start + newline + 1 if newline >= 0 else self.line_start
        return line, offset - line_start + 1

    def state(self) -> tuple[Any, ...]:
        """A copy of what is kept, but the trace (a draft cuts the trace back itself)."""
        return [list(d) for d in self.discarded], copy_json(self.errors), self.lines_before, self.line_start, \
            self.section.copy()

    def restore(self, state: tuple[Any, ...]) -> None:
        """Take a :meth:`state` (copied: a replay's is shared); the lists stay the same objects."""
        discarded, errors, self.lines_before, self.line_start, section = state
        self.discarded[:] = [list(d) for d in discarded]
        self.errors[:] = copy_json(errors)
        self.section = section.copy()


# ---------------------------------------------------------------------------- drafts (grammar_parse._engine.drafts)
class _DraftReading:
    """How call markup written inside an open reasoning block is read (grammar_parse._engine.drafts): the reading in
    force, the parser states where it applies, and the draft under way, if any (where to rewind the parser
    to if the block never closes, and the events held back until that is known)."""

    __slots__ = ("reading", "states", "open", "closing", "out")

    def __init__(self, grammar: Grammar, asked: str | bool | None) -> None:
        # (the reading asked for, else the grammar's calls_in_reasoning directive)
        self.reading = reading_of(grammar, asked)
        # The parser states of an open reasoning block, where markup is read as a draft, unless calls are
        # asked for; none while the prompt is replayed (its tail ends where the output starts): see arm().
        self.states: Mapping[int, Region] = {}
        self.open: _Draft | None = None
        self.closing = False  # the delimiter being shifted closes the open reasoning block
        self.out: list[Event] = []  # the events of the scan under way, where released events go

    def arm(self, grammar: Grammar) -> None:
        """Read drafts from now on (the output starts)."""
        self.states = draft_states(grammar, self.reading)

    def take(self, parser: ResponseParser, info: StateInfo, term: Terminal, start: int, end: int) -> int:
        """Whether a delimiter found in an open reasoning block is read as reasoning text: the end of the
        text to route as such (taking a draft of ``parser`` to rewind to if the block is never closed), or
        -1 when the delimiter is not one to hold back."""
        region = self.states[parser._stack[-1]]
        if (self.open is not None and region is not self.open.region) \
                or not interrupts(parser.grammar, parser._stack, term, region):
            return -1
        buf = parser._buf
        if any(w.role == "close" and w.region is region and closes_at(w, buf, start) for w in info.watch):
            # the block's own close, spelled like another delimiter (plamo3's stray one): a draft's end
            self.closing = self.open is not None
            return -1
        if end == start:  # a lookahead opener: the character it looked at is text
            if start >= len(buf):
                return -1
            end = start + 1
        if self.open is None:  # (the scan has reached the delimiter: the parser's position is its start)
            trace = parser._trace
            self.open = _Draft(region, parser._state(buf[:start]), None if trace is None else len(trace), [buf[start:]])
            parser._regions.events = self.open.held
        return end

    def after_shift(self, draft: _Draft, term: Terminal, regions: RegionBuilder) -> None:
        """A delimiter was shifted with ``draft`` open: the block's close ends it as reasoning (the
        "fallback" reading waits for a call after the block first), a call after the closed block shows
        that it was a draft."""
        closing, self.closing = self.closing, False
        if closing or term.role == "close" and term.region is draft.region:
            if self.reading == "fallback":
                draft.closed = True  # reasoning, unless the output ends with no call after the block
            else:
                self.release(regions)  # the reasoning block closed: what it held was reasoning
        elif draft.closed and term.opens_call:
            self.release(regions)  # a call after the block: the one in it was a draft

    def release(self, regions: RegionBuilder) -> None:
        """The draft was reasoning after all: its held events go out."""
        draft, self.open = self.open, None
        if draft is not None:
            self.out.extend(draft.held)
            regions.events = self.out

    def undo(self, parser: ResponseParser) -> bool:
        """At the end of the output, with a draft still open: rewind ``parser`` to it, to read its delimiter
        as markup (the rest of the output is read as it comes, with no further drafts). False with no draft."""
        draft, self.open = self.open, None
        if draft is None:
            return False
        self.states = {}
        parser._restore(draft.state)
        parser._buf += "".join(draft.raw)
        trace = parser._trace
        if trace is not None and draft.trace is not None:
            del trace[draft.trace:]
        parser._regions.events = self.out
        return True


# ---------------------------------------------------------------------------- the prompt
def _output_prefix(prefix: str | None, settle: Any) -> str:
    """The prompt a parser replays: ``prefix``, which is required (``""`` opts out explicitly), or ``""``
    for a grammar settled at finalize (``settle``: a legacy schema's hook reads the output alone and
    refuses a prompt)."""
    if settle is not None:
        if prefix:
            raise ArgumentError(settle.prompt_error, code="usage.prefix", hint=settle.prompt_hint)
        return ""
    if prefix is None:
        raise ArgumentError(
            "ResponseParser/parse_response requires `prefix` (the chat prompt sent to the model before "
            "generation), because chat templates often pre-write part of the assistant message (e.g. an "
            "opening `<think>` tag) that the parser must see to parse the output correctly. If the "
            'generation already contains the complete message, pass `prefix=""` to opt out explicitly.',
            code="usage.prefix",
        )
    return prefix


def _anchored_tail(grammar: Grammar, prefix: str, seconds: float | None) -> str | None:
    """What follows the prompt's last start anchor (all of it for a grammar without one); None when the
    prompt holds no anchor."""
    anchor = grammar.start_anchor
    if anchor is None:
        return prefix
    # A pattern anchor searches the whole prompt, which a user controls: past START_ANCHOR_LIMIT the
    # linear matcher finishes the search (same matches); literal anchors are linear already.
    last_end = anchor.last_end(prefix, None if anchor.literals is not None else
                               START_ANCHOR_LIMIT if seconds is None else seconds)
    return prefix[last_end:] if last_end is not None else None


def _prompt_tail(grammar: Grammar, prefix: str, seconds: float | None) -> str:
    """The part of the prompt to replay: what follows its last start anchor (all of it, with an
    AnchorWarning, when it holds none)."""
    tail = _anchored_tail(grammar, prefix, seconds)
    if tail is not None:
        return tail
    anchor = grammar.start_anchor
    assert anchor is not None  # (without one the whole prompt is the tail)
    warnings.warn(AnchorWarning(
        f"the prefix holds no start anchor of grammar {grammar.name or '(anonymous)'} "
        f"({anchor.describe()}), so the whole prefix is read as model output. Pass the prompt "
        "rendered with this model's chat template, or the right grammar for it (grammar_parse.templates._detect), "
        'or prefix="" if the output is the whole message.'), stacklevel=caller_stacklevel())
    return prefix


def _replay_key(tail: str, options: ParseOptions, extended: bool) -> tuple[Any, ...]:
    """What a replayed prompt tail's state depends on beside the grammar: the tail and the options that
    shape a parse (a snapshot is shared by the parsers, and the specialised parser, with the same key)."""
    return tail, options.strict, extended, options.max_region_chars, options.max_json_depth


def _replay_prompt(parser: ResponseParser, prefix: str) -> None:
    """Replay in ``parser`` the tail of the prompt its output continues (see _prompt_tail), so that a region
    the template opened (``<think>`` in the prompt) is open when the output starts; its events are the
    parser's ``initial_events``. The same tail (a pre-filled "<think>\n") comes with every request: its
    replay is kept per grammar and parser options, and a new parser starts from a copy of the state it left."""
    tail = _prompt_tail(parser.grammar, prefix, parser.options.start_anchor_seconds)
    if not tail:
        return
    key = None if parser._trace is not None or len(tail) > MAX_REPLAY_CHARS else \
        _replay_key(tail, parser._options, parser._regions.extended)
    replays: dict[Any, _Replay] = parser.grammar.tables.shared.setdefault("replays", {})
    if key is not None and (replay := replays.get(key)) is not None:
        parser._restore(replay.state)
        parser._prefix_len = replay.prefix_len
        parser.initial_events = copy_json(replay.events)
        _quiet(parser)
        return
    parser._prefix_len = parser._regions.prefix_len = len(tail)
    parser._buf = tail
    parser._process(parser.initial_events, eos=False)
    # (not kept when it holds what the snapshot does not carry: errors, or the region builder's exceptions)
    if key is not None and parser._regions.shareable() and not parser.errors and parser._log is None:
        if len(replays) >= MAX_REPLAYS:
            replays.pop(next(iter(replays), None), None)  # the oldest (another thread may have taken it)
        replays[key] = _Replay(parser._state(parser._buf), parser._prefix_len, copy_json(parser.initial_events))


def specialised_parse(grammar: Grammar, text: str, prefix: str, tools: ToolTypes | None,
                      options: ParseOptions) -> oneshot.Parsed | None:
    """The message of a whole output from the grammar's specialised one-shot parser (grammar_parse._engine.oneshot)
    and how many of its characters went into no field (``discarded_spans`` summed), started where the session
    would start (the prompt's tail replayed: its snapshot, once a parser made one); None where that parser
    declines or cannot start, and the session parses the output."""
    if not oneshot.SPECIALISED or grammar.settle is not None or options.trace:
        return None
    fast = generated.specialised(grammar)
    tail = _anchored_tail(grammar, prefix, options.start_anchor_seconds) if prefix else ""
    if tail is None:
        return None  # (the session warns that the prompt holds no start anchor)
    read = reading_of(grammar, options.calls_in_reasoning)
    drafts = draft_states(grammar, read)
    start, buf, pos, output, frames, origin = fast.start, text, 0, copy_json(grammar.defaults), [], 0
    if tail:
        replay = grammar.tables.shared.get("replays", {}).get(_replay_key(tail, options, False))
        if replay is None:
            return None
        state = replay.state
        found = fast.find(tuple(state.stack), state.run)
        output, kept, _, _, loose = state.regions
        regions = oneshot.open_regions(kept, state.base)
        if found is None or loose or regions is None:
            return None
        start, buf, pos, output, frames = found, state.buf + text, state.pos, copy_json(output), regions
        origin = replay.prefix_len - state.base  # (the output's first character, in the buffer)
    return with_json_depth(options.max_json_depth, fast.parse, buf, pos, start, output, frames, tools,
                           options.max_region_chars, drafts, read == "fallback", origin)


# ---------------------------------------------------------------------------- the message at the end
def _final_message(syntax: _Syntax, grammar: Grammar, strict: bool) -> Message:
    """The message at the end of the output: a required field it did not give is an error (recorded in
    lenient mode), empty fields are left out (the template's defaults kept), and the lenient-mode problems
    go under ``parse_errors``."""
    output = syntax.regions.output
    missing = missing_fields(grammar, output)
    if missing:
        error = ParseError(
            f"Required response_template fields missing from parsed output: {missing}",
            code="parse.missing_field",
            message_so_far=output,
            hint="The model did not produce them; mark the fields optional if that is acceptable.",
        )
        if strict:
            raise error
        syntax.record(error.code, str(error), missing[0], None)
    syntax.regions.output = without_empty(output, grammar.defaults, syntax.ledger.errors)
    return syntax.regions.output


def _settled_message(syntax: _Syntax, grammar: Grammar, text: str, tools: ToolTypes | None, strict: bool,
                     events: list[Event]) -> Message:
    """A settled grammar's message: its finalize hook's run over the whole output ``text``, typed by the
    tools; where it disagrees with the streamed regions, one ``correction`` event in ``events`` says which
    fields. When the hook fails, lenient mode records why and the regions' message stands."""
    syntax.regions.events = events
    streamed = without_empty(syntax.regions.output, grammar.defaults, [])
    try:
        final: Message = grammar.settle.settle(text)
    except GrammarParseError as e:
        if strict:
            raise
        syntax.record(e.code, str(e), None, None)  # lenient: the regions' message stands
        syntax.regions.output = without_empty(syntax.regions.output, grammar.defaults, syntax.ledger.errors)
        return syntax.regions.output
    if tools is not None and isinstance(final, dict):
        for key, value in final.items():
            final[key] = tools.apply(value)
    if not isinstance(final, dict):
        changed = sorted(streamed)
    else:
        changed = sorted(k for k in set(final) | set(streamed)
                         if k not in final or k not in streamed or not _same(final[k], streamed[k]))
    if changed:
        events.append({"type": "correction", "fields": changed, "message": final})
    syntax.regions.output = final
    return final


# ---------------------------------------------------------------------------- for the scan
def _fast_path(info: StateInfo, run: Terminal | None, frames: list[Frame], context: int) -> _FastPath | None:
    """What feed() needs to route a quiet chunk without scanning, if the parser state ``info`` allows it:
    a run of its text is under way (``run``), and the live delimiters are all literal. ``context``: the
    characters of routed text the grammar's delimiters look back at (tables.context), which stay buffered."""
    quiet, text = info.scanner.quiet, info.text
    if quiet is None or text is None or run is not text:
        return None
    if text.role != "text":
        return (quiet.trigger, quiet.hits, quiet.hold_space, None, None, info.scanner.quiet_heads, context)
    frame = frames[-1]  # (a component's too: its chunks carry its path, as on the general route)
    if info.scanner.value_end is not None and frame.walk is None or frame.passthrough:
        return None  # the walk to the value's end has not started; text that goes to the region around
    return (quiet.trigger, quiet.hits, quiet.hold_space, frame, frame.walk, info.scanner.quiet_heads, context)


#: A run the scan holds past this many characters makes feed() hold whitespace chunks aside (see _quiet).
HELD_RUN = 256
#: The first character at or after a position that is not whitespace as the ``regex`` module's ``\s`` reads it.
_NOT_SPACE = re.compile("[^" + re.escape(REGEX_SPACE) + "]").search


def _quiet(parser: ResponseParser) -> None:
    """After a scan, how feed() may take the next chunks: on the fast path (see _fast_path) when nothing
    is held back (the scan reached the buffer's end, no lookbehind, no trace), or holding aside a
    whitespace run that only a leading ``\\s*`` may claim (a region's opener followed by a flood,
    before any text: more whitespace cannot change what the scan decides, so it is neither scanned nor
    joined into the buffer); and whether a chunk that only grows a delimiter's start may be held unscanned
    (``_pending``: see feed). None of these while a draft is open: it keeps every piece of output it may read
    again."""
    if parser._drafting.open is not None:
        parser._fast, parser._held_space, parser._pending, parser._waiting, parser._long = None, False, None, None, None
        return
    info = parser._syntax.states[parser._stack[-1]]
    buf, pos = parser._buf, parser._pos
    scanner = info.scanner
    # (no fast path where the scan holds a match right after a text it looks back at at the buffer's end, or
    # where a chunk would land at the text's start, which a delimiter may match at: QuietTest.anchored)
    parser._fast = None if pos != len(buf) or parser._trace is not None or \
        scanner.behind_ends is not None and buf.endswith(scanner.behind_ends) or \
        not pos and scanner.quiet is not None and scanner.quiet.anchored \
        else _fast_path(info, parser._syntax.run, parser._syntax.frames, parser._grammar.tables.context)
    run = len(buf) - pos
    quiet = scanner.quiet if run <= scanner.repeat_space else scanner.quiet_past_repeats
    # (neither test reads the run past what decides it: after every feed, a run the scan holds at a long
    # flood, ``\s*;`` pending over megabytes of spaces, would make each feed cost the flood's length)
    # Past HELD_RUN characters held by the scan, whitespace waits aside too: joining each chunk into the buffer
    # copied the whole run per chunk (llama3_json's ``;\s*(?=\{...)`` pending over a flood). Holding a
    # chunk to feed it with the next is another chunking of the same text, which decides the same.
    parser._held_space = run > 0 and (run > HELD_RUN or quiet is not None and quiet.hold_space and
                                      _NOT_SPACE(buf, pos) is None)
    # (a run that is no prefix of a delimiter's start now is none once it grows: no use checking it)
    # (a run held past HELD_RUN characters that is not whitespace: its pieces are kept aside too, where the
    # scanner can tell from each piece alone that the scan would hold it again: see Scanner.holds_on)
    parser._long = _LongRun(scanner, len(buf)) if run > HELD_RUN and scanner.searches is not None \
        and parser._trace is None else None
    heads = scanner.pending_heads
    parser._pending = None if parser._held_space or heads is None or run and (
        run > heads.reach or "\0" + buf[pos:] not in heads.joined) else heads
    parser._waiting = _waiting(parser) if parser._coalesce else None


#: What lets a piece of output wait (see _waiting): the search for the characters that end a delimiter, the
#: one for those that start one (None: not usable), how many characters the open region may still take, the
#: call streamer where the region is a call (its text waits while no reader reads it), and its state's tally.
_Waiting = tuple[Search, "Search | None", int, "ToolCallStreamer | None", list[int]]
#: A state where this many scans in a row (per process) let no piece wait is no longer asked (see _waiting).
WAIT_TRIES = 256


def _waiting(parser: ResponseParser) -> _Waiting | None:
    """After a scan, whether the next pieces of output may wait for a later one, for a parser that coalesces
    a call's parts (``coalesce_calls``, see _attach_calls): where text goes only to the open region and that
    region's text moves nothing a wire adapter sends (a call's component, or a call its components make: their
    text events say nothing until a delimiter closes one), a piece completes no delimiter when it holds no
    character that ends one live now or once text has moved the parser on, or, while nothing held or waiting
    holds a character that starts one, no such character; and it sets off nothing else while the region keeps
    within its size limit. The tests and that room, or None.

    Asking costs each scan there a little; a state where, of WAIT_TRIES scans in a row, none let a piece wait
    that would have taken a scan (GLM's held runs always hold a delimiter's start and end,
    ``<arg_key>city</arg_key>``, and what waits there is text the fast path takes anyway) is not asked again in
    the process. That changes what a stream costs, never what it gives."""
    syntax = parser._syntax
    frames = syntax.frames
    if parser._held_space or parser._held or not frames or frames[-1].region.rule not in parser._coalesce:
        return None
    state = syntax.stack[-1]
    key = state if syntax.run is syntax.states[state].text else ~state
    known = parser._wait_states
    found = known.get(key, _UNKNOWN)
    if found is _UNKNOWN:
        found = known[key] = _text_only(syntax, key >= 0)
    frame = frames[-1]
    if found is None or found.region is not frame.region or frame.passthrough:
        return None
    _, ends, starts, is_call, tries = found
    tries[0] += 1
    if tries[0] >= WAIT_TRIES:
        if not tries[1]:
            known[key] = None
            if not any(known.values()):
                known[_NOWHERE] = True  # (no state is asked any more: new parsers of the grammar do not coalesce)
            return None
        tries[0] = tries[1] = 0
    buf, pos = parser._buf, parser._pos
    room = parser._max_region - frame.size - (len(buf) - pos)
    call = parser.calls if is_call else None
    if pos == len(buf) or starts is not None and starts(buf, pos) is None:
        return ends, starts, room, call, tries  # (no delimiter starts in the held run)
    return (ends, None, room, call, tries) if ends(buf, pos) is None else None


def _waits(parser: ResponseParser, waiting: _Waiting, text: str) -> bool:
    """Whether ``text`` may wait (see _waiting); if so, what the next piece is tested with."""
    ends, starts, room, call, tries = waiting
    if len(text) > room or call is not None and call.reader is not None:
        return False  # (past the limit the region reports: that is an event; a call read as it streams)
    if ends(text) is None:
        if starts is not None and starts(text) is not None:
            starts = None  # a delimiter may start in what waits: from here, only pieces without an end wait
    elif starts is None or starts(text) is not None:
        return False
    if parser._fast is None:
        tries[1] += 1  # (a piece that would have taken a scan: where the fast path would take it, less is saved)
    parser._waiting = (ends, starts, room - len(text), call, tries)
    return True


_UNKNOWN = object()
_NOWHERE = -(2 ** 62)  # (a key no state has: see _waiting)


def _coalescing(grammar: Grammar, wanted: bool) -> tuple[dict[int, Any], frozenset[str]]:
    """For a parser that coalesces a call's parts (``wanted``): what its grammar's states let wait, shared by the
    grammar's parsers (see _text_only), and the rules of the regions whose text may wait (a call's components,
    calls made of them): none where delimiters look back at text before them, or no state is asked any more."""
    if not wanted:
        return {}, frozenset()
    known: dict[int, Any] = grammar.tables.shared.setdefault("waits", {})
    if grammar.tables.context or _NOWHERE in known:
        return known, frozenset()
    return known, frozenset(r.rule for r in grammar.regions.values() if r.unframed_text)


class _WaitState(NamedTuple):
    """What a state lets wait (see _text_only)."""

    region: Region
    ends: Search
    starts: Search | None
    is_call: bool
    tries: list[int]


def _text_only(syntax: _Syntax, in_run: bool) -> _WaitState | None:
    """For a parser in the state on top of ``syntax.stack`` (``in_run``: a text run under way): the one region
    text goes to here and after text's first shift (which may change the live delimiters), the search for the
    characters that end any of those delimiters and the one for those that start them (None: not known),
    whether the region is a call, and the state's tally (see _waiting). None where that region's text is not
    one a wire adapter frames nothing of, text would go elsewhere, shift another terminal, reduce a rule (the
    answer would depend on more of the stack than its top) or set off a callback other than its own text's, or a
    delimiter's end characters are not known."""
    stack = syntax.stack
    info = syntax.states[stack[-1]]
    term = info.text
    region = term.region if term is not None else None
    if term is None or region is None or term.role != "text" or info.text_candidates or not region.unframed_text:
        return None
    infos = [info]
    if not in_run:
        fired: list[Any] = []
        record = {name: (lambda _context, name=name: fired.append(name)) for name in syntax.callbacks}
        trial = list(stack)  # (the text's shift, tried on a copy: it changes nothing)
        if not feed(syntax.table, trial, term.name, record) or len(trial) != len(stack) + 1 or \
                syntax.states[trial[-1]].default_rule is not None:
            return None
        after = syntax.states[trial[-1]]
        if any(name != term.name for name in fired) or after.text is not term or after.text_candidates:
            return None
        infos.append(after)
    ends: set[str] = set()
    starts: set[str] | None = set()
    for state in infos:
        chars = state.scanner.end_chars
        if chars is None:
            return None
        ends.update(chars)
        firsts = state.scanner.start_chars
        starts = None if firsts is None or starts is None else starts | set(firsts)
    return _WaitState(region, any_of(ends), None if starts is None else any_of(starts), region.parent is None, [0, 0])


class _LongRun:
    """A run held past HELD_RUN characters (see _quiet): its scanner, how much of the buffer and of the pieces
    kept aside its notes cover."""

    __slots__ = ("scanner", "noted", "walked")

    def __init__(self, scanner: Scanner, noted: int) -> None:
        self.scanner, self.noted, self.walked = scanner, noted, 0

    def keeps(self, parser: ResponseParser, text: str) -> bool:
        """Whether ``text`` is kept aside (the scan would hold the run again); if so, it is."""
        held = parser._held
        new = text if self.walked == len(held) else "".join(held[self.walked:]) + text
        if not self.scanner.holds_on(parser._cache.progress, parser._pos, self.noted, new):
            return False
        held.append(text)
        self.walked, self.noted = len(held), self.noted + len(new)
        return True


def _finalized_error() -> FinalizedError:
    return FinalizedError("ResponseParser already finalized", code="usage.finalized",
                          hint="Create a new ResponseParser for the next response.")


def _json_value_end(frames: list[Frame], region: Region, buf: str, base: int) -> int:
    """Where the open ``region``'s JSON value ends in ``buf`` (whose stream offset is ``base``; -1: not yet,
    or it is not on top). The walk goes on from where the last scan left it, so the cost is linear in the
    region's text."""
    frame = frames[-1] if frames else None
    if frame is None or frame.region is not region:
        return -1
    walk = frame.walk
    if walk is None:
        walk = frame.walk = JsonEnd(frame.start + len(frame.open_text))
    end = walk.advance(buf, base)
    return -1 if end is None else end - base


# ---------------------------------------------------------------------------- the parser under the scan
class _Syntax:
    """The parser proper, under the scan: the LALR state stack that tables.feed drives over Lark's table,
    fed only structure tokens (delimiters, and the first text token of a run), and the region builder its
    reductions call, into whose open region the scan routes text (bounded by ``max_region_chars``). It
    holds no buffer: the scan hands it text with its output offset, and says where it is (``position``)."""

    __slots__ = ("states", "table", "end_state", "stack", "strict", "max_region", "ledger", "trace", "position",
                 "run", "regions", "frames", "callbacks", "sections")

    def __init__(self, grammar: Grammar, tools: ToolTypes | None, options: ParseOptions, extended: bool,
                 ledger: _Ledger, position: Callable[[], int]) -> None:
        tables = grammar.tables
        self.states, self.table = tables.states, tables.parse_table.states
        self.end_state = tables.parse_table.end_states["start"]
        self.stack: list[int] = [tables.parse_table.start_states["start"]]
        self.strict, self.max_region = options.strict, options.max_region_chars
        self.ledger, self.trace = ledger, ledger.trace
        self.position = position  # the stream offset the scan has reached
        self.run: Terminal | None = None  # text terminal whose run the parser has already seen
        self.regions = RegionBuilder(grammar, tools=tools, strict=options.strict, extended=extended,
                                     position=position, report=self.record, unexpected=self.unexpected)
        self.frames = self.regions.frames
        self.callbacks = self.regions.callbacks()
        self.sections = call_section_states(grammar)

    def text(self, term: Terminal | None, text: str, start: int) -> None:
        """Route ``text`` (at output offset ``start``) as the text terminal ``term`` (None: the one the parser
        accepts here) into the open region; text that belongs to no field is discarded (and reported)."""
        if term is None:
            term = self.accepted_text()
        if term is None:
            if self.strict:
                raise self.unexpected(f"text {text[:40]!r} where the grammar allows none")
            # the message names no text: a run of stray text is one error however it was chunked
            self.record("parse.unexpected", "text where the grammar allows none was discarded (see the span)",
                        None, [start, start + len(text)])
            self.ledger.discard(start, start + len(text))
            return
        if self.run is not term:
            if self.ledger.section.start is not None:
                self.end_run()
            self.run = None
            if term.role == "unclaimed":  # (in a call section: reported where it is more than whitespace)
                self.ledger.section.field = self.sections.get(self.stack[-1])
            self.shift(term.name)  # (the text itself never goes to the parser: no copy)
            self.run = term
        if term.role != "text":
            self.ledger.discard(start, start + len(text), text)
            return
        frame = self.frames[-1]
        frame.size += len(text)
        if frame.size > self.max_region:
            if self.strict:
                raise ParseError(f"region {frame.field} is longer than {self.max_region} characters",
                                 code="parse.region_too_large", field=frame.field,
                                 position=frame.start - self.regions.prefix_len,
                                 hint="Raise max_region_chars if such output is expected.")
            keep = max(0, len(text) - (frame.size - self.max_region))
            if keep < len(text):
                self.record("parse.region_too_large", f"region {frame.field} is longer than {self.max_region} "
                            "characters; the rest of it is discarded", frame.field, [start + keep, start + len(text)])
            self.ledger.discard(start + keep, start + len(text))
            text = text[:keep]
            if not text:
                return
        if self.trace is not None:
            self.trace.append({"kind": "text", "field": frame.field, "start": start, "end": start + len(text)})
        self.regions.events.append(self.regions.chunk(frame, text))

    def repeat(self, term: Terminal, text: str, start: int) -> None:
        """An opener written again at the start of its region (``text`` at output offset ``start``) is
        markup: consumed, no token. (Text that reached the region first, whitespace of the prompt, makes it
        text after all.)"""
        frame = self.frames[-1] if self.frames else None
        if frame is None or frame.region is not term.region or any(chunk.strip() for chunk in frame.chunks):
            self.text(None, text, start)
        elif self.trace is not None:
            self.trace.append({"kind": "delimiter", "terminal": term.name, "start": start, "end": start + len(text)})

    def delimiter(self, term: Terminal, text: str, at: int, captures: Any, start: int) -> None:
        """Shift the delimiter ``term``, matched as ``text`` at stream offset ``at`` (output offset ``start``)
        with ``captures`` (its named groups)."""
        if self.ledger.section.start is not None:
            self.end_run()
        self.run = None
        if self.trace is not None and text:
            self.trace.append({"kind": "delimiter", "terminal": term.name, "start": start, "end": start + len(text)})
        regions = self.regions
        regions.shifting = (term, at, text, captures)
        self.shift(term.name)
        regions.shifting = None

    def end_run(self) -> None:
        """The run of text under way ends (a delimiter, other text, the end) holding text in a call section
        outside every call (see regions.call_section_states): it is reported, in both modes
        (errors.REPORTED_IN_STRICT: the calls around it are certain)."""
        if (problem := self.ledger.section.close()) is not None:
            self.record(problem["code"], problem["message"], problem["field"], problem["span"])

    def accepted_text(self) -> Terminal | None:
        """Which of several text terminals the parser accepts here (tried on a copy of its state)."""
        for term in self.states[self.stack[-1]].text_candidates:
            if feed(self.table, list(self.stack), term.name, {}):  # (no callbacks: a trial changes nothing)
                return term
        return None

    def shift(self, name: str) -> None:
        """Feed the terminal ``name`` to the parser, and reduce at once where no lookahead is needed, so
        regions close when their delimiter completes."""
        stack, table = self.stack, self.table
        if not feed(table, stack, name, self.callbacks, self.regions):
            raise self.unexpected(f"{name} is not allowed here (expected {self.expected()})")
        states = self.states
        callbacks, regions = self.callbacks, self.regions
        while (rule := states[stack[-1]].default_rule) is not None:
            reduce(table, stack, rule, callbacks.get(rule), regions)

    def end(self) -> None:
        """The end of the output."""
        if self.ledger.section.start is not None:
            self.end_run()
        self.run = None
        if not feed(self.table, self.stack, "$END", self.callbacks, self.regions, self.end_state):
            # The output stopped where the grammar wanted more (a region's close delimiter, a required
            # part): close what is open, innermost first, as a truncated stream should be.
            self.regions.close_open()

    def expected(self) -> list[str]:
        """The terminals the parser takes in its current state."""
        return sorted(name for name in self.table[self.stack[-1]] if name.isupper() and name != "$END")

    def unexpected(self, what: str) -> ParseError:
        """Input the grammar does not allow here (stray text, a delimiter out of place): the same code as
        the lenient record of it."""
        offset = self.position() - self.regions.prefix_len
        return ParseError(
            f"unexpected input at offset {offset}: {what}",
            code="parse.unexpected",
            position=offset,
            message_so_far=self.regions.output,
            expected=self.expected(),
            hint="Check that the output matches the grammar here, or parse with strict=False to drop it.",
        )

    def record(self, code: str, message: str, field: str | None, span: list[int] | None) -> None:
        """Lenient mode: keep a problem (see _Ledger.record), and tell the stream."""
        event = self.ledger.record(code, message, field, span)
        if event is not None:
            self.regions.events.append(event)


class ResponseParser:
    """Streaming parser for one model response.

    ``template`` is a response_template dict, a compiled Grammar, or a built-in grammar name (or a path to
    a ``.lark`` file). ``prefix`` is the prompt the model continued (pass ``""`` if the output is
    complete on its own): it is truncated after the last start anchor and replayed, so a region the
    template pre-opened (``<think>`` in the prompt) is parsed correctly; its events are ``initial_events``.

    ``strict=False`` (lenient mode) never raises because of model output: a region whose text cannot be parsed keeps
    its raw text as its value, and the problem is recorded in :attr:`errors`, in the message under ``"parse_errors"``,
    and as a ``parse_error`` event. A tool-call region that cannot be parsed still gives its calls
    (``grammar_parse._engine.salvage``): each named one is a call dict, with the raw text of arguments that did not
    parse and an ``errors`` list; its text that names no function goes to the text around it (content, or the
    reasoning it was written in). ``discarded_spans`` lists the output text that belongs to no field; ``trace=True``
    records every span (:attr:`spans`). ``max_region_chars`` bounds one region's text, ``max_json_depth`` the nesting
    of its JSON values. ``options=ParseOptions(...)`` gives these switches and limits as one value (the keywords are
    shorthands for its fields; a keyword that contradicts it is an ArgumentError). With ``extended_events=True`` each
    ``region_open`` also carries ``captures``, the named groups of its open delimiter; with ``call_events=True`` too,
    the calls come out in the same pass (``call_open``, ``call_arguments``, ``call_close``; :attr:`calls` is their
    streamer), and ``coalesce_calls=True`` lets a piece that only adds to a call's part wait (see _waiting).

    Call markup inside a reasoning block that the model closes later is reasoning text (a drafted or
    quoted call, as the peers read it); a call after a reasoning opener that is never closed is a call.
    Until that is known, what follows such markup is held back (grammar_parse._engine.drafts).
    ``calls_in_reasoning`` chooses the reading (default: the grammar's ``calls_in_reasoning`` directive,
    else ``"never"``): ``"never"`` as above; ``"fallback"``, a call in a closed reasoning block is a call
    when no call follows the block (families known to call from inside their reasoning, Qwen3); ``"always"``
    (or True), every call written in reasoning is a call.

    >>> p = ResponseParser("qwen3", prefix="")
    >>> events = p.feed("<think>hm</think>Hi")
    >>> message, final_events = p.finalize()
    >>> message["content"]
    'Hi'
    """

    def __init__(self, template: TemplateLike, prefix: str | None = None, *, tools: Iterable[Any] | None = None,
                 strict: bool | None = None, extended_events: bool = False, trace: bool | None = None,
                 max_region_chars: int | None = None, max_json_depth: int | None = None,
                 calls_in_reasoning: str | bool | None = None, options: ParseOptions | None = None,
                 call_events: bool = False, coalesce_calls: bool = False):
        expect_text(prefix, "prefix", optional=True)
        # (the keywords are shorthands for the options' fields: resolved once here, never per chunk)
        self._options = options = merge_options(options, strict=strict, trace=trace, max_region_chars=max_region_chars,
                                               max_json_depth=max_json_depth, calls_in_reasoning=calls_in_reasoning)
        self._grammar = grammar = resolve_grammar(template)
        self._drafting = _DraftReading(grammar, options.calls_in_reasoning)
        # A grammar settled at finalize (a legacy schema's whole run) needs the whole output, and no prompt.
        settle = grammar.settle
        prefix = _output_prefix(prefix, settle)
        self._log: list[str] | None = None if settle is None else []
        self._tools = ToolTypes.from_tools(tools)
        self._ledger = ledger = _Ledger(options.trace)
        self.errors: list[dict[str, Any]] = ledger.errors  # lenient mode: what could not be parsed (see _Ledger)
        self._trace = ledger.trace  # (the ledger's, read on the hot path)
        self._max_region = options.max_region_chars
        self._degraded = False  # lenient mode after an unrecoverable error: the rest is discarded
        self._buf = ""
        self._held: list[str] = []  # a whitespace run held for a leading \s*: joined once (per chunk: quadratic)
        self._held_space = False  # feed() may hold whitespace (or a long run's pieces: _long) aside (see _quiet)
        self._long: _LongRun | None = None
        self._pos, self._base, self._prefix_len = 0, 0, 0  # (_base: the stream offset of _buf[0])
        self._cache = SearchCache()
        self._last_empty: tuple[int, str] | None = None
        self._fast: _FastPath | None = None
        self._pending: HeadsTest | None = None  # (see feed and _quiet)
        self._waiting: _Waiting | None = None  # (see _waiting)
        self.calls: ToolCallStreamer | None = None
        self._wait_states, self._coalesce = _coalescing(grammar, coalesce_calls and self._trace is None)  # (not traced)
        self._finalized = False
        self._syntax = syntax = _Syntax(grammar, self._tools, options, extended_events, ledger,
                                        lambda: self._base + self._pos)
        # (the syntax's region builder, its open frames and its LALR state stack, read on the hot path)
        self._regions, self._stack = syntax.regions, syntax.stack
        self.initial_events: list[Event] = []
        if prefix:
            with_json_depth(self.max_json_depth, _replay_prompt, self, prefix)
        self._drafting.arm(grammar)
        self._start = (self._base, self._pos, len(self._buf))  # (fed nothing while this holds: see finalize)
        if call_events:
            self.calls = _attach_calls(self, extended_events)  # (its calls, as sent; typed by the parser's tools)
            self._waiting = _waiting(self) if self._drafting.open is None else None  # (see _quiet)
        elif coalesce_calls:
            raise ArgumentError("coalesce_calls=True needs call_events=True (it holds what moves no call)",
                                code="usage.argument", hint="Pass call_events=True and extended_events=True too.")

    # ------------------------------------------------------------------ public API
    @property
    def grammar(self) -> Grammar:
        """The compiled grammar this parser runs."""
        return self._grammar

    @property
    def options(self) -> ParseOptions:
        """The parse options in force (those given, with the shorthand keywords folded in)."""
        return self._options

    @property
    def max_json_depth(self) -> int:
        """The JSON nesting limit in force (made current while the parser runs: see reading.json_depth)."""
        return self._options.max_json_depth

    @property
    def message(self) -> Message:
        """The message as parsed so far (closed regions only)."""
        return self._regions.output

    @property
    def discarded_spans(self) -> list[tuple[int, int]]:
        """[start, end) offsets of output text that went into no field (text outside every region)."""
        return [(a, b) for a, b in self._ledger.discarded]

    @property
    def spans(self) -> list[dict[str, Any]]:
        """With ``trace=True``: every consumed piece of the output in order, as ``{"kind": "text" |
        "delimiter" | "discarded", "start", "end", "field" or "terminal"}`` (prompt replay excluded)."""
        if self._trace is None:
            raise UsageError("this parser records no spans", code="usage.no_trace",
                             hint="Create the parser with trace=True to record spans.")
        return self._trace

    @property
    def finalized(self) -> bool:
        """Whether :meth:`finalize` has ended the stream (the parser takes no more output)."""
        return self._finalized

    def feed(self, text: str) -> list[Event]:
        """Add the next piece of model output; return the events it completes."""
        fast = self._fast  # (None once finalized, while a draft is open or whitespace is held: see _quiet)
        if fast is not None and type(text) is str and text:
            trigger, search, hold_space, frame, walk, heads, context = fast
            if not (text.find(trigger) >= 0 if search is None else search(text)) or \
                    heads is not None and heads.quiet(text):
                # Fast path (most chunks): no delimiter can start in this chunk, so all of it is text,
                # except a trailing whitespace run that a leading \s* may still claim. Text that would
                # pass the region size limit takes the general route, which applies it.
                if self._log is not None:
                    self._log.append(text)
                # (this path runs for most chunks of a stream: what it calls is written out inline)
                if hold_space:
                    self._waiting = None  # (whitespace may be held back: see _waiting)
                    if not text.strip(REGEX_SPACE):
                        self._held.append(text)  # the held run grows (no JSON value ends in whitespace)
                        return []
                    combined = (self._join_held() if self._held else self._buf) + text
                    kept = combined.rstrip(REGEX_SPACE)
                else:
                    kept = combined = self._buf + text  # (nothing is held where no whitespace run is)
                # (a region that ends with its JSON value takes the general route once the value ends)
                if frame is None or frame.size + len(kept) - self._pos <= self._max_region and \
                        (walk is None or walk.advance(combined, self._base) is None):
                    if self._pos or context:  # (delimiters look back: the text they read stays buffered)
                        kept, start = _keep_context(self, combined, kept)
                    else:
                        self._buf = combined[len(kept):]
                        start = self._base - self._prefix_len
                        if "\n" in kept:  # (_Ledger.count_lines, for the few chunks that hold a line break)
                            ledger = self._ledger
                            ledger.lines_before += kept.count("\n")
                            ledger.line_start = start + kept.rfind("\n") + 1
                        self._base += len(kept)
                    if not kept:
                        return []
                    if frame is None:
                        self._ledger.discard(start, start + len(kept), kept)
                        return []
                    frame.size += len(kept)
                    frame.chunks.append(kept)  # (RegionBuilder.chunk, for a frame that is not passed through)
                    event: RegionChunk = {"type": "region_chunk", "field": frame.field, "text": kept,
                                          "dirty": frame.region.dirty}
                    if frame.path is not None:
                        event["path"] = frame.path
                    return [event]
                self._buf = combined
                return self._general([])
        if type(text) is not str:
            expect_text(text, "text")
        if self._finalized:
            raise _finalized_error()
        if text:
            if self._log is not None:
                self._log.append(text)
            if self._held_space:
                if not text.strip(REGEX_SPACE):
                    self._held.append(text)  # a pending whitespace run grows: the scan would decide nothing new
                    return []
                if self._long is not None and self._long.keeps(self, text):
                    return []  # (a long run goes on: see _LongRun)
            if (pending := self._pending) is not None and pending.stays_pending(self._buf[self._pos:] + text):
                # A delimiter's start grows (``<par`` + ``amet`` of ``<parameter=``): the scan would commit
                # nothing and route nothing, so it is left to the chunk that completes or breaks it.
                self._buf += text
                self._fast = self._waiting = None
                return []
            if self._drafting.open is not None:
                self._drafting.open.raw.append(text)
            self._buf = self._join_held() + text
        return self._general([])

    def _general(self, events: list[Event]) -> list[Event]:
        """The general route: scan the buffer and take what it completes."""
        with_json_depth(self._options.max_json_depth, _guarded, self, events, False)
        return events

    def _join_held(self) -> str:
        """The buffer, with the held whitespace run joined into it (one copy for the whole run)."""
        if self._held:
            self._buf += "".join(self._held)
            self._held.clear()
        return self._buf

    def finalize(self, text: str = "") -> tuple[Message, list[Event]]:
        """End the stream: close open regions, return the message and the last events.

        ``text``, if given, is a last piece of output; ``finalize(text)`` gives the same message as
        ``feed(text)`` followed by ``finalize()`` but skips the streaming decisions (one-shot parsing).
        """
        return with_json_depth(self.max_json_depth, self._finalize, text)

    def _finalize(self, text: str) -> tuple[Message, list[Event]]:
        if self._finalized:
            raise _finalized_error()
        if (done := _specialised_finalize(self, text)) is not None:
            return done
        self._finalized = True
        self._fast = self._waiting = None
        self._buf = self._join_held() + text
        if text:
            if self._log is not None:
                self._log.append(text)
            if self._drafting.open is not None:
                self._drafting.open.raw.append(text)
        events: list[Event] = []
        _guarded(self, events, eos=True)
        self._regions.settle_loose()
        if self._log is not None:
            return _settled_message(self._syntax, self._grammar, "".join(self._log), self._tools,
                                    self._options.strict, events), events
        return _final_message(self._syntax, self._grammar, self._options.strict), events

    # ------------------------------------------------------------------ lenient mode and accounting
    def _offset(self, buffer_pos: int) -> int:
        """Offset in the model output (negative inside the replayed prompt) of a buffer position."""
        return self._base + buffer_pos - self._prefix_len

    def _discard(self, end: int) -> None:
        """Drop buffer text up to ``end`` (it belongs to no field), and report its span."""
        start = self._pos
        if end > start:
            self._ledger.discard(self._offset(start), self._offset(end))
            self._pos = end

    # ------------------------------------------------------------------ states to go back to (a prompt's, a draft's)
    def _state(self, buf: str) -> _State:
        """This parser's state, with ``buf`` as its buffer (the buffer, or the part of it a draft keeps)."""
        return _State(list(self._stack), buf, self._pos, self._base, self._syntax.run, self._last_empty,
                      self._ledger.state(), self._regions.state())

    def _restore(self, state: _State) -> None:
        """Take a :meth:`_state` (copied: a replay's is shared)."""
        self._stack[:] = state.stack
        self._buf, self._pos, self._base = state.buf, state.pos, state.base
        self._syntax.run, self._last_empty = state.run, state.last_empty
        self._ledger.restore(state.ledger)
        self._regions.restore(state.regions)
        self._cache = SearchCache()

    # ------------------------------------------------------------------ the loop
    def _process(self, events: list[Event], eos: bool) -> None:
        drafting = self._drafting
        drafting.out = events
        self._regions.events = events if drafting.open is None else drafting.open.held
        states = self._syntax.states
        parser_stack = self._stack
        while True:
            info = states[parser_stack[-1]]
            buf, pos = self._buf, self._pos
            scanner = info.scanner
            scan = scanner.fast_scan if oneshot.SPECIALISED else scanner.scan  # (written out, or the reference)
            term, hit, hold = scan(buf, pos, eos, self._cache, -1 if scanner.value_end is None else
                                   _json_value_end(self._syntax.frames, scanner.value_end, buf, self._base))
            if term is not None and hit is not None:  # (the scanner gives both or neither)
                start, end, _ = hit
                if start > pos and self._route(info, start):
                    continue
                if parser_stack[-1] in drafting.states and (upto := drafting.take(self, info, term, start, end)) >= 0:
                    self._route(info, upto)  # (the delimiter, read as reasoning text)
                    continue
                if term.role == "repeat":
                    self._syntax.repeat(term, buf[start:end], self._base + start - self._prefix_len)
                    self._pos = end
                    continue
                self._pos = end
                if start == end:
                    # A zero-width close of a region that never opened does nothing and ends the pass
                    # (transformers); any zero-width delimiter firing twice in one place would loop.
                    marker = (self._base + start, term.name)
                    frames = self._syntax.frames
                    idle = idle_close(term, frames)
                    if term.role == "open" and frames and frames[-1].region is term.region \
                            and end < len(buf):
                        # A lookahead opener inside its own open region (a `{` in the JSON it opened) is
                        # the region's text: it would end the region and open another at the same place.
                        self._route(info, end + 1)
                        continue
                    if idle or marker == self._last_empty:
                        if eos:
                            if drafting.undo(self):
                                continue
                            self._discard(len(buf))  # transformers leaves the rest unparsed
                            self._syntax.end()
                        break
                    self._last_empty = marker
                self._syntax.delimiter(term, buf[start:end], self._base + start, hit[2],
                                       self._base + start - self._prefix_len)
                if drafting.open is not None:
                    drafting.after_shift(drafting.open, term, self._regions)
                continue
            if eos:
                if pos < len(buf) and self._route(info, len(buf)):
                    continue
                if drafting.undo(self):
                    continue
                self._syntax.end()
                break
            if hold > pos and self._route(info, hold):
                continue
            break
        if not eos:  # (at the end nothing more is fed: no text to keep track of)
            _trim(self)
            _quiet(self)

    def _route(self, info: StateInfo, end: int) -> bool:
        """Route buffer text up to ``end`` into the current region; True when the delimiters that are
        live changed on the way (an ordered grammar), so the caller must scan again from the new place."""
        pos, wanted = self._pos, end
        syntax = self._syntax
        if info.text_sensitive and syntax.run is not info.text and end - pos > 1:
            end = pos + 1  # the first character decides the new state; scan the rest under it
        syntax.text(info.text, self._buf[pos:end], self._base + pos - self._prefix_len)
        self._pos = end
        return end < wanted or self._syntax.states[self._stack[-1]].scanner is not info.scanner


# ---------------------------------------------------------------------------- what stays in the buffer
def _trim(parser: ResponseParser) -> None:
    """Drop consumed text, keeping what delimiters may look back at."""
    cut = parser._pos - parser._grammar.tables.context
    if cut > 0:
        if parser._regions.opened:
            _mark_open_regions(parser, parser._buf, cut)
        lo = max(parser._prefix_len - parser._base, 0)  # (the replayed prompt has no lines of the output)
        parser._ledger.count_lines(parser._buf, lo, cut, parser._offset(0))
        parser._buf = parser._buf[cut:]
        parser._pos -= cut
        parser._base += cut
        parser._cache.clear()


def _mark_open_regions(parser: ResponseParser, buf: str, cut: int) -> None:
    """Where a region opened since the last time (``RegionBuilder.opened``) and ``buf[:cut]`` leaves the buffer:
    in strict mode, the line and column of each open region's start in it, which an error the region raises names
    (its value is parsed at its close, when the start may be long gone); kept for the regions open then."""
    regions, ledger = parser._regions, parser._ledger
    origin = parser._offset(0)
    end = origin + cut
    regions.opened = False
    if not parser._syntax.strict:
        return  # (lenient mode raises nothing: its errors are reported with their spans)
    marks = {}
    for frame in regions.frames:
        at = frame.start - parser._prefix_len
        found = ledger.marks.get(at) if at < origin else ledger.line_column(at, buf, origin) if at < end else None
        if found is not None:
            marks[at] = found
        elif at >= end:
            regions.opened = True  # (its start is still buffered: noted when it leaves)
    ledger.marks = marks


def _keep_context(parser: ResponseParser, combined: str, kept: str) -> tuple[str, int]:
    """The fast path's buffer (see feed) where delimiters look back at text before them: ``kept`` (the buffer's
    routed text, ``combined[:parser._pos]``, and the chunk's, less a trailing whitespace run held) is routed, and
    the buffer trimmed as after a scan (_trim keeps what the delimiters look back at). The text routed now, and
    its output offset."""
    at = parser._pos
    start = parser._base + at - parser._prefix_len
    parser._buf, parser._pos = combined, len(kept)
    _trim(parser)
    return kept[at:], start


def _specialised_finalize(parser: ResponseParser, text: str) -> tuple[Message, list[Event]] | None:
    """``finalize(text)`` of a parser fed nothing yet (one-shot: ``chat_message``, ``respond``), by the
    grammar's specialised one-shot parser, which also makes the session's events; None where it does not
    take the output (or the parser holds more than a replayed prompt), and the session parses it."""
    if not oneshot.SPECIALISED or not text or parser._log is not None or parser._trace is not None \
            or parser._held or parser._drafting.open is not None or parser._degraded or parser.errors \
            or parser._ledger.discarded or parser._last_empty is not None \
            or (parser._base, parser._pos, len(parser._buf)) != parser._start:
        return None
    base = parser._base
    built = oneshot.open_regions(parser._syntax.frames, base)
    fast = generated.specialised(parser._grammar)
    start = fast.find(tuple(parser._stack), parser._syntax.run)
    if start is None or built is None:
        return None
    events: list[Event] = []
    found = fast.parse(parser._buf + text, parser._pos, start, copy_json(parser._regions.output), built,
                       parser._tools, parser._max_region, parser._drafting.states,
                       parser._drafting.reading == "fallback", parser._prefix_len - base, events,
                       parser._regions.extended)
    if found is None:
        return None
    parser._finalized, parser._fast, parser._waiting = True, None, None
    parser._regions.output = found.message
    parser._regions.frames.clear()
    parser._ledger.discarded.extend(found.spans)
    return found.message, events


def _guarded(parser: ResponseParser, events: list[Event], eos: bool) -> None:
    """Process ``parser``'s buffer; in lenient mode an error the parser cannot recover from is recorded and
    the rest of the output is discarded (reported), instead of raising."""
    parser._fast = parser._pending = parser._waiting = parser._long = None  # set again by a _process that completes
    # (not after an error)
    parser._held_space = False
    if not parser._degraded:
        try:
            parser._process(events, eos)
            return
        except GrammarParseError as e:
            parser._drafting.release(parser._regions)  # (an error inside a draft is the draft's reading: it stands)
            if parser._options.strict:
                if isinstance(e, ParseError) and e.line is None and e.position is not None:
                    e.line, e.column = parser._ledger.line_column(e.position, parser._buf, parser._offset(0)) \
                        or parser._ledger.marks.get(e.position) or (None, None)  # (a region's start gone by)
                raise
            parser._regions.events = events
            parser._syntax.record(e.code, str(e), getattr(e, "field", None), None)
            parser._degraded = True
    parser._regions.events = events
    parser._discard(len(parser._buf))
    if eos:
        parser._regions.close_open()


def _attach_calls(parser: ResponseParser, extended: bool) -> ToolCallStreamer:
    """Make ``parser`` emit call events (``call_events=True``): one tool-call streamer reads its region events
    as they are made, and its deltas join them, after the region events of the same piece of output:
    ``call_open`` (a call's index, name and id), ``call_arguments`` (text that only appends, whose whole is the
    call's arguments as strict JSON) and ``call_close`` (the arguments' typed value and the wire's problems):
    what the wire adapters frame. The parser's own feed
    stays as it is for every other parser."""
    if not extended:
        raise ArgumentError("call_events=True needs extended_events=True (the streamer reads each region's "
                            "captures)", code="usage.argument", hint="Pass extended_events=True too.")
    streamer = ToolCallStreamer(parser.grammar, parser._tools, max_json_depth=parser.max_json_depth,
                                lenient=not parser.options.strict)
    feed, finalize = parser.feed, parser.finalize
    fields = streamer.fields
    held: list[str] = []  # (coalesce_calls) pieces that wait for the next one

    def feed_calls(text: str) -> list[Event]:
        if (waiting := parser._waiting) is not None and type(text) is str and _waits(parser, waiting, text):
            held.append(text)
            return []
        if held:  # (fed with this piece, in one pass: fed one by one, they would have given no call event)
            if type(text) is not str:
                events = _with_calls(streamer, feed("".join(held)))
                held.clear()
                return events + feed(text)  # (which says what is wrong with it)
            held.append(text)
            text = "".join(held)
            held.clear()
        events = feed(text)
        if not events or len(events) == 1 and events[0].get("field") not in fields:
            return events  # (most pieces: nothing, or text of a field without calls, which moves no call)
        return _with_calls(streamer, events)

    def finalize_calls(text: str = "") -> tuple[Message, list[Event]]:
        events = _with_calls(streamer, feed("".join(held))) if held else []
        held.clear()
        message, last = finalize(text)
        return message, events + _with_calls(streamer, last)

    parser.feed, parser.finalize = feed_calls, finalize_calls  # type: ignore[method-assign]
    parser.initial_events = _with_calls(streamer, parser.initial_events)
    return streamer


def _with_calls(streamer: ToolCallStreamer, events: list[Event]) -> list[Event]:
    """``events`` and, after them, the call events they complete."""
    deltas = streamer.feed(events) if events else ()
    if not deltas:
        return events
    for delta in deltas:
        kind = "call_open" if "name" in delta else "call_close" if "done" in delta else "call_arguments"
        events.append({"type": kind, **delta})  # type: ignore[arg-type]
    return events


@overload
def parse_response(
    text: str,
    template: TemplateLike,
    *,
    prefix: str | None = None,
    tools: Iterable[Any] | None = None,
    strict: bool | None = None,
    calls_in_reasoning: str | bool | None = None,
    max_region_chars: int | None = None,
    max_json_depth: int | None = None,
    options: ParseOptions | None = None,
) -> Message: ...


@overload
def parse_response(
    text: list[str],
    template: TemplateLike,
    *,
    prefix: str | list[str] | None = None,
    tools: Iterable[Any] | None = None,
    strict: bool | None = None,
    calls_in_reasoning: str | bool | None = None,
    max_region_chars: int | None = None,
    max_json_depth: int | None = None,
    options: ParseOptions | None = None,
) -> list[Message]: ...


def parse_response(
    text: str | list[str],
    template: TemplateLike,
    *,
    prefix: str | list[str] | None = None,
    tools: Iterable[Any] | None = None,
    strict: bool | None = None,
    calls_in_reasoning: str | bool | None = None,
    max_region_chars: int | None = None,
    max_json_depth: int | None = None,
    options: ParseOptions | None = None,
) -> Message | list[Message]:
    """Parse a complete model output (or a list of them) into a message (or a list of messages).

    Equivalent to feeding the whole text to a :class:`ResponseParser` and finalizing it. For a batch,
    ``prefix`` is one prompt for all texts or a list with one per text. ``strict=False`` is lenient
    mode (see :class:`ResponseParser`): problems are reported under ``"parse_errors"``, never raised.
    ``calls_in_reasoning`` reads calls written inside reasoning (see :class:`ResponseParser`); ``options``
    gives the switches and limits as one :class:`~grammar_parse.options.ParseOptions` (the keywords are its
    shorthands).
    """
    options = merge_options(options, strict=strict, calls_in_reasoning=calls_in_reasoning,
                            max_region_chars=max_region_chars, max_json_depth=max_json_depth)
    if isinstance(text, (list, tuple)):
        if text and all(isinstance(t, Mapping) for t in text):
            expect_text(text, "text")  # (a conversation, not a batch of outputs: said so)
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
        return [parse_response(t, template, prefix=p, tools=tools, options=options) for t, p in zip(text, prefixes)]
    expect_text(text, "text")
    if isinstance(prefix, (list, tuple)):
        if prefix and all(isinstance(p, Mapping) for p in prefix):
            expect_text(prefix, "prefix")  # (a conversation as the prompt: said so)
        raise ArgumentError("a list of prefixes needs a list of texts", code="usage.batch")
    expect_text(prefix, "prefix", optional=True)
    grammar = resolve_grammar(template)
    if oneshot.SPECIALISED and grammar.settle is None:
        tools = list(tools) if isinstance(tools, Iterator) else tools  # (read twice where the session takes over)
        found = specialised_parse(grammar, text, _output_prefix(prefix, None), ToolTypes.from_tools(tools), options)
        if found is not None:
            return found[0]
    parser = ResponseParser(grammar, prefix, tools=tools, options=options)
    if parser.grammar.settle is not None:
        # One-shot settling needs no streaming regions: the hook's own run is the result.
        parser._finalized = True
        return _settled_message(parser._syntax, parser.grammar, text, parser._tools, parser.options.strict, [])
    return parser.finalize(text)[0]


__all__ = ["MAX_REGION_CHARS", "START_ANCHOR_LIMIT", "ResponseParser", "parse_response", "resolve_grammar"]
