"""Matching one delimiter against a growing buffer: where it matches, and which bytes must wait.

A streaming parser may only act on a delimiter match that no future byte can change, and may only emit
text that cannot turn out to be part of a delimiter. transformers decides this with one partial regex
search per delimiter. That rule is kept here, because consumers compare events feed by feed, with three
guards that make streaming agree with one-shot parsing where transformers' does not:

* **hidden partials** - the ``regex`` module reports a complete match anywhere in preference to an
  earlier partial one, so in ``(?:<turn\\|>)|$`` the zero-width ``$`` at the buffer end hides a
  half-received ``<tur``. We look for a live partial before every complete match.
* **end-dependent matches** - ``$`` also matches before a final newline, so a feed ending in ``\\n``
  would close a region that one-shot parsing leaves open.
* **preferred longer matches** - in ``\\)(?:\\]<\\|end\\|>)?`` a match of ``)`` is complete, but if the
  buffer ends inside the optional tail, the regex will prefer the tail once it arrives. We complete the
  live path the shortest way (with the pattern's automaton, via interegular) and check the regex still
  picks the same match.

Literal delimiters take a ``str.find`` fast path with the same semantics as the alternation
transformers compiles them to (leftmost, then longest). What a matcher knows about its pattern's source
(widths, first characters, the ``\\s*literal`` form, the need for a time limit) is read once, at load
time, by :mod:`grammar_parse._engine.regex_shape`.
"""

from __future__ import annotations

from functools import cached_property
from time import perf_counter
from typing import TYPE_CHECKING, Any

import regex

from .linear_regex import LinearRegex
from .regex_safety import AUTOMATON_BUDGET, analyse, automaton_cost, sre, sre_parse
from .regex_shape import (
    UNBOUNDED,
    backtracking_risk,
    behind_texts,
    first_chars,
    first_chars_past_start,
    is_regex_space,
    literal_alternatives,
    literal_heads,
    pattern_shape,
    regex_atoms,
    required_text,
    space_then_chars,
    strip_anchors,
    trailing_lookahead_as_text,
    unnamed,
)

#: Seconds one search of a delimiter (or content) pattern may take in the regex module before the linear
#: matcher, which finds the same matches, takes over (see search_budget).
REGEX_TIMEOUT = 1.0


#: Seconds a character of search may take (see search_budget): what the linear matcher needs for a pattern of a
#: few choice points; a delimiter's own rate grows with its (RegexMatcher.rate).
BUDGET_RATE = 2e-6


def search_budget(chars: int, rate: float = BUDGET_RATE) -> float:
    """Seconds the regex module may take on a search over ``chars`` characters before the linear matcher
    takes over: about what the linear matcher would need (``rate`` a character), so no search costs much more
    than linear time and limits cannot add up over the searches of one region (at most REGEX_TIMEOUT)."""
    return min(REGEX_TIMEOUT, 0.002 + rate * chars)

#: (start, end, match object or None for literals)
Hit = tuple[int, int, Any]


def find_literals(buf: str, pos: int, literals: tuple[str, ...], firsts: str) -> tuple[int, str] | None:
    """Leftmost occurrence of any of ``literals`` at or after ``pos``: (start, literal), preferring the
    earlier literal in ``literals`` at the same start.

    Searching for the first characters (memchr speed, ~50 GB/s) and checking the literals there is
    ~100x faster than one str.find per literal when a literal is absent (a full scan each); after a
    few false candidates (text full of '<') it falls back to str.find per literal.
    """
    i = pos
    for _ in range(8):
        if len(firsts) == 1:
            i = buf.find(firsts, i)
        else:
            found = [j for j in (buf.find(c, i) for c in firsts) if j != -1]
            i = min(found) if found else -1
        if i == -1:
            return None
        for lit in literals:
            if buf.startswith(lit, i):
                return i, lit
        i += 1
    best: tuple[int, str] | None = None
    for lit in literals:
        j = buf.find(lit, i)
        if j != -1 and (best is None or j < best[0]):
            best = (j, lit)
    return best


def search_spaced(buf: str, pos: int, spaced: tuple[tuple[str, ...], int], matcher: RegexMatcher) -> Any:
    """The leftmost match of a pattern whose matches are a whitespace run of at most ``run`` characters then one
    of ``heads`` (regex_shape.space_then_chars): the first of those texts at ``c``, then a match tried from
    each start the run before it allows (none before the whitespace that ends at ``c``, nor more than ``run``
    back, nor before the last try), in order; then the next. (A match starting before ``c`` reads its head at
    ``c`` or later, ``run`` at most after its start.) A text every match reads (regex_shape.required_text) is
    found first: no match starts more than its reach before it, and none where it is not (a flood of heads
    without it is skipped at once).

    Where heads come every few characters and start no match, the pattern's own search from there, which is
    then as quick. A try runs without a time limit where one attempt is linear (the limit costs 1 µs a try);
    tries that could still read the same text again from each head are limited as a whole, as the pattern's
    search would be: past its budget the linear matcher searches on."""
    heads, run = spaced
    attempt = matcher.compiled.match if not matcher._attempt_limit else matcher.match
    deadline = perf_counter() + search_budget(len(buf) - pos, matcher.rate) if matcher.limit else None
    nexts = dict.fromkeys(heads, -2)  # each text's next place (-2: not looked for yet)
    needed, reach = matcher._required or ("", 0)
    need_at = -2  # where that text is next (a match starts at most ``reach`` before it)
    floor = pos
    tries = 0
    while True:
        if needed and need_at < floor:
            need_at = buf.find(needed, floor)
            if need_at < 0:
                return None
            floor = max(floor, need_at - reach)
        c = -1
        for head, at in nexts.items():
            if at == -2 or -1 < at < floor:
                at = nexts[head] = buf.find(head, floor)
            if at >= 0 and (c < 0 or at < c):
                c = at
        if c < 0:
            return None
        start, lo = c, max(floor, c - run)
        while start > lo and is_regex_space(buf[start - 1]):
            start -= 1
        for s in range(start, c + 1):
            m = attempt(buf, s)
            if m is not None:
                return m
        floor = c + 1
        tries += 1
        if tries > _DENSE_TRIES and tries * 32 > floor - pos:
            return matcher.searched(buf, floor)
        if deadline is not None and not tries % _DENSE_TRIES and perf_counter() > deadline:
            return matcher.after_timeout(buf, floor)


