"""What a delimiter regex's source says about its matches, read once when a grammar loads.

A streaming matcher needs facts about its pattern that a regex engine does not report: how long a match
can be and how far its assertions look around it (how much history a trimmed buffer keeps, when a match
at the buffer's edge is final), which characters every match starts or ends with (the fast paths that
skip a chunk without searching it), whether the pattern is a ``\\s*literal`` that ``str.find`` can search,
and whether its searches need a time limit. They are read here off Python's own regex parse tree, once per
pattern, at load time.

The matching itself happens at run time, in :mod:`grammar_parse._engine.delimiters`. Keeping the two apart keeps
that hot-path module to its matchers, and gives the loaders (the tool streamer, the legacy schema
translation) the analysis without them. Layering: ``regex_safety`` (parsing, backtracking analysis) ->
``linear_regex`` -> ``regex_shape`` -> ``delimiters``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import regex

from .regex_safety import analyse, refusal, sre, sre_parse

#: A match width (or look-around distance) with no bound.
UNBOUNDED = 1 << 30
#: The parsed-regex ops of a backtracking repeat (greedy or lazy).
REPEAT_OPS = (sre.MAX_REPEAT, sre.MIN_REPEAT)
# Every repeat op, possessive ones included (Python 3.11+).
_ANY_REPEAT = (*REPEAT_OPS, getattr(sre, "POSSESSIVE_REPEAT", None))


def _std_flags(flags: int) -> int:
    """``flags`` as Python's own regex parser takes them (no ``regex``-only bits)."""
    return flags & ~regex.VERSION1 & 0xFFFF


# ---------------------------------------------------------------------------- widths and context
@dataclass(frozen=True)
class PatternShape:
    """What a regex can look at beyond the text it consumes.

    ``max_width``: longest match (UNBOUNDED if unbounded). ``end_reach``: how many characters past a
    match's end an assertion may inspect (``$`` looks one further for a final newline; a negative
    lookahead as far as its body). ``context``: how many characters before the search position the
    pattern may inspect (``^``, ``\\b``, lookbehind), so trimmed buffers keep that much history.
    ``min_width``: shortest match (0 where unknown too).
    """

    max_width: int
    end_reach: int
    context: int
    lookaround: bool = False
    min_width: int = 0
    #: How far past its start a match attempt may read, lookaheads' text included (UNBOUNDED if unbounded):
    #: text further from the end of the buffer than this holds no partial match.
    reads: int = UNBOUNDED


_UNKNOWN_SHAPE = PatternShape(max_width=UNBOUNDED, end_reach=1, context=UNBOUNDED, lookaround=True)


def _width(sub: Any) -> int:
    hi = sub.getwidth()[1]
    return UNBOUNDED if hi >= sre.MAXREPEAT or hi >= getattr(sre_parse, "MAXWIDTH", UNBOUNDED) else int(hi)


def _item_width(op: Any, av: Any) -> int:
    """The longest text one parsed item matches (UNBOUNDED where that depends on a group's: a backreference)."""
    try:
        return _width(sre_parse.SubPattern(sre_parse.State(), [(op, av)]))
    except (IndexError, TypeError):  # (a group reference: the widths of groups live on the whole pattern)
        return UNBOUNDED


