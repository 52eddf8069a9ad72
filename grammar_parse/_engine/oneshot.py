"""The specialised one-shot parser: the session's own automaton, worked out ahead for one grammar.

One-shot parsing (``parse_response``, the batch path) knows the whole output, so nothing is streamed: no
events, no held text, no drafts to rewind. What is left of the session's work is the scan for the next
delimiter, the LALR steps it leads to and the regions they open and close. The steps depend only on the
parser's state stack and the terminal, and the stacks real outputs reach are few. So each stack a parse
reaches becomes a config of the grammar's ``OneShot``, worked out once: its live delimiters and, per
terminal, the config it leads to and the region actions on the way. A parse then walks those configs: the
same scan, a dict lookup per terminal, and the region values built as the region builder builds them (the
same parser, transform, tool typing and call check). Once the first parses have worked the configs out,
grammar_parse._engine.generated writes them out as one Python function per grammar (``OneShot.compiled``),
which walks them the same way and hands over to this walk at anything it does not write.

It takes only clean outputs. Anything the session handles with more than that declines (``None``), and
the session parses the output itself: text where the grammar allows none, a delimiter the state cannot
take, a region value that does not parse, an argument without a value, a repeated opener that is text, a
repaired opener, a region past its size limit, markup inside reasoning that could be a draft, a missing
required field, a regex past its time limit. So the result is the session's wherever it is given; the
differential tests hold that for every built-in grammar.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, Protocol

from ..errors import GrammarParseError
from .content.xml import reads_elements, reports_stray, text_outside
from .delimiters import captured
from .drafts import closes_at, interrupts
from .events import Event, Message
from .grammar import Grammar, Region, Terminal
from .reading import JsonEnd, copy_json
from .regions import (Frame, SectionRun, Storer, call_section_states, component_path, idle_close,
                      missing_fields, region_callbacks, region_storer, region_value, store, without_empty)
from .salvage import check_calls
from .scanner import SearchCache, scan_searches
from .tables import RuleHandle, feed, reduce
from .tools import ToolTypes
from .values import specialised_content

#: Whether the specialised parsers run (``GRAMMAR_PARSE_SPECIALISED=0`` turns them off, to compare against
#: the session or as an escape hatch).
SPECIALISED = os.environ.get("GRAMMAR_PARSE_SPECIALISED", "1") != "0"

#: A grammar's specialised parser keeps at most this many stacks, none deeper than MAX_DEPTH: an output that
#: would need more (its regions nest deeper than outputs do) is the session's. Bounds its memory and the
#: work an authored (untrusted) grammar can cause.
MAX_CONFIGS = 2048
MAX_DEPTH = 48

# A region action, in the order the parser's callbacks run: open (by its delimiter or its first text), close.
OPEN, TEXT_OPEN, CLOSE = 0, 1, 2
Action = tuple[int, Any]  # (OPEN, Terminal) | (TEXT_OPEN, Terminal) | (CLOSE, Region)


class CompiledWalk(Protocol):
    """The walk compiled from a OneShot's configs (grammar_parse._engine.generated.Compiled)."""

    def current(self, events: bool) -> Callable[..., tuple[Config, int, bool, Any]] | None:
        """The function for a parse that asks for events or not, where one is made: (buf, pos, config,
        builder, drafts) -> (config, pos, done, last zero-width delimiter)."""
        ...

    def handed_over(self) -> None:
        """A parse the function handed to the walk before the end (a config it does not hold, ...)."""
        ...


class CallReading(Protocol):
    """A OneShot's readers of whole calls (grammar_parse._engine.callreader.CallReaders)."""

    def get(self, config: Config) -> Any:
        """The reader of the call just opened in ``config`` (its ``read``: this ``read`` past the lookup), or
        None; made the first time (which may work out more configs)."""
        ...

    def known(self, config: Config) -> Any:
        """:meth:`get` where made already, else None (makes nothing)."""
        ...

    def read(self, config: Config, buf: str, pos: int, build: Builder,
             drafts: Mapping[int, Region]) -> tuple[Config, int] | None:
        """The call just opened in ``config`` at ``pos`` read whole, where a reader takes it: the config and
        position after its close; else None (nothing done)."""
        ...


