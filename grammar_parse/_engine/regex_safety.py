"""How much work a backtracking regex engine can do on a pattern, decided from the pattern alone.

A backtracking matcher (the ``regex`` module, Python's ``re``) tries the ways a pattern can match, one after
another; on a near miss it tries them all. How many there are is the pattern's *ambiguity*, read here off
its position automaton (Glushkov's: one state per character the pattern consumes, counted repeats
written out), as the regular-expression denial-of-service literature does (Weber and Seidl's degrees
of ambiguity; Weideman et al., "Analyzing Matching Time Behavior of Backtracking Regular Expression
Matchers by Using Ambiguity of NFA", 2016):

* **exponential** - a state with two different loops on the same text (``(a+)+``, ``(a|a)*``,
  ``(\\w+\\s?)*``): the ways double with every character. Rejected.
* **polynomial of degree d** - a chain of d + 1 loops that can each take the same text (``(.*?,){11}P``
  is degree 10; ``\\s*(?P<v>.*?)\\s*</p>`` is degree 2): a near miss costs the text length to the power
  d + 1 at each start. Rejected above :data:`MAX_DEGREE`: real templates and legacy schemas reach 4
  (transformers' own Qwen3 and SmolLM3 schemas), so those run bounded instead (see ``BacktrackingProfile``).
* **finite** - no such loops; what remains is bounded by a constant, which alternatives and counted
  repeats can still make huge (``(?:a{1,16}){1,16}b``): rejected above :data:`MAX_AMBIGUITY`.

Two repeats written side by side over the same characters, in the same capture (``\\s*\\s*``,
``.*.*X``), split the text in many ways for nothing: rejected whatever their degree. Counted repeats
above :data:`MAX_REPEAT` are rejected (they inflate automata and look-back windows), and counted repeats
above :data:`EXPAND_LIMIT` are analysed as the unbounded loops they behave like.

Possessive quantifiers and atomic groups are analysed as if they backtracked (Python 3.10's parser
knows neither); lookarounds are analysed on their own and are zero-width outside; a backreference
consumes its group's characters in one step.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

import regex

# Python's own regex parser and its op codes: every analysis of a pattern's source reads its parse tree.
try:  # Python 3.11+: the regex parser behind `re` lives in re._parser
    sre_parse: Any = importlib.import_module("re._parser")
    sre: Any = importlib.import_module("re._constants")
except ImportError:  # pragma: no cover - older Pythons
    import sre_constants as sre
    import sre_parse

#: Largest count a counted repeat may give (``a{1000000}`` is rejected, code ``*.regex_size``).
MAX_REPEAT = 1000
#: Counted repeats up to this count are analysed exactly (written out); larger ones as unbounded loops.
EXPAND_LIMIT = 16
#: Positions (characters the pattern consumes, counted repeats written out) the analysis reads at most.
MAX_POSITIONS = 4000
#: Transitions between positions the analysis builds at most (the load time of a hostile pattern stays
#: under a second).
MAX_EDGES = 200_000
#: Highest degree of polynomial ambiguity accepted: a near miss costs at most (length)^(MAX_DEGREE + 1)
#: steps per start. Real legacy schemas reach 4 (``\s*(?:<tool_call>(.+?)</tool_call>)?\s*(.+?)?\s*$``).
MAX_DEGREE = 4
#: Most ways a pattern without ambiguous loops may match one text (its finite ambiguity).
MAX_AMBIGUITY = 64
#: Most choice points a pattern searched under a time limit may have (see choice_points): past the limit the
#: linear matcher reads each at every character, about 0.5 us each (llama3_json's old call separator, 201 of them,
#: read a flood of newlines at 110 s per MB; three runs of {0,900}: 1.3 s per KB).
MAX_CHOICE_POINTS = 256

_REPEATS = (sre.MAX_REPEAT, sre.MIN_REPEAT) + tuple(
    op for op in (getattr(sre, "POSSESSIVE_REPEAT", None),) if op is not None)
_CLASS_OPS = (sre.LITERAL, sre.NOT_LITERAL, sre.ANY, sre.IN)
_UNBOUNDED = sre.MAXREPEAT

# Characters every analysis samples besides the pattern's own: two classes overlap when a sample is in
# both; the pattern's literals and range ends are sampled too, so literal and range overlaps are exact.
_REPRESENTATIVES = (" \t\n\r\x0b\x0c\x1c\x85\xa0\u1680\u2028\u3000azAZ09_-.,:;<>/\\\"'()[]{}|=+*?!#$%&@^`~"
                    "\x00\x01\x7f\xe9\xc9\xdf\u01c5\u0660\u00b2\u2160\u4e00\u0301\U0001f600\ue000\uffff\U0010ffff")
#: Regex source of each category op in a parse tree (\d, \s, \w and their negations).
CATEGORY_SOURCE = {
    sre.CATEGORY_DIGIT: r"\d", sre.CATEGORY_NOT_DIGIT: r"\D", sre.CATEGORY_SPACE: r"\s",
    sre.CATEGORY_NOT_SPACE: r"\S", sre.CATEGORY_WORD: r"\w", sre.CATEGORY_NOT_WORD: r"\W",
}
# Stand-ins for `regex`-only escapes (\p{L}, \pN, ...) while the standard parser reads the pattern: private
# use characters of plane 16, each mapped back to the escape it replaces.
_STAND_IN_BASE = 0x10FF00


class RegexSafetyError(ValueError):
    """Why a pattern is refused; ``kind`` is ``"backtracking"`` or ``"size"`` (the error code's suffix)."""

    def __init__(self, reason: str, kind: str = "backtracking") -> None:
        self.reason = reason
        self.kind = kind
        super().__init__(reason)


@dataclass(frozen=True)
class BacktrackingProfile:
    """What the analysis found for an accepted pattern.

    ``degree``: polynomial degree of ambiguity (0: finitely ambiguous). ``ambiguity``: the finite part
    (most ways the loop-free part matches one text). ``pump``: a character class (regex source) holding
    every character the ambiguous loops share, or None; a near miss needs long runs of them.
    ``prefix``: a literal every match starts with ("" if none): each start of a match is one of its
    occurrences. ``loops``: whether any repeat is unbounded (a search then scans to the end from a start).
    """

    degree: int = 0
    ambiguity: int = 1
    pump: str | None = None
    prefix: str = ""
    loops: bool = False
    rescans: bool = False  # two unbounded repeats, or one holding a choice: a search may rescan a lot
    #: The linear matcher's choice points (see choice_points), counted where a search needs a time limit (past
    #: it that matcher reads each at every character); 0 elsewhere.
    choice_points: int = 0

    @property
    def linear(self) -> bool:
        """Whether one match attempt costs at most a constant times the text it reads."""
        return self.degree == 0


# ---------------------------------------------------------------------------- reading the pattern
def _tokens(pattern: str) -> list[str]:
    """The pattern as escapes, class brackets and single characters (enough to rewrite it safely)."""
    out, i = [], 0
    while i < len(pattern):
        if pattern[i] == "\\" and i + 1 < len(pattern):
            j = i + 2
            if pattern[i + 1] in "pPN" and j < len(pattern) and pattern[j] == "{":
                end = pattern.find("}", j)
                j = len(pattern) if end == -1 else end + 1
            elif pattern[i + 1] in "pP" and j < len(pattern):
                j += 1
            elif pattern[i + 1] == "g" and j < len(pattern) and pattern[j] == "<":
                end = pattern.find(">", j)
                j = len(pattern) if end == -1 else end + 1
            out.append(pattern[i:j])
            i = j
        else:
            out.append(pattern[i])
            i += 1
    return out


def _standard_syntax(pattern: str, keep_alternatives: bool = True) -> tuple[str, dict[str, str]]:
    """``pattern`` rewritten for Python's own regex parser: ``regex``-only escapes become stand-in
    characters (returned with the escapes they stand for), possessive quantifiers and atomic groups their
    backtracking forms, ``(?<name>`` becomes ``(?P<name>``, and a group name given twice (``regex`` allows
    it) is renamed."""
    out: list[str] = []
    stand_ins: dict[str, str] = {}
    names: dict[str, int] = {}
    tokens = _tokens(pattern)
    in_class = False
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if len(tok) > 2 and tok[1] in "pP":
            ch = stand_ins.get(tok) or chr(_STAND_IN_BASE + len(stand_ins))
            stand_ins.setdefault(tok, ch)
            out.append(ch)
        elif len(tok) == 3 and tok[1] in "pP":
            ch = chr(_STAND_IN_BASE + len(stand_ins))
            stand_ins.setdefault(tok, ch)
            out.append(stand_ins[tok])
        elif tok.startswith("\\g<") and not in_class:
            out.append(f"(?P={tok[3:-1]})")
        elif in_class:
            out.append(tok)
            if tok == "]" and not (out[-2:-1] == ["["] or out[-3:-1] == ["[", "^"]):
                in_class = False
        elif tok == "[":
            in_class = True
            out.append(tok)
        elif tok == "|" and keep_alternatives:
            # The standard parser folds (a|a) into a and (a|b) into [ab], which backtrack differently; an
            # empty lookahead opening every alternative keeps them as written.
            out.append("|(?=)")
        elif tok == "+" and out and out[-1] in ("*", "+", "?", "}") and not (len(out) > 1 and out[-2] == "\\"):
            pass  # possessive: analysed as the plain repeat (a superset of its backtracking)
        elif tok == "(" and tokens[i + 1:i + 3] == ["?", ">"]:
            out.append("(?:")
            i += 2
        elif tok == "(" and (tokens[i + 1:i + 4] == ["?", "P", "<"] or tokens[i + 1:i + 3] == ["?", "<"]
                             and tokens[i + 3:i + 4] not in (["="], ["!"])):
            start = i + 4 if tokens[i + 2] == "P" else i + 3
            end = start
            while end < len(tokens) and tokens[end] != ">":
                end += 1
            name = "".join(tokens[start:end])
            names[name] = names.get(name, 0) + 1
            out.append(f"(?P<{name if names[name] == 1 else f'{name}__{names[name]}'}>")
            i = end
        else:
            out.append(tok)
        i += 1
    return "".join(out), {ch: tok for tok, ch in stand_ins.items()}


def parse_pattern(pattern: str, flags: int, keep_alternatives: bool = True) -> tuple[Any, dict[str, str]]:
    """Python's parse tree of ``pattern`` (its ``regex``-only syntax rewritten first) and the stand-in
    characters for ``regex``-only escapes; RegexSafetyError where the parser cannot read it.
    ``keep_alternatives`` keeps alternatives the parser would fold (the backtracking analysis needs them
    as written)."""
    source, stand_ins = _standard_syntax(pattern, keep_alternatives)
    std_flags = flags & (regex.IGNORECASE | regex.MULTILINE | regex.DOTALL | regex.VERBOSE | regex.ASCII)
    try:
        return sre_parse.parse(source, std_flags), stand_ins
    except Exception as e:  # noqa: BLE001 - syntax only `regex` knows (fuzzy matching, recursion, ...)
        raise RegexSafetyError(f"syntax the backtracking analysis cannot read ({e}); write it in the "
                               "common regex syntax") from None


# ---------------------------------------------------------------------------- character classes
class _Alphabet:
    """Sample characters, and each character class as the bitmask of the samples it matches."""

    def __init__(self, parsed: Any, stand_ins: dict[str, str]) -> None:
        chars = set(_REPRESENTATIVES)
        self.stand_ins = {ch: regex.compile(src) for ch, src in stand_ins.items()}
        for op, av in _walk_items(parsed):
            if op in (sre.LITERAL, sre.NOT_LITERAL):
                chars.add(chr(av))
            elif op is sre.RANGE:
                chars.update((chr(av[0]), chr(av[1])))
        for ch in list(chars):
            chars.update((ch.lower(), ch.upper(), ch.swapcase()))
        self.samples = sorted(c for c in chars if len(c) == 1 and c not in self.stand_ins)
        self._categories = {cat: regex.compile(src) for cat, src in CATEGORY_SOURCE.items()}
        self._masks: dict[Any, int] = {}

    def mask(self, op: Any, av: Any, flags: int) -> int:
        key = (op, tuple(av) if isinstance(av, list) else av,
               flags & (sre.SRE_FLAG_IGNORECASE | sre.SRE_FLAG_DOTALL | sre.SRE_FLAG_ASCII))
        bits = self._masks.get(key)
        if bits is None:  # (counted repeats write the same class out many times)
            test = self._test(op, av, flags)
            bits = 0
            for i, ch in enumerate(self.samples):
                if test(ch):
                    bits |= 1 << i
            self._masks[key] = bits
        return bits

    def _test(self, op: Any, av: Any, flags: int) -> Callable[[str], bool]:
        fold = bool(flags & sre.SRE_FLAG_IGNORECASE)
        if op is sre.ANY:
            return (lambda ch: True) if flags & sre.SRE_FLAG_DOTALL else (lambda ch: ch != "\n")
        if op in (sre.LITERAL, sre.NOT_LITERAL):
            same = self._literal(chr(av), fold)
            return same if op is sre.LITERAL else (lambda ch: not same(ch))
        items = list(av)
        negate = bool(items) and items[0][0] is sre.NEGATE
        tests = [self._item(o, a, fold) for o, a in (items[1:] if negate else items)]
        return lambda ch: any(t(ch) for t in tests) != negate

    def _literal(self, c: str, fold: bool) -> Callable[[str], bool]:
        stand_in = self.stand_ins.get(c)
        if stand_in is not None:
            return lambda ch: stand_in.fullmatch(ch) is not None
        if not fold:
            return lambda ch: ch == c
        variants = {c, c.lower(), c.upper(), c.swapcase()}
        return lambda ch: ch in variants or ch.lower() in variants or ch.upper() in variants

    def _item(self, op: Any, av: Any, fold: bool) -> Callable[[str], bool]:
        if op is sre.LITERAL:
            return self._literal(chr(av), fold)
        if op is sre.RANGE:
            lo, hi = av
            if not fold:
                return lambda ch: lo <= ord(ch) <= hi
            return lambda ch: any(lo <= ord(v) <= hi for v in (ch, ch.lower(), ch.upper()) if len(v) == 1)
        if op is sre.CATEGORY:
            compiled = self._categories.get(av)
            if compiled is None:  # a category the table lacks: match everything (the cautious answer)
                return lambda ch: True
            return lambda ch: compiled.fullmatch(ch) is not None
        return lambda ch: True  # (unknown class items: cautious)


def _walk_items(parsed: Any) -> Iterable[tuple[Any, Any]]:
    """Every (op, av) in a parsed pattern, class items included."""
    stack = [list(parsed)]
    while stack:
        for op, av in stack.pop():
            yield op, av
            if op is sre.IN:
                yield from av
            elif op is sre.BRANCH:
                stack.extend(list(alt) for alt in av[1])
            elif op is sre.SUBPATTERN:
                stack.append(list(av[-1]))
            elif op in _REPEATS:
                stack.append(list(av[2]))
            elif op in (sre.ASSERT, sre.ASSERT_NOT):
                stack.append(list(av[1]))
            elif op is getattr(sre, "ATOMIC_GROUP", None):
                stack.append(list(av))
            elif op is sre.GROUPREF_EXISTS:
                stack.extend(list(b) for b in av[1:] if b is not None)


# ---------------------------------------------------------------------------- the position automaton
@dataclass
class _Fragment:
    nullable: bool
    first: set[int]
    last: set[int]


class _Automaton:
    """Glushkov's automaton of a parsed pattern: positions with their class masks and follow sets;
    position 0 is the start. Lookaround bodies become separate automata (``looks``)."""

    def __init__(self, alphabet: _Alphabet) -> None:
        self.alphabet = alphabet
        self.masks: list[int] = [0]
        self.follow: list[set[int]] = [set()]
        # Edges the pattern writes more than once ((a+)+: the inner and the outer loop both go a -> a) are
        # different paths to a backtracking engine: their multiplicity.
        self.mult: dict[tuple[int, int], int] = {}
        self.edges = 0
        self.looks: list[Any] = []  # (parsed body, flags) of each lookaround, analysed on their own
        self.groups: dict[int, Any] = {}  # group number -> (body, flags), for backreferences
        self.unbounded = False
        # The tempered dot, (?:(?!</tag>)[\s\S])*: a position a negative lookahead of literal strings guards
        # cannot take the first character of those strings; positions that start a run of literals spell it.
        self.guards: dict[int, tuple[str, ...]] = {}
        self.spells: dict[int, str] = {}

    def position(self, mask: int) -> _Fragment:
        self.masks.append(mask)
        self.follow.append(set())
        if len(self.masks) > MAX_POSITIONS:
            raise RegexSafetyError(f"more than {MAX_POSITIONS} characters to analyse once its counted repeats "
                                   "are written out", "size")
        p = len(self.masks) - 1
        return _Fragment(False, {p}, {p})

    def link(self, frm: Iterable[int], to: set[int]) -> None:
        frm = list(frm)
        self.edges += len(frm) * len(to)
        if self.edges > MAX_EDGES:  # (optional parts in a row follow each other all to all)
            raise RegexSafetyError(f"more than {MAX_EDGES} transitions to analyse (optional parts in a long row); "
                                   "simplify it", "size")
        for p in frm:
            follow = self.follow[p]
            for q in to:
                if q in follow:
                    self.mult[(p, q)] = self.mult.get((p, q), 1) + 1
                else:
                    follow.add(q)

    def sequence(self, items: Iterable[tuple[Any, Any]], flags: int) -> _Fragment:
        out = _Fragment(True, set(), set())
        listed = list(items)
        for i, (op, av) in enumerate(listed):
            frag = self.item(op, av, flags)
            if op is sre.LITERAL and not flags & sre.SRE_FLAG_IGNORECASE:
                run = []
                for op2, av2 in listed[i:]:
                    if op2 is not sre.LITERAL:
                        break
                    run.append(chr(av2))
                self.spells[min(frag.first)] = "".join(run)
            if op in _CLASS_OPS and i and listed[i - 1][0] is sre.ASSERT_NOT and listed[i - 1][1][0] > 0:
                guarded = _literal_strings(listed[i - 1][1][1])
                if guarded:
                    self.guards[min(frag.first)] = guarded
            out = self.concat(out, frag)
        return out

    def concat(self, a: _Fragment, b: _Fragment) -> _Fragment:
        self.link(a.last, b.first)
        return _Fragment(a.nullable and b.nullable, a.first | (b.first if a.nullable else set()),
                         b.last | (a.last if b.nullable else set()))

    def item(self, op: Any, av: Any, flags: int) -> _Fragment:
        if op in _CLASS_OPS:
            return self.position(self.alphabet.mask(op, av, flags))
        if op is sre.SUBPATTERN:
            group, add, remove, body = av
            inner = (flags | add) & ~remove
            if group is not None:
                self.groups[group] = (body, inner)
            return self.sequence(body, inner)
        if op is sre.BRANCH:
            out = _Fragment(False, set(), set())
            for alt in av[1]:
                f = self.sequence(alt, flags)
                out = _Fragment(out.nullable or f.nullable, out.first | f.first, out.last | f.last)
            return out
        if op in _REPEATS:
            return self.repeat(av[0], av[1], av[2], flags)
        if op is getattr(sre, "ATOMIC_GROUP", None):
            return self.sequence(av, flags)
        if op in (sre.ASSERT, sre.ASSERT_NOT):
            if len(av[1]):  # ((?=) is the marker that keeps alternatives apart)
                self.looks.append((av[1], flags))
            return _Fragment(True, set(), set())
        if op is sre.GROUPREF:
            # The text its group took, in one step: no choice inside, so one position for its characters.
            body, inner = self.groups.get(av, ([], flags))
            mask = 0
            for o, a in _walk_items(body):
                if o in _CLASS_OPS:
                    mask |= self.alphabet.mask(o, a, inner)
            frag = self.position(mask)
            return _Fragment(True, frag.first, frag.last)
        if op is sre.GROUPREF_EXISTS:
            yes = self.sequence(av[1], flags)
            no = self.sequence(av[2], flags) if av[2] is not None else _Fragment(True, set(), set())
            return _Fragment(yes.nullable or no.nullable, yes.first | no.first, yes.last | no.last)
        return _Fragment(True, set(), set())  # anchors and other zero-width items

    def repeat(self, lo: int, hi: int, body: Any, flags: int) -> _Fragment:
        for count in (lo, hi):
            if count != _UNBOUNDED and count > MAX_REPEAT:
                raise RegexSafetyError(f"a counted repeat of {count}, above the limit of {MAX_REPEAT}", "size")
        if hi != _UNBOUNDED and hi > EXPAND_LIMIT or lo > EXPAND_LIMIT:
            lo, hi = min(lo, EXPAND_LIMIT), _UNBOUNDED  # a long counted repeat backtracks like a loop
        if hi == _UNBOUNDED:
            self.unbounded = True
            out = _Fragment(True, set(), set())
            for _ in range(max(lo - 1, 0)):
                out = self.concat(out, self.sequence(body, flags))
            loop = self.sequence(body, flags)
            self.link(loop.last, loop.first)
            return self.concat(out, _Fragment(loop.nullable or lo == 0, loop.first, loop.last))
        out = _Fragment(True, set(), set())
        for _ in range(lo):
            out = self.concat(out, self.sequence(body, flags))
        tail = _Fragment(True, set(), set())
        for _ in range(hi - lo):  # (x(x(x)?)?)?: a counter stops once, it never resumes
            f = self.concat(self.sequence(body, flags), tail)
            tail = _Fragment(True, f.first, f.last)
        return self.concat(out, tail)


def _literal_strings(items: Any) -> tuple[str, ...]:
    """The strings a lookahead body of plain literals (or alternatives of them) matches, else ()."""
    items = list(items)
    if len(items) == 1 and items[0][0] is sre.BRANCH:
        found = [_literal_strings(alt) for alt in items[0][1][1]]
        return tuple(s for f in found for s in f) if all(found) else ()
    if items and all(op is sre.LITERAL for op, _ in items):
        return ("".join(chr(av) for _, av in items),)
    return ()


def _components(follow: list[set[int]]) -> tuple[list[int], list[list[int]]]:
    """Strongly connected components (iterative Tarjan): each position's component, and the components
    in reverse topological order."""
    n = len(follow)
    index = [-1] * n
    low = [0] * n
    on_stack = [False] * n
    comp = [-1] * n
    stack: list[int] = []
    comps: list[list[int]] = []
    counter = 0
    for root in range(n):
        if index[root] != -1:
            continue
        work = [(root, iter(follow[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack[root] = True
        while work:
            v, children = work[-1]
            advanced = False
            for w in children:
                if index[w] == -1:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack[w] = True
                    work.append((w, iter(follow[w])))
                    advanced = True
                    break
                if on_stack[w]:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                members = []
                while True:
                    w = stack.pop()
                    on_stack[w] = False
                    comp[w] = len(comps)
                    members.append(w)
                    if w == v:
                        break
                comps.append(members)
    return comp, comps


#: Work (product states visited) the ambiguity tests may spend on one pattern before giving up.
_WORK_LIMIT = 400_000


class _Analysis:
    """The ambiguity of one automaton."""

    def __init__(self, automaton: _Automaton) -> None:
        self.masks = automaton.masks
        self.follow = automaton.follow
        self.comp, self.comps = _components(self.follow)
        self.looping = [len(c) > 1 or c[0] in self.follow[c[0]] for c in self.comps]
        self.guards = automaton.guards
        self.spells = automaton.spells
        self.mult = automaton.mult
        self.work = 0

    def together(self, p: int, q: int) -> bool:
        """Whether two paths can take the same character at positions p and q: their classes meet, and
        neither is a tempered dot refusing the literal string the other one starts."""
        if not self.masks[p] & self.masks[q]:
            return False
        for a, b in ((p, q), (q, p)):
            guard = self.guards.get(a)
            if guard and (spelled := self.spells.get(b)) and any(spelled.startswith(g) for g in guard):
                return False
        return True

    def _spend(self, amount: int = 1) -> None:
        self.work += amount
        if self.work > _WORK_LIMIT:
            raise RegexSafetyError("too many interlocking repeats to analyse; simplify it")

    def exponential(self) -> bool:
        """Whether some state has two different loops on the same text.

        Two paths that take the same characters, as pairs of positions: they start together, part at a
        state (different next positions, or the same one by two edges), and loop back to a common
        state. Parted pairs from which a pair (q, q) is reachable mean exponential ambiguity (from q, follow
        the common path back to where they parted)."""
        for ci, members in enumerate(self.comps):
            if not self.looping[ci]:
                continue
            inside = set(members)
            parted: set[tuple[int, int]] = set()
            for x in members:
                nxt = self.follow[x] & inside
                for a in nxt:
                    for b in nxt:
                        if (a != b or self.mult.get((x, a), 1) > 1) and self.together(a, b):
                            if a == b:
                                return True
                            parted.add((a, b))
            todo = list(parted)
            while todo:
                a, b = todo.pop()
                for a2 in self.follow[a] & inside:
                    for b2 in self.follow[b] & inside:
                        self._spend()
                        if not self.together(a2, b2):
                            continue
                        if a2 == b2:
                            return True
                        if (a2, b2) not in parted:
                            parted.add((a2, b2))
                            todo.append((a2, b2))
        return False

    def links(self) -> dict[int, set[int]]:
        """Component pairs (c1, c2) joined by a polynomial ambiguity: positions p in c1 and q in c2 with a
        text v that loops at p, leads from p to q, and loops at q."""
        out: dict[int, set[int]] = {}
        loops = [ci for ci, looping in enumerate(self.looping) if looping]
        if len(loops) < 2:
            return out
        reach = self._reach()
        for c1 in loops:
            for c2 in loops:
                if c1 != c2 and reach[c1] >> c2 & 1 and self._linked(c1, c2, reach):
                    out.setdefault(c1, set()).add(c2)
        return out

    def _reach(self) -> list[int]:
        """Components reachable from each component (itself included), as bitmasks."""
        reach: list[int] = [0] * len(self.comps)
        for ci, members in enumerate(self.comps):  # reverse topological: successors come first
            r = 1 << ci
            for p in members:
                for q in self.follow[p]:
                    if self.comp[q] != ci:
                        r |= reach[self.comp[q]]
            reach[ci] = r
        return reach

    def _linked(self, c1: int, c2: int, reach: list[int]) -> bool:
        one, two = set(self.comps[c1]), set(self.comps[c2])
        between = {p for p in range(len(self.masks)) if reach[c1] >> self.comp[p] & 1 and reach[self.comp[p]] >> c2 & 1}
        # (p, q) fixed: walk (x in c1, y between, z in c2) on common characters from (p, p, q) to (p, q, q)
        for p in one:
            for q in two:
                start = (p, p, q)
                seen = {start}
                todo = [start]
                while todo:
                    x, y, z = todo.pop()
                    for x2 in self.follow[x] & one:
                        mx = self.masks[x2]
                        for z2 in self.follow[z] & two:
                            mxz = mx & self.masks[z2]
                            if not mxz or not self.together(x2, z2):
                                continue
                            for y2 in self.follow[y] & between:
                                self._spend()
                                if not mxz & self.masks[y2] or not self.together(x2, y2) \
                                        or not self.together(y2, z2):
                                    continue
                                if (x2, y2, z2) == (p, q, q):
                                    return True
                                if (x2, y2, z2) not in seen:
                                    seen.add((x2, y2, z2))
                                    todo.append((x2, y2, z2))
        return False

    def degree(self, links: dict[int, set[int]]) -> int:
        """The longest chain of linked components, in links."""
        longest: dict[int, int] = {}
        for ci in range(len(self.comps)):  # reverse topological order: successors first
            longest[ci] = max((1 + longest[c2] for c2 in links.get(ci, ())), default=0)
        return max(longest.values(), default=0)

    def finite_ambiguity(self) -> int:
        """Most paths one text has through the automaton without its loops (saturating above
        MAX_AMBIGUITY): the multiplier alternatives and counted repeats add."""
        follow = [{q for q in f if self.comp[q] != self.comp[p]} for p, f in enumerate(self.follow)]
        if all(self.mult.get((p, q), 1) == 1 for p, f in enumerate(follow) for q in f) and \
                all(not self.masks[a] & self.masks[b] for f in follow for a in f for b in f if a < b):
            return 1  # deterministic: one path per text (most real patterns)
        signatures: dict[tuple[int, ...], int] = {}
        width = max((m.bit_length() for m in self.masks), default=0)
        atoms = []
        for bit in range(width):
            sig = tuple(p for p, m in enumerate(self.masks) if m >> bit & 1)
            if sig and sig not in signatures:
                signatures[sig] = bit
                atoms.append(1 << bit)
        cap = MAX_AMBIGUITY + 1
        start: tuple[tuple[int, int], ...] = ((0, 1),)
        seen = {start}
        todo = [start]
        best = 1
        while todo:
            vector = todo.pop()
            for atom in atoms:
                counts: dict[int, int] = {}
                for p, c in vector:
                    for q in follow[p]:
                        if self.masks[q] & atom:
                            counts[q] = min(cap, counts.get(q, 0) + c * self.mult.get((p, q), 1))
                self._spend(len(vector))
                if not counts:
                    continue
                total = sum(counts.values())
                if total > MAX_AMBIGUITY:
                    return total
                best = max(best, total)
                nxt = tuple(sorted(counts.items()))
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return best

    def pump(self, links: dict[int, set[int]], alphabet: _Alphabet) -> str | None:
        """A class of every character some pair of linked loops shares, as regex source."""
        shared = 0
        for c1, targets in links.items():
            one = 0
            for p in self.comps[c1]:
                one |= self.masks[p]
            for c2 in targets:
                two = 0
                for q in self.comps[c2]:
                    two |= self.masks[q]
                shared |= one & two
        if not shared:
            return None
        chars = [ch for i, ch in enumerate(alphabet.samples) if shared >> i & 1]
        return _class_of(chars, alphabet, shared)


def _class_of(chars: list[str], alphabet: _Alphabet, mask: int) -> str:
    """A regex class for a set of sampled characters: the broad categories it covers, else the characters.

    The cost estimate counts runs of these characters in a text; a category stands for all the characters
    it holds, so a sample set that matches exactly a category's samples becomes that category."""
    for source in (r"[\s\S]", r"\s", r"\w", r"\d", r"\S", r"\W", r"[^\n]"):
        compiled = regex.compile(source)
        cat = 0
        for i, ch in enumerate(alphabet.samples):
            if compiled.fullmatch(ch):
                cat |= 1 << i
        if cat & mask == cat:  # the whole category is in the shared set: count all of it
            if cat == mask:
                return source
    return "[" + "".join(regex.escape(c) for c in chars) + "]"


def _literal_prefix(parsed: Any, flags: int) -> str:
    """The literal text every match starts with ("" when there is none or case is ignored)."""
    if flags & sre.SRE_FLAG_IGNORECASE:
        return ""
    out = []
    items = list(parsed)
    while items:
        op, av = items[0]
        if op is sre.LITERAL:
            out.append(chr(av))
            items = items[1:]
        elif op is sre.SUBPATTERN and not av[1] and not av[2]:
            items = list(av[-1]) + items[1:]
        else:
            break
    return "".join(out)


def _redundant(items: Any, alphabet: _Alphabet, flags: int) -> str | None:
    """Two unbounded repeats of the same character class side by side in one sequence (``\\s*\\s*``,
    ``.*.*``): they add nothing but ways to split the text. A description, else None."""
    flat: list[tuple[Any, Any]] = []
    for op, av in items:
        if op is sre.SUBPATTERN and av[0] is None and not av[1] and not av[2]:
            flat.extend(av[-1])  # non-capturing groups do not separate
        else:
            flat.append((op, av))
    for (op1, av1), (op2, av2) in zip(flat, flat[1:]):
        if op1 in _REPEATS and op2 in _REPEATS and av1[1] == _UNBOUNDED and av2[1] == _UNBOUNDED:
            b1, b2 = list(av1[2]), list(av2[2])
            if len(b1) == len(b2) == 1 and b1[0][0] in _CLASS_OPS and b2[0][0] in _CLASS_OPS \
                    and alphabet.mask(b1[0][0], b1[0][1], flags) == alphabet.mask(b2[0][0], b2[0][1], flags):
                return "two repeats side by side"
    for op, av in flat:
        inner: list[Any] = []
        if op is sre.BRANCH:
            inner = [list(alt) for alt in av[1]]
        elif op is sre.SUBPATTERN:
            inner = [list(av[-1])]
        elif op in _REPEATS:
            inner = [list(av[2])]
        elif op in (sre.ASSERT, sre.ASSERT_NOT):
            inner = [list(av[1])]
        for seq in inner:
            if (found := _redundant(seq, alphabet, flags)) is not None:
                return found
    return None


def _rescans(items: Any, flags: int, alphabet: _Alphabet, prefix: str, starts: int | None) -> bool:
    """Whether a search may read the text once per start of a match attempt, even where one attempt is
    linear: an unbounded repeat can read over the start of a later attempt and the attempt can still fail
    after it (``<a>[^>]*>`` on ``<a><a><a>...``: the attempt from every ``<a>`` reads to the end). A start is
    the literal every match starts with (``prefix``; a repeat that cannot read one of its characters does not
    read over one), or else a character a match starts with (``starts``: their mask; None: any). A repeat at
    the end of the pattern never fails after it (the attempt has matched), so it does not count; one in a
    lookaround may (the rest of the pattern may fail after it). Where no repeat counts, one attempt reads past
    boundedly many later starts, so a search reads each character boundedly often, however many unbounded
    repeats there are (``<tool_call>\\s*<function=([^<>]+)>``)."""
    if prefix:
        needed = [alphabet.mask(sre.LITERAL, ord(c), flags) for c in prefix]
    elif starts is not None:
        needed = [starts]
    else:
        needed = []  # (any repeat reads over a start)

    def reads(seq: Any, fl: int) -> int:
        """The mask of what the consuming items of ``seq`` read (-1: anything, as far as known)."""
        mask = 0
        for op, av in seq:
            if op in (sre.LITERAL, sre.NOT_LITERAL, sre.ANY, sre.IN):
                mask |= alphabet.mask(op, av, fl)
            elif op in _NESTING:
                for sub, sub_flags in _inside(op, av, fl):
                    mask |= reads(sub, sub_flags)
            elif op is not sre.AT:
                return -1  # (a back reference, an unknown item)
        return mask

    def counts(seq: Any, fl: int, tail: bool) -> bool:
        """Whether a repeat in ``seq`` counts (``tail``: nothing after ``seq`` can fail)."""
        seq = list(seq)
        for i, (op, av) in enumerate(seq):
            last = tail and i == len(seq) - 1
            if op in _REPEATS and av[1] == _UNBOUNDED and not last and all(
                    reads(av[2], fl) & need for need in needed):  # (-1 & need: need)
                return True
            inner_tail = last and op is not sre.ASSERT_NOT  # (a negative lookahead fails where its body matches)
            if op in _NESTING and any(counts(sub, sub_flags, inner_tail) for sub, sub_flags in _inside(op, av, fl)):
                return True
        return False

    return counts(items, flags, True)


#: The parsed items that hold sequences of their own (see _inside).
_NESTING = (*_REPEATS, sre.SUBPATTERN, sre.BRANCH, sre.ASSERT, sre.ASSERT_NOT)


def _inside(op: Any, av: Any, flags: int) -> list[tuple[Any, int]]:
    """The sequences inside one parsed item, each with the flags it is read under (a group's inline ones)."""
    if op in _REPEATS:
        return [(av[2], flags)]
    if op is sre.SUBPATTERN:
        return [(av[-1], (flags | av[1]) & ~av[2])]
    if op is sre.BRANCH:
        return [(alt, flags) for alt in av[1]]
    return [(av[1], flags)]  # (a lookaround's body)


def _start_mask(automaton: _Automaton, whole: _Fragment) -> int | None:
    """The characters a match that reads any can start with, as a mask (None: not known)."""
    if not whole.first:
        return None
    mask = 0
    for p in whole.first:
        mask |= automaton.masks[p]
    return mask


def _analyse_parsed(parsed: Any, flags: int, alphabet: _Alphabet, depth: int = 0) -> BacktrackingProfile:
    if _redundant(list(parsed), alphabet, flags) is not None:
        raise RegexSafetyError("two repeats side by side over the same characters (as in \\s*\\s* or .*.*X): "
                               "they split one text in many ways; write them as one repeat")
    automaton = _Automaton(alphabet)
    whole = automaton.sequence(parsed, flags)
    automaton.link([0], whole.first)
    analysis = _Analysis(automaton)
    if analysis.exponential():
        raise RegexSafetyError("repeats that can split one text in exponentially many ways (as in (a+)+, "
                               "(a|a)* or (\\w+\\s?)*): a near miss backtracks practically for ever")
    links = analysis.links()
    degree = analysis.degree(links)
    if degree > MAX_DEGREE:
        raise RegexSafetyError(f"{degree + 1} repeats in a row that can each take the same text (as in "
                               f"(.*?,){{11}}): a near miss costs the text length to the power {degree + 1} "
                               f"(at most {MAX_DEGREE + 1} is accepted)")
    ambiguity = analysis.finite_ambiguity()
    if ambiguity > MAX_AMBIGUITY:
        raise RegexSafetyError(f"alternatives or counted repeats that match one text in more than {MAX_AMBIGUITY} "
                               "ways (as in (?:a{1,16}){1,16}b)")
    prefix = _literal_prefix(parsed, flags)
    profile = BacktrackingProfile(degree=degree, ambiguity=ambiguity,
                                  pump=analysis.pump(links, alphabet) if degree else None,
                                  prefix=prefix, loops=automaton.unbounded,
                                  rescans=_rescans(parsed, flags, alphabet, prefix, _start_mask(automaton, whole)))
    for body, body_flags in automaton.looks:  # a lookaround runs at each position it is reached
        if depth > 8:
            raise RegexSafetyError("lookarounds nested too deeply to analyse")
        inner = _analyse_parsed(body, body_flags, alphabet, depth + 1)
        if inner.degree > profile.degree or inner.ambiguity > profile.ambiguity:
            profile = BacktrackingProfile(degree=max(profile.degree, inner.degree),
                                          ambiguity=max(profile.ambiguity, inner.ambiguity),
                                          pump=profile.pump if profile.degree >= inner.degree else inner.pump,
                                          prefix=profile.prefix, loops=profile.loops or inner.loops,
                                          rescans=profile.rescans)
    return profile


@lru_cache(maxsize=4096)
def analyse(pattern: str, flags: int = regex.DOTALL) -> BacktrackingProfile:
    """The backtracking profile of ``pattern`` (cached); RegexSafetyError says why it is refused."""
    parsed, stand_ins = parse_pattern(pattern, flags)
    flags = parsed.state.flags if hasattr(parsed, "state") else flags
    profile = _analyse_parsed(parsed, flags, _Alphabet(parsed, stand_ins))
    if profile.linear and not profile.rescans:
        return profile
    points = choice_points(list(parse_pattern(pattern, flags, keep_alternatives=False)[0]))  # (as it compiles)
    if points > MAX_CHOICE_POINTS:
        raise RegexSafetyError(f"{points} choice points (its counted repeats written out) in a pattern searched under "
                               "a time limit, past which the linear matcher reads each of them at every character "
                               f"(at most {MAX_CHOICE_POINTS}): bound every run of it (it then needs no time limit) "
                               "or count fewer", kind="size")
    return replace(profile, choice_points=points)


def choice_points(items: list[Any]) -> int:
    """The places where the linear matcher (linear_regex) may choose a path, as it compiles a parsed sequence:
    a counted repeat's optional copies written out, a loop's one, an alternative's. Past its time limit a search
    reads each of them at every character, whatever the pattern's shape."""
    total = 0
    for op, av in items:
        if op in _REPEATS:
            lo, hi, body = av[0], av[1], choice_points(list(av[2]))
            total += lo * body + (1 + body if hi == _UNBOUNDED else (hi - lo) * (1 + body))
        elif op is sre.BRANCH:
            total += len(av[1]) - 1 + sum(choice_points(list(alternative)) for alternative in av[1])
        elif op is sre.GROUPREF_EXISTS:
            total += sum(choice_points(list(branch)) for branch in av[1:] if branch is not None)
        elif op in _NESTING:
            total += sum(choice_points(list(sub)) for sub, _ in _inside(op, av, 0))
    return total


def refusal(pattern: str, flags: int = regex.DOTALL) -> RegexSafetyError | None:
    """Why ``pattern`` is refused, or None when it is accepted."""
    try:
        analyse(pattern, flags)
    except RegexSafetyError as e:
        return e
    return None


# ---------------------------------------------------------------------------- the cost of an automaton
#: States past which a delimiter's automaton is not built (see automaton_cost): 64 x 64 took 1 s.
AUTOMATON_BUDGET = 2048


def automaton_cost(pattern: str, flags: int = regex.DOTALL) -> int:
    """A bound on how many states the pattern's finite automaton needs because of counted repeats that read the
    same characters one after the other (``[^"<]{1,128}"?[^<]{0,128}``: the automaton must count both, 8,500
    states and 14 s to build at 128, a minute at 256): the sum over such pairs of their bounds' product. A
    pattern beyond AUTOMATON_BUDGET gets no automaton (its construction would stall the stream that needs it).
    0 where the parser cannot read the pattern (nor, then, can the automaton's builder)."""
    try:
        parsed, stand_ins = parse_pattern(pattern, flags)
    except RegexSafetyError:
        return 0
    return _sequence_cost(list(parsed), flags, _Alphabet(parsed, stand_ins))


def _sequence_cost(items: list[Any], flags: int, alphabet: _Alphabet) -> int:
    cost = 0
    counted: list[tuple[int, int | None]] = []  # (bound, character mask) of the counted repeats still adjacent
    for op, av in _groups_inlined(items):
        if op in _REPEATS and 1 < av[1] < _UNBOUNDED:
            body = list(av[2])
            mask = alphabet.mask(body[0][0], body[0][1], flags) if len(body) == 1 and body[0][0] in _CLASS_OPS else None
            cost += sum(bound * av[1] for bound, other in counted if mask is None or other is None or mask & other)
            # (one that must read a character ends the adjacency of those before it)
            counted = [*counted, (av[1], mask)] if av[0] == 0 else [(av[1], mask)]
        elif op in (sre.SUBPATTERN, sre.BRANCH):
            # (a group that may start with a counted repeat follows those before it, one that may end with one
            # comes before what follows: taken as reading anything)
            first = _edge_bound(op, av, flags, 0)
            cost += sum(bound * first for bound, _ in counted) if first > 1 else 0
            last = _edge_bound(op, av, flags, -1)
            counted = [(last, None)] if last > 1 else []
        elif not (op in _REPEATS and av[0] == 0):  # (an optional item keeps the repeats before it adjacent)
            counted = []
        if op in _NESTING:
            cost += sum(_sequence_cost(list(body), inner_flags, alphabet) for body, inner_flags in _inside(op, av, flags))
    return cost


def _groups_inlined(items: list[Any]) -> Iterable[tuple[Any, Any]]:
    """The items of a sequence with the items of its groups in their place (a group without flags of its own, a
    capture's too: what is adjacent stays adjacent across its edges)."""
    for op, av in items:
        if op is sre.SUBPATTERN and not av[1] and not av[2]:
            yield from _groups_inlined(list(av[-1]))
        else:
            yield op, av


def _edge_bound(op: Any, av: Any, flags: int, edge: int) -> int:
    """The bound of a counted repeat one parsed group may start (``edge`` 0) or end (-1) with, the largest over
    its alternatives; 1 where each starts (ends) with something else."""
    bound = 1
    for body, inner_flags in _inside(op, av, flags):
        items = list(_groups_inlined(list(body)))
        if not items:
            continue
        op2, av2 = items[edge]
        if op2 in _REPEATS and av2[1] < _UNBOUNDED:
            bound = max(bound, av2[1])
        elif op2 in (sre.SUBPATTERN, sre.BRANCH):
            bound = max(bound, _edge_bound(op2, av2, inner_flags, edge))
    return bound


__all__ = ["AUTOMATON_BUDGET", "CATEGORY_SOURCE", "EXPAND_LIMIT", "MAX_AMBIGUITY", "MAX_DEGREE", "MAX_EDGES", "MAX_POSITIONS", "MAX_REPEAT",
           "BacktrackingProfile", "RegexSafetyError", "analyse", "automaton_cost", "parse_pattern", "refusal", "sre", "sre_parse"]