def _walk(sub: Any, reach: list[int], context: list[int]) -> bool:
    """Collect end reach and context of a parsed pattern; return whether it has end-sensitive parts."""
    sensitive = False
    for op, av in sub:
        if op is sre.AT:
            if av in (sre.AT_END, sre.AT_END_LINE):
                reach[0] = max(reach[0], 1)
                sensitive = True
            elif av in (sre.AT_END_STRING, sre.AT_BOUNDARY, sre.AT_NON_BOUNDARY):
                sensitive = True
            if av in (sre.AT_BEGINNING, sre.AT_BEGINNING_LINE, sre.AT_BEGINNING_STRING,
                      sre.AT_BOUNDARY, sre.AT_NON_BOUNDARY):
                context[0] = max(context[0], 1)
        elif op in (sre.ASSERT, sre.ASSERT_NOT):
            context.append(-1)  # marks a lookaround (automata libraries model them as consuming text)
            direction, body = av
            inner = _walk(body, reach, context)
            if direction < 0:
                context[0] = max(context[0], _width(body))
            elif op is sre.ASSERT_NOT or inner:
                # A negative lookahead that holds now can fail once more text arrives.
                reach[0] = max(reach[0], _width(body))
                sensitive = True
        elif op is sre.BRANCH:
            for alt in av[1]:
                sensitive |= _walk(alt, reach, context)
        elif op is sre.SUBPATTERN:
            sensitive |= _walk(av[-1], reach, context)
        elif op in _ANY_REPEAT:
            sensitive |= _walk(av[2], reach, context)
        elif op is getattr(sre, "ATOMIC_GROUP", None):
            sensitive |= _walk(av, reach, context)
        elif op is sre.GROUPREF_EXISTS:
            for branch in av[1:]:
                if branch is not None:
                    sensitive |= _walk(branch, reach, context)
    return sensitive


def unnamed(pattern: str) -> str:
    """``pattern`` with its named groups made non-capturing (for analysis, never for matching)."""
    return regex.sub(r"(?<!\\)((?:\\\\)*)\(\?P<\w+>", r"\1(?:", pattern)


def pattern_shape(pattern: str, flags: int = regex.DOTALL) -> PatternShape:
    """Analyse ``pattern`` with Python's own regex parser; unknown syntax gives a cautious answer."""
    # \p{..} classes exist only in `regex`; any one character stands in for them here. Named groups do
    # not matter to the shape, and `regex` allows a name twice where the stdlib parser does not.
    simplified = unnamed(regex.sub(r"\\[pP]\{[^}]*\}|\\[pP][A-Za-z]", "A", pattern))
    try:
        parsed = sre_parse.parse(simplified, _std_flags(flags))
    except Exception:  # noqa: BLE001 - any syntax the stdlib parser lacks
        return _UNKNOWN_SHAPE
    reach, context = [0], [0]
    _walk(parsed, reach, context)
    return PatternShape(max_width=_width(parsed), end_reach=reach[0], context=context[0],
                        lookaround=-1 in context[1:], min_width=int(parsed.getwidth()[0]),
                        reads=min(UNBOUNDED, max(_reads(list(parsed)), _width(parsed) + reach[0])))


def _reads(items: list[Any]) -> int:
    """How far a parsed sequence may read from where it starts, a lookahead's text read as if consumed."""
    total = 0
    for op, av in items:
        if op in (sre.ASSERT, sre.ASSERT_NOT):
            total += 0 if av[0] < 0 else _reads(list(av[1]))  # (an upper bound: what follows starts before it)
        elif op is sre.SUBPATTERN:
            total += _reads(list(av[-1]))
        elif op is sre.BRANCH:
            total += max(_reads(list(alternative)) for alternative in av[1])
        elif op in _ANY_REPEAT:
            total += UNBOUNDED if av[1] >= sre.MAXREPEAT else int(av[1]) * _reads(list(av[2]))
        else:
            total += _item_width(op, av)
        if total >= UNBOUNDED:
            return UNBOUNDED
    return total


# ---------------------------------------------------------------------------- first and last characters
def _literal_items(pattern: str, flags: int) -> list[Any] | None:
    """The parsed top-level items of ``pattern``, or None where its literals may match other characters
    (case ignored, ``regex``-only escapes) or the stdlib parser cannot read it."""
    parsed = _literal_parse(pattern, flags)
    return None if parsed is None else list(parsed)