class Step:
    """A terminal's effect on one stack: the stack it leads to and the region actions on the way; whether
    it would interrupt an open reasoning block (a draft, which the session reads)."""

    __slots__ = ("config", "actions", "interrupts")

    def __init__(self, config: Config, actions: tuple[Action, ...], interrupts: bool) -> None:
        self.config = config
        self.actions = actions
        self.interrupts = interrupts


class Config:
    """One reachable parser stack, with the text terminal of the run under way (the session's ``run``)."""

    __slots__ = ("stack", "run", "top", "info", "steps", "text_step", "end_actions", "ended",
                 "explored", "visits", "aside")

    def __init__(self, stack: tuple[int, ...], run: Terminal | None, info: Any) -> None:
        self.stack, self.run, self.top, self.info = stack, run, stack[-1], info
        self.steps: dict[str, Step] = {}
        self.text_step: Step | None = None
        self.end_actions: tuple[Action, ...] = ()
        self.ended = False  # the end of the output is a step of the grammar (else open regions are closed)
        self.explored = False  # its steps are worked out (see OneShot._explore)
        self.visits = 0  # scans the walk made in it (the compiled walk tests the busiest first)
        self.aside = False  # worked out by a call reader (callreader), not reached by a walk yet


class _Recorder:
    """Callbacks that note the region actions instead of taking them (see RegionBuilder.callbacks)."""

    def __init__(self, grammar: Grammar) -> None:
        self.callbacks: dict[RuleHandle | str, Callable[[list[Action]], None]] = region_callbacks(
            grammar, lambda region: lambda log: log.append((CLOSE, region)),
            lambda term: lambda log: log.append((OPEN if term.role == "open" else TEXT_OPEN, term)))


