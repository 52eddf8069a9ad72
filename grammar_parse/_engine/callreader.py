"""The specialised one-shot parser's reader of a whole tool call: one regex match per call.

The walk (``OneShot._walk`` or the compiled walk) takes a call delimiter by delimiter: per argument a scan, a
step, its region opened, its text routed, a scan, a step, its region closed. Where a call's inside is in its
clean shape, a pattern written from the grammar's own delimiters matches all of it at once, and the arguments
are stored as the walk stores them. The pattern reads what the walk reads because, checked when the reader is
made:

- between arguments it takes only ``[ \\t\\n\\r]`` (text a call's closer accepts), and no delimiter live there
  can start with one of those characters;
- an argument's text holds no first character of a delimiter live inside an argument, so the first delimiter
  after it starts where its close does;
- at each delimiter, no other delimiter live there can match: their literal heads (regex_shape.literal_heads) are
  exclusive, none the prefix of another, or their automata share no path on which one accepts while the other
  is alive, so the scan's tie-break has one candidate;
- each delimiter is its own pattern, embedded atomically (``(?>...)``): it matches there as its search does; where
  one is searched under a time limit, the match runs under it (past it the parse declines to the session).

The configs the steps lead to are the walk's own, followed step by step, and the region actions on those steps
(an argument's open, its text, its close, the call's close) are checked as the configs are worked out. Where
the pattern does not match (another shape, markup in a value, a call cut off), the walk reads the call; where
what it stores is not the walk's plain case (an argument twice, a value that does not parse), the parse declines
as the walk would. Measured and left out: one more match for the text after a call and the next call's opener
(the walk between calls is as cheap), and a match per argument (the regex module's fixed cost per match).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from itertools import repeat
from typing import Any

import regex

from ..errors import GrammarParseError
from .content.text import without_separators
from .delimiters import LiteralMatcher, RegexMatcher, search_budget
from .grammar import Region, Terminal
from .oneshot import CLOSE, OPEN, TEXT_OPEN, Builder, Closer, Config, Decline, OneShot
from .regex_shape import always_captured
from .regions import Storer

#: A call's configs past this many (its arguments' and the text between them): no reader.
MAX_CONFIGS = 32
#: What a reader takes between arguments: characters every call's closer reads as whitespace.
_GAP = " \t\n\r"


class _Kind:
    """One kind of argument: its opener and close (terminal names; where the argument pattern's groups for
    them, its value and the opener's named groups are, with those groups' names in the grammar), and how its
    value is made and stored (the walk's closer, read once). ``after``: the config an argument of this kind
    leads to, by the config it starts in and whether whitespace came before it and it has text (each worked
    out once)."""

    __slots__ = ("open", "close", "group", "names", "olds", "direct", "full", "storer", "entry", "scope", "mode",
                 "separators", "after", "at", "value", "shut", "captures")

    def __init__(self, i: int, open_term: Terminal, close_term: Terminal, region: Region,
                 names: tuple[tuple[str, str], ...],
                 parts: tuple[Callable[[str], Any] | None, Callable[..., Any], Storer | None]) -> None:
        self.open, self.close, self.group = open_term.name, close_term.name, f"_gp{i}"
        self.names, self.olds = tuple(new for new, _ in names), tuple(old for _, old in names)
        self.at = self.value = self.shut = 0  # (the group numbers, set once the pattern is compiled)
        self.captures: tuple[int, ...] = ()
        self.direct, self.full, storer = parts
        assert storer is not None  # (an argument's: OneShot.parts)
        self.storer = storer
        # (the keyed store written out, where the entry's key is one capture of the opener: regions.component_storer)
        entry = region.entry_key
        self.entry = self.olds.index(entry[1:-1]) if isinstance(entry, str) and entry == "{" + entry[1:-1] + "}" \
            and entry[1:-1] in self.olds else -1
        self.scope = region.key
        # (the text content parser's specialised forms written out: content.text._specialise_text)
        direct = self.direct
        self.separators: Any = direct.keywords["separators"] if isinstance(direct, partial) and \
            direct.func is without_separators else None
        self.mode = _AS_IS if direct is str else _STRIP if direct is str.strip else \
            _SEPARATORS if self.separators is not None else _DIRECT if direct is not None else _FULL
        self.after: dict[tuple[Config, bool, bool], Config] = {}

    def numbered(self, groups: Mapping[str, int]) -> None:
        """Where its groups are in the compiled argument pattern."""
        g = self.group
        self.at, self.value, self.shut = groups.get(g + "o", 0), groups[g + "v"], groups.get(g + "c", 0)
        self.captures = tuple(groups[name] for name in self.names)

    def follow(self, config: Config, gap: bool, text: bool) -> Config:
        """The config after an argument of this kind that starts in ``config`` (``gap``: after whitespace;
        ``text``: it has some): the steps the walk takes."""
        key = (config, gap, text)
        if gap:
            config = _text_step(config)
        step = config.steps.get(self.open)
        if step is None:
            raise Decline
        config = step.config
        if text:
            config = _text_step(config)
        step = config.steps.get(self.close)
        if step is None:
            raise Decline
        self.after[key] = step.config
        return step.config


#: How an argument's value is made: its text as it is, stripped, off its separators, by its content parser,
#: by its full value spec.
_AS_IS, _STRIP, _SEPARATORS, _DIRECT, _FULL = range(5)


def _text_step(config: Config) -> Config:
    step = config.text_step
    if step is None:
        raise Decline  # (text where the grammar takes none: the session reads it)
    return step.config


class CallReader:
    """A call's inside read by one match (see the module doc), from a config where the call is just open.
    ``closes``: the call's close terminals, with their group numbers; ``gap_after``: the config whitespace
    before the call's close leads to (by the config it starts in)."""

    __slots__ = ("pattern", "gaps", "end", "call", "kinds", "closes", "tops", "closer", "gap_after", "rate")

    def __init__(self, pattern: Any, call: Region, kinds: tuple[_Kind, ...], closes: tuple[tuple[str, int], ...],
                 tops: frozenset[int], closer: Closer, rate: float | None) -> None:
        self.pattern, self.call, self.kinds, self.closes, self.tops, self.closer = \
            pattern, call, kinds, closes, tops, closer
        self.gaps, self.end = pattern.groupindex["_gpw"], pattern.groupindex["_gpe"]
        self.gap_after: dict[Config, Config] = {}
        #: Where a delimiter it holds is searched under a time limit: the highest rate (delimiters.search_budget)
        self.rate = rate

    def read(self, buf: str, pos: int, build: Builder, config: Config,
             drafts: Mapping[int, Any]) -> tuple[Config, int] | None:
        """The config and position after the call's close, its arguments stored and the call closed; None
        where the walk reads it (nothing done)."""
        frames = build.frames
        if not frames or frames[-1].region is not self.call or drafts and not self.tops.isdisjoint(drafts):
            return None
        m = _match(self.pattern, buf, pos, self.rate)
        if m is None:
            return None
        at, end = m.span(self.end)
        if at == end:
            return None  # (a zero-width close: the walk's rules for it)
        call = frames[-1]
        maxr, chunks, children = build.max_region, call.chunks, call.children
        gaps = m.captures(self.gaps)
        chunks.extend(gaps)  # (the walk routes each gap into the call's text; an empty one adds nothing to it)
        call.size += sum(map(len, gaps))
        if call.size > maxr:
            raise Decline
        kinds = self.kinds
        if len(kinds) == 1:
            kind = kinds[0]
            values = m.captures(kind.value)
            args: Any = zip(repeat(kind), values, repeat([m.captures(g) for g in kind.captures]), range(len(values)))
        else:  # (several kinds: in the order they were written)
            args = [a for _, a in sorted((start, (k, value, captured, i)) for k in kinds
                                         for captured in ([m.captures(g) for g in k.captures],)
                                         for i, (start, value) in enumerate(zip(m.starts(k.value),
                                                                                m.captures(k.value))))]
        try:
            for gap, (kind, value, captured, i) in zip(gaps, args):
                config = kind.after.get((config, gap != "", value != "")) or kind.follow(config, gap != "", value != "")
                if len(value) > maxr:
                    raise Decline
                mode = kind.mode
                if mode == _SEPARATORS:
                    lead, trail = kind.separators
                    if lead and value.startswith(lead):
                        value = value[len(lead):]
                    if trail and value.endswith(trail):
                        value = value[:len(value) - len(trail)]
                elif mode == _STRIP:
                    value = value.strip()
                elif mode != _AS_IS:
                    value = _value(kind, m, i, value, captured)
                entries = children.get(kind.scope) if kind.entry >= 0 else None
                if type(entries) is dict:
                    entry = captured[kind.entry][i]
                    if entry in entries:
                        raise Decline  # an argument written twice: the session reports it
                    entries[entry] = value
                elif kind.storer(children, {old: c[i] for old, c in zip(kind.olds, captured)}, {}, value):
                    raise Decline
            if gaps[-1]:
                after = self.gap_after.get(config)
                if after is None:
                    after = self.gap_after[config] = _text_step(config)
                config = after
            closes = self.closes
            name = closes[0][0] if len(closes) == 1 else next(c for c, g in closes if m.spans(g))
            step = config.steps.get(name)
            if step is None:
                raise Decline
        except GrammarParseError:  # (a value that does not parse: the session reports it)
            raise Decline from None
        frames.pop()
        build.at = at
        self.closer(build, frames, call, buf[at:end])
        return step.config, end


def _match(pattern: Any, buf: str, pos: int, rate: float | None) -> Any:
    """``pattern`` matched at ``pos``, under the time limit its delimiters are searched under (``rate``; past
    it TimeoutError: the parse declines, and the session, whose searches hand over to the linear matcher,
    parses the output)."""
    if rate is None:
        return pattern.match(buf, pos)
    return pattern.match(buf, pos, timeout=search_budget(len(buf) - pos, rate))


def _rate(terms: Any) -> float | None:
    """The highest time-limit rate of the delimiters ``terms`` (None: none is searched under a limit)."""
    rates = [t.matcher.rate for t in terms if isinstance(t.matcher, RegexMatcher) and t.matcher.limit]
    return max(rates) if rates else None


def _value(kind: _Kind, m: Any, i: int, body: str, captured: list[list[str]]) -> Any:
    """An argument's value by its content parser or its full spec (oneshot.region_closer)."""
    if kind.direct is not None:
        return kind.direct(body)
    o0, o1 = m.spans(kind.at)[i]
    c0, c1 = m.spans(kind.shut)[i]
    return kind.full(body, {old: c[i] for old, c in zip(kind.olds, captured)}, m.string[o0:o1],
                     m.string[c0:c1], {})


class CallReaders:
    """A OneShot's call readers, by the config a call opens in, each made the first time a parse reaches it
    (oneshot.CallReading)."""

    def __init__(self, shot: OneShot) -> None:
        self.shot = shot
        self._made: dict[int, CallReader | None] = {}

    def get(self, config: Config) -> CallReader | None:
        made = self._made
        if id(config) not in made:  # (the shot keeps its configs: an id stays theirs)
            shot = self.shot
            made[id(config)] = call_reader(config, shot.explore, shot.closer, shot.parts) \
                if shot.explore(config, False) else None  # (the call's first config: the walk's)
        return made[id(config)]

    def known(self, config: Config) -> CallReader | None:
        """The reader made for ``config`` so far (None: none, or not made yet)."""
        return self._made.get(id(config))

    def read(self, config: Config, buf: str, pos: int, build: Builder,
             drafts: Mapping[int, Any]) -> tuple[Config, int] | None:
        reader = self.get(config)
        return None if reader is None else reader.read(buf, pos, build, config, drafts)


# ---------------------------------------------------------------------------- making one
def call_reader(config: Config, explore: Callable[[Config], bool], closer: Callable[[Region, bool], Closer],
                parts: Callable[[Region], tuple[Callable[[str], Any] | None, Callable[..., Any], Storer | None]],
                ) -> CallReader | None:
    """The reader for the call just opened in ``config``, or None where the call's configs do not meet the
    module doc's conditions. ``explore``: works out a config's steps (OneShot); ``closer``: OneShot.closer;
    ``parts``: an argument region's content parser (None: its full value), full value and storer."""
    if not explore(config):
        return None
    entries = config.info.scanner.entries
    calls = {id(t.region): t.region for t, *_ in entries
             if t.role == "close" and t.region is not None and t.region.is_call and t.name in config.steps}
    if len(calls) != 1:
        return None
    (call,) = calls.values()
    if not any(t.role == "open" and t.region is not None and t.region.parent == call.rule and t.name in config.steps
               for t, *_ in entries):
        return None  # (no arguments written as regions of their own)
    found = _closure(config, call, explore)
    if found is None or found[4].get(None, set()) & set(_GAP):
        return None
    return _made(call, *found, closer, parts)


_Closure = tuple[list[tuple[Config, "Region | None"]], dict[str, Terminal], dict[str, Terminal], dict[str, Terminal],
                 dict["str | None", set[str]]]


def _closure(config: Config, call: Region, explore: Callable[[Config], bool]) -> _Closure | None:
    """The configs a call's inside reaches from ``config`` by the steps the pattern takes, each with the argument
    region open in it (None: between arguments); the argument openers and closes (by region rule), the
    call's closes (by terminal name), and the trigger characters (_triggers). None where a step does more than
    the reader does (its region actions are not an argument's open, text or close, or the call's close), where a
    config fails _triggers' test, or past MAX_CONFIGS."""
    seen: dict[int, tuple[Config, Region | None]] = {}
    todo: list[tuple[Config, Region | None]] = [(config, None)]
    openers: dict[str, Terminal] = {}
    closes: dict[str, Terminal] = {}
    call_closes: dict[str, Terminal] = {}
    triggers: dict[str | None, set[str]] = {}
    while todo:
        c, region = todo.pop()
        if id(c) in seen:
            if seen[id(c)][1] is not region:
                return None  # (one config inside two kinds of argument, or both inside and between)
            continue
        seen[id(c)] = (c, region)
        if len(seen) > MAX_CONFIGS or not explore(c):
            return None
        text, step = c.info.text, c.text_step
        if c.run is None and step is not None:
            if text is None or text.role != "text" or step.actions not in ((), ((TEXT_OPEN, text),)) or \
                    step.actions and text.region is not (call if region is None else region):
                return None
            todo.append((step.config, region))
        taken: set[int] = set()  # (the delimiters the pattern takes here: checked at once, so that a call the
        for term, *_ in c.info.scanner.entries:  # reader cannot take costs one config, not its whole inside)
            step = c.steps.get(term.name)
            if step is None:
                continue
            if region is None and term.role == "open" and term.region is not None and \
                    term.region.parent == call.rule and not _may_be_empty(term):  # (a zero-width one: the walk's)
                if step.actions != ((OPEN, term),) or term.repair is not None or \
                        openers.setdefault(term.region.rule, term) is not term:
                    return None
                todo.append((step.config, term.region))
            elif region is None and term.role == "close" and term.region is call:
                if step.actions != ((CLOSE, call),) or term.repair is not None:
                    return None
                call_closes[term.name] = term
            elif region is not None and term.role == "close" and term.region is region:
                if step.actions != ((CLOSE, region),) or closes.setdefault(region.rule, term) is not term:
                    return None
                todo.append((step.config, None))
            else:
                continue
            if _embedded(term, term.role == "open", "") is None:
                return None  # (one the pattern cannot hold)
            taken.add(id(term))
        if not _triggers(c, taken, triggers.setdefault(None if region is None else region.rule, set())):
            return None
    if not openers or not call_closes or set(closes) != set(openers):
        return None
    return list(seen.values()), openers, closes, call_closes, triggers


def _triggers(config: Config, taken: set[int], triggers: set[str]) -> bool:
    """Add to ``triggers`` the first characters of the delimiters live in ``config``; False where a delimiter's
    heads are not known, or where one the pattern takes there (``taken``, by id) and another one live beside it
    may match at one place (the scan's tie-break would decide)."""
    live = [(t, _heads(m)) for t, m, *_ in config.info.scanner.entries]
    for t, h in live:
        if h is None:
            return False
        triggers.update(head[0] for head in h)
        if id(t) in taken and any(u is not t and not _apart(t, h, u, g) for u, g in live):
            return False
    return True


def _made(call: Region, configs: list[tuple[Config, Region | None]], openers: dict[str, Terminal],
          closes: dict[str, Terminal], call_closes: dict[str, Terminal], triggers: dict[str | None, set[str]],
          closer: Callable[[Region, bool], Closer],
          parts: Callable[[Region], tuple[Callable[[str], Any] | None, Callable[..., Any], Storer | None]],
          ) -> CallReader | None:
    """The reader: its pattern (every gap one group, whose spans are the gaps in order; per kind of argument its
    value, its opener's named groups, and where its full value reads them its opener's and close's text; the
    call's close, and which one where there are several), None where the delimiters' flags differ or the
    pattern does not compile."""
    flags = {t.matcher.flags for t in (*openers.values(), *closes.values(), *call_closes.values())
             if isinstance(t.matcher, RegexMatcher)}
    if len(flags) > 1:
        return None
    kinds, alternatives = [], []
    for i, (rule, opener) in enumerate(sorted(openers.items())):
        close, region = closes[rule], opener.region
        assert region is not None
        head, tail = _embedded(opener, True, f"_gp{i}n"), _embedded(close, False, "")
        assert head is not None and tail is not None  # (_closure took only delimiters it can embed)
        kind = _Kind(i, opener, close, region, head[1], parts(region))
        kinds.append(kind)
        value = "".join(regex.escape(ch) for ch in sorted(triggers.get(rule, set())))
        g = kind.group
        if kind.mode == _FULL:  # (its full value reads its opener's and close's text)
            alternatives.append(f"(?P<{g}o>(?>{head[0]}))(?P<{g}v>[^{value}]*+)(?P<{g}c>(?>{tail[0]}))")
        else:
            alternatives.append(f"(?>{head[0]})(?P<{g}v>[^{value}]*+)(?>{tail[0]})")
    ends = []
    for name, term in sorted(call_closes.items()):
        end = _embedded(term, False, "")
        assert end is not None  # (as above)
        if not name.isidentifier():
            return None
        ends.append(f"(?P<_gpe{name}>(?>{end[0]}))" if len(call_closes) > 1 else f"(?>{end[0]})")
    gap = "(?P<_gpw>[ \\t\\n\\r]*+)"
    try:
        pattern = regex.compile(f"(?:{gap}(?:{'|'.join(alternatives)}))*+{gap}(?P<_gpe>{'|'.join(ends)})",
                                flags.pop() if flags else regex.DOTALL)
    except regex.error:
        return None
    for kind in kinds:
        kind.numbered(pattern.groupindex)
    numbered = tuple((name, pattern.groupindex.get("_gpe" + name, 0)) for name in sorted(call_closes))
    return CallReader(pattern, call, tuple(kinds), numbered, frozenset(c.top for c, _ in configs), closer(call, False),
                      _rate([*openers.values(), *closes.values(), *call_closes.values()]))


def _may_be_empty(term: Terminal) -> bool:
    """Whether ``term`` may match empty (an opener that looks ahead only, as ``(?=\\{)``): the pattern takes no
    such opener, which stays live beside the others (where it matches, the pattern does not, and the walk reads
    the call)."""
    return isinstance(term.matcher, RegexMatcher) and term.matcher.min_width == 0


def _heads(matcher: Any) -> tuple[str, ...] | None:
    """What every match of a scanner's ``matcher`` starts with (delimiters.*.heads), None where that is not
    known (a repeated opener's, a JSON value's end)."""
    return matcher.heads if isinstance(matcher, (LiteralMatcher, RegexMatcher)) else None


def _apart(t: Terminal, h: tuple[str, ...], u: Terminal, g: tuple[str, ...] | None) -> bool:
    """Whether delimiters ``t`` and ``u`` (their heads ``h`` and ``g``) never match at one place: their heads
    are exclusive, or their automata (a trailing lookahead read as text) share no path on which one of them
    accepts while the other is still alive (``<[ \\t]{0,8}/`` and ``<[ \\t]{0,8}parameter``, whose heads are
    both ``<``)."""
    if g is None:
        return False
    if _exclusive(h, g):
        return True
    a = t.matcher.forwards[0] if isinstance(t.matcher, RegexMatcher) else None
    b = u.matcher.forwards[0] if isinstance(u.matcher, RegexMatcher) else None
    return a is not None and b is not None and not _share_a_start(a, b)


#: Pairs of states past which two automata are taken to share a start (_share_a_start).
_PAIRS = 4096


def _share_a_start(a: Any, b: Any) -> bool:
    """Whether some text is read by both automata from their starts with one of them accepting (a match of one
    that is a prefix of the other's: both may match at one place)."""
    moves = {(a.symbols.get(ch, a.other), b.symbols.get(ch, b.other)) for ch in {*a.symbols, *b.symbols}}
    moves.add((a.other, b.other))  # (a character neither names)
    seen: set[tuple[Any, Any]] = set()
    todo = [(a.initial, b.initial)]
    while todo:
        pair = todo.pop()
        if pair in seen:
            continue
        seen.add(pair)
        x, y = pair
        if x in a.finals or y in b.finals or len(seen) > _PAIRS:
            return True
        for p, q in moves:
            nx = a.trans.get(x, {}).get(p) if p is not None else None
            ny = b.trans.get(y, {}).get(q) if q is not None else None
            if nx is not None and ny is not None and nx in a.live and ny in b.live:
                todo.append((nx, ny))
    return False


def _exclusive(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """Whether no match starting with one of ``a`` can start where one starting with one of ``b`` does."""
    return not any(x.startswith(y) or y.startswith(x) for x in a for y in b)


#: Syntax an embedded delimiter may not hold: a back reference (group numbers move), a global inline flag.
_UNSAFE = regex.compile(r"\\[1-9]|\\g<|\(\?P=|\(\?[aiLmsux]+\)")
_NAMED = regex.compile(r"(?<!\\)((?:\\\\)*)\(\?P<(\w+)>")


def _embedded(term: Terminal, captures: bool, prefix: str) -> tuple[str, tuple[tuple[str, str], ...]] | None:
    """``term``'s pattern to embed in a reader's: its named groups renamed ``prefix`` + their number where its
    ``captures`` are wanted (each always taking part), else made non-capturing; with the (new, old) names.
    None where it cannot be embedded (a pattern the grammar would refuse as backtracking badly, syntax whose
    meaning would change, an opener that may match empty)."""
    matcher = term.matcher
    if isinstance(matcher, LiteralMatcher):
        return ("|".join(regex.escape(lit) for lit in matcher.literals), ()) if matcher.literals[0] else None
    if not isinstance(matcher, RegexMatcher) or matcher.risk is not None or _UNSAFE.search(matcher.pattern):
        return None  # (one searched under a time limit is embedded too: the reader's match is, at the highest rate)
    if captures and (matcher.min_width == 0 or not always_captured(matcher.pattern, matcher.flags)):
        return None
    if not captures:
        return _NAMED.sub(r"\1(?:", matcher.pattern), ()
    names: list[tuple[str, str]] = []

    def rename(m: Any) -> str:
        names.append((f"{prefix}{len(names)}", m.group(2)))
        return f"{m.group(1)}(?P<{names[-1][0]}>"
    source = _NAMED.sub(rename, matcher.pattern)
    return (source, tuple(names)) if len(names) == len(matcher.compiled.groupindex) else None


__all__ = ["MAX_CONFIGS", "CallReader", "CallReaders", "call_reader"]