@lru_cache(maxsize=1024)
def _literal_parse(pattern: str, flags: int) -> Any:
    """:func:`_literal_items`' parse, once per pattern: a delimiter's analyses (first characters, heads, the
    forms its search takes) each read it (the walks read the tree and never change it)."""
    if flags & (regex.IGNORECASE | regex.VERSION1) or regex.search(r"\\[pPNX]|\(\?[a-zA-Z]*i", pattern):
        return None
    try:
        return sre_parse.parse(unnamed(pattern), _std_flags(flags))
    except Exception:  # noqa: BLE001 - syntax only `regex` knows
        return None


def first_chars(pattern: str, flags: int = regex.DOTALL) -> str | None:
    """The characters every match of ``pattern`` starts with, or None when that is not a small known set
    (the pattern can match empty, starts with an assertion or a broad class, ignores case, ...).

    A chunk without any of them cannot begin a match, complete or partial: the session's fast path."""
    items = _literal_items(pattern, flags)
    found = None if items is None else _firsts(items)
    return "".join(sorted(found)) if found else None


def first_chars_past_start(pattern: str, flags: int = regex.DOTALL) -> str | None:
    """For a pattern whose matches may start at the text's start (``(?:>>>|^)all\\n``): the characters every
    match anywhere else starts with ("" where none can), or None when that is not a small known set. A chunk
    that lands after buffered text and holds none of them cannot begin a match."""
    parsed = _literal_parse(pattern, flags)
    if parsed is None or (flags | parsed.state.flags) & regex.MULTILINE:
        return None  # (``^`` is a line's start there)
    found = _firsts(list(parsed), past_start=True)
    return None if found is None else "".join(sorted(found))


def always_captured(pattern: str, flags: int = regex.DOTALL) -> bool:
    """Whether every named group of ``pattern`` takes part in every match (none stands in an alternative, a
    repeat or an assertion), so that no value of a match's ``groupdict()`` is None. False where the stdlib
    parser cannot read the pattern."""
    if regex.search(r"\\[pPNX]", pattern):
        return False
    try:
        parsed = sre_parse.parse(pattern, _std_flags(flags))
    except Exception:  # noqa: BLE001 - syntax only `regex` knows (duplicate names, ...)
        return False
    sure: set[int] = set()
    todo = [list(parsed)]
    while todo:
        for op, av in todo.pop():
            if op is sre.SUBPATTERN:
                if av[0] is not None:
                    sure.add(av[0])
                todo.append(list(av[3]))
    return set(parsed.state.groupdict.values()) <= sure


#: At most this many heads per pattern (literal_heads): past it the pattern is not worth the check.
_MAX_HEADS = 32


def literal_heads(pattern: str, flags: int = regex.DOTALL) -> tuple[str, ...] | None:
    """Texts one of which every match of ``pattern`` starts with (a zero-width match: the text its lookahead
    needs), each non-empty; None where that is not known (a match may start with a class, a repeat, an
    assertion; case ignored; ``regex``-only syntax). A run of text that holds none of them whole holds no
    complete match, and one that is a proper prefix of one of them may still become a match."""
    items = _literal_items(pattern, flags)
    heads = None if items is None else _heads(items)
    return None if not heads or "" in heads or len(heads) > _MAX_HEADS else tuple(sorted(heads))


def _heads(items: list[Any]) -> set[str] | None:
    """The literal texts the matches of a parsed sequence start with, as far as each is known ("": one may
    start with text that is not known)."""
    if not items:
        return {""}
    op, av = items[0]
    rest = items[1:]
    if op is sre.LITERAL:
        after = _heads(rest)
        return None if after is None else {chr(av) + h for h in after}
    if op is sre.SUBPATTERN:
        return None if av[1] else _heads(list(av[-1]) + rest)  # (inline flags: give up)
    if op is sre.BRANCH:
        union: set[str] = set()
        for alternative in av[1]:
            found = _heads(list(alternative) + rest)
            if found is None or len(union | found) > _MAX_HEADS:
                return None
            union |= found
        return union
    if op in _ANY_REPEAT and av[1] == 1:  # (an optional item: with it or without it)
        body = list(av[2])
        with_it = _heads(body + rest) if av[0] <= 1 else None
        without = _heads(rest) if av[0] == 0 else set()
        return None if with_it is None or without is None else with_it | without
    if op is sre.ASSERT and av[0] == 1:  # a lookahead: the text at the match is what it needs
        return _heads(list(av[1]))
    return {""}  # (a class, a repeat, an anchor, ...: what follows is not one known text)