class OneShot:
    """A grammar's stacks and steps (see the module doc), worked out as parses reach them."""

    def __init__(self, grammar: Grammar) -> None:
        self.grammar = grammar
        tables = grammar.tables
        self.table = tables.parse_table.states
        self.states = tables.states
        self.end_state = tables.parse_table.end_states["start"]
        self.configs: dict[tuple[tuple[int, ...], str | None], Config] = {}
        self.recorder = _Recorder(grammar)
        self.start = self._config((tables.parse_table.start_states["start"],), None)
        self._parents = {r.parent for r in grammar.regions.values()}  # the rules regions are components of
        self._closers: dict[tuple[int, bool], Closer] = {}
        self.sections = call_section_states(grammar)  # (text there that is not whitespace is reported)
        #: The walk compiled from the configs worked out so far, where one is made (generated.specialised).
        self.compiled: CompiledWalk | None = None
        #: Its readers of whole calls (callreader), where made (generated.specialised).
        self.readers: CallReading | None = None

    def find(self, stack: tuple[int, ...], run: Terminal | None) -> Config | None:
        """The config of a parser stack (a replayed prompt's), None past the limits."""
        try:
            return self._config(stack, run)
        except _TooMany:
            return None

    def closer(self, region: Region, check: bool) -> Closer:
        """How a frame of ``region`` closes (:func:`region_closer`), made once per grammar."""
        found = self._closers.get((id(region), check))
        if found is None:
            found = self._closers[(id(region), check)] = region_closer(region, check, *self.parts(region))
        return found

    def parts(self, region: Region) -> tuple[Callable[[str], Any] | None, Callable[..., Any], Storer | None]:
        """What closing ``region`` takes: its content parser alone where it is a leaf (no components, no scope)
        without a transform (None: its full value), its full value (regions.region_value), and its storer in its
        parent call's scope (a component's)."""
        leaf = region.rule not in self._parents and not region.scope
        return (specialised_content(region.spec) if leaf else None, region_value(self.grammar, region),
                region_storer(self.grammar, region) if region.parent is not None else None)

    def explore(self, config: Config, aside: bool = True) -> bool:
        """Work out ``config``'s steps where not done yet, for a call reader (``aside``: inside the call, which
        no walk may reach); False past the limits."""
        try:
            if not config.explored:
                self._explore(config)
                config.aside = aside
        except _TooMany:
            return False
        return True

    # ---------------------------------------------------------------- building
    def _config(self, stack: tuple[int, ...], run: Terminal | None) -> Config:
        key = (stack, run.name if run is not None else None)
        config = self.configs.get(key)
        if config is None:
            if len(self.configs) >= MAX_CONFIGS or len(stack) > MAX_DEPTH:
                raise _TooMany
            config = self.configs[key] = Config(stack, run, self.states[stack[-1]])
        return config

    def _shift(self, stack: tuple[int, ...], name: str) -> tuple[tuple[int, ...], tuple[Action, ...]] | None:
        """The session's ``shift`` of ``name`` on a copy of ``stack``, its callbacks noted."""
        trial, log = list(stack), []  # type: ignore[var-annotated]
        if not feed(self.table, trial, name, self.recorder.callbacks, log):
            return None
        while (rule := self.states[trial[-1]].default_rule) is not None:
            reduce(self.table, trial, rule, self.recorder.callbacks.get(rule), log)
        return tuple(trial), tuple(log)

    def _explore(self, config: Config) -> None:
        """Work out a config's steps, the first time a parse reaches it (the configs a grammar's outputs
        reach are few; those they could reach may be many, or unbounded for a grammar whose outputs nest)."""
        info = config.info
        reasoning = config.info.text.region if info.text is not None else None
        for term, *_ in info.scanner.entries:
            shifted = self._shift(config.stack, term.name)
            if shifted is None:
                continue  # (the session reports it: an unexpected delimiter)
            blocked = reasoning is not None and reasoning.is_reasoning and \
                interrupts(self.grammar, list(config.stack), term, reasoning)
            config.steps[term.name] = Step(self._config(shifted[0], None), shifted[1], blocked)
        text = info.text
        if text is not None and config.run is not text:
            shifted = self._shift(config.stack, text.name)
            if shifted is not None:
                config.text_step = Step(self._config(shifted[0], text), shifted[1], False)
        trial, log = list(config.stack), []  # type: ignore[var-annotated]
        config.ended = feed(self.table, trial, "$END", self.recorder.callbacks, log, self.end_state)
        config.end_actions = tuple(log)
        config.explored = True  # (last: another thread that sees it sees the steps)

    # ---------------------------------------------------------------- parsing
    def parse(self, buf: str, pos: int, start: Config, output: Message, frames: list[Open],
              tools: ToolTypes | None, max_region: int, drafts: Mapping[int, Region], fallback: bool = False,
              origin: int = 0, events: list[Event] | None = None, extended: bool = False) -> Parsed | None:
        """The output in ``buf`` from ``pos`` (the output itself starts at ``origin``), parsed from stack
        ``start`` with ``output`` and the open ``frames`` (a replayed prompt's); with ``events``, the
        session's events are added to it. ``drafts``: the states where markup in reasoning is a draft, under
        the "fallback" reading or not (drafts.py). None where the session must parse it."""
        build = Builder(output, frames, tools, max_region, self.closer, origin, events, extended)
        try:
            compiled = self.compiled
            walk = compiled.current(events is not None) if compiled is not None else None
            config, done, last_empty, handed = start, False, None, False
            hits = build.memo = SearchCache().hits  # (the searches made, which both walks hand each other)
            while not done:
                if walk is not None:  # (the compiled walk, grammar_parse._engine.generated, which takes the end's
                    # reductions too: the walk goes on where it stops, and gets it back after the first draft)
                    config, pos, done, last_empty = walk(buf, pos, config, build, drafts)
                    if done:
                        break
                    if not handed and compiled is not None:
                        compiled.handed_over()
                # (once only: a compiled walk taken up again searches afresh for what is still ahead, so that
                # output with a draft in each of many reasoning blocks would cost the rest of it per block)
                config, pos, done = self._walk(buf, pos, config, build, drafts, last_empty, fallback,
                                               walk is not None and not handed, hits)
                handed = True
                if done:
                    if not config.explored:
                        self._explore(config)
                    build.at = len(buf)
                    if build.section.start is not None:
                        build.new_run(None)
                    build.act(config.end_actions)  # (at a cut-off end, the reductions it still makes)
            if not config.ended:
                while build.frames:  # the output stopped where the grammar wanted more: close what is open
                    build.close(build.frames[-1].region)
            return Parsed(build.message(self.grammar), build.discarded, build.spans)
        except (Decline, _TooMany, GrammarParseError, TimeoutError):  # (a regex past its limit: the session reports it)
            return None

    def _walk(self, buf: str, pos: int, config: Config, build: Builder, drafts: Mapping[int, Region],
              last_empty: tuple[int, str] | None = None, fallback: bool = False,
              give_back: bool = False, hits: dict[str, Any] | None = None) -> tuple[Config, int, bool]:
        """The session's scan loop (``_process`` at the end of the output) on the automaton: the config at
        the end, and True; or, with ``give_back``, the config and position right after a draft ends, and False
        (the compiled walk goes on from there). (``last_empty``: the zero-width delimiter last shifted, where a
        compiled walk hands over.) Markup in reasoning is read as the session reads it (a draft: reasoning
        text), while the block's close or a call after it can tell; where the output ends inside the draft,
        its delimiter is read again as markup."""
        n = len(buf)
        hits = SearchCache().hits if hits is None else hits
        draft = _DraftWatch(fallback)
        readers = self.readers if build.events is None else None
        while True:
            if not config.explored:
                self._explore(config)
            config.visits += 1
            info = config.info
            if info.scanner.searches is not None:  # (most states: the scan's short loop, called directly)
                term, hit = scan_searches(info.scanner.searches, buf, pos, hits)
            else:
                region = info.scanner.value_end
                term, hit, _ = info.scanner._scan_final(buf, pos, hits,
                                                        -1 if region is None else build.value_end(region, buf))
            if hit is None:
                if pos < n:
                    config, pos, again = self._route(config, buf, pos, n, build)
                    if again:
                        continue
                if draft.region is not None:  # the output ends inside a draft: its delimiter was markup after all
                    config, pos, last_empty, drafts, draft = draft.rewind(build)
                    continue
                return config, pos, True
            at, end = hit[0], hit[1]
            if at > pos:
                config, pos, again = self._route(config, buf, pos, at, build)
                if again:
                    continue
            assert term is not None  # (the scanner gives both or neither)
            if config.top in drafts and (upto := draft.take(config, term, buf, at, end, drafts)) >= 0:
                if draft.back is None:  # (a draft opens: where to read its delimiter again as markup)
                    draft.back = (config, pos, last_empty, build.state())
                config, pos, _ = self._route(config, buf, pos, upto, build)  # (the delimiter, read as reasoning text)
                continue
            if term.role == "repeat":
                build.repeat(term)
                pos = end
                continue
            pos = end
            if at == end:  # a zero-width delimiter (the session's rules for it)
                top = bool(build.frames) and build.frames[-1].region is term.region
                if term.role == "open" and top and end < n:
                    config, pos, _ = self._route(config, buf, end, end + 1, build)  # the character it looked at
                    continue
                if idle_close(term, build.frames) or (at, term.name) == last_empty:
                    if draft.region is not None:  # (the session goes back to the draft first)
                        config, pos, last_empty, drafts, draft = draft.rewind(build)
                        continue
                    build.discard(at, n)  # the rest of the output is left unparsed, as transformers leaves it
                    return config, n, True
                last_empty = (at, term.name)
            step = config.steps.get(term.name)
            if step is None:
                raise Decline  # a delimiter the grammar does not take here
            if build.section.start is not None:  # (the run of text before it ends)
                build.new_run(None)
            build.shifting, build.at = (term, buf[at:end], hit[2]), at
            build.act(step.actions)
            build.shifting = None
            config = step.config
            if readers is not None and term.opens_call and draft.region is None and \
                    (read := readers.read(config, buf, pos, build, drafts)) is not None:
                config, pos = read  # (the call read whole: callreader)
            if draft.region is not None:
                draft.after_shift(term)
                if draft.region is None and give_back and at < end:
                    return config, pos, False

    def _route(self, config: Config, buf: str, pos: int, end: int, build: Builder) -> tuple[Config, int, bool]:
        """Text ``buf[pos:end]`` into the open region (the session's ``_route``): the config it leaves, where
        the text routed ends, and whether the scan must run again (the live delimiters changed)."""
        info, wanted, top = config.info, end, config.top
        text = info.text
        if text is None:
            raise Decline  # text where the grammar allows none (or several text terminals to try)
        if info.text_sensitive and config.run is not text and end - pos > 1:
            end = pos + 1
        if config.run is not text:
            step = config.text_step
            if step is None:
                raise Decline
            if text.role != "text" or build.section.start is not None:  # (a run ends, another starts)
                build.new_run(self.sections.get(top) if text.role != "text" else None)
            build.at = pos
            build.act(step.actions)
            config = step.config
            if not config.explored:
                self._explore(config)
        if text.role == "text":
            build.text(buf[pos:end])
        else:
            build.discard(pos, end)  # text the grammar reads and keeps nowhere
            run = build.section
            if run.field is not None and (run.start is not None or not buf[pos:end].isspace()):
                build.stray(pos, end, buf)  # (in a call section: reported; a piece of whitespace first adds nothing)
        return config, end, end < wanted or config.info.scanner is not info.scanner


