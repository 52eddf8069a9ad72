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
transformers compiles them to (leftmost, then longest).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import regex

from .linear_regex import LinearRegex
from .regex_safety import analyse, refusal

try:  # Python 3.11+: the regex parser behind `re` lives in re._parser
    _sre_parse: Any = importlib.import_module("re._parser")
    _sre: Any = importlib.import_module("re._constants")
except ImportError:  # pragma: no cover - older Pythons
    import sre_constants as _sre
    import sre_parse as _sre_parse

UNBOUNDED = 1 << 30
#: The parsed-regex ops of a backtracking repeat (greedy or lazy).
REPEAT_OPS = (_sre.MAX_REPEAT, _sre.MIN_REPEAT)

#: Seconds one search of a delimiter (or content) pattern may take in the regex module before the linear
#: matcher, which finds the same matches, takes over (see RegexMatcher.budget).
REGEX_TIMEOUT = 1.0


def search_budget(chars: int) -> float:
    """Seconds the regex module may take on a search over ``chars`` characters before the linear matcher
    takes over: about what the linear matcher would need, so no search costs much more than linear time
    and limits cannot add up over the searches of one region (at most REGEX_TIMEOUT)."""
    return min(REGEX_TIMEOUT, 0.002 + 2e-6 * chars)

#: (start, end, match object or None for literals)
Hit = tuple[int, int, Any]


@dataclass(frozen=True)
class PatternShape:
    """What a regex can look at beyond the text it consumes.

    ``max_width``: longest match (UNBOUNDED if unbounded). ``end_reach``: how many characters past a
    match's end an assertion may inspect (``$`` looks one further for a final newline; a negative
    lookahead as far as its body). ``context``: how many characters before the search position the
    pattern may inspect (``^``, ``\\b``, lookbehind), so trimmed buffers keep that much history.
    """

    max_width: int
    end_reach: int
    context: int
    lookaround: bool = False


_UNKNOWN_SHAPE = PatternShape(max_width=UNBOUNDED, end_reach=1, context=UNBOUNDED, lookaround=True)


def _width(sub: Any) -> int:
    hi = sub.getwidth()[1]
    return UNBOUNDED if hi >= _sre.MAXREPEAT or hi >= getattr(_sre_parse, "MAXWIDTH", UNBOUNDED) else int(hi)


def _walk(sub: Any, reach: list[int], context: list[int]) -> bool:
    """Collect end reach and context of a parsed pattern; return whether it has end-sensitive parts."""
    sensitive = False
    for op, av in sub:
        if op is _sre.AT:
            if av in (_sre.AT_END, _sre.AT_END_LINE):
                reach[0] = max(reach[0], 1)
                sensitive = True
            elif av in (_sre.AT_END_STRING, _sre.AT_BOUNDARY, _sre.AT_NON_BOUNDARY):
                sensitive = True
            if av in (_sre.AT_BEGINNING, _sre.AT_BEGINNING_LINE, _sre.AT_BEGINNING_STRING,
                      _sre.AT_BOUNDARY, _sre.AT_NON_BOUNDARY):
                context[0] = max(context[0], 1)
        elif op in (_sre.ASSERT, _sre.ASSERT_NOT):
            context.append(-1)  # marks a lookaround (automata libraries model them as consuming text)
            direction, body = av
            inner = _walk(body, reach, context)
            if direction < 0:
                context[0] = max(context[0], _width(body))
            elif op is _sre.ASSERT_NOT or inner:
                # A negative lookahead that holds now can fail once more text arrives.
                reach[0] = max(reach[0], _width(body))
                sensitive = True
        elif op is _sre.BRANCH:
            for alt in av[1]:
                sensitive |= _walk(alt, reach, context)
        elif op is _sre.SUBPATTERN:
            sensitive |= _walk(av[-1], reach, context)
        elif op in (_sre.MAX_REPEAT, _sre.MIN_REPEAT, getattr(_sre, "POSSESSIVE_REPEAT", None)):
            sensitive |= _walk(av[2], reach, context)
        elif op is getattr(_sre, "ATOMIC_GROUP", None):
            sensitive |= _walk(av, reach, context)
        elif op is _sre.GROUPREF_EXISTS:
            for branch in av[1:]:
                if branch is not None:
                    sensitive |= _walk(branch, reach, context)
    return sensitive