class Progress:
    """What one session's last streaming scan established for one delimiter, so the next scan of the grown
    buffer starts where that one stopped instead of from the held position (which made a long pending run,
    such as whitespace after ``<tool_call>`` that ``(?=\\s*[{\\[])`` must see past, cost its length on
    every feed: quadratic).

    At buffer length ``end``, scanning from ``pos``: no match, complete or partial, starts before
    ``pending`` (or before ``end`` when ``pending`` is -1); ``found`` says whether the search had a complete
    match; ``state`` is the matcher's own note on the run from ``pending`` (an automaton state, or how far
    it is known to be whitespace), None when it has none.
    """

    __slots__ = ("end", "pos", "pending", "found", "state")

    def __init__(self, end: int, pos: int, pending: int, found: bool, state: Any = None) -> None:
        self.end = end
        self.pos = pos
        self.pending = pending
        self.found = found
        self.state = state

    def dead_below(self) -> int:
        """No match can start before this offset, however the text goes on."""
        return self.end if self.pending == -1 else self.pending


class LiteralMatcher:
    """Any of a set of fixed strings: leftmost match, longest at that position."""

    def __init__(self, literals: tuple[str, ...]) -> None:
        self.literals = tuple(sorted(literals, key=len, reverse=True))
        self.max_width = len(self.literals[0])
        # A match at the buffer edge may still grow only if another literal extends it.
        self.can_extend = any(a != b and a.startswith(b) for a in literals for b in literals)
        self.first_chars = "".join(sorted({s[0] for s in literals}))
        #: The texts its matches start with (see RegexMatcher.heads): the literals themselves.
        self.heads: tuple[str, ...] | None = self.literals
        self.context = 0
        self.zero_width = False

    def search(self, buf: str, pos: int) -> Hit | None:
        found = find_literals(buf, pos, self.literals, self.first_chars)  # longest first wins a tie
        return None if found is None else (found[0], found[0] + len(found[1]), None)

    def live_partial(self, buf: str, lo: int, hi: int) -> int:
        """First position in [lo, hi) whose suffix of ``buf`` is a proper prefix of a literal, else -1."""
        n = len(buf)
        start = max(lo, n - self.max_width + 1)
        for i in range(start, min(hi, n)):
            if buf[i] in self.first_chars:
                tail = buf[i:]
                for lit in self.literals:
                    if len(tail) < len(lit) and lit.startswith(tail):
                        return i
        return -1

    def probe(self, buf: str, pos: int, hit: Hit | None) -> tuple[Hit | None, int]:
        """Streaming decision given the complete ``hit`` from ``search``: (committable hit, pending start)."""
        n = len(buf)
        if hit is None:
            return None, self.live_partial(buf, pos, n)
        partial = self.live_partial(buf, pos, hit[0])
        if partial != -1:
            return None, partial
        if hit[1] == n and self.can_extend:
            return None, hit[0]
        return hit, -1


#: Automaton.walk remembers the answers for texts up to this long, at most this many per automaton.
_WALKS_TEXT, _WALKS_KEPT = 48, 1024
#: Automaton.completion remembers its answers for tails up to this long (an opener with a call's name in it).
_COMPLETIONS_TEXT = 128
_UNWALKED = object()