class _DraftWatch:
    """The draft a walk reads (the session's _DraftReading, for an output read to its end): the open reasoning
    region markup was found in, whether the block closed (the "fallback" reading waits for a call after it), and
    whether the delimiter being shifted is the block's close spelled like another one."""

    __slots__ = ("region", "closed", "closing", "fallback", "back")

    def __init__(self, fallback: bool) -> None:
        self.region: Region | None = None
        self.closed = self.closing = False
        self.fallback = fallback
        #: Where the draft's delimiter was found: the config, position, zero-width marker and builder state.
        self.back: tuple[Config, int, tuple[int, str] | None, tuple[Any, ...]] | None = None

    def rewind(self, build: Builder) -> tuple[Config, int, tuple[int, str] | None, Mapping[int, Region], _DraftWatch]:
        """The output ended inside the draft (the session's undo): back to where its delimiter was found, to read
        it as markup, and the rest as it comes with no further drafts."""
        assert self.back is not None
        config, pos, last_empty, state = self.back
        build.restore(state)
        return config, pos, last_empty, {}, _DraftWatch(self.fallback)

    def take(self, config: Config, term: Terminal, buf: str, at: int, end: int, drafts: Mapping[int, Region]) -> int:
        """Where the text read as reasoning ends, for delimiter ``term`` at ``at``..``end`` found in a reasoning
        state: its end (a draft opens at the first), or -1 where it is not markup to read so."""
        region = drafts[config.top]
        step = config.steps.get(term.name)
        if self.region is not None and region is not self.region or step is None or not step.interrupts:
            return -1
        if any(w.role == "close" and w.region is region and closes_at(w, buf, at) for w in config.info.watch):
            self.closing = self.region is not None  # the block's own close, spelled like another delimiter
            return -1
        if end == at:  # a lookahead opener: the character it looked at is text
            if at >= len(buf):
                return -1
            end = at + 1
        self.region = region
        return end

    def after_shift(self, term: Terminal) -> None:
        """A delimiter was shifted with a draft open: the block's close ends it (under "fallback", a call after the
        block does), which leaves what it read as reasoning."""
        closing, self.closing = self.closing, False
        if closing or term.role == "close" and term.region is self.region:
            if self.fallback:
                self.closed = True
            else:
                self.region = self.back = None  # (a later draft goes back to its own delimiter)
        elif self.closed and term.opens_call:
            self.region, self.closed, self.back = None, False, None