def _unnamed(pattern: str) -> str:
    """``pattern`` with its named groups made non-capturing (for analysis, never for matching)."""
    return regex.sub(r"(?<!\\)((?:\\\\)*)\(\?P<\w+>", r"\1(?:", pattern)


def pattern_shape(pattern: str, flags: int = regex.DOTALL) -> PatternShape:
    """Analyse ``pattern`` with Python's own regex parser; unknown syntax gives a cautious answer."""
    # \p{..} classes exist only in `regex`; any one character stands in for them here. Named groups do
    # not matter to the shape, and `regex` allows a name twice where the stdlib parser does not.
    simplified = _unnamed(regex.sub(r"\\[pP]\{[^}]*\}|\\[pP][A-Za-z]", "A", pattern))
    try:
        parsed = _sre_parse.parse(simplified, flags & ~regex.VERSION1 & 0xFFFF)
    except Exception:  # noqa: BLE001 - any syntax the stdlib parser lacks
        return _UNKNOWN_SHAPE
    reach, context = [0], [0]
    _walk(parsed, reach, context)
    return PatternShape(max_width=_width(parsed), end_reach=reach[0], context=context[0],
                        lookaround=-1 in context[1:])


def first_chars(pattern: str, flags: int = regex.DOTALL) -> str | None:
    """The characters every match of ``pattern`` starts with, or None when that is not a small known set
    (the pattern can match empty, starts with an assertion or a broad class, ignores case, ...).

    A chunk without any of them cannot begin a match, complete or partial: the session's fast path."""
    if flags & (regex.IGNORECASE | regex.VERSION1) or regex.search(r"\\[pPNX]|\(\?[a-zA-Z]*i", pattern):
        return None
    try:
        parsed = _sre_parse.parse(_unnamed(pattern), flags & ~regex.VERSION1 & 0xFFFF)
    except Exception:  # noqa: BLE001 - syntax only `regex` knows
        return None
    found = _firsts(list(parsed))
    return "".join(sorted(found)) if found else None


def last_char(pattern: str, flags: int = regex.DOTALL) -> str | None:
    """The literal character every match of ``pattern`` ends with, or None when there is no such one.
    A match can only complete in text that holds it (the tool streamer rescans only then)."""
    if flags & (regex.IGNORECASE | regex.VERSION1) or regex.search(r"\\[pPNX]|\(\?[a-zA-Z]*i", pattern):
        return None
    try:
        items = list(_sre_parse.parse(_unnamed(pattern), flags & ~regex.VERSION1 & 0xFFFF))
    except Exception:  # noqa: BLE001 - syntax only `regex` knows
        return None
    while items:
        op, av = items[-1]
        if op is _sre.LITERAL:
            return chr(av)
        if op is not _sre.SUBPATTERN or av[1]:
            return None
        items = list(av[-1])
    return None


def required_tail(pattern: str, flags: int = regex.DOTALL) -> str | None:
    """The last run of literal text (3 characters or more where there is one) that every match of
    ``pattern`` contains, or None: no match can complete before it appears, so the tool streamer waits
    for it instead of retrying a pattern whose lazy ``.*?`` runs to the end of a long body each time."""
    if flags & (regex.IGNORECASE | regex.VERSION1) or regex.search(r"\\[pPNX]|\(\?[a-zA-Z]*i", pattern):
        return None
    try:
        items = list(_sre_parse.parse(_unnamed(pattern), flags & ~regex.VERSION1 & 0xFFFF))
    except Exception:  # noqa: BLE001 - syntax only `regex` knows
        return None
    runs, current = [], ""
    for op, av in items:
        if op is _sre.LITERAL:
            current += chr(av)
        else:
            runs.append(current)
            current = ""
    runs = [r for r in [*runs, current] if r]
    if not runs:
        return None
    return next((r for r in reversed(runs) if len(r) >= 3), runs[-1])