def space_then_chars(pattern: str, flags: int = regex.DOTALL) -> tuple[tuple[str, ...], int] | None:
    """For a pattern every match of which is a run of whitespace then one of a few known texts (``\\s{0,64};``,
    ``(?:\\s{0,64};|[ \\t]{0,64}\\n)``, ``\\s{0,8}to=``; at least one character each): those texts and the
    run's longest length (``UNBOUNDED``), or None (not such a pattern, or not a small known set).

    A chunk without any of their first characters cannot hold the rest of a match: only a whitespace run at
    its end can start one, which the session's fast path holds back (as for a leading ``\\s*`` before
    literals); and a search finds a match by those texts first (delimiters.search_spaced), where the regex
    engine would try a match at every whitespace character."""
    items = _literal_items(pattern, flags)
    found = None if items is None else _space_then(items)
    return None if found is None or not found[1] else (tuple(sorted(found[0])), found[1])


def _space_then(items: list[Any]) -> tuple[set[str], int] | None:
    """(the texts after a leading whitespace run, the run's longest length) of a parsed sequence."""
    if not items:
        return None
    op, av = items[0]
    rest = items[1:]
    if op in (sre.ASSERT, sre.ASSERT_NOT) and av[0] == -1:  # a lookbehind reads no character of the match
        return _space_then(rest)
    if op in _ANY_REPEAT and _spaces_only(list(av[2])):
        after = _texts(rest)
        return None if after is None else (after, UNBOUNDED if av[1] >= sre.MAXREPEAT else int(av[1]))
    if op is sre.SUBPATTERN:
        return None if av[1] else _space_then(list(av[-1]) + rest)  # (inline flags: give up)
    if op is sre.BRANCH:
        union: set[str] = set()
        lead = 0
        for alternative in av[1]:
            found = _space_then(list(alternative) + rest)
            if found is None or len(union | found[0]) > _MAX_HEADS:
                return None
            union |= found[0]
            lead = max(lead, found[1])
        return union, lead
    texts = _texts(items)
    return None if texts is None else (texts, 0)


def _texts(items: list[Any]) -> set[str] | None:
    """Texts one of which every match of a parsed sequence starts with: its literal heads (``_heads``) where
    each is known, else its first characters."""
    heads = _heads(items)
    return heads if heads and "" not in heads and len(heads) <= _MAX_HEADS else _firsts(items)


def required_text(pattern: str, flags: int = regex.DOTALL) -> tuple[str, int] | None:
    """The longest literal text every match of ``pattern`` reads (a lookahead's text too), with the furthest
    place after the match's start it may begin at; None where there is none at a bounded place. A search
    skips to where that text is (delimiters.search_spaced: a flood without it holds no match)."""
    items = _literal_items(pattern, flags)
    found = [] if items is None else [(text, at) for text, at in _required(items, 0) if at < UNBOUNDED]
    return max(found, key=lambda f: len(f[0]), default=None)


def _required(items: list[Any], offset: int) -> list[tuple[str, int]]:
    """The literal texts a parsed sequence that starts at most ``offset`` characters after the match's start
    always reads, each with the furthest place it may begin at."""
    out: list[tuple[str, int]] = []
    text, at = "", offset
    for op, av in items:
        if op is sre.LITERAL:
            if not text:
                at = offset
            text += chr(av)
            offset += 1
            continue
        if text:
            out.append((text, at))
            text = ""
        if op is sre.ASSERT and av[0] == 1:  # a lookahead reads its text from here, and consumes none
            out += _required(list(av[1]), offset)
            continue
        if op is sre.SUBPATTERN and not av[1]:
            out += _required(list(av[-1]), offset)
        elif op in _ANY_REPEAT and av[0] >= 1:  # (its first pass)
            out += _required(list(av[2]), offset)
        offset += _item_width(op, av)
        if offset >= UNBOUNDED:
            return out
    if text:
        out.append((text, at))
    return out


