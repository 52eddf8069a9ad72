"""The specialised one-shot parser compiled: the automaton's configs written out as one Python function.

:class:`~grammar_parse._engine.oneshot.OneShot` walks its configs generically: per delimiter a loop over the
live searches, a dict lookup for the step, a loop over its region actions. Here the configs a grammar's
outputs reached are written out as source, one block per config: its searches unrolled in tie-break order
(a single literal as ``str.find``), their memo in local variables, the step per delimiter and the text step
resolved ahead, the region actions as code, and each region closed by the closer the generic walk's builder
uses too (OneShot.closer: its value spec read once). Two functions are written from the same configs, made as parses ask
for them: one for parses that ask for the session's events (the builder's own methods take each region
action) and one for the rest (the actions written out, no test per step of which it is). The configs the
walk visited most are tested for first. The function does what ``OneShot._walk`` does, step for step, with
the same builder; where the walk would do something else (a config not worked out yet, a zero-width match
it has rules for) it stops at that point and the walk goes on from there. So the result is the walk's,
which the differential tests hold equal to the session's.

The source holds no text from the grammar: terminals, regions, configs and search functions are constants
the function reads by number (globals ``k0``, ``k1``, ...), so an authored grammar cannot write code into
it. It is made once the first parses have worked out the configs outputs reach, and again as parses reach
new ones, a few times at most, and only for grammars whose outputs reach few configs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from .callreader import CallReaders
from .delimiters import LiteralMatcher, RegexMatcher, Repeat, ValueEnd, search_budget
from .grammar import Grammar, Region, Terminal
from .oneshot import CLOSE, OPEN, Action, Builder, Config, Decline, OneShot, Open, close_rules
from .regex_shape import always_captured

#: Configs past this many are not written out (the walk takes such grammars); the function is first made at
#: the FIRST_BUILD-th parse, and made again MAX_BUILDS times at most, where one parse in REBUILD_SHARE was
#: handed over (see Compiled).
MAX_CONFIGS = 256
#: Source past this many lines is not compiled either (an authored grammar with many delimiters live in many
#: configs): compiling costs about 10 µs a line, and it is paid inside a parse.
MAX_LINES = 20_000
FIRST_BUILD = 8
MAX_BUILDS = 8
REBUILD_SHARE = 16

#: What a compiled walk does: (buf, pos, config, builder, drafts) -> (config, pos, done, last zero-width
#: delimiter); ``done``: at the end of the output, its reductions made; else the generic walk goes on from
#: that config and position.
Walk = Callable[[str, int, Config, Builder, Mapping[int, Any]], tuple[Config, int, bool, Any]]


class _Source:
    """The function's lines and its constants (each the global ``k<i>``); ``events``: the function for parses
    that ask for the session's events (the builder's own methods take every region action), else the one
    that takes them itself."""

    def __init__(self, shot: OneShot, events: bool) -> None:
        self.shot = shot
        self.events = events
        self.lines: list[str] = []
        self.constants: list[Any] = []
        self._index: dict[int, int] = {}

    def const(self, value: Any) -> str:
        i = self._index.get(id(value))
        if i is None:
            i = self._index[id(value)] = len(self.constants)
            self.constants.append(value)
        return f"k{i}"

    def emit(self, depth: int, line: str) -> None:
        if len(self.lines) >= MAX_LINES:
            raise _TooLong
        self.lines.append("\t" * depth + line)


class _TooLong(Exception):
    """The source passed MAX_LINES: the walk takes the grammar."""


#: The memo slots of a repeated opener (looked for at pos only, not memoised) and of the end of the open
#: region's JSON value (the builder walks it).
_REPEAT, _VALUE_END = "r", "v"


def _searches(config: Config) -> list[tuple[str, Terminal, Any, Any]]:
    """A config's live delimiters in tie-break order: (search key, or _REPEAT or _VALUE_END; terminal; matcher;
    search)."""
    scanner = config.info.scanner
    entries = sorted(scanner.entries, key=lambda entry: entry[5])
    return [(_REPEAT if isinstance(m, Repeat) else _VALUE_END if isinstance(m, ValueEnd) else scanner.keys[t.name],
             t, m, None if isinstance(m, ValueEnd) else m.search) for t, m, *_ in entries]


def compile_walk(shot: OneShot, events: bool = False) -> Walk | None:
    """The walk of ``shot``'s configs worked out so far, as a function (``events``: for parses that ask for
    events); None past MAX_CONFIGS or MAX_LINES."""
    made = walk_source(shot, events)
    return None if made is None else compile_source(*made)


def compile_source(source: str, constants: list[Any], number: dict[int, int]) -> Walk:
    """The function :func:`walk_source` wrote."""
    namespace: dict[str, Any] = {f"k{i}": value for i, value in enumerate(constants)}
    namespace.update(NUMBER=number, Decline=Decline, Open=Open)
    exec(compile(source, "<grammar_parse generated walk>", "exec"), namespace)  # (see the module doc)
    walk: Walk = namespace["walk"]
    return walk


def walk_source(shot: OneShot, events: bool = False) -> tuple[str, list[Any], dict[int, int]] | None:
    """The source of the compiled walk (``events``: for parses that ask for events), its constants, and the
    block number of each config (by id)."""
    if shot.readers is not None and not events:  # (made first: making one works out the configs its call reaches)
        for c in [c for c in list(shot.configs.values()) if c.explored]:
            for step in c.steps.values():
                if step.config.explored and any(kind == OPEN and what.opens_call for kind, what in step.actions):
                    shot.readers.get(step.config)
    explored = [c for c in list(shot.configs.values()) if c.explored]
    made = _source(shot, explored, events)
    if made is None:  # (too many or too long: then without those only a call reader worked out, the generic walk's)
        made = _source(shot, [c for c in explored if c.visits or not c.aside], events)
    return made


def _source(shot: OneShot, configs: list[Config], events: bool) -> tuple[str, list[Any], dict[int, int]] | None:
    """:func:`walk_source` of these configs; None past MAX_CONFIGS or MAX_LINES."""
    if not configs or len(configs) > MAX_CONFIGS:
        return None
    configs.sort(key=lambda c: -c.visits)  # (the busiest first: the dispatch tests them first)
    number = {id(c): i for i, c in enumerate(configs)}
    keys: dict[str, int] = {}  # search key -> memo slot
    for c in configs:
        for memo, *_ in _searches(c):
            if memo not in (_REPEAT, _VALUE_END):
                keys.setdefault(memo, len(keys))
    src = _Source(shot, events)
    src.emit(0, "def walk(buf, pos, config, B, drafts):")
    src.emit(1, "n = len(buf)")
    src.emit(1, "s = NUMBER.get(id(config), -1)")
    src.emit(1, "if s < 0: return config, pos, False, None")
    src.emit(1, "le = None")  # the zero-width delimiter last shifted: (where, terminal name)
    for k in range(len(keys)):  # memo k: searched from f (n + 1: not yet), first match at a (-1: none)
        src.emit(1, f"f{k} = n + 1; a{k} = -1; e{k} = -1; m{k} = None")
    src.emit(1, "ar = er = av = ev = -1; mr = mv = None")
    src.emit(1, "push = B.push; close = B.close; text = B.text; discard = B.discard; frames = B.frames")
    src.emit(1, "MAXR = B.max_region")
    weights = [0]
    for c in configs:
        weights.append(weights[-1] + c.visits + 1)
    # The searches the generic walk made before (it hands the output back after a draft), and after it those this
    # walk made, for the generic walk to go on with (else a delimiter absent from the rest is searched again).
    memos = [(k, src.const(memo)) for memo, k in keys.items()]
    try:
        src.emit(1, "H = B.memo")
        if memos:
            src.emit(1, "if H:")
            for k, memo in memos:
                src.emit(2, f"c = H.get({memo})")
                src.emit(2, f"if c is not None and c[0] is buf: f{k} = c[1]; h = c[2]; "
                            f"a{k}, e{k}, m{k} = (-1, -1, None) if h is None else h")
        src.emit(1, "while True:")
        _dispatch(src, configs, weights, 0, len(configs), 2, number, keys)
        src.emit(1, "if H is not None:")  # (handed over at ``rc``, ``rp``)
        for k, memo in memos:
            src.emit(2, f"if f{k} <= n: H[{memo}] = (buf, f{k}, None if a{k} < 0 else (a{k}, e{k}, m{k}))")
        src.emit(1, "return rc, rp, False, le")
    except _TooLong:
        return None
    return "\n".join(src.lines), src.constants, number


def _dispatch(src: _Source, configs: list[Config], weights: list[int], lo: int, hi: int, depth: int,
              number: dict[int, int], keys: dict[str, int]) -> None:
    """Blocks ``lo``..``hi`` as a binary tree of tests on the block number ``s``, split where the visits
    (``weights``: their running sums) balance, so that the busiest configs are found after the fewest tests."""
    if hi - lo == 1:
        _block(src, configs[lo], depth, number, keys)
        return
    half = (weights[lo] + weights[hi]) / 2
    mid = min(range(lo + 1, hi), key=lambda i: abs(weights[i] - half))
    src.emit(depth, f"if s < {mid}:")
    _dispatch(src, configs, weights, lo, mid, depth + 1, number, keys)
    src.emit(depth, "else:")
    _dispatch(src, configs, weights, mid, hi, depth + 1, number, keys)


def _block(src: _Source, config: Config, d: int, number: dict[int, int], keys: dict[str, int]) -> None:
    """One config: the scan (scan_searches unrolled), then the text before the delimiter and its step, as
    ``OneShot._walk`` and ``_route`` take them."""
    searches = _searches(config)
    for memo, term, matcher, search in searches:
        if memo == _REPEAT:
            src.emit(d, f"h = {src.const(search)}(buf, pos)")
            src.emit(d, "if h is None: ar = -1")
            src.emit(d, "else: ar, er, mr = h")
            continue
        if memo == _VALUE_END:
            src.emit(d, f"av = ev = B.value_end({src.const(config.info.scanner.value_end)}, buf)")
            src.emit(d, "if av < pos: av = -1")
            continue
        k = keys[memo]
        src.emit(d, f"if not (f{k} <= pos and (a{k} < 0 or a{k} >= pos)):")
        if isinstance(matcher, LiteralMatcher) and len(matcher.literals) == 1 and matcher.literals[0]:
            # Its first character found first (memchr speed, as find_literals does: a long text without it
            # costs next to nothing), then the literal from there where that was not its start.
            literal = matcher.literals[0]
            lit, first = src.const(literal), src.const(literal[0])
            src.emit(d + 1, f"f{k} = pos; a{k} = buf.find({first}, pos); e{k} = a{k} + {len(literal)}")
            if len(literal) > 1:
                src.emit(d + 1, f"if a{k} >= 0 and not buf.startswith({lit}, a{k}): "
                                f"a{k} = buf.find({lit}, a{k} + 1); e{k} = a{k} + {len(literal)}")
        elif isinstance(matcher, RegexMatcher) and (matcher.plain or matcher.timed):
            if matcher.plain:
                src.emit(d + 1, f"f{k} = pos; h = {src.const(matcher.compiled)}.search(buf, pos)")  # (its search)
            else:  # (its search too, written out: a call through the matcher cost as much as the time limit)
                src.emit(d + 1, f"f{k} = pos")
                src.emit(d + 1, f"try: h = {src.const(matcher.compiled)}.search(buf, pos, "
                                f"timeout={src.const(search_budget)}(n - pos, {matcher.rate!r}))")
                src.emit(d + 1, f"except TimeoutError: h = {src.const(matcher.after_timeout)}(buf, pos)")
            src.emit(d + 1, f"if h is None: a{k} = -1")
            src.emit(d + 1, f"else: a{k}, e{k} = h.span(); m{k} = h")
        else:
            src.emit(d + 1, f"f{k} = pos; h = {src.const(search)}(buf, pos)")
            src.emit(d + 1, f"if h is None: a{k} = -1")
            src.emit(d + 1, f"else: a{k}, e{k}, m{k} = h")
    # the earliest match, then the longest, then the first-ranked (the order above): strict comparisons
    src.emit(d, "t = -1")
    for i, (memo, *_rest) in enumerate(searches):
        slot = _slot(memo, keys)
        if i == 0:
            src.emit(d, f"if 0 <= a{slot} < n: t = 0; at = a{slot}; w = a{slot} - e{slot}")
        else:
            src.emit(d, f"if 0 <= a{slot} < n and (t < 0 or a{slot} < at or (a{slot} == at and "
                        f"a{slot} - e{slot} < w)): t = {i}; at = a{slot}; w = a{slot} - e{slot}")
    src.emit(d, "if t < 0:")
    src.emit(d + 1, "if pos >= n:")  # the end of the output: the reductions it makes (OneShot.parse)
    _end_run(src, config, d + 2)
    _actions(src, config.end_actions, d + 2, None, "n")
    src.emit(d + 2, f"return {src.const(config)}, pos, True, le")
    _route(src, config, d + 1, "n", number, after=None)
    for i, (memo, term, *_rest) in enumerate(searches):
        slot = _slot(memo, keys)
        src.emit(d, "if t == %d:" % i if i == 0 else "elif t == %d:" % i)
        src.emit(d + 1, f"end = e{slot}")
        src.emit(d + 1, "if at > pos:")
        _route(src, config, d + 2, "at", number, after=(term, slot))  # (where it falls through: the step below)
        _shift(src, config, term, slot, d + 1, number)


def _end_run(src: _Source, config: Config, d: int) -> None:
    """The run of text under way in ``config`` ends (Builder.new_run): only a run of text that goes into no field
    can be in a call section, and one is under way only in a config whose run it is."""
    if src.shot.sections and config.run is not None and config.run.role != "text":
        src.emit(d, "if B.section.start is not None: B.new_run(None)")


def _slot(memo: str, keys: dict[str, int]) -> str:
    return memo if memo in (_REPEAT, _VALUE_END) else str(keys[memo])


def _route(src: _Source, config: Config, d: int, end: str, number: dict[int, int],
           after: tuple[Terminal, str] | None) -> bool:
    """Text ``buf[pos:end]`` into the open region (``OneShot._route``); then, where the live delimiters are
    the same, the delimiter ``after`` it (terminal, memo slot) is shifted in the config the text led to; else
    the scan runs again. True where the code falls through to the step in ``config`` itself (the text
    continued the run under way)."""
    info = config.info
    text = info.text
    if text is None:
        src.emit(d, "raise Decline")  # text where the grammar allows none
        return False
    target = config
    if config.run is not text:
        step = config.text_step
        if step is None:
            src.emit(d, "raise Decline")
            return False
        target = step.config
        if id(target) not in number:
            src.emit(d, f"rc = {src.const(config)}; rp = pos; break")  # (the walk routes it)
            return False
        _actions(src, step.actions, d, None, "pos")
        if src.shot.sections:  # (a run ends, another starts: Builder.new_run, written out)
            _end_run(src, config, d)
            if text.role != "text":
                field = src.shot.sections.get(config.top)
                src.emit(d, f"B.section.field = {'None' if field is None else src.const(field)}")
    cut = info.text_sensitive and config.run is not text
    if cut:  # (the text terminal decides the state for the next character only: scan again after it)
        src.emit(d, f"stop = pos + 1 if {end} - pos > 1 else {end}")
    else:
        src.emit(d, f"stop = {end}")
    if text.role == "text" and src.events:
        src.emit(d, "text(buf[pos:stop])")
    elif text.role == "text":  # (Builder.text, written out)
        src.emit(d, "fr = frames[-1]; fr.size += stop - pos")
        src.emit(d, "if fr.size > MAXR: raise Decline")
        src.emit(d, "fr.chunks.append(buf[pos:stop])")
    else:
        src.emit(d, "discard(pos, stop)")
        if src.shot.sections:  # (the run may be in a call section: Builder.stray, from its first piece of words)
            src.emit(d, "sr = B.section")
            src.emit(d, "if sr.field is not None and (sr.start is not None or not buf[pos:stop].isspace()): "
                        "B.stray(pos, stop, buf)")
    again = "" if target is config else f"s = {number[id(target)]}; "  # (the config the scan runs in again)
    same = target.info.scanner is info.scanner
    if after is None or not same:
        src.emit(d, f"pos = stop; {again}continue")
        return False
    if cut:
        src.emit(d, f"if stop < at: pos = stop; {again}continue")
    src.emit(d, "pos = stop")
    if target is config:
        return True  # (the step that follows is the one without text before it)
    term, k = after
    _shift(src, target, term, k, d, number)
    return False


def _shift(src: _Source, config: Config, term: Terminal, k: str, d: int, number: dict[int, int]) -> None:
    """The step of delimiter ``term`` (its match in memo slot ``k``, at ``at``..``end``) in ``config``."""
    here = src.const(config)  # (where it hands over to the walk)
    step = config.steps.get(term.name)
    if step is not None and step.interrupts:  # markup inside reasoning: the walk reads drafts (OneShot._walk)
        src.emit(d, f"if {config.top} in drafts: rc = {here}; rp = pos; break")
    if term.role == "repeat":  # an opener written again at the start of its region (Builder.repeat)
        src.emit(d, f"B.repeat({src.const(term)}); pos = end; s = {number[id(config)]}; continue")
        return
    if not isinstance(term.matcher, LiteralMatcher) and getattr(term.matcher, "min_width", 0) == 0:
        src.emit(d, "if at == end:")  # (a zero-width match: OneShot._walk's rules for it)
        top = f"frames and frames[-1].region is {src.const(term.region)}"
        if term.role == "open":  # (it looks at a character the walk routes first)
            src.emit(d + 1, f"if end < n and {top}: rc = {here}; rp = pos; break")
        elif term.role == "close":  # (regions.idle_close, written out: the walk discards the rest of the output)
            src.emit(d + 1, f"if all(f.region is not {src.const(term.region)} for f in frames): rc = {here}; rp = pos; break")
        name = src.const(term.name)
        src.emit(d + 1, f"if le == (at, {name}): rc = {here}; rp = pos; break")
        src.emit(d + 1, f"le = (at, {name})")
    if step is None:
        src.emit(d, "raise Decline")  # a delimiter the grammar does not take here
        return
    _end_run(src, config, d)  # (the run of text before it ends)
    if any(kind == OPEN and term.repair is not None and term.region is what.region for kind, what in step.actions):
        src.emit(d, "raise Decline")  # (a repaired opener: the session reports it)
        return
    if step.actions:
        src.emit(d, "sh = buf[at:end]")
    _actions(src, step.actions, d, (term, k), "at")
    target = step.config
    if id(target) in number:
        readers = src.shot.readers
        reader = readers.known(target) if readers is not None and not src.events and term.opens_call else None
        if reader is not None:  # (the call read whole where the reader takes it: callreader)
            src.emit(d, f"r = {src.const(reader)}.read(buf, end, B, {src.const(target)}, drafts)")
            src.emit(d, "if r is not None:")
            src.emit(d + 1, "c, pos = r; s = NUMBER.get(id(c), -1)")
            src.emit(d + 1, "if s < 0: rc = c; rp = pos; break")
            src.emit(d + 1, "continue")
        src.emit(d, f"pos = end; s = {number[id(target)]}; continue")
    else:
        src.emit(d, f"rc = {src.const(target)}; rp = end; break")


def _actions(src: _Source, actions: tuple[Action, ...], d: int, shifting: tuple[Terminal, str] | None,
             at: str) -> None:
    """A step's region actions at ``at``, while ``shifting`` (the delimiter and its memo slot; None: a text
    step or the end) is shifted: the builder's own (``Builder.act``) where events are asked for, else written
    out, with the builder's own where a frame is not the one expected."""
    if not actions:
        return
    tup = "None" if shifting is None else f"({src.const(shifting[0])}, sh, m{shifting[1]})"
    if src.events:
        src.emit(d, f"B.at = {at}; B.shifting = {tup}; B.act({src.const(actions)}); B.shifting = None")
        return
    for kind, what in actions:
        if kind == CLOSE:
            _close(src, what, d, shifting, at, tup)
        elif kind == OPEN:
            if shifting is None:
                _push(src, what.region, d, "{}", '""', at)
                continue
            matcher, m = shifting[0].matcher, f"m{shifting[1]}"
            if isinstance(matcher, RegexMatcher) and matcher.compiled.groupindex:
                _push(src, what.region, d, f"{m}.groupdict() if {m} is not None else {{}}"
                      if always_captured(matcher.pattern, matcher.flags) else  # (no value is None)
                      f"{{k: v for k, v in {m}.groupdict().items() if v is not None}} if {m} is not None else {{}}",
                      "sh", at)
            else:
                _push(src, what.region, d, "{}", "sh", at)
        else:
            src.emit(d, f"if not frames or frames[-1].region is not {src.const(what.region)}:")
            _push(src, what.region, d + 1, "{}", '""', at)