def _firsts(items: list[Any]) -> set[str] | None:
    """First characters of a parsed sequence whose first item always consumes one, else None."""
    if not items:
        return None
    op, av = items[0]
    if op is _sre.LITERAL:
        return {chr(av)}
    if op is _sre.IN:
        out: set[str] = set()
        for item_op, item_av in av:
            if item_op is _sre.LITERAL:
                out.add(chr(item_av))
            elif item_op is _sre.RANGE and item_av[1] - item_av[0] < 64:
                out.update(map(chr, range(item_av[0], item_av[1] + 1)))
            else:
                return None  # negated sets, categories, wide ranges
        return out
    if op is _sre.SUBPATTERN:
        return None if av[1] else _firsts(list(av[-1]))  # inline flags: give up
    if op is getattr(_sre, "ATOMIC_GROUP", None):
        return _firsts(list(av))
    if op is _sre.BRANCH:
        union: set[str] = set()
        for alternative in av[1]:
            found = _firsts(list(alternative))
            if found is None:
                return None
            union |= found
        return union
    if op in (_sre.MAX_REPEAT, _sre.MIN_REPEAT, getattr(_sre, "POSSESSIVE_REPEAT", None)) and av[0] >= 1:
        return _firsts(list(av[2]))
    return None


def _trailing_lookahead_as_text(pattern: str) -> str | None:
    """``X(?:Y)`` for a pattern ``X(?=Y)`` whose only lookaround is that lookahead at its very end; None
    for any other pattern."""
    depth, i, in_class, last_top, last_close = 0, 0, False, -1, -1
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
            if pattern.startswith("[]", i) or pattern.startswith("[^]", i):  # a leading ] is a member
                i += 2 if pattern.startswith("[]", i) else 3
                continue
        elif ch == "(":
            if depth == 0:
                last_top = i
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                last_close = i
        i += 1
    # the last top-level group is a lookahead and it closes at the very end
    if last_top == -1 or not pattern.startswith("(?=", last_top) or last_close != len(pattern) - 1:
        return None
    head, tail = pattern[:last_top], pattern[last_top + 3:]
    if any(mark in head or mark in tail for mark in ("(?=", "(?!", "(?<")):
        return None
    return f"{head}(?:{tail}"


def _strip_anchors(pattern: str) -> str:
    """``pattern`` without zero-width anchors (``^ $ \\A \\Z \\b ...``), which automata libraries lack.

    The result matches a superset of the original; it is only used to guess how a live path continues,
    and the guess is then checked against the real pattern.
    """
    out = []
    i, in_class = 0, False
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            if in_class or pattern[i + 1] not in "AZzbBG":
                out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            if ch == "]":
                in_class = False
        elif ch == "[":
            in_class = True
            out.append(ch)
            i += 1
            # a ']' or '^]' right after '[' is literal
            if i < len(pattern) and pattern[i] == "^":
                out.append("^")
                i += 1
            if i < len(pattern) and pattern[i] == "]":
                out.append("]")
                i += 1
            continue
        elif ch in "^$":
            i += 1
            continue
        out.append(ch)
        i += 1
    return "".join(out)


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

    def first_alive(self, buf: str, lo: int, hi: int) -> int:
        """First start in [lo, hi) such that ``buf[start:]`` is a prefix of some match, else -1.

        Reads ``buf`` backwards from its end, tracking the set of automaton states from which the text
        read so far leads to a live state (a lazily built reverse DFA); this usually dies within a few
        characters, so the cost does not depend on how much text precedes the end.
        """
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

    def walk(self, state: Any, text: str) -> Any:
        """The state after reading ``text`` from ``state`` on a path that has not matched yet; None once
        the path dies or reaches acceptance (then the regex itself must look)."""
        symbols, other, trans, live, finals = self.symbols, self.other, self.trans, self.live, self.finals
        for ch in text:
            sym = symbols.get(ch, other)
            state = trans.get(state, {}).get(sym) if sym is not None else None
            if state is None or state not in live or state in finals:
                return None
        return state

    def completion(self, tail: str) -> str | None:
        """The shortest non-empty string taking the automaton from after ``tail`` to acceptance."""
        state = self.initial
        for ch in tail:
            sym = self.symbols.get(ch, self.other)
            state = self.trans.get(state, {}).get(sym) if sym is not None else None
            if state is None:
                return None
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


# What the regex module's \s matches (str.isspace() also accepts \x1c-\x1f, which \s does not).
_NOT_REGEX_SPACE = frozenset("\x1c\x1d\x1e\x1f")
REGEX_SPACE = "".join(c for c in map(chr, range(0x3001)) if c.isspace() and c not in _NOT_REGEX_SPACE)
_ESCAPE_CHARS = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v"}


def _is_regex_space(ch: str) -> bool:
    return ch.isspace() and ch not in _NOT_REGEX_SPACE


def _space_end(buf: str, j: int, stop: int) -> int:
    """The first position in [j, stop) that is not regex whitespace (``stop`` if there is none)."""
    while j < stop and _is_regex_space(buf[j]):
        j += 1
    return j


