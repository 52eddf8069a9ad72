"""The streaming scanner: among the delimiters live in a parser state, which one fires next.

One Scanner exists per distinct watch-list (cached on the grammar). ``scan`` returns the delimiter to
commit now, if any, and ``hold``: the first buffer position that might still belong to a delimiter.
Everything before ``hold`` can be emitted as text at once; everything from it waits for more input.

The choice among complete matches is transformers': earliest start, then longest, then opens before
closes (terminal priority), then field name. A complete match is only committed if it starts before
every pending one, because a pending delimiter that starts no later might be the one that fires.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from functools import cached_property
from typing import Any

import regex

from ..errors import ParseError
from .delimiters import (PARTIAL_WINDOW, REGEX_SPACE, Hit, LiteralMatcher, Progress, RegexMatcher, Repeat,
                         ValueEnd)
from .symbols import Region, Terminal


#: A search for characters in a text from an offset (a compiled pattern's ``search``).
Search = Callable[..., Any]
_NEVER: Search = re.compile("(?!)").search


def any_of(chars: Iterable[str]) -> Search:
    """The search for any of ``chars`` in a text from an offset (for none: a search that finds nothing)."""
    joined = "".join(sorted(set(chars)))
    return re.compile("[" + re.escape(joined) + "]").search if joined else _NEVER


class SearchCache:
    """A session's memo for its scans, cleared whenever the session drops consumed text (offsets shift).

    ``hits``: search key (:func:`search_key`: terminals written alike share one) -> (buffer, searched-from,
    hit), for the scans that repeat on one buffer after each token. ``progress``: terminal name -> what the
    last streaming scan of a shorter buffer established (:class:`Progress`), so the next feed's scan does not
    start over from the held position.
    """

    __slots__ = ("hits", "progress")

    def __init__(self) -> None:
        self.hits: dict[str, tuple[str, int, Hit | None]] = {}
        self.progress: dict[str, Progress] = {}

    def clear(self) -> None:
        self.hits.clear()
        self.progress.clear()


class QuietTest:
    """A cheap test that a chunk cannot start any watched delimiter, for the session's fast path.

    Exists only when every watched delimiter is a literal (or ``\\s*`` + literals), a regex whose
    matches all start with one of a few known characters, or the end of a JSON value (the session's fast
    path walks it): then a delimiter, complete or partial, needs one of those first characters in the
    buffer, except that a leading ``\\s*`` keeps a trailing whitespace run pending (``hold_space``).
    """

    def __init__(self, triggers: str, hold_space: bool, anchored: bool = False) -> None:
        self.triggers = triggers
        self.hold_space = hold_space
        #: Whether a watched delimiter may also match at the text's start, with other characters: the test
        #: holds for a chunk that lands after buffered text only (see the session's _quiet)
        self.anchored = anchored
        # One trigger is found with str.find; several with a character-class search (``trigger`` is then
        # empty and unused).
        self.trigger = triggers if len(triggers) == 1 else ""
        self.hits: Search | None = None if self.trigger else any_of(triggers)


def _quiet_test(watch: tuple[Terminal, ...]) -> QuietTest | None:
    triggers: set[str] = set()
    hold_space = anchored = False
    for term in watch:
        m = term.matcher
        if isinstance(m, ValueEnd):
            continue  # the session's fast path walks the chunk itself (see ResponseParser.feed)
        if isinstance(m, LiteralMatcher):
            triggers.update(m.first_chars)
        elif isinstance(m, RegexMatcher) and m.lowered is not None:
            leading, literals, _ = m.lowered
            triggers.update(lit[0] for lit in literals)
            hold_space |= leading
        elif isinstance(m, RegexMatcher) and m.first_chars:
            triggers.update(m.first_chars)
        elif isinstance(m, RegexMatcher) and m.spaced_first_chars:
            triggers.update(m.spaced_first_chars)  # (the whitespace before them: a trailing run is held)
            hold_space = True
        elif isinstance(m, RegexMatcher) and m.behind:
            # (a zero-width match right after one of a few texts: a chunk without their last characters has
            # none of its places but the one before its first character, which the session tests: behind_ends)
            triggers.update(text[-1] for text in m.behind)
        elif isinstance(m, RegexMatcher) and m.past_start_chars is not None:
            triggers.update(m.past_start_chars)  # (its matches at the text's start: see QuietTest.anchored)
            anchored = True
        else:
            return None
    # (a delimiter may start with a whitespace character, as ``\n?```<end>`` does: chunks holding one
    # take the general route; only a match starting with ``\s``, which has no short list, rules it out)
    if not triggers:
        return None
    return QuietTest("".join(sorted(triggers)), hold_space, anchored)


class HeadsTest:
    """What the texts the live delimiters' matches start with (``heads``: each matcher's, see
    RegexMatcher.heads) tell about text with nothing pending before it, without a scan:

    * :meth:`quiet`: a chunk that holds none of them whole and has no end that begins one can start no
      delimiter: all of it is text, though it holds a trigger character (``t`` of gpt-oss's
      ``to=functions.``, a newline), the finer test behind a QuietTest;
    * :meth:`stays_pending`: a pending run that is a proper prefix of one and holds none of them whole cannot
      hold a complete match, and any scan holds it (``<par`` + ``amet`` of ``<parameter=``).
    """

    __slots__ = ("heads", "complete", "joined", "firsts", "reach")

    def __init__(self, heads: tuple[str, ...]) -> None:
        self.heads = heads
        self.complete = re.compile("|".join(re.escape(h) for h in sorted(heads, key=len, reverse=True))).search
        self.joined = "\0" + "\0".join(heads)  # ("\0" + a run in it: the run begins one of them)
        self.firsts = frozenset(h[0] for h in heads)
        self.reach = max(len(h) for h in heads) - 1  # (a proper prefix is at most this long)

    def quiet(self, text: str) -> bool:
        if self.complete(text) is not None:
            return False
        n, firsts, joined = len(text), self.firsts, self.joined
        return not any(text[i] in firsts and "\0" + text[i:] in joined for i in range(max(0, n - self.reach), n))

    def stays_pending(self, run: str) -> bool:
        """Whether ``run`` (the buffer from the scan's position, with the new chunk) begins one of the texts
        and holds none of them whole."""
        if "\0" + run not in self.joined:
            return False
        n = len(run)
        return not any(len(head) <= n and head in run for head in self.heads)

    def can_pend(self) -> bool:
        """Whether some run could stay pending: not so where each start of a text holds another whole
        (``<`` and ``</f``)."""
        heads = self.heads
        return not all(any(other in head[:cut] for other in heads) for head in heads for cut in range(1, len(head)))


#: How a scan asks a watched delimiter (Scanner.entries): a search memoised per buffer, the end of the
#: open region's JSON value (the session walks it), or a repeated opener (matched at one position).
_SEARCH, _VALUE_END, _REPEAT = 0, 1, 2


class Scanner:
    """Commit/hold decisions for one set of live delimiters."""

    def __init__(self, watch: tuple[Terminal, ...]) -> None:
        # (the grammar watches only terminals that have a matcher) Each entry: the terminal, its matcher,
        # how to ask it, whether it is a LiteralMatcher / a RegexMatcher, and its tie-break key.
        self.entries: list[tuple[Terminal, Any, int, bool, bool, tuple[int, str, str]]] = [
            (t, t.matcher, _VALUE_END if isinstance(t.matcher, ValueEnd) else _REPEAT if isinstance(t.matcher, Repeat)
             else _SEARCH, isinstance(t.matcher, LiteralMatcher), isinstance(t.matcher, RegexMatcher), t.sort_key)
            for t in watch if t.matcher is not None]
        #: Per terminal, the key its searches are memoised under (search_key).
        self.keys = {t.name: search_key(t) for t, *_ in self.entries}
        self.quiet = _quiet_test(watch)
        #: The texts a live zero-width delimiter's match comes right after (a lookbehind of texts alone), or None:
        #: a scan holds such a match at the buffer's end, so the fast path does not start where one ends it.
        self.behind_ends: tuple[str, ...] | None = tuple(sorted(
            {text for t in watch if isinstance(t.matcher, RegexMatcher) and t.matcher.behind
             for text in t.matcher.behind})) or None
        # A repeated opener is watched only across the first few whitespace characters of its region: past
        # them the other delimiters decide, and a whitespace run held for a leading \s* can grow unscanned.
        self.repeat_space = max((m.space for _, m, kind, *_ in self.entries if kind == _REPEAT), default=-1)
        self.quiet_past_repeats = self.quiet if self.repeat_space < 0 else \
            _quiet_test(tuple(t for t in watch if not isinstance(t.matcher, Repeat)))
        #: The region whose JSON value's end is a live close here (the session walks its text), if any.
        self.value_end: Region | None = next((t.region for t in watch if isinstance(t.matcher, ValueEnd)), None)
        #: The texts the live delimiters' matches start with, where every one has such texts (HeadsTest): the
        #: fast path's finer quiet test, and the pending runs feed() holds unscanned (see ResponseParser.feed).
        heads = _entry_heads(self.entries)
        self.quiet_heads = heads if self.quiet is not None else None
        self.pending_heads = heads if heads is not None and heads.can_pend() else None
        #: Where every live delimiter is a plain search (most states): (search key, terminal, search, tie-break key)
        #: each, for the end-of-output scan's short loop (scan_searches).
        self.searches: list[tuple[str, Terminal, Any, Any]] | None = \
            [(self.keys[t.name], t, m.search, key) for t, m, kind, _, _, key in self.entries] \
            if all(kind == _SEARCH for _, _, kind, *_ in self.entries) else None
        #: The scan's loop, one row per entry: the entry, its name and search key, and the test that no character
        #: its matches start with (a zero-width one's: the character at it) is in the buffer from an offset (one
        #: such character, or a class search; neither where they are not known): text without them cannot
        #: start one (see scan).
        self.rows: list[tuple[Terminal, str, Any, int, bool, bool, Any, str, str, Any]] = [
            (t, t.name, m, kind, literal, is_regex, key, self.keys[t.name],
             *_first_test(_match_firsts(m) if kind == _SEARCH else None))
            for t, m, kind, literal, is_regex, key in self.entries]
        #: Text with no trigger character from the scan's position holds no delimiter and no start of one:
        #: where that is all a scan must know (every delimiter is searched, none has a leading whitespace run),
        #: the trigger (one character) or the search for any of them.
        #: (not where a zero-width match comes right after a text: one may be at the position itself)
        self.none_from: tuple[str, Any] | None = None if self.quiet is None or self.quiet.hold_space \
            or self.searches is None or self.behind_ends is not None or self.quiet.anchored \
            else (self.quiet.trigger, self.quiet.hits)

    @cached_property
    def fast_scan(self) -> Callable[..., tuple[Terminal | None, Hit | None, int]]:
        """:meth:`scan`, written out for these delimiters (the same answers and notes, in fewer Python steps: the
        streaming session's most frequent call; see _written_scan); :meth:`scan` itself where none is live."""
        return _written_scan(self) or self.scan

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without its written-out scan (generated code): a process that receives it writes its own."""
        return {k: v for k, v in self.__dict__.items() if k != "fast_scan"}

    @cached_property
    def end_chars(self) -> str | None:
        """The characters the live delimiters' matches end with (see _match_ends): text without any of them
        completes no delimiter here. None where one of them is not known (or a delimiter is not searched: a
        repeated opener, a JSON value's end)."""
        return self._chars(_match_ends)

    @cached_property
    def start_chars(self) -> str | None:
        """The characters the live delimiters' matches start with (see _match_firsts): text without any of them
        starts none. None where one of them is not known."""
        return self._chars(_match_firsts)

    def holds_on(self, progress: dict[str, Progress], pos: int, n: int, text: str) -> bool:
        """Whether a streaming scan from ``pos`` of the buffer the notes in ``progress`` cover (``n`` characters)
        grown by ``text`` would hold at ``pos`` again, told from ``text`` alone: each delimiter either has no match
        or start of one and no first character in ``text``, or is a regex whose run pending from ``pos`` or later
        goes on over ``text`` as a partial match, one of them from ``pos``. Then the notes move on over ``text``
        as that scan's would, and True; else they stay as they are (a scan of the joined buffer decides). The
        session asks it for a run held past HELD_RUN characters, so that each piece of it is not joined into the
        buffer (one copy of the whole run per piece: quadratic)."""
        end = n + len(text)
        moved: list[tuple[Progress, Any]] = []
        held = False
        for _, name, matcher, _, _, is_regex, _, _, first, firsts in self.rows:
            known = progress.get(name)
            if known is None:
                continue  # (no note: the next scan searches it afresh; a hit of it starts at pos or later, held)
            if known.end != n or known.pos > pos:
                return False
            if known.pending == -1:
                starts = firsts if first or firsts is not None else self._starts.get(name)
                if known.found or (text.find(first) >= 0 if first else starts is None or starts(text) is not None):
                    return False
                moved.append((known, None))
                continue
            if not is_regex or known.state is None or known.pending < pos:
                return False
            if known.found:  # a match held at the edge that grows while its repeat's characters come (resume)
                tail = matcher.tail
                grows = not text.strip(REGEX_SPACE) if tail is None else tail.match(text).end() == len(text)
                if known.state != n or not grows:
                    return False
                state: Any = end
            else:
                automaton = matcher.forwards[known.pending == 0] if matcher.lowered is None else None
                state = automaton.walk(known.state, text) if automaton is not None else None
                if state is None:
                    return False
            held = held or known.pending == pos
            moved.append((known, state))
        if not held:
            return False
        for known, state in moved:
            known.end = end
            if state is not None:
                known.state = state
        return True

    @cached_property
    def _starts(self) -> dict[str, Any]:
        """For holds_on, the delimiters whose first characters the scan's rows do not list (a class of more than a
        few, ``\\s{1,64}``): the search for them, where their automata tell them."""
        found: dict[str, Any] = {}
        for _, name, matcher, kind, _, is_regex, _, _, first, firsts in self.rows:
            if first or firsts is not None or kind != _SEARCH or not is_regex:
                continue
            # (a piece kept follows a held run, never at the buffer's start: the automaton for elsewhere, where a
            # pattern anchored at the start, ``^[^<]{1,128}<\\|content_text\\|>``, starts nowhere)
            automaton = matcher.forwards[0]
            chars = automaton.first_chars() if automaton is not None else None
            if chars is not None:
                found[name] = any_of(chars)
        return found

    def _chars(self, of: Callable[[Any], str | None]) -> str | None:
        found: set[str] = set()
        for _, matcher, kind, *_ in self.entries:
            chars = of(matcher) if kind == _SEARCH else None
            if chars is None:
                return None
            found.update(chars)
        return "".join(sorted(found))

    def scan(self, buf: str, pos: int, eos: bool, cache: SearchCache,
             value_end: int = -1) -> tuple[Terminal | None, Hit | None, int]:
        """(terminal to commit or None, its hit, hold position) for ``buf`` from ``pos``; ``value_end`` is
        where the open region's JSON value ends in ``buf`` (-1: not yet, or no such region)."""
        n = hold = len(buf)
        best: Terminal | None = None
        best_hit: Hit | None = None
        best_key: Any = None
        hits, progress = cache.hits, cache.progress
        if eos and not progress:
            return self._scan_final(buf, pos, hits, value_end)
        if not eos and (none := self.none_from) is not None \
                and (buf.find(none[0], pos) < 0 if none[1] is None else none[1](buf, pos) is None):
            return None, None, n  # (what the loop below would find, without asking each delimiter)
        for term, name, matcher, kind, literal, is_regex, sort_key, key, first, firsts in self.rows:
            try:
                if kind == _VALUE_END:
                    hit: Hit | None = (value_end, value_end, None) if value_end >= pos else None
                elif kind == _REPEAT:
                    hit = matcher.search(buf, pos)  # (it looks at pos only: a miss there says nothing later)
                else:
                    # Where an earlier feed's scan stopped: no match starts before its pending run (dead
                    # starts stay dead as text arrives), and that run may be resumed without a rescan.
                    start, known = pos, progress.get(name)
                    if known is not None:
                        dead = known.end if known.pending == -1 else known.pending  # (known.dead_below())
                        if known.pos <= pos <= dead and known.end <= n:
                            start = dead
                            if eos:
                                pass  # (the end decides afresh)
                            elif known.pending == -1:
                                # nothing matched or pending at the last scan, and the new text holds no
                                # character a match starts with: still nothing, now up to the buffer's end
                                # (the note moves on with it: the next scan reads only what comes after, where
                                # a pending run of another delimiter keeps the buffer growing unconsumed)
                                if not known.found and (buf.find(first, dead) < 0 if first else
                                                        firsts is not None and firsts(buf, dead) is None):
                                    known.end = n
                                    continue
                            elif is_regex and start < n and (pending := matcher.resume(buf, known)) is not None:
                                if pending < hold:
                                    hold = pending
                                continue
                        else:
                            known = None
                            del progress[name]
                    # (a literal that was not in the shorter buffer can only end in the new text)
                    hit = _search(hits, key, matcher, buf, pos,
                                  start if known is None or known.found or not literal
                                  else max(start, known.end - matcher.max_width + 1))
                    if not eos:
                        found, searched = hit is not None, hit
                        hit, pending = matcher.probe(buf, start, hit)
                        # (a pending run found past a complete match is exact only with an automaton)
                        if hit is None and (literal or is_regex and (not found or matcher.exact_pending)):
                            known = progress[name] = Progress(n, pos, pending, found)
                            if is_regex:
                                matcher.note(buf, known, searched)
                        else:
                            progress.pop(name, None)
                        if pending != -1 and pending < hold:
                            hold = pending
                if kind != _SEARCH and not eos:
                    hit, pending = matcher.probe(buf, pos, hit)
                    if pending != -1 and pending < hold:
                        hold = pending
            except TimeoutError:
                raise _timed_out(term) from None
            if hit is not None:
                rank = (hit[0], hit[0] - hit[1], sort_key)
                if best_key is None or rank < best_key:
                    best, best_hit, best_key = term, hit, rank
        if best_hit is not None and best_hit[0] >= hold:
            return None, None, hold
        return best, best_hit, hold

    def _scan_final(self, buf: str, pos: int, hits: dict[str, tuple[str, int, Hit | None]],
                    value_end: int) -> tuple[Terminal | None, Hit | None, int]:
        """``scan`` at the end of the output with no streaming scan behind it (one-shot parsing): no
        match can grow and none is pending, so it is the earliest, longest, first-ranked match."""
        n = len(buf)
        if self.searches is not None:
            return (*scan_searches(self.searches, buf, pos, hits), n)
        best: Terminal | None = None
        best_hit: Hit | None = None
        best_key: Any = None
        for term, matcher, kind, _, _, sort_key in self.entries:
            try:
                if kind == _VALUE_END:
                    hit: Hit | None = (value_end, value_end, None) if value_end >= pos else None
                elif kind == _REPEAT:
                    hit = matcher.search(buf, pos)
                else:
                    hit = _search(hits, self.keys[term.name], matcher, buf, pos, pos)
            except TimeoutError:
                raise _timed_out(term) from None
            if hit is not None and hit[0] < n:
                key = (hit[0], hit[0] - hit[1], sort_key)
                if best_key is None or key < best_key:
                    best, best_hit, best_key = term, hit, key
        return best, best_hit, n


def scan_searches(searches: list[tuple[str, Terminal, Any, Any]], buf: str, pos: int,
                  hits: dict[str, tuple[str, int, Hit | None]]) -> tuple[Terminal | None, Hit | None]:
    """The end-of-output scan of a state whose delimiters are all plain searches (Scanner.searches): the
    earliest match, then the longest, then the first-ranked; each delimiter's next match memoised as
    :func:`_search` does, written out here (one-shot parsing runs it at every delimiter)."""
    best: Terminal | None = None
    best_hit: Hit | None = None
    best_key: Any = None
    n = len(buf)
    for memo, term, search, sort_key in searches:
        cached = hits.get(memo)
        if cached is not None and cached[0] is buf and cached[1] <= pos and (cached[2] is None or cached[2][0] >= pos):
            hit = cached[2]
        else:
            try:
                hit = search(buf, pos)
            except TimeoutError:
                raise _timed_out(term) from None
            hits[memo] = (buf, pos, hit)
        if hit is not None and hit[0] < n:
            key = (hit[0], hit[0] - hit[1], sort_key)
            if best_key is None or key < best_key:
                best, best_hit, best_key = term, hit, key
    return best, best_hit


def _written_scan(scanner: Scanner) -> Callable[..., tuple[Terminal | None, Hit | None, int]] | None:
    """``scanner.scan`` written out for its delimiters (Scanner.fast_scan): the same loop with each row's
    constants, its kind and its matcher's fast paths read once (None: no delimiter is live). The end of the
    output, where a scan decides afresh, stays with ``scan``."""
    if not scanner.rows:
        return None
    consts: list[Any] = [scanner, Progress, _timed_out]

    def const(value: Any) -> str:
        consts.append(value)
        return f"k{len(consts) - 1}"
    lines = ["def fast_scan(buf, pos, eos, cache, value_end=-1):",
             "\tif eos: return k0.scan(buf, pos, eos, cache, value_end)"]
    if scanner.none_from is not None:
        trigger, hits = scanner.none_from
        test = f"buf.find({const(trigger)}, pos) < 0" if hits is None else f"{const(hits)}(buf, pos) is None"
        lines.append(f"\tif {test}: return None, None, len(buf)")
    lines += ["\tn = hold = len(buf)", "\tbest = bh = None; bs = bw = 0; bk = None",
              "\thits, progress = cache.hits, cache.progress", "\tti = 0", "\ttry:"]
    for i, row in enumerate(scanner.rows):
        lines += ["\t\t" + line for line in _written_row(i, row, const)]
    lines += ["\texcept TimeoutError:", "\t\traise k2(k0.rows[ti][0]) from None",
              "\tif bh is not None and bs >= hold: return None, None, hold", "\treturn best, bh, hold"]
    namespace: dict[str, Any] = {f"k{i}": value for i, value in enumerate(consts)}
    exec(compile("\n".join(lines), "<grammar_parse scan>", "exec"), namespace)  # noqa: S102 - our own text
    return namespace["fast_scan"]  # type: ignore[no-any-return]


def _written_row(i: int, row: tuple[Any, ...], const: Callable[[Any], str]) -> list[str]:
    """One delimiter's turn in :meth:`Scanner.scan`'s loop (not at the end of the output), written out."""
    term, name, matcher, kind, literal, is_regex, sort_key, key, first, firsts = row
    nm, m, kk = const(name), const(matcher), const(key)
    if kind != _SEARCH:  # (the end of the open region's JSON value, which the session walks; a repeated opener)
        ask = "hit = (value_end, value_end, None) if value_end >= pos else None" if kind == _VALUE_END else \
            f"hit = {m}.search(buf, pos)"
        return [f"ti = {i}", ask, f"hit, pending = {m}.probe(buf, pos, hit)",
                "if pending != -1 and pending < hold: hold = pending", *_ranked(term, sort_key, const)]
    out = [f"ti = {i}", "start = pos", f"known = progress.get({nm})", "go = True", "if known is not None:",
           "\tpend = known.pending", "\tdead = known.end if pend == -1 else pend",
           "\tif known.pos <= pos <= dead and known.end <= n:", "\t\tstart = dead"]
    no_first = f"buf.find({const(first)}, dead) < 0" if first else \
        f"{const(firsts)}(buf, dead) is None" if firsts is not None else None
    if no_first is not None:  # (nothing matched or pending, and no character a match starts with since)
        out += ["\t\tif pend == -1:", f"\t\t\tif not known.found and {no_first}:", "\t\t\t\tknown.end = n; go = False"]
    if is_regex:  # (a pending run resumed)
        out += [f"\t\t{'el' if no_first is not None else ''}if pend != -1 and start < n:",
                f"\t\t\tp = {m}.resume(buf, known)", "\t\t\tif p is not None:", "\t\t\t\tgo = False",
                "\t\t\t\tif p < hold: hold = p"]
    out += ["\telse:", f"\t\tknown = None; del progress[{nm}]", "if go:"]
    frm = "start" if not literal else \
        f"start if known is None or known.found else max(start, known.end - {matcher.max_width - 1})"
    out += [f"\tfrm = {frm}", f"\tcached = hits.get({kk})",  # (_search: memoised per buffer)
            ("\tif cached is not None and cached[0] is buf and cached[1] <= pos and "
             "(cached[2] is None or cached[2][0] >= pos):"), "\t\thit = cached[2]", "\telse:"]
    if is_regex and matcher.plain:
        out += [f"\t\tmt = {const(matcher.compiled.search)}(buf, frm)",
                "\t\thit = None if mt is None else (mt.start(), mt.end(), mt)"]
    elif literal and len(matcher.literals) == 1 and matcher.literals[0]:
        lit = matcher.literals[0]
        out += [f"\t\tat = buf.find({const(lit)}, frm)", f"\t\thit = None if at < 0 else (at, at + {len(lit)}, None)"]
    else:
        out += [f"\t\thit = {m}.search(buf, frm)"]
    out += [f"\t\thits[{kk}] = (buf, pos, hit)", "\tfound = hit is not None; searched = hit"]
    out += ["\t" + line for line in _written_probe(matcher, m, const)]
    if literal:
        out += ["\tif hit is None:", f"\t\tprogress[{nm}] = k1(n, pos, pending, found)"]
    elif is_regex:  # (a pending start found beside a complete match is kept only where it is exact: asked only
        # then, as the loop asks, for the answer builds the regex's automaton)
        out += [f"\tif hit is None and (not found or {m}.exact_pending):", f"\t\tknown = progress[{nm}] = k1(n, pos, pending, found)",
                f"\t\tif pending != -1: {m}.note(buf, known, searched)"]
    else:
        out += ["\tif False: pass"]
    return out + ["\telse:", f"\t\tprogress.pop({nm}, None)", "\tif pending != -1 and pending < hold: hold = pending",
                  *("\t" + line for line in _ranked(term, sort_key, const))]


def _ranked(term: Terminal, sort_key: Any, const: Callable[[Any], str]) -> list[str]:
    """The scan's choice among complete matches (earliest, then longest, then first-ranked), for one row's hit."""
    sk = const(sort_key)
    return ["if hit is not None:", "\ta = hit[0]; w = a - hit[1]",
            f"\tif best is None or a < bs or a == bs and (w < bw or w == bw and {sk} < bk):",
            f"\t\tbest = {const(term)}; bh = hit; bs = a; bw = w; bk = {sk}"]


def _written_probe(matcher: Any, m: str, const: Callable[[Any], str]) -> list[str]:
    """``hit, pending = matcher.probe(buf, start, hit)`` for the written-out scan (``m``: the matcher's constant):
    with no complete match, a single literal's pending start (a proper prefix of it ends the buffer) and a plain
    regex's partial search within one window written out; the rest asks the matcher."""
    if isinstance(matcher, LiteralMatcher) and len(matcher.literals) == 1 and matcher.literals[0]:
        lit = matcher.literals[0]
        return ["if hit is None:", "\tpending = -1", f"\tj = max(start, n - {len(lit) - 1})",
                "\twhile True:", f"\t\tj = buf.find({const(lit[0])}, j)", "\t\tif j < 0: break",
                f"\t\tif {const(lit)}.startswith(buf[j:]): pending = j; break", "\t\tj += 1",
                # (a complete match ends at most at the buffer's end: no proper prefix of the literal can start
                # before it, and one literal cannot grow)
                "else: pending = -1"]
    if isinstance(matcher, RegexMatcher) and matcher.plain:
        partial = const(matcher.partial_compiled.search)
        return [f"if hit is None and n - start <= {PARTIAL_WINDOW}:",
                f"\tmp = {partial}(buf, start, n, partial=True)",
                "\tpending = -1 if mp is None or mp.start() >= n else mp.start()",
                f"else: hit, pending = {m}.probe(buf, start, hit)"]
    return [f"hit, pending = {m}.probe(buf, start, hit)"]


def _entry_heads(entries: list[tuple[Terminal, Any, int, bool, bool, tuple[int, str, str]]]) -> HeadsTest | None:
    """The texts every live delimiter's matches start with, where each searched one has some (else None)."""
    heads: list[str] = []
    for _, matcher, kind, *_ in entries:
        found = getattr(matcher, "heads", None) if kind == _SEARCH else None
        if not found:
            return None
        heads += found
    return None if not heads or any("\0" in h for h in heads) else HeadsTest(tuple(heads))


def _first_test(chars: str | None) -> tuple[str, Any]:
    """How a scan asks whether any of ``chars`` is in the buffer from an offset: ``str.find`` of the one
    character, or a character-class search (neither: the characters are not known)."""
    if chars is None:
        return "", None
    if len(chars) == 1:
        return chars, None
    return "", any_of(chars)


def _match_firsts(matcher: Any) -> str | None:
    """The characters a matcher's matches start with (a zero-width match: the character at it, which its
    lookahead reads), or None where that is not a short known set."""
    heads = getattr(matcher, "heads", None)
    if heads:
        found: str | None = "".join(sorted({h[0] for h in heads}))
    else:  # (a regex with no known start texts, not a \s* one: the characters it starts with, if known)
        found = matcher.first_chars if isinstance(matcher, RegexMatcher) and matcher.lowered is None else None
    return found if found and len(found) <= 8 else None


def _match_ends(matcher: Any) -> str | None:
    """The characters a matcher's matches end with, a trailing lookahead's text included (``X(?=Y)`` is decided
    when ``Y``'s last character arrives): text without any of them completes none, and holds none that more text
    would complete. None where that is not known: no automaton (other lookarounds), an assertion the next
    character decides (``\\b``, ``$``), flags the automaton does not read, or a match that may be empty."""
    if isinstance(matcher, LiteralMatcher):
        return None if not all(matcher.literals) else "".join(sorted({lit[-1] for lit in matcher.literals}))
    if not isinstance(matcher, RegexMatcher) or matcher.zero_width or matcher.partial_compiled is not matcher.compiled \
            or matcher.flags & ~regex.DOTALL:
        return None
    found: set[str] = set()
    for automaton in matcher.forwards:
        chars = automaton.final_chars() if automaton is not None else None
        if chars is None:
            return None
        found.update(chars)
    return "".join(sorted(found))


def search_key(term: Terminal) -> str:
    """The key a terminal's searches are memoised under: its pattern's, so that terminals written alike (a
    call's opener at the top and after a call, say) share one search (their matches are the same)."""
    matcher = term.matcher
    if isinstance(matcher, RegexMatcher):
        return f"\0r{matcher.flags}:{matcher.pattern}"
    if isinstance(matcher, LiteralMatcher):
        return "\0l" + "\0".join(matcher.literals)
    return term.name


def _search(hits: dict[str, tuple[str, int, Hit | None]], key: str, matcher: Any, buf: str, pos: int,
            frm: int) -> Hit | None:
    """The first match of ``matcher`` in ``buf`` from ``pos``, searched from ``frm`` (no match starts between
    them), memoised per buffer under ``key`` (search_key): the scan repeats after each token."""
    cached = hits.get(key)
    if cached is not None and cached[0] is buf and cached[1] <= pos and (cached[2] is None or cached[2][0] >= pos):
        return cached[2]
    hit: Hit | None = matcher.search(buf, frm)
    hits[key] = (buf, pos, hit)
    return hit


def _timed_out(term: Terminal) -> ParseError:
    matcher = term.matcher
    pattern = f" ({matcher.pattern!r})" if isinstance(matcher, RegexMatcher) else ""  # (only regexes time out)
    return ParseError(f"delimiter {term.name}{pattern} ran past its time limit on this output",
                      code="parse.timeout", field=term.region.field if term.region else None,
                      hint="The pattern backtracks badly on this text; make it more specific.")


__all__ = ["HeadsTest", "Scanner", "SearchCache", "scan_searches"]