class Automaton:
    """A regex's finite automaton, for questions the regex engine cannot answer: which partial matches
    are still alive at the end of the buffer, and the shortest way to complete one."""

    def __init__(self, fsm: Any) -> None:
        self.initial = fsm.initial
        self.finals = frozenset(fsm.finals)
        self.trans: dict[Any, dict[Any, Any]] = {st: dict(m) for st, m in fsm.map.items()}
        reverse: dict[Any, set[Any]] = {}
        pairs: dict[tuple[Any, Any], set[Any]] = {}
        for st, moves in self.trans.items():
            for sym, target in moves.items():
                reverse.setdefault(target, set()).add(st)
                pairs.setdefault((target, sym), set()).add(st)
        self.reverse: dict[tuple[Any, Any], frozenset[Any]] = {k: frozenset(v) for k, v in pairs.items()}
        live, todo = set(self.finals), list(self.finals)
        while todo:
            for prev in reverse.get(todo.pop(), ()):
                if prev not in live:
                    live.add(prev)
                    todo.append(prev)
        self.live = frozenset(live)
        mapping = fsm.alphabet._symbol_mapping
        self.symbols: dict[str, Any] = {ch: sym for ch, sym in mapping.items() if isinstance(ch, str)}
        self.other = next((sym for ch, sym in mapping.items() if not isinstance(ch, str)), None)
        self.reps: dict[Any, str] = {}
        for ch, sym in self.symbols.items():
            self.reps.setdefault(sym, ch)
        self._steps: dict[tuple[frozenset[Any], Any], frozenset[Any]] = {}
        self._walks: dict[tuple[Any, str], Any] = {}  # (state, text) -> walk's answer (see walk)
        self._completions: dict[str, tuple[str | None | bool]] = {}  # tail -> (completion's answer,)
        self._from_state: dict[Any, str | None] = {}  # state -> the shortest way on to acceptance

    def first_alive(self, buf: str, lo: int, hi: int) -> int:
        """First start in [lo, hi) such that ``buf[start:]`` is a prefix of some match, else -1.

        Reads ``buf`` backwards from its end, tracking the set of automaton states from which the text
        read so far leads to a live state (a lazily built reverse DFA); this usually dies within a few
        characters, so the cost does not depend on how much text precedes the end.
        """
        if hi <= lo:  # (a held match with nothing before it: no need to read it back)
            return -1
        current = self.live
        best = -1
        symbols, other, steps, reverse, initial = self.symbols, self.other, self._steps, self.reverse, self.initial
        for i in range(len(buf) - 1, lo - 1, -1):
            sym = symbols.get(buf[i], other)
            if sym is None:
                break
            key = (current, sym)
            nxt = steps.get(key)
            if nxt is None:
                nxt = frozenset(q for t in current for q in reverse.get((t, sym), ()))
                steps[key] = nxt
            if not nxt:
                break
            current = nxt
            if i < hi and initial in current:
                best = i
        return best

    def first_chars(self) -> str | None:
        """The characters a match can start with: those read on a step from the start. None where a character
        outside the automaton's alphabet can start one (they cannot be listed)."""
        moves = self.trans.get(self.initial, {})
        if self.other is not None and self.other in moves:
            return None
        return "".join(sorted(ch for ch, sym in self.symbols.items() if sym in moves))

    def final_chars(self) -> str | None:
        """The characters a match can end with: those read on a step into acceptance. None where the empty
        text is a match (it ends nowhere) or such a step reads a character outside the automaton's alphabet
        (they cannot be listed)."""
        if self.initial in self.finals:
            return None
        syms = {sym for moves in self.trans.values() for sym, target in moves.items() if target in self.finals}
        if self.other is not None and self.other in syms:
            return None
        return "".join(sorted(ch for ch, sym in self.symbols.items() if sym in syms))

    def walk(self, state: Any, text: str) -> Any:
        """The state after reading ``text`` from ``state`` on a path that has not matched yet; None once
        the path dies or reaches acceptance (then the regex itself must look).

        Short walks are remembered: a stream walks the same delimiter pieces over and over (``<parameter=``
        and a parameter's name, cut the same way at every call), one Python step per character each time."""
        if len(text) > _WALKS_TEXT:
            return self._walk(state, text)
        key = (state, text)
        known = self._walks.get(key, _UNWALKED)
        if known is _UNWALKED:
            known = self._walk(state, text)
            if len(self._walks) >= _WALKS_KEPT:
                self._walks.clear()  # (bounded, whatever texts a process streams)
            self._walks[key] = known
        return known

    def _walk(self, state: Any, text: str) -> Any:
        symbols, other, trans, live, finals = self.symbols, self.other, self.trans, self.live, self.finals
        for ch in text:
            sym = symbols.get(ch, other)
            state = trans.get(state, {}).get(sym) if sym is not None else None
            if state is None or state not in live or state in finals:
                return None
        return state

    def completion(self, tail: str) -> str | None | bool:
        """For ``tail`` read from the start: False where no path reading it stays alive (it is no prefix of a
        match), else the shortest non-empty string taking the automaton on to acceptance (None: none is
        written with the alphabet's characters).

        A stream asks this of a held opener at every piece until it commits (deepseek's: a call's name and a
        newline, then an optional json code fence), and the same tails come back at every call: the answers
        are remembered per tail, and the search from a state per state."""
        known = self._completions.get(tail)  # (one lookup: another thread may clear the dict between two)
        if known is not None:
            return known[0]
        state = self.initial
        symbols, other, trans = self.symbols, self.other, self.trans
        for ch in tail:
            sym = symbols.get(ch, other)
            state = trans.get(state, {}).get(sym) if sym is not None else None
            if state is None:
                break
        answer: str | None | bool = False
        if state is not None and state in self.live:
            if state not in self._from_state:
                self._from_state[state] = self._shortest(state)
            answer = self._from_state[state]
        if len(tail) <= _COMPLETIONS_TEXT:
            if len(self._completions) >= _WALKS_KEPT:
                self._completions.clear()  # (bounded, whatever texts a process streams)
            self._completions[tail] = (answer,)
        return answer

    def _shortest(self, state: Any) -> str | None:
        """The shortest non-empty string taking ``state`` to acceptance, written with representatives."""
        seen, frontier = {state}, [(state, "")]
        while frontier:
            nxt = []
            for st, path in frontier:
                for sym, target in self.trans.get(st, {}).items():
                    if sym not in self.reps or target not in self.live:
                        continue
                    if target in self.finals:  # checked before `seen`: a loop back to the start counts
                        return path + self.reps[sym]
                    if target not in seen:
                        seen.add(target)
                        nxt.append((target, path + self.reps[sym]))
            frontier = nxt
        return None


#: The characters the regex module's \s matches (up to U+3000, the last of them).
REGEX_SPACE = "".join(c for c in map(chr, range(0x3001)) if is_regex_space(c))


def _space_end(buf: str, j: int, stop: int) -> int:
    """The first position in [j, stop) that is not regex whitespace (``stop`` if there is none)."""
    while j < stop and is_regex_space(buf[j]):
        j += 1
    return j


#: The span a partial search reads at a time (RegexMatcher._partial_search): 512 characters keep the
#: regex module's quadratic partial search at ~40 us a window.
PARTIAL_WINDOW = 512
_TIMED_OUT = object()
#: The longest leading whitespace run a search by the texts after it (search_spaced)
#: walks back over: past it (``\s*;``) the compiled search, whose tries are the same.
_SPACED_RUN = 256
#: After this many heads in a row that start no match, a few characters apart, search_spaced hands over to
#: the pattern's own search (a text dense with them: beam's ``to=`` heads in prose about "to").
_DENSE_TRIES = 16

#: What an end-sensitive assertion becomes for partial matching (see edge_undecided): it also needs text
#: after it, so at the end of the buffer it is undecided (a partial match) instead of decided.
_UNDECIDED = {"\\b": r"(?:\b(?=[\s\S]))", "\\B": r"(?:\B(?=[\s\S]))", "\\Z": r"(?:\Z(?=[\s\S]))",
              "$": r"(?:$(?=[\s\S]{2}))"}