def _literal_alternatives(pattern: str) -> tuple[bool, tuple[str, ...], bool] | None:
    """Recognise ``\\s*(?:lit1|lit2)\\s*`` (each ``\\s*`` optional): (leading, literals, trailing)."""
    tokens: list[str] = []
    i = 0
    while i < len(pattern):
        tok = pattern[i : i + 2] if pattern[i] == "\\" else pattern[i]
        tokens.append(tok)
        i += len(tok)
    leading = tokens[:2] == ["\\s", "*"]
    if leading:
        tokens = tokens[2:]
    trailing = tokens[-2:] == ["\\s", "*"]
    if trailing:
        tokens = tokens[:-2]
    if tokens[:3] == ["(", "?", ":"] and tokens[-1:] == [")"]:
        tokens = tokens[3:-1]
    literals: list[str] = []
    current: list[str] = []
    for tok in tokens + ["|"]:
        if tok == "|":
            if not current or leading and _is_regex_space(current[0][0]):
                return None  # (after a leading \s*, a literal that starts with whitespace shifts the match)
            literals.append("".join(current))
            current = []
        elif len(tok) == 2:  # an escape: punctuation stands for itself, \n \t ... for control characters
            if tok[1] in _ESCAPE_CHARS:
                current.append(_ESCAPE_CHARS[tok[1]])
            elif tok[1].isalnum():
                return None
            else:
                current.append(tok[1])
        elif tok in ".^$*+?{}[]()\\":
            return None
        else:
            current.append(tok)
    return leading, tuple(literals), trailing