def behind_texts(pattern: str, flags: int = regex.DOTALL) -> tuple[str, ...] | None:
    """For a pattern that is only a lookbehind of literal texts (``(?<=\\)\\])``, a zero-width match right after
    one of them): those texts, or None. str.find finds them; the regex module tries every position."""
    items = _literal_items(pattern, flags)
    if not items or len(items) != 1 or items[0][0] is not sre.ASSERT or items[0][1][0] != -1:
        return None
    texts = _exact_texts(list(items[0][1][1]))
    return None if not texts or "" in texts or len(texts) > _MAX_HEADS else tuple(sorted(texts))


def _exact_texts(items: list[Any]) -> set[str] | None:
    """The texts a parsed sequence of literals, groups and alternatives of them matches, or None."""
    out = {""}
    for op, av in items:
        if op is sre.LITERAL:
            out = {text + chr(av) for text in out}
            continue
        if op is sre.SUBPATTERN and not av[1]:
            alternatives = [list(av[-1])]
        elif op is sre.BRANCH:
            alternatives = [list(alternative) for alternative in av[1]]
        else:
            return None
        found: set[str] = set()
        for alternative in alternatives:
            texts = _exact_texts(alternative)
            if texts is None:
                return None
            found |= texts
        out = {text + tail for text in out for tail in found}
        if len(out) > _MAX_HEADS:
            return None
    return out


def _spaces_only(body: list[Any]) -> bool:
    """Whether a repeated item reads whitespace only: ``\\s``, or a set or one of whitespace characters."""
    if len(body) != 1:
        return False
    op, av = body[0]
    if op is sre.LITERAL:
        return is_regex_space(chr(av))
    return op is sre.IN and all(item == (sre.CATEGORY, sre.CATEGORY_SPACE)
                                or item[0] is sre.LITERAL and is_regex_space(chr(item[1])) for item in av)


def _firsts(items: list[Any], past_start: bool = False) -> set[str] | None:
    """First characters of a parsed sequence whose first item always consumes one, else None. ``past_start``:
    of its matches that do not start at the text's start (an alternative that begins with ``^`` or ``\\A``
    has none)."""
    if not items:
        return None
    op, av = items[0]
    if op is sre.AT:
        return set() if past_start and av in (sre.AT_BEGINNING, sre.AT_BEGINNING_STRING) else None
    if op is sre.LITERAL:
        return {chr(av)}
    if op is sre.IN:
        out: set[str] = set()
        for item_op, item_av in av:
            if item_op is sre.LITERAL:
                out.add(chr(item_av))
            elif item_op is sre.RANGE and item_av[1] - item_av[0] < 64:
                out.update(map(chr, range(item_av[0], item_av[1] + 1)))
            else:
                return None  # negated sets, categories, wide ranges
        return out
    if op is sre.SUBPATTERN:
        return None if av[1] else _firsts(list(av[-1]), past_start)  # inline flags: give up
    if op is getattr(sre, "ATOMIC_GROUP", None):
        return _firsts(list(av), past_start)
    if op is sre.BRANCH:
        union: set[str] = set()
        for alternative in av[1]:
            found = _firsts(list(alternative), past_start)
            if found is None:
                return None
            union |= found
        return union
    if op in _ANY_REPEAT:
        inner = _firsts(list(av[2]), past_start)
        if inner is None or av[0] >= 1:
            return inner
        rest = _firsts(items[1:], past_start)  # (an optional item: a match may start with what follows it)
        return None if rest is None else inner | rest
    if op is sre.ASSERT and av[0] == 1:  # a lookahead: the character at the match is one its text starts with
        return _firsts(list(av[1]), past_start)
    return None