def edge_undecided(pattern: str) -> str | None:
    """``pattern`` for partial matching, with ``\\b``, ``\\B``, ``\\Z`` and ``$`` left undecided at the end of
    the buffer; None if it has none of them.

    The regex module decides them there as if the text ended: ``null\\b`` holds after ``null``, so in
    ``(?!null\\b)[^<]+`` a path that ``nullable`` keeps alive looks dead, and a streaming scan gave that text
    away as plain text (issue 32: K2 Horizon's ``nullable`` argument dropped when fed 1-2 characters at a
    time). Away from the end each stands for itself; ``$`` needs two characters because it also holds
    before a final newline.
    """
    tokens = regex_atoms(pattern)
    if not any(kind != "class" and text in _UNDECIDED for kind, text in tokens):
        return None
    return "".join(_UNDECIDED[text] if kind != "class" and text in _UNDECIDED else text for kind, text in tokens)


def tail_repeat(pattern: str, flags: int) -> tuple[Any, Any] | None:
    """(``(?:C)*``, the characters of the optional ones after it or None) when ``pattern`` ends in a greedy
    unbounded repeat of one character class C, then at most a few optional single characters
    (``call:(?P<name>[\\w.\\-]+)``, ``Action:...```(?:json)?[ \\t]*\\n?``); else None.

    A match of such a pattern that runs to the end of the buffer, its last character not one of the optional
    ones, runs to the new end too when all the new text is in C (a path still open at the old end either
    fails or ends in the same repeat, which is greedy, and the optional characters then match nothing), so
    a held match that keeps growing is checked on its new text only instead of re-matched from its start
    on every feed (gemma4, a 20 KB call name in 64-character feeds: 0.43 s).
    """
    tokens = regex_atoms(pattern)
    optional: list[str] = []
    while tokens:
        if tokens[-1] == ("char", ")"):
            tokens.pop()
        elif len(tokens) >= 2 and tokens[-1] == ("char", "?") and _optional_char(tokens[-2]) is not None:
            optional.append(tokens[-2][1])
            del tokens[-2:]
        else:
            break
    if len(tokens) < 2 or tokens[-1] not in (("char", "+"), ("char", "*")) or not _single_char(tokens[-2]) \
            or any(t == ("char", "(") and u == ("char", "?") and v[1] in "aiLmsuxV-"  # (inline flags)
                   for t, u, v in zip(tokens, tokens[1:], tokens[2:])):
        return None
    atom = tokens[-2][1]
    try:
        items = sre_parse.parse(unnamed(pattern), flags & ~regex.VERSION1 & 0xFFFF)
    except Exception:  # noqa: BLE001 - syntax only the regex module knows
        return None
    skipped = 0
    while True:  # the last items, through the groups that end the pattern: the repeat, then the optionals
        while len(items) > 1 and items[-1][0] is sre.MAX_REPEAT and items[-1][1][:2] == (0, 1) \
                and _one_char_item(items[-1][1][2]):
            items = items[:-1]
            skipped += 1
        op, av = items[-1]
        if op is sre.SUBPATTERN and not av[1] and not av[2]:
            items = av[-1]
            continue
        if op is not sre.MAX_REPEAT or av[1] != sre.MAXREPEAT or not _one_char_item(av[2]) or skipped != len(optional):
            return None
        repeat = regex.compile(f"(?:{atom})*", flags)
        if any(repeat.fullmatch(_optional_char(("", c)) or "") for c in optional):  # (one in C would be ambiguous)
            return None
        return repeat, (regex.compile("|".join(optional), flags) if optional else None)


def _single_char(token: tuple[str, str]) -> bool:
    kind, text = token
    return (kind == "class" or kind == "escape" and text[1] in "wWsSdDnrtfv"
            or kind == "char" and text not in "()|?*+{}^$\\")


def _only_leading_carets(pattern: str, flags: int) -> bool:
    """Whether ``pattern`` has anchors and each is a ``^`` that nothing can precede in a match."""
    try:
        items = sre_parse.parse(unnamed(pattern), flags & ~regex.VERSION1 & 0xFFFF)
    except Exception:  # noqa: BLE001 - syntax only the regex module knows
        return False

    def anchors(items: Any) -> int:
        count = 0
        for op, av in items:
            if op is sre.AT:
                count += 1
            elif op is sre.BRANCH:
                count += sum(anchors(alt) for alt in av[1])
            elif op is sre.SUBPATTERN:
                count += anchors(av[-1])
            elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT) or op is getattr(sre, "POSSESSIVE_REPEAT", None):
                count += anchors(av[2])
            elif op in (sre.ASSERT, sre.ASSERT_NOT):
                count += anchors(av[1]) + 1
            elif op is getattr(sre, "ATOMIC_GROUP", None):
                count += anchors(av)
        return count

    def leading(items: Any) -> int:
        if not items:
            return 0
        op, av = items[0]
        if op is sre.AT:
            return 1 if av is sre.AT_BEGINNING else 0
        if op is sre.SUBPATTERN:
            return leading(av[-1])
        if op is sre.BRANCH:
            return sum(leading(alt) for alt in av[1])
        return 0

    total = anchors(items)
    return total > 0 and total == leading(items)


def _optional_char(token: tuple[str, str]) -> str | None:
    """The one character a literal token stands for (``\\n``, ``\\.``, ``x``), None for anything else."""
    kind, text = token
    if len(text) == 1:
        return None if kind == "class" or text in "()|?*+{}[].^$\\" else text
    if text[0] == "\\" and text[1] in "nrtfv":
        return {"n": "\n", "r": "\r", "t": "\t", "f": "\f", "v": "\v"}[text[1]]
    return text[1] if text[0] == "\\" and not text[1].isalnum() else None


def _one_char_item(items: Any) -> bool:
    return len(items) == 1 and items[0][0] in (sre.IN, sre.LITERAL, sre.NOT_LITERAL, sre.ANY)


