"""Every built-in delimiter regex is searched in linear time on a flood of the text that hurts it.

A backtracking search tries each start position; a pattern costs a run's length at every start when
(a) its match can begin with an unbounded repeat (``(?=\\s*\\{)``, ``[^<]*<tag>``: every character of a
whitespace flood is a start, and each scans to the flood's end), or (b) after its literal head, an
unbounded repeat can run over every character of that head (``<parameter=[^>\\n]+>`` on a flood of
``<parameter=path``: each occurrence scans to the end). Written as a static rule over the grammars, since
tests do not time things; ``benchmarks/bench_hostile.py`` measures the cost per MB.

``\\s*literal\\s*`` forms are exempt: the engine finds them with ``str.find`` (``RegexMatcher.lowered``).
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from typing import Any

import regex

import pytest

import grammar_parse as gp
from grammar_parse._engine.delimiters import RegexMatcher
from grammar_parse._engine.regex_safety import RegexSafetyError, analyse
from grammar_parse._engine.regex_safety import sre as _sre
from grammar_parse._engine.regex_safety import sre_parse as _sre_parse
from grammar_parse._engine.regex_shape import unnamed as _unnamed

UNBOUNDED = _sre.MAXREPEAT


def leading_unbounded(items: list) -> bool:
    """Whether a match can start inside an unbounded repeat (looking through a leading lookahead,
    group or optional part)."""
    for op, av in items:
        if op in (_sre.MAX_REPEAT, _sre.MIN_REPEAT):
            lo, hi, sub = av
            if hi == UNBOUNDED or leading_unbounded(list(sub)):
                return True
            if lo > 0:
                return False
            continue  # an optional part: what follows can start the match too
        if op is _sre.SUBPATTERN:
            if leading_unbounded(list(av[-1])):
                return True
            return False
        if op is _sre.ASSERT and av[0] == 1:  # a lookahead: its text starts the match too
            return leading_unbounded(list(av[1]))
        if op is _sre.BRANCH:
            return any(leading_unbounded(list(b)) for b in av[1])
        if op in (_sre.AT, _sre.ASSERT_NOT, _sre.ASSERT):
            continue  # zero-width
        return False
    return False


def class_chars(item) -> tuple[bool, set[str]] | None:
    """(negated, literal characters) of a one-character item, None for ANY / a category-only class."""
    op, av = item
    if op is _sre.LITERAL:
        return False, {chr(av)}
    if op is _sre.ANY:
        return None
    if op is _sre.IN:
        negated = bool(av) and av[0][0] is _sre.NEGATE
        chars = {chr(a) for o, a in av if o is _sre.LITERAL}
        for o, a in av:
            if o is _sre.RANGE:
                chars.update(chr(c) for c in range(a[0], min(a[1], a[0] + 256) + 1))
        categories = [a for o, a in av if o is _sre.CATEGORY]
        if categories and negated:
            return None if any(c not in (_sre.CATEGORY_SPACE, _sre.CATEGORY_LINEBREAK) for c in categories) \
                else (True, chars)
        return negated, chars
    return False, set()


def runs_over(items: list, head: str) -> list[str]:
    """The unbounded repeats in ``items`` whose one-character body matches every character of ``head``
    (so a run can cross a whole occurrence of it: one that excludes any of them stops there)."""
    found = []
    for op, av in items:
        if op in (_sre.MAX_REPEAT, _sre.MIN_REPEAT):
            lo, hi, sub = av
            sub = list(sub)
            if hi == UNBOUNDED and len(sub) == 1:
                chars = class_chars(sub[0])
                if chars is None or all((c not in chars[1]) if chars[0] else (c in chars[1]) for c in head):
                    found.append(repr(sub[0])[:60])
            found += runs_over(sub, head)
        elif op is _sre.SUBPATTERN:
            found += runs_over(list(av[-1]), head)
        elif op is _sre.BRANCH:
            for b in av[1]:
                found += runs_over(list(b), head)
    return found


def problems(pattern: str, flags: int, shortest_head: int = 2) -> list[str]:
    parsed = list(_sre_parse.parse(_unnamed(regex.sub(r"\\[pP]\{[^}]*\}", "A", pattern)), flags & 0xFFFF))
    out = []
    if leading_unbounded(parsed):
        out.append("a match can start inside an unbounded repeat")
    head = ""
    for op, av in parsed:
        if op is not _sre.LITERAL:
            break
        head += chr(av)
    if len(head) >= shortest_head:
        out += [f"after {head!r}, {r} can run over {head[0]!r}" for r in runs_over(parsed[len(head):], head)]
    return out


def delimiter_regexes() -> list[tuple[str, str, RegexMatcher]]:
    out = []
    for name in sorted(gp.list_grammars()):
        for term in gp.load_grammar(name).terminals.values():
            m = term.matcher
            if isinstance(m, RegexMatcher) and m.lowered is None:
                out.append((name, term.name, m))
    return out


REGEXES = delimiter_regexes()


@pytest.mark.parametrize("name, terminal, matcher", REGEXES, ids=[f"{n}-{t}" for n, t, _ in REGEXES])
def test_delimiter_regex_searches_in_linear_time(name, terminal, matcher):
    # (a one-character head too: mimo's ``<[ \t]{0,8}parameter...(?P<key>[^>\s]+)`` let its key run hold
    # another ``<parameter=``, 75 s on 176 KB; the engine would search such a pattern under a limit)
    assert problems(matcher.pattern, matcher.flags, shortest_head=1) == []


@pytest.mark.parametrize("pattern, bad", [
    (r"(?=\s*\{)", True), (r"[^<]*<tag>", True), (r"(?:<a>)?[^<]*<b>", True), (r"<p=(?P<k>[^>\n]+)>", True),
    (r"<c>.*?<m>", True), (r"(?=\{)", False), (r"<p=(?P<k>[^<>\n]+)>", False), (r"(?:<a>[^<]*)?<b>", False),
    (r"\s{0,8}to=", False), (r"(?:</f>\s*)?</t>", False), (r"<i\s{1,8}n=(?P<n>[^\"'<>\s]+)>", False), (r"to=f\.(?P<n>[^\s<]+)\s*<c>", True),
    (r"to=f\.(?P<n>[^\s<=]+)\s*<c>", False),
])
def test_the_rule_tells_linear_patterns_from_quadratic_ones(pattern, bad):
    assert bool(problems(pattern, regex.DOTALL)) is bad


# ---------------------------------------------------------------------------- the package's own regexes
#: Modules whose regexes run over model output, requests or templates (the integrations need their engines).
_OWN_MODULES = sorted(m.name for m in pkgutil.walk_packages(gp.__path__, "grammar_parse.")
                      if ".integrations." not in m.name and not m.name.endswith("__main__"))
#: Patterns the analysis finds polynomial, each with why that is bounded where it runs.
_POLYNOMIAL_KNOWN = {
    ("grammar_parse.templates._chat_template", "_PERCENT_SPEC"): "a template's own format string, size-limited",
}


def _own_patterns() -> list[tuple[str, str, Any]]:
    found = []
    for name in _OWN_MODULES:
        module = importlib.import_module(name)
        for attribute, value in vars(module).items():
            if isinstance(value, (re.Pattern, regex.Pattern)) and isinstance(value.pattern, str):
                found.append((name, attribute, value))
    return found


def test_the_packages_own_regexes_cannot_backtrack_away() -> None:
    """Every regex the package compiles at import (the wire filter's, the readers', the templates') is one the
    backtracking analysis accepts, and none is polynomial but the few listed with why. The wire filter's string
    run once read a run inside a repeat (``(?:[^"\\\\]+|...)*``): a key of 40 ``[`` and a lone surrogate
    never finished its fullmatch."""
    patterns = _own_patterns()
    assert len(patterns) >= 50  # (the walk finds them: a broken walk cannot pass)
    for module, attribute, compiled in patterns:
        flags = compiled.flags & (re.I | re.M | re.S | re.X)
        try:
            profile = analyse(compiled.pattern, flags)
        except RegexSafetyError as e:
            raise AssertionError(f"{module}.{attribute}: {e}") from None
        assert profile.degree == 0 or (module, attribute) in _POLYNOMIAL_KNOWN, (module, attribute, profile)