def _push(src: _Source, region: Region, d: int, captures: str, open_text: str, at: str) -> None:
    """``Builder.push`` (at ``at``) where no events are asked for: the frame appended here, or the builder's
    own where a component's region is not the open one."""
    r = src.const(region)
    if region.parent is not None:
        src.emit(d, f"if not frames or frames[-1].region.rule != {src.const(region.parent)}: "
                    f"B.at = {at}; push({r}, {captures}, {open_text})")
        src.emit(d, f"else: ot = {open_text}; frames.append(Open({r}, {captures}, ot, {at} + len(ot)))")
    else:
        src.emit(d, f"ot = {open_text}; frames.append(Open({r}, {captures}, ot, {at} + len(ot)))")


def _close(src: _Source, region: Region, d: int, shifting: tuple[Terminal, str] | None, at: str, tup: str) -> None:
    """``Builder.close`` of ``region`` where no events are asked for, while ``shifting`` is shifted (``tup``:
    the builder's form of it): the builder's own where the region is not the open one, else the region's
    closer (OneShot.closer) with what the shifted delimiter decides of it (oneshot.close_rules)."""
    r = src.const(region)
    closing, check = close_rules(region, None if shifting is None else shifting[0])
    src.emit(d, f"if not frames or frames[-1].region is not {r}: "
                f"B.at = {at}; B.shifting = {tup}; close({r}); B.shifting = None")
    src.emit(d, f"else: {src.const(src.shot.closer(region, check))}(B, frames, frames.pop(), "
                f"{'sh' if closing else repr('')})")