class RegexMatcher:
    """A regular expression delimiter, searched with the ``regex`` module (DOTALL unless authored otherwise)."""

    def __init__(self, pattern: str, flags: int = regex.DOTALL) -> None:
        self.pattern = pattern
        self.compiled = regex.compile(pattern, flags)
        self.flags = flags
        shape = pattern_shape(pattern, flags)
        self.max_width = shape.max_width
        self.end_reach = shape.end_reach
        self.context = shape.context
        self.lookaround = shape.lookaround
        self.zero_width = self.compiled.match("") is not None
        # Patterns that could backtrack badly search under a time limit; the rest run free (it costs ~1 µs).
        #: Why the pattern can backtrack catastrophically (None if it cannot); grammars refuse such patterns.
        self.risk, timed = backtracking_risk(pattern, flags)
        # (a limit only where needed: passing ``timeout=None`` costs about 1 µs a search)
        self.limit = timed
        # `\s*<lit>` patterns defeat the regex engine's literal scan (~25 MB/s); str.find plus a
        # whitespace walk finds the same leftmost match at memory speed.
        # (DOTALL or not: the lowered form has no dot)
        self.lowered = _literal_alternatives(pattern) if not flags & ~regex.DOTALL and not self.compiled.groupindex else None
        self._firsts = "".join(sorted({lit[0] for lit in self.lowered[1]})) if self.lowered else ""
        self._prefixes = LiteralMatcher(self.lowered[1]) if self.lowered else None  # partial literals at the edge
        self.first_chars = None if self.zero_width else first_chars(pattern, flags)

    @cached_property
    def _automaton(self) -> Automaton | None:
        """The pattern's automaton (anchors dropped), or None where interegular cannot build a faithful one."""
        if self.lookaround:
            return None
        try:
            import interegular

            stripped = _strip_anchors(_unnamed(self.pattern))
            source = stripped if not self.flags & regex.DOTALL else f"(?s:{stripped})"
            return Automaton(interegular.parse_pattern(source).to_fsm())
        except Exception:  # noqa: BLE001 - lookbehinds, backreferences, regex-only syntax
            return None

    @cached_property
    def _forward(self) -> Automaton | None:
        """An automaton whose live paths are exactly this pattern's partial matches, for resuming a pending
        run: the pattern's own, or for ``X(?=Y)`` (a lookahead at the end) that of ``XY``, since a match
        needs ``Y`` right after ``X``. None where anchors would be dropped (the automaton would over-report)."""
        source = _unnamed(self.pattern)
        if _strip_anchors(source) != source:
            return None
        if not self.lookaround:
            return self._automaton
        body = _trailing_lookahead_as_text(source)
        if body is None:
            return None
        try:
            import interegular

            return Automaton(interegular.parse_pattern(body if not self.flags & regex.DOTALL else f"(?s:{body})").to_fsm())
        except Exception:  # noqa: BLE001 - syntax interegular lacks
            return None

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
            # a lowered `lit\s*` match held at the edge, growing over whitespace (`</think>` + a flood)
            if self.lowered is not None and self.lowered[2] and hit is not None and hit[0] == start \
                    and hit[1] == len(buf):
                progress.state = hit[1]
            return
        if self.lowered is not None:
            j = _space_end(buf, start, len(buf))
            progress.state = j  # buf[start:j] is whitespace (a leading \s* run), then a literal's prefix
            return
        automaton = self._forward
        if automaton is not None:
            progress.state = automaton.walk(automaton.initial, buf[start:])

    def resume(self, buf: str, progress: Progress) -> int | None:
        """The pending start for ``buf`` (which grew from ``progress.end``) without a full rescan, or None
        where it takes one: the run from ``progress.pending`` is still a partial match and no complete one
        can have appeared (the scanner then holds from there, as the full scan would)."""
        start, state, n = progress.pending, progress.state, len(buf)
        if start == -1 or state is None:
            return None
        if progress.found:  # the held match grows while only whitespace arrives; then it may commit
            if _space_end(buf, state, n) < n:
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
        automaton = self._forward
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

    def budget(self, text: int) -> float:
        """The regex module's time on a search over ``text`` characters (see :func:`search_budget`)."""
        return search_budget(text)

    def search(self, buf: str, pos: int) -> Hit | None:
        lowered = self.lowered
        if lowered is not None:
            return self._search_lowered(buf, pos, lowered)
        m: Any
        if not self.limit:
            m = self.compiled.search(buf, pos)
        else:
            try:
                m = self.compiled.search(buf, pos, timeout=self.budget(len(buf) - pos))
            except TimeoutError:
                m = self.linear.search(buf, pos)
        return None if m is None else (m.start(), m.end(), m)

    def match(self, buf: str, pos: int) -> Any:
        """The match at ``pos`` (a ``regex`` match or, after a hand-over, a linear one), or None."""
        if not self.limit:
            return self.compiled.match(buf, pos)
        try:
            return self.compiled.match(buf, pos, timeout=self.budget(len(buf) - pos))
        except TimeoutError:
            return self.linear.match(buf, pos)

    def wants_more(self, buf: str, pos: int) -> bool:
        """Whether the text from ``pos`` is a proper prefix of a match (given no match at ``pos``)."""
        if self.limit:
            try:
                m = self.compiled.match(buf, pos, partial=True, timeout=self.budget(len(buf) - pos))
            except TimeoutError:
                return self.linear.wants_more(buf, pos)
        else:
            m = self.compiled.match(buf, pos, partial=True)
        return m is not None and m.partial

    def _search_lowered(self, buf: str, pos: int, lowered: tuple[bool, tuple[str, ...], bool]) -> Hit | None:
        leading, literals, trailing = lowered
        hit = find_literals(buf, pos, literals, self._firsts)  # written order wins a tie
        if hit is None:
            return None
        start, end = hit[0], hit[0] + len(hit[1])
        if leading:
            while start > pos and _is_regex_space(buf[start - 1]):
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
            while start > pos and _is_regex_space(buf[start - 1]):
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
                    if self.compiled.fullmatch(buf, s, partial=True, timeout=self.budget(len(buf) - s)) is not None:
                        return s
                return -1
            except TimeoutError:
                return self.linear.first_alive(buf, lo, hi)
        for s in range(lo, hi):
            if self.compiled.fullmatch(buf, s, partial=True) is not None:
                return s
        return -1

    def _stable(self, buf: str, hit: Hit) -> bool:
        """Whether a complete match before the edge stays the regex's choice once the live path completes."""
        if self._first_alive(buf, hit[0], hit[0] + 1) == -1:
            return True
        automaton = self._automaton
        completion = automaton.completion(buf[hit[0]:]) if automaton is not None else None
        if completion is None:
            return False
        m = self.match(buf + completion, hit[0])
        return m is not None and m.span() == (hit[0], hit[1])

    def _partial_search(self, buf: str, pos: int) -> int:
        """Where a partial match starts (given no complete one from ``pos``), -1 for none."""
        n = len(buf)
        if self.limit:
            try:
                m = self.compiled.search(buf, pos, partial=True, timeout=self.budget(n - pos))
            except TimeoutError:
                return self.linear.partial_search(buf, pos)
        else:
            m = self.compiled.search(buf, pos, partial=True)
        return -1 if m is None or m.start() >= n else m.start()

    def probe(self, buf: str, pos: int, hit: Hit | None) -> tuple[Hit | None, int]:
        """Streaming decision given the complete ``hit`` from ``search``: (committable hit, pending start)."""
        n = len(buf)
        if hit is None:
            if self._prefixes is not None:
                return None, self._lowered_partial(buf, pos, self._prefixes)
            return None, self._partial_search(buf, pos)
        lo = pos if self.max_width >= UNBOUNDED else max(pos, n - self.max_width)
        partial = self._first_alive(buf, lo, hit[0])
        if partial != -1:
            return None, partial
        if hit[1] == n or hit[1] + self.end_reach >= n or not self._stable(buf, hit):
            return None, hit[0]
        return hit, -1