class PlainState:
    """Pickles as plain data: what the object worked out for itself (its ``cached_property`` values, such
    as automata holding closures) stays behind and is worked out again on use, and its compiled patterns
    travel as their text and compile on first use in the receiving process (the ``regex`` module's
    compile is the costly part of loading a grammar)."""

    def __getstate__(self) -> dict[str, Any]:
        derived = {name for klass in type(self).__mro__ for name, value in vars(klass).items()
                   if isinstance(value, cached_property)}
        state = {name: value for name, value in self.__dict__.items() if name not in derived}
        lazy = {name: (value.pattern, value.flags) for name, value in state.items()
                if isinstance(value, regex.Pattern)}
        for name in lazy:
            del state[name]
        return {**state, "_lazy": {**state.get("_lazy", {}), **lazy}}

    if not TYPE_CHECKING:  # (for the type checker, the attributes are the ones each class declares)
        def __getattr__(self, name: str) -> Any:
            """A compiled pattern not compiled yet in this process (only called for a missing attribute)."""
            lazy = self.__dict__.get("_lazy")
            if lazy is None or name not in lazy:
                raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
            value = regex.compile(*lazy[name])
            object.__setattr__(self, name, value)  # (a frozen dataclass's too: a cache, not a change)
            return value


def _automaton_of(source: str) -> Automaton | None:
    """The automaton of regex ``source``, or None where interegular cannot build a faithful one (lookbehinds,
    backreferences, syntax it lacks) or where building it would stall the stream that asked for it: counted
    repeats reading the same characters one after another, past AUTOMATON_BUDGET (regex_safety.automaton_cost;
    an authored pattern or a template's may hold them). Without it a pending match is matched again instead."""
    if automaton_cost(source) > AUTOMATON_BUDGET:
        return None
    try:
        import interegular

        return Automaton(interegular.parse_pattern(source).to_fsm())
    except Exception:  # noqa: BLE001 - syntax interegular lacks
        return None