class Parsed(NamedTuple):
    """What the specialised parser gives for an output it takes."""

    message: Message
    discarded: int  # characters of the output that went into no field
    spans: list[list[int]]  # where they are: the session's discarded spans


class _TooMany(Exception):
    """A parse reached more stacks than a grammar's specialised parser keeps: the session parses it."""


class Decline(Exception):
    """The output is not one this parser takes: the session parses it."""


class Open:
    """An open region: what the session's Frame holds, for the regions this parser takes."""

    __slots__ = ("region", "captures", "open_text", "chunks", "size", "children", "text_start", "walk", "path")

    def __init__(self, region: Region, captures: dict[str, str], open_text: str, text_start: int,
                 path: list[str | int] | None = None) -> None:
        self.region, self.captures, self.open_text = region, captures, open_text
        self.chunks: list[str] = []
        self.size = 0
        self.children: dict[str, Any] = region.new_scope() if region.scope else {}
        self.text_start = text_start  # where its text starts in the buffer
        self.walk: JsonEnd | None = None  # the walk to its JSON value's end (a region closed by it)
        self.path = path  # where a component's events point (None: a message field)

    def copy(self) -> Open:
        """A frame with the same state that shares nothing mutable with this one (a draft's to go back to)."""
        frame = Open(self.region, dict(self.captures), self.open_text, self.text_start,
                     None if self.path is None else list(self.path))
        frame.chunks, frame.size, frame.children = list(self.chunks), self.size, copy_json(self.children)
        frame.walk = None if self.walk is None else self.walk.copy()
        return frame