class Compiled:
    """A OneShot's compiled walk (oneshot.CompiledWalk). Made at the FIRST_BUILD-th parse, once the first
    parses have worked out the configs outputs reach; made again, MAX_BUILDS times at most, at the 4th,
    16th, ... times as many parses, where new configs appeared and at least one parse in REBUILD_SHARE since
    the last build was handed to the walk before its end. Making it costs about as much as a few dozen
    parses, so a config that only malformed outputs reach (they are declined anyway) does not make it again."""

    def __init__(self, shot: OneShot) -> None:
        self.shot = shot
        self.walks: dict[bool, Walk | None] = {}  # by whether the parse asks for events (made on first use)
        self.seen = -1  # how many configs the shot had when the walk was made
        self.parses = self.handed = 0  # since the walk was made (counts other threads may race: only when to
        self.due = FIRST_BUILD         # build again depends on them)
        self.builds = 0
        self._lock = threading.Lock()

    def current(self, events: bool = False) -> Walk | None:
        self.parses += 1
        if self.parses >= self.due and self.builds < MAX_BUILDS:
            with self._lock:
                if self.parses >= self.due and self.builds < MAX_BUILDS:
                    self.due *= 4
                    if len(self.shot.configs) != self.seen and (
                            not any(self.walks.values()) or self.handed * REBUILD_SHARE >= self.parses):
                        self.seen = len(self.shot.configs)
                        self.walks = {events: compile_walk(self.shot, events)}
                        self.builds += 1
                        self.parses = self.handed = 0
                        self.due = FIRST_BUILD * 4 ** self.builds
        walks = self.walks
        if events not in walks and walks:  # (made since the last build for the other kind of parse only)
            with self._lock:
                if events not in self.walks:
                    self.walks = {**self.walks, events: compile_walk(self.shot, events)}
            walks = self.walks
        return walks.get(events)

    def handed_over(self) -> None:
        self.handed += 1


def specialised(grammar: Grammar) -> OneShot:
    """The grammar's specialised one-shot parser (made on first use, per process: it is not pickled with the
    grammar; its configs are worked out as parses reach them), with its walk compiled (see Compiled)."""
    found = grammar.tables.shared.get("oneshot")
    if found is None:
        shot = OneShot(grammar)
        shot.compiled = Compiled(shot)
        shot.readers = CallReaders(shot)
        found = grammar.tables.shared.setdefault("oneshot", shot)
    return found  # type: ignore[no-any-return]


__all__ = ["FIRST_BUILD", "MAX_BUILDS", "MAX_CONFIGS", "MAX_LINES", "REBUILD_SHARE", "Compiled", "compile_source",
           "compile_walk", "specialised", "walk_source"]