def last_char(pattern: str, flags: int = regex.DOTALL) -> str | None:
    """The literal character every match of ``pattern`` ends with, or None when there is no such one.
    A match can only complete in text that holds it (the tool streamer rescans only then)."""
    items = _literal_items(pattern, flags)
    while items:
        op, av = items[-1]
        if op is sre.LITERAL:
            return chr(av)
        if op is not sre.SUBPATTERN or av[1]:
            return None
        items = list(av[-1])  # (a group without inline flags ends where its last item does)
    return None


def required_tail(pattern: str, flags: int = regex.DOTALL) -> str | None:
    """The last run of literal text (3 characters or more where there is one) that every match of
    ``pattern`` contains, or None: no match can complete before it appears, so the tool streamer waits
    for it instead of retrying a pattern whose lazy ``.*?`` runs to the end of a long body each time."""
    items = _literal_items(pattern, flags)
    if items is None:
        return None
    runs, current = [], ""
    for op, av in items:  # (top level only: a group's literals may belong to one alternative)
        if op is sre.LITERAL:
            current += chr(av)
        else:
            runs.append(current)
            current = ""
    runs = [r for r in [*runs, current] if r]
    if not runs:
        return None
    return next((r for r in reversed(runs) if len(r) >= 3), runs[-1])


# ---------------------------------------------------------------------------- rewriting the source
def _source_tokens(pattern: str) -> Iterator[tuple[int, str, bool]]:
    """(offset, token, inside a character class) for each token of ``pattern``: an escape, a class
    opener with the ``^`` and ``]`` right after it (``[``, ``[^``, ``[]``, ``[^]``: that ``]`` is a
    member), or one character. The flag is False for an opener and True for its closing ``]``."""
    i, n, in_class = 0, len(pattern), False
    while i < n:
        ch, inside = pattern[i], in_class
        if ch == "\\":
            tok = pattern[i:i + 2]
        elif in_class:
            tok = ch
            in_class = ch != "]"
        elif ch == "[":
            j = i + 1
            if pattern.startswith("^", j):
                j += 1
            if pattern.startswith("]", j):
                j += 1
            tok = pattern[i:j]
            in_class = True
        else:
            tok = ch
        yield i, tok, inside
        i += len(tok)


def _is_anchor(tok: str) -> bool:
    """Whether a token outside a class is a zero-width anchor (``^ $ \\A \\Z \\z \\b \\B \\G``)."""
    return tok in ("^", "$") or len(tok) == 2 and tok[0] == "\\" and tok[1] in "AZzbBG"


def regex_atoms(pattern: str) -> list[tuple[str, str]]:
    """``pattern`` cut into (kind, text) atoms: "escape" (a backslash and one character), "class" (a whole
    ``[...]``) or "char"; enough to find assertions and a trailing repeat without a full parser (the tokens of
    :func:`_source_tokens`, a class's joined into one)."""
    out: list[tuple[str, str]] = []
    members: list[str] | None = None
    for _, tok, inside in _source_tokens(pattern):
        if members is not None:
            members.append(tok)
            if tok == "]":
                out.append(("class", "".join(members)))
                members = None
        elif tok.startswith("[") and not inside:
            members = [tok]
        else:
            out.append(("escape" if len(tok) == 2 and tok[0] == "\\" else "char", tok))
    if members is not None:  # (a class the pattern never closes)
        out.append(("class", "".join(members)))
    return out


def strip_anchors(pattern: str) -> str:
    """``pattern`` without zero-width anchors (``^ $ \\A \\Z \\b ...``), which automata libraries lack.

    The result matches a superset of the original; it is only used to guess how a live path continues,
    and the guess is then checked against the real pattern.
    """
    return "".join(tok for _, tok, inside in _source_tokens(pattern) if inside or not _is_anchor(tok))