class JsonWalk:
    """Where a JSON value that starts at an offset ends, found incrementally as text arrives.

    The state of a bracket-and-string walk (depth, inside a string, a pending backslash) at absolute
    offset ``at``; ``end`` is the absolute offset just past the value once it is complete. Only the
    characters up to the end decide it, so any chunking finds the same end. A value that does not start
    with ``{``, ``[`` or ``"`` after whitespace never ends (``dead``): its region then runs on as if it
    had no close, and nothing is cut.
    """

    __slots__ = ("at", "depth", "in_string", "escape", "started", "dead", "end")

    _STRUCTURE = regex.compile(r'[\[\]{}"]')
    _IN_STRING = regex.compile(r'["\\]')

    def __init__(self, at: int) -> None:
        self.at = at
        self.depth = 0
        self.in_string = False
        self.escape = False
        self.started = False
        self.dead = False
        self.end: int | None = None

    def advance(self, buf: str, base: int) -> int | None:
        """Walk ``buf`` (which starts at absolute offset ``base``) to its end; the value's end, if seen."""
        if self.end is not None or self.dead:
            return self.end
        i, n = self.at - base, len(buf)
        if self.started and not self.escape and \
                (self._IN_STRING if self.in_string else self._STRUCTURE).search(buf, i) is None:
            self.at = base + n  # (most chunks: nothing that changes the state)
            return None
        while i < n:
            if self.escape:
                self.escape = False
                i += 1
                continue
            if not self.started:
                while i < n and _is_regex_space(buf[i]):
                    i += 1
                if i == n:
                    break
                ch = buf[i]
                if ch not in '{["':
                    self.dead = True
                    return None
                self.started = True
                self.in_string = ch == '"'
                self.depth = 0 if self.in_string else 1
                i += 1
                continue
            m = (self._IN_STRING if self.in_string else self._STRUCTURE).search(buf, i)
            if m is None:
                i = n
                break
            j = m.start()
            ch = buf[j]
            i = j + 1
            if ch == "\\":
                self.escape = True
            elif ch == '"':
                self.in_string = not self.in_string
                if not self.in_string and self.depth == 0:
                    self.end = base + i
                    return self.end
            elif ch in "{[":
                self.depth += 1
            else:
                self.depth -= 1
                if self.depth == 0:
                    self.end = base + i
                    return self.end
        self.at = base + i
        return None


class ValueEnd:
    """The close of a region whose JSON payload has no closing delimiter of its own (``%declare``d
    ``RULE_CLOSE``): zero-width, where the value ends. The session walks the open region's text
    (:class:`JsonWalk`) and hands the scanner the end; the matcher itself holds no state, since one grammar
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


__all__ = ["Hit", "JsonWalk", "LiteralMatcher", "Matcher", "PatternShape", "Progress", "RegexMatcher", "Repeat",
           "UNBOUNDED", "ValueEnd", "pattern_shape", "search_budget"]


def backtracking_risk(pattern: str, flags: int = regex.DOTALL) -> tuple[str | None, bool]:
    """(why the pattern is refused, or None; whether its searches need a limit): see
    :mod:`grammar_parse.regex_safety`. Patterns whose ambiguity is polynomial (``.*?\\S.*?``) are accepted
    with a limit; exponential, high-degree, redundant and oversized ones are refused."""
    found = refusal(pattern, flags)
    if found is not None:
        return found.reason, True
    profile = analyse(pattern, flags)
    return None, not profile.linear or profile.rescans