def open_regions(frames: list[Frame], base: int) -> list[Open] | None:
    """The session's open frames (a replayed prompt's; ``base``: the stream offset of its buffer's start)
    as this parser's, None where one is more than it takes (passed through, repaired, a component, or
    walked to its JSON value's end)."""
    if any(f.passthrough or f.repair or f.path is not None or f.walk for f in frames):
        return None
    out = []
    for f in frames:
        region = Open(f.region, dict(f.captures), f.open_text, f.start + len(f.open_text) - base)
        region.chunks, region.size, region.children = list(f.chunks), f.size, copy_json(f.children)
        out.append(region)
    return out


class Builder:
    """The regions and the message, as the session's RegionBuilder makes them for top-level regions."""

    __slots__ = ("output", "frames", "tools", "max_region", "closer", "shifting", "at", "origin", "discarded",
                 "spans", "events", "extended", "memo", "section", "errors")

    def __init__(self, output: Message, frames: list[Open], tools: ToolTypes | None, max_region: int,
                 closer: Callable[[Region, bool], Closer], origin: int, events: list[Event] | None = None,
                 extended: bool = False) -> None:
        self.output = output
        self.closer = closer  # (OneShot.closer)
        self.origin = origin  # where the output starts in the buffer (the prompt's tail is before it)
        self.discarded = 0  # characters of the output that went into no field
        self.spans: list[list[int]] = []  # ... as the session's discarded spans: [start, end) output offsets
        # The session's events, where a parser's finalize asks for them (``extended``: with the captures).
        self.events = events
        self.extended = extended
        self.frames = frames
        self.tools = tools
        self.max_region = max_region
        self.shifting: tuple[Terminal, str, Any] | None = None  # (terminal, text, match) of the delimiter
        self.at = 0  # where in the buffer the step under way is (the delimiter's start, or the text's)
        #: The parse's memoised searches (scanner._search's), which the generic and the compiled walk hand each other.
        self.memo: dict[str, Any] | None = None
        self.section = SectionRun()  # the run of text under way that goes into no field (see new_run)
        self.errors: list[dict[str, Any]] = []  # its problems, as the session reports them

    def state(self) -> tuple[Any, ...]:
        """What the builder holds, copied: where a draft rewinds to (the session's RegionBuilder.state)."""
        return (copy_json(self.output), [f.copy() for f in self.frames], self.discarded,
                [list(span) for span in self.spans], None if self.events is None else len(self.events),
                self.section.copy(), copy_json(self.errors))

    def restore(self, state: tuple[Any, ...]) -> None:
        """Take a :meth:`state` back (once: it is not copied again); the events made since are dropped."""
        self.output, frames, self.discarded, self.spans, events, self.section, self.errors = state
        self.frames[:] = frames
        if self.events is not None:
            del self.events[events:]

    def value_end(self, region: Region, buf: str) -> int:
        """Where the open ``region``'s JSON value ends (-1: not in the output, or it is not on top)."""
        frame = self.frames[-1] if self.frames else None
        if frame is None or frame.region is not region:
            return -1
        if frame.walk is None:
            frame.walk = JsonEnd(frame.text_start)
        end: int | None = frame.walk.advance(buf, 0)
        return -1 if end is None else end

    def act(self, actions: tuple[Action, ...]) -> None:
        for kind, what in actions:
            if kind == CLOSE:
                self.close(what)
            elif kind == OPEN:
                shifting = self.shifting
                if shifting is None:
                    self.push(what.region, {}, "")
                else:
                    captures = captured(shifting[2])
                    if shifting[0].repair is not None and shifting[0].region is what.region:
                        raise Decline  # (a repaired opener: reported, or passed through in strict mode)
                    self.push(what.region, captures, shifting[1])
            elif not self.frames or self.frames[-1].region is not what.region:
                self.push(what.region, {}, "")

    def push(self, region: Region, captures: dict[str, str], open_text: str) -> None:
        path: list[str | int] | None = None
        if region.parent is not None:
            parent = next((f for f in reversed(self.frames) if f.region.rule == region.parent), None)
            if parent is None:
                raise Decline  # a component outside the region it belongs to: the session reports it
            if self.events is not None:
                path = component_path(self.output, parent.region, parent.path, region, captures)
        self.frames.append(Open(region, captures, open_text, self.at + len(open_text), path))
        if self.events is not None:
            event: dict[str, Any] = {"type": "region_open", "field": region.field if path is None else path[0]}
            if path is not None:
                event["path"] = path
            if self.extended:
                event["captures"] = captures
                if path is None:
                    event["region"] = region.rule
            self.events.append(event)  # type: ignore[arg-type]

    def repeat(self, term: Terminal) -> None:
        """An opener written again at the start of its region is markup (the session's ``repeat``)."""
        frame = self.frames[-1] if self.frames else None
        if frame is None or frame.region is not term.region or any(chunk.strip() for chunk in frame.chunks):
            raise Decline  # then it is text, which the session routes by trying the parser

    def new_run(self, field: str | None) -> None:
        """A run of text that goes into no field starts: in the call section of ``field`` (else None). The run
        before it ends, and its problem is kept (the session's ParserCore.end_run)."""
        if (problem := self.section.close()) is not None:
            self.errors.append(problem)
            if self.events is not None:
                self.events.append({"type": "parse_error", **problem})  # type: ignore[arg-type]
        self.section.field = field

    def stray(self, start: int, end: int, buf: str) -> None:
        """Buffer text ``[start, end)`` of the run in a call section."""
        self.section.add(buf[start:end], start - self.origin)

    def discard(self, start: int, end: int) -> None:
        """Buffer text ``[start, end)`` goes into no field (what of it is the prompt's is not counted)."""
        start, end = max(start - self.origin, 0), end - self.origin
        if end > start:
            self.discarded += end - start
            if self.spans and self.spans[-1][1] == start:
                self.spans[-1][1] = end
            else:
                self.spans.append([start, end])

    def text(self, text: str) -> None:
        frame = self.frames[-1]
        frame.size += len(text)
        if frame.size > self.max_region:
            raise Decline
        frame.chunks.append(text)
        if self.events is not None:
            event: dict[str, Any] = {"type": "region_chunk", "field": frame.region.field if frame.path is None
                                     else frame.path[0], "text": text, "dirty": frame.region.dirty}
            if frame.path is not None:
                event["path"] = frame.path
            self.events.append(event)  # type: ignore[arg-type]

    def close(self, region: Region) -> None:
        frames = self.frames
        if not frames or frames[-1].region is not region:
            if region.implicit:
                return
            self.push(region, {}, "")
        frame = frames.pop()
        shifting = self.shifting
        closing, check = close_rules(region, shifting[0] if shifting is not None else None)
        value = self.closer(region, check)(self, frames, frame, shifting[1] if closing and shifting else "")
        if self.events is None:
            return
        if region.parent is None:
            self.events.append({"type": "region_close", "field": region.field, "value": value})
        elif frame.path is not None:  # (a component's events have its path)
            self.events.append({"type": "region_close", "field": str(frame.path[0]), "path": frame.path,
                                "value": value})

    def message(self, grammar: Grammar) -> Message:
        if missing_fields(grammar, self.output):
            raise Decline  # a required field is missing: the session reports it
        self.new_run(None)
        return without_empty(self.output, grammar.defaults, self.errors)