def trailing_lookahead_as_text(pattern: str) -> str | None:
    """``X(?:Y)`` for a pattern ``X(?=Y)`` whose only lookaround is that lookahead at its very end; None
    for any other pattern."""
    depth, last_top, last_close = 0, -1, -1
    for i, tok, inside in _source_tokens(pattern):
        if inside:
            continue
        if tok == "(":
            if depth == 0:
                last_top = i
            depth += 1
        elif tok == ")":
            depth -= 1
            if depth == 0:
                last_close = i
    # the last top-level group is a lookahead and it closes at the very end
    if last_top == -1 or not pattern.startswith("(?=", last_top) or last_close != len(pattern) - 1:
        return None
    head, tail = pattern[:last_top], pattern[last_top + 3:]
    if any(mark in head or mark in tail for mark in ("(?=", "(?!", "(?<")):
        return None
    return f"{head}(?:{tail}"


# ---------------------------------------------------------------------------- `\s*literal` patterns
# What the regex module's \s matches (str.isspace() also accepts \x1c-\x1f, which \s does not).
_NOT_REGEX_SPACE = frozenset("\x1c\x1d\x1e\x1f")
_ESCAPE_CHARS = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v"}


def is_regex_space(ch: str) -> bool:
    """Whether the regex module's ``\\s`` matches the character ``ch``."""
    return ch.isspace() and ch not in _NOT_REGEX_SPACE


def literal_alternatives(pattern: str) -> tuple[bool, tuple[str, ...], bool] | None:
    """Recognise ``\\s*(?:lit1|lit2)\\s*`` (each ``\\s*`` optional): (leading, literals, trailing), else
    None. Such a pattern is searched with ``str.find`` and a whitespace walk (see ``RegexMatcher``)."""
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
            if not current or leading and is_regex_space(current[0][0]):
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


# ---------------------------------------------------------------------------- backtracking
def backtracking_risk(pattern: str, flags: int = regex.DOTALL) -> tuple[str | None, bool, bool]:
    """(why the pattern is refused, or None; whether its searches need a limit; whether one match attempt
    does, where a search may only read text again from each start): see
    :mod:`grammar_parse._engine.regex_safety`. Patterns whose ambiguity is polynomial (``.*?\\S.*?``) are
    accepted with a limit; exponential, high-degree, redundant and oversized ones are refused."""
    found = refusal(pattern, flags)
    if found is not None:
        return found.reason, True, True
    profile = analyse(pattern, flags)
    return None, not profile.linear or profile.rescans, not profile.linear


def spellings(items: object, limit: int = 256) -> list[str]:
    """The usual spellings of a short regex: each whitespace run written as nothing or one space, each
    optional group left out or written ([] when there are more than ``limit``, or a part varies otherwise)."""
    c = sre
    out = [""]
    for op, av in items:  # type: ignore[attr-defined]
        if op is c.LITERAL:
            choices = [chr(av)]
        elif op is c.SUBPATTERN:
            choices = spellings(av[3], limit)
        elif op is c.BRANCH:
            choices = [t for branch in av[1] for t in spellings(branch, limit)]
        elif op in (c.MAX_REPEAT, c.MIN_REPEAT) and av[0] == 0 and len(av[2]) == 1 and av[2][0][0] is c.IN \
                and av[2][0][1] == [(c.CATEGORY, c.CATEGORY_SPACE)]:
            choices = ["", " "]
        elif op in (c.MAX_REPEAT, c.MIN_REPEAT) and (av[0], av[1]) == (0, 1):
            choices = ["", *spellings(av[2], limit)]
        else:
            return []
        if not choices or len(out) * len(choices) > limit:
            return []
        out = [a + b for a in out for b in choices]
    return out


__all__ = ["REPEAT_OPS", "UNBOUNDED", "PatternShape", "always_captured", "backtracking_risk", "behind_texts", "first_chars", "space_then_chars", "is_regex_space", "last_char",
           "literal_alternatives", "literal_heads", "pattern_shape", "regex_atoms", "required_tail", "required_text", "spellings", "strip_anchors", "trailing_lookahead_as_text",
           "unnamed"]
