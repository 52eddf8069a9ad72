"""A regex matcher whose time is linear in the text, with the matches of a backtracking engine.

It backtracks as Python's ``re`` does (alternatives in order, greedy and lazy repeats, captures,
lookarounds, backreferences, atomic groups), but remembers every (choice point, position) it has tried:
from there the rest of the pattern either fails or succeeds whatever path led there, and the first path
to arrive had the higher priority, so a second arrival can only fail (RE2's "bit-state" backtracker
works the same way). Each pair is tried once, so a search costs at most the text length times the
number of choice points, where the regex module can take exponential time. Patterns with
backreferences, or repeats whose body can match empty, remember the state they depend on too.

Written in Python it is about a hundred times slower than the regex module per character, so callers
run it only where the regex module could go superlinear (see :mod:`grammar_parse._engine.regex_safety`).
The text it reads is what ``re`` reads: a pattern in ``re`` syntax, plus the ``regex`` module's ``\\p{..}``
classes; DOTALL, IGNORECASE, MULTILINE and ASCII flags.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from functools import cached_property
from operator import itemgetter
from typing import Any

import regex

from .regex_safety import CATEGORY_SOURCE, parse_pattern, sre

# Instruction codes. Every instruction is a tuple whose first item is its code.
_CHAR, _STR, _ANY, _SPLIT, _JMP, _SAVE, _AT, _LOOK, _BACKREF, _ATOMIC, _MARK, _UNTIL, _COND, _MATCH = range(14)

_Predicate = Callable[[str], bool]
#: Largest table of failed (choice point, position) pairs kept as one byte each (bytes); beyond, a set.
_DENSE_TABLE = 32 * 1024 * 1024


class _Program:
    """Instructions for one pattern (or one lookaround or atomic body)."""

    def __init__(self) -> None:
        self.code: list[tuple[Any, ...]] = []
        self.splits = 0  # choice points, numbered for the visited table
        self.registers = 0  # progress registers of repeats whose body can match empty
        self.backrefs: set[int] = set()

    @cached_property
    def captures(self) -> bool:
        """Whether the program sets captures (a lookaround's result then depends on its caller's; cached: read
        only once the program is compiled, at every lookaround a run meets)."""
        return any(ins[0] == _SAVE for ins in self.code)

    @cached_property
    def reach(self) -> int:
        """The length of its longest literal: a path that fails further than that from the end of the text
        was not cut off by it (cached: read only once the program is compiled)."""
        return max((len(ins[1]) for ins in self.code if ins[0] == _STR), default=1)

    @cached_property
    def backref_slots(self) -> Callable[[tuple[int, ...]], Any]:
        """The capture slots of the groups it backreferences, read from a run's captures: part of the key
        of a failed state, as where those groups matched decides what the rest of the pattern matches."""
        slots = [slot for group in sorted(self.backrefs) for slot in (2 * group, 2 * group + 1)]
        return itemgetter(*slots) if slots else _no_slots

    def emit(self, *instruction: Any) -> int:
        self.code.append(instruction)
        return len(self.code) - 1

    def split(self, first: int, second: int) -> int:
        self.splits += 1
        return self.emit(_SPLIT, first, second, self.splits - 1)


def _no_slots(caps: tuple[int, ...]) -> tuple[int, ...]:
    """No capture slots: the program backreferences no group."""
    return ()


class _Compiler:
    """sre parse trees to programs."""

    def __init__(self, stand_ins: dict[str, str]) -> None:
        self.stand_ins = {ch: regex.compile(src) for ch, src in stand_ins.items()}
        self.categories = {cat: regex.compile(src) for cat, src in CATEGORY_SOURCE.items()}
        self.ascii_categories = {cat: regex.compile(src, regex.ASCII) for cat, src in CATEGORY_SOURCE.items()}

    def program(self, items: Any, flags: int) -> _Program:
        prog = _Program()
        self.sequence(prog, list(items), flags)
        prog.emit(_MATCH)
        return prog

    def sequence(self, prog: _Program, items: list[tuple[Any, Any]], flags: int) -> None:
        i = 0
        while i < len(items):
            op, av = items[i]
            if op is sre.LITERAL and not flags & sre.SRE_FLAG_IGNORECASE and chr(av) not in self.stand_ins:
                j = i
                while j < len(items) and items[j][0] is sre.LITERAL and chr(items[j][1]) not in self.stand_ins:
                    j += 1
                prog.emit(_STR, "".join(chr(a) for _, a in items[i:j]))
                i = j
                continue
            self.item(prog, op, av, flags)
            i += 1

    def predicate(self, op: Any, av: Any, flags: int) -> _Predicate:
        fold = bool(flags & sre.SRE_FLAG_IGNORECASE)
        categories = self.ascii_categories if flags & sre.SRE_FLAG_ASCII else self.categories
        if op in (sre.LITERAL, sre.NOT_LITERAL):
            test = self.literal(chr(av), fold)
            if op is sre.LITERAL:
                return test
            return lambda ch: not test(ch)
        items = list(av)
        negate = bool(items) and items[0][0] is sre.NEGATE
        tests: list[_Predicate] = []
        for item_op, item_av in items[1:] if negate else items:
            if item_op is sre.LITERAL:
                tests.append(self.literal(chr(item_av), fold))
            elif item_op is sre.RANGE:
                tests.append(_range(item_av[0], item_av[1], fold))
            elif item_op is sre.CATEGORY:
                tests.append(_category(categories[item_av]))
            else:  # pragma: no cover - the parser makes no other class items
                raise ValueError(f"unsupported class item {item_op}")
        cache: dict[str, bool] = {}

        def member(ch: str) -> bool:
            found = cache.get(ch)
            if found is None:
                found = cache[ch] = any(t(ch) for t in tests) != negate
            return found

        return member

    def literal(self, c: str, fold: bool) -> _Predicate:
        stand_in = self.stand_ins.get(c)
        if stand_in is not None:
            return _category(stand_in)
        if not fold:
            return c.__eq__
        variants = {c, c.lower(), c.upper()}
        return lambda ch: ch in variants or ch.lower() in variants

    def item(self, prog: _Program, op: Any, av: Any, flags: int) -> None:
        if op is sre.ANY:
            prog.emit(_ANY, bool(flags & sre.SRE_FLAG_DOTALL))
        elif op in (sre.LITERAL, sre.NOT_LITERAL, sre.IN):
            prog.emit(_CHAR, self.predicate(op, av, flags))
        elif op is sre.SUBPATTERN:
            group, add, remove, body = av
            inner = (flags | add) & ~remove
            if group is not None:
                prog.emit(_SAVE, 2 * group)
            self.sequence(prog, list(body), inner)
            if group is not None:
                prog.emit(_SAVE, 2 * group + 1)
        elif op is sre.BRANCH:
            ends: list[int] = []
            alternatives = list(av[1])
            for k, alt in enumerate(alternatives):
                if k < len(alternatives) - 1:
                    at = prog.split(-1, -1)
                    prog.code[at] = (_SPLIT, at + 1, -1, prog.code[at][3])
                    self.sequence(prog, list(alt), flags)
                    ends.append(prog.emit(_JMP, -1))
                    prog.code[at] = (_SPLIT, at + 1, len(prog.code), prog.code[at][3])
                else:
                    self.sequence(prog, list(alt), flags)
            for at in ends:
                prog.code[at] = (_JMP, len(prog.code))
        elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT):
            self.repeat(prog, av[0], av[1], list(av[2]), flags, greedy=op is sre.MAX_REPEAT)
        elif op is getattr(sre, "POSSESSIVE_REPEAT", None):
            prog.emit(_ATOMIC, self.program([(sre.MAX_REPEAT, av)], flags))
        elif op is getattr(sre, "ATOMIC_GROUP", None):
            prog.emit(_ATOMIC, self.program(list(av), flags))
        elif op in (sre.ASSERT, sre.ASSERT_NOT):
            direction, body = av
            sub = self.program(list(body), flags)
            width = body.getwidth() if direction < 0 else (0, 0)
            prog.emit(_LOOK, sub, direction < 0, op is sre.ASSERT_NOT, width[0], min(width[1], 1 << 20))
        elif op is sre.AT:
            prog.emit(_AT, _anchor(av, flags, self.ascii_categories if flags & sre.SRE_FLAG_ASCII
                                   else self.categories))
        elif op is sre.GROUPREF:
            prog.backrefs.add(av)
            prog.emit(_BACKREF, av, bool(flags & sre.SRE_FLAG_IGNORECASE))
        elif op is sre.GROUPREF_EXISTS:
            group, yes, no = av
            prog.backrefs.add(group)
            at = prog.emit(_COND, group, -1)
            self.sequence(prog, list(yes), flags)
            jump = prog.emit(_JMP, -1)
            prog.code[at] = (_COND, group, len(prog.code))
            if no is not None:
                self.sequence(prog, list(no), flags)
            prog.code[jump] = (_JMP, len(prog.code))
        else:  # pragma: no cover - the analysis refuses what the parser makes and this does not know
            raise ValueError(f"unsupported regex construct {op}")

    def repeat(self, prog: _Program, lo: int, hi: int, body: list[Any], flags: int, greedy: bool) -> None:
        nullable = _can_be_empty(body)
        for _ in range(lo):
            self.sequence(prog, body, flags)
        if hi == sre.MAXREPEAT:
            # L: [mark r] split(body, exit); body; [until r -> exit]; jmp L
            register = prog.registers if nullable else -1
            prog.registers += nullable
            start = len(prog.code)
            if nullable:
                prog.emit(_MARK, register)
            at = prog.split(-1, -1)
            self.sequence(prog, body, flags)
            if nullable:
                prog.emit(_UNTIL, register, -1)
            prog.emit(_JMP, start)
            end = len(prog.code)
            index = prog.code[at][3]
            prog.code[at] = (_SPLIT, at + 1, end, index) if greedy else (_SPLIT, end, at + 1, index)
            for k in range(at, end):
                if prog.code[k][0] == _UNTIL and prog.code[k][2] == -1:
                    prog.code[k] = (_UNTIL, prog.code[k][1], end)
            return
        # optional copies (x(x(x)?)?)?: a counted repeat stops for good, and after an empty pass
        pending: list[int] = []
        for _ in range(hi - lo):
            register = prog.registers if nullable else -1
            prog.registers += nullable
            if nullable:
                prog.emit(_MARK, register)
            pending.append(prog.split(-1, -1))
            self.sequence(prog, body, flags)
            if nullable:
                pending.append(prog.emit(_UNTIL, register, -1))
        end = len(prog.code)
        for at in pending:
            instruction = prog.code[at]
            if instruction[0] == _SPLIT:
                index = instruction[3]
                prog.code[at] = (_SPLIT, at + 1, end, index) if greedy else (_SPLIT, end, at + 1, index)
            else:
                prog.code[at] = (_UNTIL, instruction[1], end)


def _can_be_empty(items: list[Any]) -> bool:
    """Whether ``items`` can match the empty string (a repeat of such a body needs a progress check)."""
    return all(_item_can_be_empty(op, av) for op, av in items)


def _item_can_be_empty(op: Any, av: Any) -> bool:
    if op in (sre.LITERAL, sre.NOT_LITERAL, sre.ANY, sre.IN):
        return False
    if op is sre.SUBPATTERN:
        return _can_be_empty(list(av[-1]))
    if op is sre.BRANCH:
        return any(_can_be_empty(list(alt)) for alt in av[1])
    if op in (sre.MAX_REPEAT, sre.MIN_REPEAT, getattr(sre, "POSSESSIVE_REPEAT", None)):
        return av[0] == 0 or _can_be_empty(list(av[2]))
    if op is getattr(sre, "ATOMIC_GROUP", None):
        return _can_be_empty(list(av))
    if op is sre.GROUPREF_EXISTS:
        return _can_be_empty(list(av[1])) or av[2] is None or _can_be_empty(list(av[2]))
    return True  # anchors, lookarounds, backreferences (to an empty group)


def _range(lo: int, hi: int, fold: bool) -> _Predicate:
    if not fold:
        return lambda ch: lo <= ord(ch) <= hi
    return lambda ch: any(lo <= ord(v) <= hi for v in (ch, ch.lower(), ch.upper()) if len(v) == 1)


def _category(compiled: regex.Pattern[str]) -> _Predicate:
    return lambda ch: compiled.fullmatch(ch) is not None


def _anchor(kind: Any, flags: int, categories: dict[Any, regex.Pattern[str]]) -> Callable[[str, int], bool]:
    multiline = bool(flags & sre.SRE_FLAG_MULTILINE)
    word = categories[sre.CATEGORY_WORD]

    def is_word(text: str, i: int) -> bool:
        return 0 <= i < len(text) and word.fullmatch(text[i]) is not None

    if kind is sre.AT_BEGINNING_STRING or kind is sre.AT_BEGINNING and not multiline:
        return lambda text, pos: pos == 0
    if kind in (sre.AT_BEGINNING, sre.AT_BEGINNING_LINE):
        return lambda text, pos: pos == 0 or text[pos - 1] == "\n"
    if kind is sre.AT_END_STRING:
        return lambda text, pos: pos == len(text)
    if kind is sre.AT_END and not multiline:
        return lambda text, pos: pos == len(text) or pos == len(text) - 1 and text[pos] == "\n"
    if kind in (sre.AT_END, sre.AT_END_LINE):
        return lambda text, pos: pos == len(text) or text[pos] == "\n"
    if kind in (sre.AT_BOUNDARY, sre.AT_UNI_BOUNDARY, sre.AT_LOC_BOUNDARY):
        return lambda text, pos: is_word(text, pos - 1) != is_word(text, pos)
    if kind in (sre.AT_NON_BOUNDARY, sre.AT_UNI_NON_BOUNDARY, sre.AT_LOC_NON_BOUNDARY):
        return lambda text, pos: is_word(text, pos - 1) == is_word(text, pos)
    raise ValueError(f"unsupported anchor {kind}")  # pragma: no cover


class Match:
    """The part of ``re.Match`` that callers use: groups by number or name, spans, and the text."""

    def __init__(self, string: str, caps: tuple[int, ...], names: dict[str, int], partial: bool = False) -> None:
        self.string = string
        self._caps = caps
        self._names = names
        self.partial = partial  # (a partial match: from its start to the end of the text, no groups set)

    def _index(self, group: int | str) -> int:
        index = self._names[group] if isinstance(group, str) else group
        if not 0 <= index < len(self._caps) // 2:
            raise IndexError("no such group")
        return index

    def span(self, group: int | str = 0) -> tuple[int, int]:
        index = self._index(group)
        return self._caps[2 * index], self._caps[2 * index + 1]

    def start(self, group: int | str = 0) -> int:
        return self.span(group)[0]

    def end(self, group: int | str = 0) -> int:
        return self.span(group)[1]

    def group(self, *groups: int | str) -> Any:
        if len(groups) > 1:
            return tuple(self.group(g) for g in groups)
        start, end = self.span(groups[0] if groups else 0)
        return None if start < 0 or end < 0 else self.string[start:end]

    def __getitem__(self, group: int | str) -> Any:
        return self.group(group)

    def groups(self, default: Any = None) -> tuple[Any, ...]:
        return tuple(default if (v := self.group(i)) is None else v for i in range(1, len(self._caps) // 2))

    def groupdict(self, default: Any = None) -> dict[str, Any]:
        return {name: default if (v := self.group(i)) is None else v for name, i in self._names.items()}

    def expand(self, template: str) -> str:
        return _expand(template, self)

    def __repr__(self) -> str:
        return f"<linear_regex.Match span={self.span()} match={self.group()!r}>"


class LinearRegex:
    """One compiled pattern: ``search``, ``match``, ``finditer`` and ``sub`` as ``re`` has them."""

    def __init__(self, pattern: str, flags: int = regex.DOTALL) -> None:
        self.pattern = pattern
        parsed, stand_ins = parse_pattern(pattern, flags, keep_alternatives=False)  # (the parser's folding is exact)
        self.flags = parsed.state.flags
        self.names = {name: gid for name, gid in parsed.state.groupdict.items() if "__" not in name}
        self.groups = parsed.state.groups - 1
        self.program = _Compiler(stand_ins).program(list(parsed), self.flags)
        # (a match starts where its first literal does when the program opens with it: searched with find)
        first = self.program.code[0]
        self.prefix: str = first[1] if first[0] == _STR else ""

    def _runner(self, text: str) -> _Runner:
        return _Runner(text, self.groups)

    def search(self, text: str, pos: int = 0) -> Match | None:
        return self._search(self._runner(text), text, pos, -1)

    def match(self, text: str, pos: int = 0) -> Match | None:
        caps = self._runner(text).run(self.program, pos, None, -1)
        return None if caps is None else Match(text, caps, self.names)

    def _search(self, runner: _Runner, text: str, pos: int, forbid_empty_at: int) -> Match | None:
        prefix = self.prefix
        n = len(text)
        start = pos
        while start <= n:
            if prefix:
                start = text.find(prefix, start)
                if start == -1:
                    return None
            caps = runner.run(self.program, start, None, forbid_empty_at)
            if caps is not None:
                return Match(text, caps, self.names)
            start += 1
        return None

    def partial_search(self, text: str, pos: int = 0) -> int:
        """Where the first complete or partial match starts (``regex``'s ``search(partial=True)``): the
        leftmost start from which the pattern matches, or a path reaches the end of the text wanting more;
        -1 for none. Anchors and lookarounds at the end count as wanting more, which only holds text longer."""
        runner = _Runner(text, self.groups, _PARTIAL)
        prefix, n, start = self.prefix, len(text), pos
        while start < n:
            if prefix:
                found = text.find(prefix, start)
                if found == -1:  # the literal a match opens with may be cut off at the end
                    start = max(start, n - len(prefix) + 1)
                    while start < n and not prefix.startswith(text[start:]):
                        start += 1
                    return start if start < n else -1
                start = found
            try:
                if runner.run(self.program, start, None, -1) is not None:
                    return start
            except _AtEnd:
                return start
            start += 1
        return -1

    def wants_more(self, text: str, pos: int) -> bool:
        """Whether a path from ``pos`` reaches the end of the text wanting more before any match does."""
        try:
            _Runner(text, self.groups, _PARTIAL).run(self.program, pos, None, -1)
        except _AtEnd:
            return True
        return False

    def first_alive(self, text: str, lo: int, hi: int) -> int:
        """The first start in [lo, hi) from which a path consumes all of ``text``, as a match or wanting
        more (``regex``'s ``fullmatch(partial=True)`` at each start, in time linear in the text); -1 for none."""
        runner = _Runner(text, self.groups, _PARTIAL_FULL)
        for start in range(lo, hi):
            try:
                runner.run(self.program, start, None, -1)
            except _AtEnd:
                return start
        return -1

    def finditer(self, text: str, pos: int = 0) -> Iterator[Match]:
        runner = self._runner(text)  # (what failed once fails again: one table for the whole scan)
        forbid = -1
        while pos <= len(text):
            found = self._search(runner, text, pos, forbid)
            if found is None:
                return
            yield found
            start, end = found.span()
            pos, forbid = end, end if start == end else -1

    def sub(self, repl: str | Callable[[Any], str], text: str) -> str:
        return _substitute(self.finditer(text), repl, text)


#: Partial modes of a run (streaming): a path that needs more text counts (search), and for fullmatch a
#: match must also end at the end of the text.
_WHOLE, _PARTIAL, _PARTIAL_FULL = 0, 1, 2


#: How a program runs on one text: where its failed pairs are remembered (the dense table, or None; the set
#: of failed states), whether their keys hold the registers and backreferenced captures, how to read those
#: captures, and its longest literal (a path that fails further than that from the end was not cut off by it).
_Memo = tuple[bytearray | None, set[Any], bool, Callable[[tuple[int, ...]], Any], int]


class _AtEnd(Exception):
    """A path reached the end of the text wanting more (partial modes): the run stops there."""


class _Runner:
    """The tables of one text: the (choice point, position) pairs known to fail stay known across starts
    and calls on that text. In a partial mode a run stops at the first path that reaches the end wanting
    more, so every pair remembered failed without doing so, and the tables stay sound across starts."""

    def __init__(self, text: str, groups: int, partial: int = _WHOLE) -> None:
        self.text = text
        self.partial = partial
        self.slots = 2 * (groups + 1)
        self.failed: dict[int, bytearray] = {}  # program -> one byte per (choice point, position)
        self.failed_states: dict[int, set[Any]] = {}  # programs whose outcome also depends on captures
        self.looks: dict[tuple[int, int], tuple[int, ...] | None] = {}
        self.memos: dict[int, _Memo] = {}  # program -> its memo, as :meth:`_memo` chose it

    def run(self, prog: _Program, start: int, caps: tuple[int, ...] | None, forbid_empty_at: int,
            must_end: int = -1) -> tuple[int, ...] | None:
        """The captures of the first match of ``prog`` at ``start`` (None: no match). ``caps``: the
        captures so far, for a nested body (its result then carries its end in slot 0). ``must_end``: only
        a match ending there counts (lookbehinds); ``forbid_empty_at``: no empty match there (finditer)."""
        memo = self.memos.get(id(prog)) if must_end == -1 else None
        if memo is None:  # (the program's first run on this text, or a lookbehind body)
            memo = self._memo(prog, must_end)
        initial = (start,) + (caps[1:] if caps is not None else (-1,) * (self.slots - 1))
        # (a lookbehind body ends before the text does: it never wants more)
        partial = self.partial if must_end == -1 else _WHOLE
        # Frames: (pc, pos, captures, registers) to run, or (-1, key) once both branches of a choice failed.
        stack: list[Any] = [(0, start, initial, (-1,) * prog.registers)]
        return self._walk(prog.code, memo, stack, start, caps, forbid_empty_at, must_end, partial)

    def _memo(self, prog: _Program, must_end: int) -> _Memo:
        """Where the failed (choice point, position) pairs of ``prog`` are remembered on this text, and what
        a pair's key holds; kept in ``memos`` for the program's next runs. A lookbehind body (``must_end``)
        is fixed-width: it remembers nothing, and gets a fresh memo each run."""
        stateful = bool(prog.registers or prog.backrefs)
        table: bytearray | None = None
        states: set[Any] = set()
        if must_end != -1:
            return table, states, stateful, prog.backref_slots, prog.reach
        if not stateful and prog.splits * (len(self.text) + 1) <= _DENSE_TABLE:
            table = self.failed.get(id(prog))
            if table is None:
                table = self.failed[id(prog)] = bytearray(prog.splits * (len(self.text) + 1))
        else:  # (captures matter, or a dense table would be too large: remember visited states one by one)
            states = self.failed_states.setdefault(id(prog), set())
        memo = self.memos[id(prog)] = (table, states, stateful, prog.backref_slots, prog.reach)
        return memo

    def _walk(self, code: list[tuple[Any, ...]], memo: _Memo, stack: list[Any], start: int,
              caps: tuple[int, ...] | None, forbid_empty_at: int, must_end: int, partial: int
              ) -> tuple[int, ...] | None:
        """:meth:`run`'s backtracking loop. The instructions most patterns run per character (text, choices,
        jumps, captures, anchors) stay inline, as a call each would cost about what they do (the loop is
        ~0.3-1.5 us a character); the others go to :meth:`_rare_step`, a match to :meth:`_accepted`."""
        text = self.text
        n = len(text)
        width = n + 1
        table, states, stateful, backref_slots, reach = memo
        on_path: set[Any] = set()
        while stack:
            frame = stack.pop()
            if frame[0] == -1:  # (both branches of a choice failed: remembered)
                key = frame[1]
                on_path.discard(key)
                if table is not None:
                    table[key] = 1
                elif must_end == -1:
                    states.add(key)
                continue
            pc, pos, now, regs = frame
            while True:
                ins = code[pc]
                op = ins[0]
                if op == _STR:
                    piece = ins[1]
                    if not text.startswith(piece, pos):
                        break
                    pos += len(piece)
                    pc += 1
                elif op == _CHAR:
                    if pos >= n or not ins[1](text[pos]):
                        break
                    pos += 1
                    pc += 1
                elif op == _ANY:
                    if pos >= n or not ins[1] and text[pos] == "\n":
                        break
                    pos += 1
                    pc += 1
                elif op == _SPLIT:
                    if table is not None:
                        key = ins[3] * width + pos
                        if table[key] or key in on_path:
                            break
                    else:
                        key = (pc, pos, regs, backref_slots(now)) if stateful else ins[3] * width + pos
                        if key in states or key in on_path:
                            break
                    on_path.add(key)  # (two appends: `stack += (a, b)` measured 10% slower a character)
                    stack.append((-1, key))
                    stack.append((ins[2], pos, now, regs))
                    pc = ins[1]
                elif op == _JMP:
                    pc = ins[1]
                elif op == _SAVE:
                    slot = ins[1]
                    now = now[:slot] + (pos,) + now[slot + 1:]
                    pc += 1
                elif op == _AT:
                    if partial and pos == n:
                        raise _AtEnd  # (what follows may change an anchor's answer: a partial match)
                    if not ins[1](text, pos):
                        break
                    pc += 1
                elif op != _MATCH:  # (registers, backreferences, conditions, lookarounds, atomic groups)
                    moved = self._rare_step(ins, pc, pos, now, regs, partial)
                    if moved is None:
                        break
                    pc, pos, now, regs = moved
                else:  # _MATCH
                    found = self._accepted(pos, now, start, caps, forbid_empty_at, must_end, partial)
                    if found is not None:
                        return found
                    break
            if partial and pos + reach > n and _wants_text(code[pc], text, pos):  # (cut off by the text's end)
                raise _AtEnd
        return None

    def _accepted(self, pos: int, now: tuple[int, ...], start: int, caps: tuple[int, ...] | None,
                  forbid_empty_at: int, must_end: int, partial: int) -> tuple[int, ...] | None:
        """The captures of a match ending at ``pos``, or None where this match may not end there."""
        if must_end != -1 and pos != must_end or pos == forbid_empty_at == start:
            return None
        if partial == _PARTIAL_FULL and caps is None:
            if pos == len(self.text):
                raise _AtEnd  # (a whole match of the text is alive too)
            return None
        if caps is not None:
            return (pos,) + now[1:]  # a nested body: slot 0 says where it ended
        return (start, pos) + now[2:]

    def _rare_step(self, ins: tuple[Any, ...], pc: int, pos: int, now: tuple[int, ...], regs: tuple[int, ...],
                   partial: int) -> tuple[int, int, tuple[int, ...], tuple[int, ...]] | None:
        """One of the instructions few patterns have, at ``pos``: a repeat's register (its body can match
        empty), a backreference, a condition, a lookaround or an atomic group. The next (pc, pos, captures,
        registers), or None where the path fails."""
        op = ins[0]
        if op == _MARK:
            r = ins[1]
            return pc + 1, pos, now, regs[:r] + (pos,) + regs[r + 1:]
        if op == _UNTIL:
            return (ins[2] if regs[ins[1]] == pos else pc + 1), pos, now, regs  # an empty pass ends the repeat
        if op == _BACKREF:
            g = ins[1]
            s0, e0 = now[2 * g], now[2 * g + 1]
            if s0 < 0 or e0 < 0:
                return None
            text = self.text
            piece = text[s0:e0]
            got = text[pos:pos + len(piece)]
            if got != piece and not (ins[2] and got.lower() == piece.lower()):
                if partial and pos + len(piece) > len(text) and (piece.startswith(got) or ins[2]):
                    raise _AtEnd
                return None
            return pc + 1, pos + len(piece), now, regs
        if op == _COND:
            g = ins[1]
            return (pc + 1 if now[2 * g] >= 0 and now[2 * g + 1] >= 0 else ins[2]), pos, now, regs
        if op == _LOOK:
            found = self._look(ins, pos, now)
            return None if found is None else (pc + 1, pos, found, regs)
        inner = self.run(ins[1], pos, now, -1)  # _ATOMIC: its first match, never another
        return None if inner is None else (pc + 1, inner[0], (now[0],) + inner[1:], regs)

    def _look(self, ins: tuple[Any, ...], pos: int, caps: tuple[int, ...]) -> tuple[int, ...] | None:
        _, sub, behind, negate, lo, hi = ins
        cacheable = not sub.backrefs and not sub.captures  # (with captures, each caller gets its own)
        if cacheable and (id(sub), pos) in self.looks:
            found = self.looks[(id(sub), pos)]
        else:
            found = None
            if behind:
                for width in range(lo, min(hi, pos) + 1):
                    found = self.run(sub, pos - width, caps, -1, must_end=pos)
                    if found is not None:
                        break
            else:
                found = self.run(sub, pos, caps, -1)
            if cacheable:
                self.looks[(id(sub), pos)] = found
        if negate:
            return caps if found is None else None
        if found is None:
            return None
        # (captures made inside a positive lookaround are kept; the others are the caller's)
        return (caps[0],) + tuple(f if f != -1 or c == -1 else c for f, c in zip(found[1:], caps[1:]))


def _wants_text(ins: tuple[Any, ...], text: str, pos: int) -> bool:
    """Whether an instruction that reads text failed at ``pos`` only for want of more (a partial run then
    stops there: the path is cut off, not dead)."""
    op = ins[0]
    if op == _STR:
        return pos + len(ins[1]) > len(text) and bool(ins[1].startswith(text[pos:]))
    return (op == _CHAR or op == _ANY) and pos >= len(text)


class BoundedRegex:
    """A pattern that cannot run away: the regex module (fast) for up to ``limit`` seconds a call, then
    :class:`LinearRegex`, which finds the same matches in linear time. The limit decides how soon a hostile
    text is handed over, never what is found, so the outcome does not depend on the clock or on how the
    text arrived."""

    def __init__(self, pattern: str, flags: int = regex.DOTALL) -> None:
        self.pattern = pattern
        self.flags = flags
        self.compiled = regex.compile(pattern, flags)
        self._linear: LinearRegex | None = None

    @property
    def linear(self) -> LinearRegex:
        """The linear matcher (built on first use); TimeoutError where it cannot read the pattern."""
        if self._linear is None:
            try:
                self._linear = LinearRegex(self.pattern, self.flags)
            except ValueError:  # (RegexSafetyError too) syntax only the regex module knows
                raise TimeoutError(f"regex {self.pattern!r} ran past its limit") from None
        return self._linear

    def search(self, text: str, limit: float | None) -> Any:
        """The first match (a ``regex`` match, or a :class:`Match` after a hand-over), or None."""
        if limit is None:
            return self.compiled.search(text)
        if limit > 0:
            try:
                return self.compiled.search(text, timeout=limit)
            except TimeoutError:
                pass
        return self.linear.search(text)

    def search_from(self, text: str, pos: int, limit: float, partial: bool = False) -> Any:
        """The regex module's ``search(text, pos, partial=...)``: the first complete match, else (partial)
        the leftmost one cut off by the end of the text (``.partial``), else None."""
        try:
            return self.compiled.search(text, pos, partial=partial, timeout=limit)
        except TimeoutError:
            pass
        found = self.linear.search(text, pos)
        if found is not None or not partial:
            return found
        start = self.linear.partial_search(text, pos)
        if start == -1:
            return None
        slots = 2 * (self.linear.groups + 1)
        return Match(text, (start, len(text)) + (-1,) * (slots - 2), self.linear.names, partial=True)

    def finditer(self, text: str, limit: float | None) -> list[Any]:
        """Every match, as ``re.finditer`` gives them."""
        if limit is None:
            return list(self.compiled.finditer(text))
        if limit > 0:
            try:
                return list(self.compiled.finditer(text, timeout=limit))
            except TimeoutError:
                pass
        return list(self.linear.finditer(text))

    def sub(self, repl: str | Callable[[Any], str], text: str, limit: float | None) -> str:
        """``re.sub``; ``repl`` is called once per match, whichever engine found them."""
        return _substitute(self.finditer(text, limit), repl, text)


def _substitute(matches: Iterable[Any], repl: str | Callable[[Any], str], text: str) -> str:
    """``text`` with each of ``matches`` replaced (by ``repl(match)``, or the template ``repl`` expanded)."""
    out: list[str] = []
    last = 0
    for m in matches:
        start, end = m.span()
        out.append(text[last:start])
        out.append(repl(m) if callable(repl) else m.expand(repl))
        last = end
    out.append(text[last:])
    return "".join(out)


def _expand(template: str, m: Match) -> str:
    """A replacement template as ``re`` reads it: ``\\1``, ``\\g<1>``, ``\\g<name>`` and the escapes."""
    out: list[str] = []
    i = 0
    simple = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v", "a": "\a", "b": "\b", "\\": "\\"}
    while i < len(template):
        ch = template[i]
        if ch != "\\" or i + 1 == len(template):
            out.append(ch)
            i += 1
            continue
        nxt = template[i + 1]
        if nxt == "g" and template[i + 2:i + 3] == "<":
            end = template.index(">", i + 3)
            name = template[i + 3:end]
            out.append(m.group(int(name) if name.isdigit() else name) or "")
            i = end + 1
        elif nxt.isdigit():
            j = i + 1
            while j < len(template) and j < i + 3 and template[j].isdigit():
                j += 1
            out.append(m.group(int(template[i + 1:j])) or "")
            i = j
        elif nxt in simple:
            out.append(simple[nxt])
            i += 2
        elif nxt.isascii() and nxt.isalpha():
            raise ValueError(f"bad escape \\{nxt} in the replacement")
        else:
            out.append("\\" + nxt)
            i += 2
    return "".join(out)


__all__ = ["BoundedRegex", "LinearRegex", "Match"]