#: How a frame closes: (builder, the frames left, the frame, the close delimiter's text) -> the region's value.
Closer = Callable[[Builder, list[Open], Open, str], Any]


def close_rules(region: Region, shifting: Terminal | None) -> tuple[bool, bool]:
    """(whether ``shifting``, the delimiter shifted (None: a text step or the end), is ``region``'s own close, so
    its text is the close text; whether the region is an argument that must have a value, the session's test
    where something other than its close ends it)."""
    closing = shifting is not None and shifting.role == "close" and shifting.region is region
    return closing, region.entry_key is not None and shifting is not None and not closing


def region_closer(region: Region, check: bool, direct: Callable[[str], Any] | None, full: Callable[..., Any],
                  storer: Storer | None) -> Closer:
    """``Builder.close`` past its first test for ``region``, with its value spec read once (OneShot.parts):
    ``direct``, the content parser alone for a leaf (no components) without a transform
    (values.specialised_content), else ``full``, the spec specialised (regions.region_value); stored in its
    parent call's scope (``storer``, the session's own: regions.region_storer), or typed, checked and stored in
    the message as the session's region builder does. ``check``: an argument without a value declines."""
    parent_rule = region.parent
    if parent_rule is not None:
        assert storer is not None  # (a component's: see OneShot.closer)

        def close_component(build: Builder, frames: list[Open], frame: Open, close_text: str) -> Any:
            if check and not any(chunk.strip() for chunk in frame.chunks):
                raise Decline  # an argument without a value: the session reports it
            try:
                body = "".join(frame.chunks)
                value = direct(body) if direct is not None else \
                    full(body, frame.captures, frame.open_text, close_text, frame.children)
                parent = frames[-1] if frames and frames[-1].region.rule == parent_rule else \
                    next(f for f in reversed(frames) if f.region.rule == parent_rule)  # (most often the open one)
                if storer(parent.children, frame.captures, frame.children, value):
                    raise Decline  # an argument written twice: the session reports it
            except GrammarParseError:  # (a value that does not parse; a placeholder with nothing to fill)
                raise Decline from None
            return value
        return close_component
    elements, join, is_call = reads_elements(region.spec), region.spec.join is not None, region.is_call
    components = region.made_of_components
    tagged = reports_stray(region.spec)

    def close_field(build: Builder, frames: list[Open], frame: Open, close_text: str) -> Any:
        body = "".join(frame.chunks)
        if components and body and not body.isspace() or tagged and text_outside(region.spec, body, False):
            raise Decline  # text outside every argument (or an argument's close again): the session reads it
        try:
            value = direct(body) if direct is not None else \
                full(body, frame.captures, frame.open_text, close_text, frame.children)
            tools = build.tools
            if tools is not None and not isinstance(value, str):  # (a string is no call: apply leaves it)
                value = tools.apply(value, elements=elements)
            if join and not isinstance(value, str):
                raise Decline
            if is_call:
                check_calls(value)
        except GrammarParseError:
            raise Decline from None
        store(build.output, region, value)
        return value
    return close_field


__all__ = ["CLOSE", "OPEN", "SPECIALISED", "TEXT_OPEN", "Action", "Builder", "CallReading", "Closer", "CompiledWalk",
           "Config", "Decline", "OneShot", "Open", "Parsed", "Step", "close_rules", "open_regions", "region_closer"]