class RegexMatcher(PlainState):
    """A regular expression delimiter, searched with the ``regex`` module (DOTALL unless authored otherwise).
    It pickles as plain data (:class:`PlainState`)."""

    def __init__(self, pattern: str, flags: int = regex.DOTALL) -> None:
        self.pattern = pattern
        self.compiled = regex.compile(pattern, flags)
        self.flags = flags
        # Partial matches (what may still be arriving at the edge) are asked of a form whose end-sensitive
        # assertions stay undecided at the end of the buffer; complete matches of the pattern itself.
        undecided = edge_undecided(pattern)
        self.partial_compiled = self.compiled if undecided is None else regex.compile(undecided, flags)
        shape = pattern_shape(pattern, flags)
        self.max_width = shape.max_width
        self.end_reach = shape.end_reach
        self.context = shape.context
        self.lookaround = shape.lookaround
        self.min_width = shape.min_width  # (0: it may match empty somewhere, or that is not known)
        self.reads = shape.reads
        self.zero_width = self.compiled.match("") is not None
        # Patterns that could backtrack badly search under a time limit; the rest run free (it costs ~1 µs).
        #: Why the pattern can backtrack catastrophically (None if it cannot); grammars refuse such patterns.
        self.risk, timed, attempt_timed = backtracking_risk(pattern, flags)
        # (a limit only where needed: passing ``timeout=None`` costs about 1 µs a search)
        self.limit = timed
        self._attempt_limit = attempt_timed  # (one match attempt's, see search_spaced)
        #: Seconds a character of a limited search may take before the linear matcher takes over: what that matcher
        #: needs, ~0.5 us a choice point, so a search the regex module does in linear time is not handed over.
        points = analyse(pattern, flags).choice_points if timed and self.risk is None else 0  # (cached)
        self.rate = BUDGET_RATE * max(1.0, points / 4)
        # `\s*<lit>` patterns defeat the regex engine's literal scan (~25 MB/s); str.find plus a whitespace walk
        # finds the same leftmost match at memory speed. (DOTALL or not: the lowered form has no dot)
        self.lowered = literal_alternatives(pattern) if not flags & ~regex.DOTALL and not self.compiled.groupindex else None
        self._firsts = "".join(sorted({lit[0] for lit in self.lowered[1]})) if self.lowered else ""
        self._prefixes = LiteralMatcher(self.lowered[1]) if self.lowered else None  # partial literals at the edge
        #: Texts one of which every match starts with (a zero-width match: the text its lookahead reads), or None
        #: (regex_shape.literal_heads; a leading ``\s*`` run: a match may start with any whitespace).
        self.heads: tuple[str, ...] | None = (None if self.lowered[0] else self.lowered[1]) if self.lowered \
            else literal_heads(pattern, flags)
        self.first_chars = None if self.zero_width else first_chars(pattern, flags)
        #: What every match not at the text's start starts with, where one may start there (``(?:>>>|^)a``)
        self.past_start_chars = None if self.first_chars else first_chars_past_start(pattern, flags)
        #: For a lookbehind of texts alone (``(?<=\)\])``): the texts, found with str.find (see search)
        self.behind = behind_texts(pattern, flags)
        #: For ``\s{0,64};...`` (a leading whitespace run, then known characters): those characters (see
        #: space_then_chars); the fast path then holds a trailing whitespace run, as for ``\s*<lit>``.
        spaced = None if self.zero_width or self.first_chars or self.lowered else space_then_chars(pattern, flags)
        self.spaced_first_chars = None if spaced is None else "".join(sorted({head[0] for head in spaced[0]}))
        # ... and a search finds them first, then tries the run before each (at most this long): the regex engine's
        # own search tries one at every whitespace character (llama3_json's separator: 45 ns a character, ~1 this way)
        self._spaced = spaced if spaced is not None and spaced[1] <= _SPACED_RUN else None
        required = required_text(pattern, flags) if self._spaced is not None else None
        self._required = None if required is None or spaced is None or required[0] in spaced[0] else required
        # (whether search is the compiled pattern's own: no lowered, behind or spaced form; see plain and timed)
        self._compiled_search = self.lowered is None and self.behind is None and self._spaced is None
        #: ``(?:C)*`` when the pattern ends in a greedy ``C+`` (see tail_repeat) and nothing at its end looks
        #: past the match; lets a held match growing over C resume (note / resume).
        tail = None if undecided is not None or self.end_reach or self.lookaround else tail_repeat(pattern, flags)
        self.tail: Any = None if tail is None else tail[0]
        self._tail_optional: Any = None if tail is None else tail[1]

    @cached_property
    def _automaton(self) -> Automaton | None:
        """The pattern's automaton (anchors dropped), or None where interegular cannot build a faithful one."""
        if self.lookaround:
            return None
        stripped = strip_anchors(unnamed(self.pattern))
        return _automaton_of(stripped if not self.flags & regex.DOTALL else f"(?s:{stripped})")

    @cached_property
    def _forward(self) -> Automaton | None:
        """An automaton whose live paths are exactly this pattern's partial matches, for resuming a pending
        run: the pattern's own, or for ``X(?=Y)`` (a lookahead at the end) that of ``XY``, since a match
        needs ``Y`` right after ``X``. None where anchors would be dropped (the automaton would over-report)."""
        source = unnamed(self.pattern)
        if strip_anchors(source) != source:
            return self._caret_automaton(at_start=False)
        if not self.lookaround:
            return self._automaton
        body = trailing_lookahead_as_text(source)
        if body is None:
            return None
        return _automaton_of(body if not self.flags & regex.DOTALL else f"(?s:{body})")

    @cached_property
    def _forward_at_start(self) -> Automaton | None:
        """``_forward`` for a run that starts at the buffer's start, where a leading ``^`` holds."""
        source = unnamed(self.pattern)
        return self._forward if strip_anchors(source) == source else self._caret_automaton(at_start=True)

    @property
    def forwards(self) -> tuple[Automaton | None, Automaton | None]:
        """The automata a pending run is walked on: one that starts elsewhere, one at the buffer's start."""
        return self._forward, self._forward_at_start

    def _forward_for(self, start: int) -> Automaton | None:
        return self._forward_at_start if start == 0 else self._forward

    def _caret_automaton(self, at_start: bool) -> Automaton | None:
        """The automaton of a pattern whose only anchors are ``^`` where a match starts (functionary's
        ``(?:>>>|^)(?P<name>\\w+)\\n``), for a run starting at the buffer's start (``^`` holds) or elsewhere
        (it cannot); None for other anchors. (Without it a name written at the start of the output was
        re-matched from its first character on every feed: quadratic.)"""
        # (a trailing lookahead reads as text, as for _forward: functionary's ``(?:>>>|^)python\n(?=[^{])``)
        pattern = trailing_lookahead_as_text(unnamed(self.pattern)) if self.lookaround else unnamed(self.pattern)
        if pattern is None or self.flags & regex.MULTILINE or not _only_leading_carets(pattern, self.flags):
            return None
        source = "".join(("" if at_start else r"[^\s\S]") if tok == ("char", "^") else tok[1]
                         for tok in regex_atoms(pattern))
        return _automaton_of(source if not self.flags & regex.DOTALL else f"(?s:{source})")

    @property
    def exact_pending(self) -> bool:
        """Whether a pending start found beside a complete match is the leftmost live one (an automaton
        says so; without one the look-back is bounded)."""
        return self._automaton is not None

    def note(self, buf: str, progress: Progress, hit: Hit | None) -> None:
        """Record on ``progress`` (just computed for ``buf``, whose search found ``hit``) what lets the next
        scan resume its pending run."""
        start = progress.pending
        if start == -1:
            return
        if progress.found:
            # a match held at the edge that grows while its final repeat's characters arrive: a lowered
            # `lit\s*` over whitespace (`</think>` + a flood), or a call name (`call:(?P<name>[\w.\-]+)`)
            if hit is not None and hit[0] == start and hit[1] == len(buf) \
                    and (self.lowered is not None and self.lowered[2] or self.tail is not None and hit[1] > hit[0]
                         and (self._tail_optional is None or not self._tail_optional.match(buf, hit[1] - 1))):
                progress.state = hit[1]
            return
        if self.lowered is not None:
            j = _space_end(buf, start, len(buf))
            progress.state = j  # buf[start:j] is whitespace (a leading \s* run), then a literal's prefix
            return
        automaton = self._forward_for(start)
        if automaton is not None:
            progress.state = automaton.walk(automaton.initial, buf[start:])

    def resume(self, buf: str, progress: Progress) -> int | None:
        """The pending start for ``buf`` (which grew from ``progress.end``) without a full rescan, or None
        where it takes one: the run from ``progress.pending`` is still a partial match and no complete one
        can have appeared (the scanner then holds from there, as the full scan would)."""
        start, state, n = progress.pending, progress.state, len(buf)
        if start == -1 or state is None:
            return None
        if progress.found:  # the held match grows while only its repeat's characters arrive; then it may commit
            if (_space_end(buf, state, n) if self.tail is None else self.tail.match(buf, state, n).end()) < n:
                return None
            progress.state, progress.end = n, n
            return start
        if self.lowered is not None:
            assert self._prefixes is not None
            leading, literals, _ = self.lowered
            if not leading:
                return None  # (its pending run is a literal's prefix: short, the full scan is cheap)
            # a literal completed in the new text: the full scan decides
            if find_literals(buf, max(start, progress.end - self._prefixes.max_width + 1), literals, self._firsts) is not None:
                return None
            j = _space_end(buf, state, n)
            if j == n or self._prefixes.live_partial(buf, j, j + 1) == j:
                progress.state, progress.end = j, n
                return start
            return None
        automaton = self._forward_for(start)
        if automaton is None:
            return None
        state = automaton.walk(state, buf[progress.end:])
        if state is None:
            return None
        progress.state, progress.end = state, n
        return start

    @cached_property
    def linear(self) -> LinearRegex:
        """The linear matcher a limited search hands over to: the same answers, in linear time.
        TimeoutError (the parse then fails with parse.timeout) where it cannot read the pattern."""
        try:
            return LinearRegex(self.pattern, self.flags)
        except ValueError:  # (RegexSafetyError too) syntax only the regex module knows
            raise TimeoutError(f"regex {self.pattern!r} ran past its limit") from None

    @property
    def plain(self) -> bool:
        """Whether :meth:`search` is the compiled pattern's own search (no lowered or spaced form, no time
        limit), which a caller may then call directly (the compiled walk does)."""
        return self._compiled_search and not self.limit

    @property
    def timed(self) -> bool:
        """Whether :meth:`search` is the compiled pattern's search under a time limit (``search_budget``), handed to
        :meth:`after_timeout` past it, and nothing else (no lowered or spaced form), which a caller may then
        write out (the compiled walk does)."""
        return self._compiled_search and bool(self.limit)

    def after_timeout(self, buf: str, pos: int) -> Any:
        """The match :meth:`search` gives where the regex module ran past its time limit: the linear matcher's."""
        return self.linear.search(buf, pos)

    def search(self, buf: str, pos: int) -> Hit | None:
        lowered = self.lowered
        if lowered is not None:
            return self._search_lowered(buf, pos, lowered)
        if self.behind is not None:  # the first place right after one of the texts
            at = min((i + len(t) for t in self.behind if (i := buf.find(t, max(0, pos - len(t)))) >= 0), default=-1)
            return None if at < 0 else (at, at, None)
        spaced = self._spaced
        m = self.searched(buf, pos) if spaced is None else search_spaced(buf, pos, spaced, self)
        return None if m is None else (m.start(), m.end(), m)

    def searched(self, buf: str, pos: int) -> Any:
        """The compiled pattern's own search: a match or None (past its time limit, the linear matcher's)."""
        if not self.limit:
            return self.compiled.search(buf, pos)
        try:
            return self.compiled.search(buf, pos, timeout=search_budget(len(buf) - pos, self.rate))
        except TimeoutError:
            return self.after_timeout(buf, pos)

    def match(self, buf: str, pos: int) -> Any:
        """The match at ``pos`` (a ``regex`` match or, after a hand-over, a linear one), or None."""
        if not self.limit:
            return self.compiled.match(buf, pos)
        try:
            return self.compiled.match(buf, pos, timeout=search_budget(len(buf) - pos, self.rate))
        except TimeoutError:
            return self.linear.match(buf, pos)

    def wants_more(self, buf: str, pos: int) -> bool:
        """Whether the text from ``pos`` is a proper prefix of a match (given no match at ``pos``)."""
        if self.limit:
            try:
                m = self.partial_compiled.match(buf, pos, partial=True,
                                                timeout=search_budget(len(buf) - pos, self.rate))
            except TimeoutError:
                return self.linear.wants_more(buf, pos)
        else:
            m = self.partial_compiled.match(buf, pos, partial=True)
        return m is not None and m.partial

    def _search_lowered(self, buf: str, pos: int, lowered: tuple[bool, tuple[str, ...], bool]) -> Hit | None:
        leading, literals, trailing = lowered
        hit = find_literals(buf, pos, literals, self._firsts)  # written order wins a tie
        if hit is None:
            return None
        start, end = hit[0], hit[0] + len(hit[1])
        if leading:
            while start > pos and is_regex_space(buf[start - 1]):
                start -= 1
        if trailing:
            end = _space_end(buf, end, len(buf))
        return (start, end, None)

    def _lowered_partial(self, buf: str, pos: int, prefixes: LiteralMatcher) -> int:
        """Where a ``\\s*<lit>`` match may be arriving, with no complete one in the buffer: a proper prefix
        of a literal at the edge, and before it the whitespace a leading ``\\s*`` takes (what a partial
        regex search finds, without its quadratic cost on long whitespace runs)."""
        n = len(buf)
        start = prefixes.live_partial(buf, pos, n)
        start = n if start == -1 else start
        if self.lowered is not None and self.lowered[0]:
            while start > pos and is_regex_space(buf[start - 1]):
                start -= 1
        return -1 if start >= n else start

    def _first_alive(self, buf: str, lo: int, hi: int) -> int:
        """First start in [lo, hi) from which a path of the pattern consumes all of ``buf``, else -1."""
        automaton = self._automaton
        if automaton is not None:
            return automaton.first_alive(buf, lo, hi)
        # Without an automaton, ask the regex engine (it may over-report, which only holds text longer);
        # a bounded look-back keeps one huge chunk from making this quadratic.
        lo = max(lo, hi - 4096)
        if self.limit:
            try:
                for s in range(lo, hi):
                    budget = search_budget(len(buf) - s, self.rate)
                    if self.partial_compiled.fullmatch(buf, s, partial=True, timeout=budget) is not None:
                        return s
                return -1
            except TimeoutError:
                return self.linear.first_alive(buf, lo, hi)
        for s in range(lo, hi):
            if self.partial_compiled.fullmatch(buf, s, partial=True) is not None:
                return s
        return -1

    def _stable(self, buf: str, hit: Hit) -> bool:
        """Whether a complete match before the edge stays the regex's choice once the live path completes."""
        automaton = self._automaton
        if automaton is None:  # (the regex engine's partial match says whether a longer path is alive)
            return self._first_alive(buf, hit[0], hit[0] + 1) == -1
        completion = automaton.completion(buf[hit[0]:])  # (one forward walk: alive, and how it completes)
        if not isinstance(completion, str):
            return completion is False  # (no live path: stable; one the alphabet cannot write: held)
        m = self.match(buf + completion, hit[0])
        return m is not None and m.span() == (hit[0], hit[1])

    def _partial_search(self, buf: str, pos: int) -> int:
        """Where a partial match starts (given no complete one from ``pos``), -1 for none.

        Asked of growing prefixes of the buffer, a window at a time, instead of the whole span at once: the
        regex module's partial search costs about the square of the span (``(?:>>>|^)\\w+\\n`` over 40 KB
        of ``a.``: 0.22 s, 200 KB in one feed: 3.7 s), while a start that has no partial match in a prefix
        has none in the whole buffer (what streams in small chunks already relied on), so each window only
        goes on from the leftmost start still alive.
        """
        n = len(buf)
        start, end = pos, min(n, pos + PARTIAL_WINDOW)
        while True:
            m = self._partial_in(buf, start, end)
            if m is _TIMED_OUT:
                return self.linear.partial_search(buf, pos)
            if end == n:
                return -1 if m is None or m.start() >= n else m.start()
            if m is not None and m.start() < end:
                if not m.partial:  # (a match the whole buffer lacks: let the whole buffer say)
                    end = n
                    continue
                start = m.start()
            else:
                start = end
            end = min(n, end + max(PARTIAL_WINDOW, end - start))

    def _partial_in(self, buf: str, start: int, end: int) -> Any:
        """The partial search of ``buf[:end]`` from ``start`` (``_TIMED_OUT`` past its time limit)."""
        if not self.limit:
            return self.partial_compiled.search(buf, start, end, partial=True)
        try:
            return self.partial_compiled.search(buf, start, end, partial=True,
                                                timeout=search_budget(end - start, self.rate))
        except TimeoutError:
            return _TIMED_OUT

    def probe(self, buf: str, pos: int, hit: Hit | None) -> tuple[Hit | None, int]:
        """Streaming decision given the complete ``hit`` from ``search``: (committable hit, pending start)."""
        n = len(buf)
        if hit is None:
            if self._prefixes is not None:
                return None, self._lowered_partial(buf, pos, self._prefixes)
            # (a start further from the end than a match attempt reads is no partial match: a bounded pattern
            # is asked of the buffer's end only, which a flood it is pending over grows)
            return None, self._partial_search(buf, pos if self.reads >= UNBOUNDED else max(pos, n - self.reads))
        lo = pos if self.max_width >= UNBOUNDED else max(pos, n - self.max_width)
        partial = self._first_alive(buf, lo, hit[0])
        if partial != -1:
            return None, partial
        if hit[1] == n or hit[1] + self.end_reach >= n or not self._stable(buf, hit):
            return None, hit[0]
        return hit, -1


class ValueEnd:
    """The close of a region whose JSON payload has no closing delimiter of its own (``%declare``d
    ``RULE_CLOSE``): zero-width, where the value ends. The session walks the open region's text
    (``reading.JsonEnd``) and hands the scanner the end; the matcher itself holds no state, since one grammar
    serves many sessions."""

    max_width = 0
    end_reach = 0
    context = 0
    zero_width = True
    first_chars: str | None = None

    def search(self, buf: str, pos: int) -> Hit | None:
        return None  # only the session's walk knows; see Scanner.scan

    def probe(self, buf: str, pos: int, hit: Hit | None) -> tuple[Hit | None, int]:
        return hit, -1  # the end is final once its last character is seen: nothing is pending


class Repeat:
    """A region's opener written again where the region's text starts, after at most ``space`` whitespace
    characters (see ``tables._repeat_watches``). It is matched only at the scan position, never searched
    for: a scan over a long region costs nothing."""

    context = 0
    zero_width = False
    end_reach = 0
    first_chars: str | None = None  # (whitespace may come first: no fast path while it is live)

    def __init__(self, opener: LiteralMatcher | RegexMatcher, space: int) -> None:
        self.opener = opener
        self.space = space
        self.max_width = space + opener.max_width

    def _after_space(self, buf: str, pos: int) -> int:
        return _space_end(buf, pos, min(len(buf), pos + self.space))

    def search(self, buf: str, pos: int) -> Hit | None:
        j = self._after_space(buf, pos)
        opener = self.opener
        if isinstance(opener, LiteralMatcher):
            lit = next((lit for lit in opener.literals if buf.startswith(lit, j)), None)  # longest first
            return None if lit is None else (pos, j + len(lit), None)
        m = opener.match(buf, j)
        return None if m is None else (pos, m.end(), None)

    def probe(self, buf: str, pos: int, hit: Hit | None) -> tuple[Hit | None, int]:
        """Pending while the text from ``pos`` is whitespace, then (part of) the opener, up to the edge."""
        n = len(buf)
        j = self._after_space(buf, pos)
        opener = self.opener
        if isinstance(opener, LiteralMatcher):
            if hit is not None:
                return (None, pos) if hit[1] == n and opener.can_extend else (hit, -1)
            tail = buf[j:]
            growing = j == n or any(len(tail) < len(lit) and lit.startswith(tail) for lit in opener.literals)
            return None, (pos if growing else -1)
        if hit is None:
            return None, (pos if opener.wants_more(buf, j) else -1)
        # a complete match may still grow with more text (`[ \t]*` before more tabs, `(?:json)?` after "js"):
        # the opener's own streaming test decides, for a match that starts where the whitespace ends
        committed, _ = opener.probe(buf, j, (j, hit[1], None))
        return (hit, -1) if committed is not None else (None, pos)


Matcher = LiteralMatcher | RegexMatcher | ValueEnd | Repeat


def captured(match: Any) -> dict[str, str]:
    """A delimiter match's named groups that took part in it (a region's captures); {} for no match (a literal's,
    a lowered search's)."""
    return {} if match is None else {k: v for k, v in match.groupdict().items() if v is not None}


__all__ = ["BUDGET_RATE", "PARTIAL_WINDOW", "REGEX_SPACE", "REGEX_TIMEOUT", "Hit", "LiteralMatcher", "Matcher",
           "Progress", "RegexMatcher", "Repeat", "ValueEnd", "captured", "edge_undecided", "search_budget", "tail_repeat"]
