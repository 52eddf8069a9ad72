"""The linear-time matcher: the matches of Python's re (spans and groups, search, finditer and sub), in
time linear in the text where the regex module backtracks for ever.

Its cost is counted, not timed (``linear_steps``; ``benchmarks/`` measures seconds)."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance import load
from grammar_parse._engine.linear_regex import BoundedRegex, LinearRegex, _Runner

#: Most steps ``linear_steps`` lets one call take before it stops it (a guard: a matcher that stopped
#: remembering what failed runs for ever on the runaways below).
STEP_GUARD = 5_000_000


class _TooManySteps(BaseException):
    """Raised inside the matcher when it passes its step limit (a BaseException: no handler of the
    library's may swallow it)."""


def linear_steps(run: Callable[[], Any], limit: float = STEP_GUARD, memo: bool = True) -> tuple[int, Any]:
    """(steps, result) of ``run()``: the steps are the linear matcher's runs (one per start, lookaround
    and atomic body) and its look-ups of a (choice point, position) pair, whose table is what keeps it
    linear; between two such steps it executes at most its program's length in instructions.

    More than ``limit`` steps fail the test there. ``memo=False`` makes the matcher forget every failure
    (and lookaround result): it is then a plain backtracking matcher trying paths in the regex module's
    order, whose steps stand for the regex module's (its own cannot be counted)."""
    steps = 0

    def step() -> None:
        nonlocal steps
        steps += 1
        if steps > limit:
            raise _TooManySteps

    class Table(dict[Any, int]):  # the failed pairs of one program, dense (a bytearray) in the library
        def __getitem__(self, key: Any) -> int:
            step()
            return self.get(key, 0)

        def __setitem__(self, key: Any, value: int) -> None:
            if memo:
                super().__setitem__(key, value)

    class Tables(dict[int, Table]):
        def get(self, key: int, default: Any = None) -> Table:
            return self.setdefault(key, Table())

    class States(set[Any]):  # the failed states of a program whose outcome depends on its captures
        def __contains__(self, key: object) -> bool:
            step()
            return super().__contains__(key)

        def add(self, key: Any) -> None:
            if memo:
                super().add(key)

    class StateTables(dict[int, States]):
        def setdefault(self, key: int, default: Any = None) -> States:
            if key not in self:
                self[key] = States()
            return self[key]

    class Looks(dict[Any, Any]):
        def __contains__(self, key: object) -> bool:
            return memo and super().__contains__(key)

    init, original_run = _Runner.__init__, _Runner.run

    def counted_init(self: _Runner, *args: Any) -> None:
        init(self, *args)
        self.failed, self.failed_states, self.looks = Tables(), StateTables(), Looks()

    def counted_run(self: _Runner, *args: Any, **kwargs: Any) -> Any:
        step()
        return original_run(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_Runner, "__init__", counted_init)
        patch.setattr(_Runner, "run", counted_run)
        try:
            result = run()
        except _TooManySteps:
            pytest.fail(f"the linear matcher took more than {limit:.0f} steps")
    return steps, result

# One pattern per construct the matcher implements, and a few that combine them.
CONSTRUCTS = [
    r"abc", r"a.c", r"(?-s:a.c)", r"[a-c]+", r"[^a\n]*x", r"\d+\.\d*", r"\w+\s\W", r"(?i)AbC[x-z]", r"(?i:k)",
    r"a|ab|abc", r"(a|ab)(c|bcd)(d*)", r"(a+?)(b*)", r"a{2,4}", r"a{2,4}?b", r"(?:ab){0,3}c", r"x{3}",
    r"(a?)*b", r"(a|)*b", r"(a*)+b", r"(?:(a)|b)*", r"(a)|b", r"(?:x(a)?)*", r"x*", r"\b|x", r"\Bb",
    r"^a$", r"(?m)^a$", r"\Aa|b\Z", r"a$", r"(?=(a))a", r"a(?!b)", r"(?<=ab)c", r"(?<!a)b", r"(?<=a|b)c",
    r"(\w+)\s\1", r"(?P<q>['\"]).*?(?P=q)", r"(?i)(a)\1", r"(a)?(?(1)b|c)", r"(?P<k>\w)=(?P<v>[^,]*)",
    r"<(\w+)>(.*?)</\1>", r"(?:(?!</t>).)*</t>", r"\s*(.*?)\s*$", r".*?\S.*?x", r"[\s\S]*?\n\s*y",
]


@lru_cache(maxsize=None)
def linear(pattern):
    return LinearRegex(pattern)


def _outcomes(compiled, text):
    found = compiled.search(text)
    return (found and (found.span(), found.groups()),
            [(m.span(), m.groups(), m.groupdict()) for m in compiled.finditer(text)])


TEXT = st.lists(st.sampled_from(["a", "b", "c", "x", "y", "k", "K", " ", "\n", "ab", "<t>", "</t>", "=", ",", "'",
                                 '"', "1", ".", "A", "é"]), max_size=14).map("".join)


@pytest.mark.parametrize("pattern", CONSTRUCTS)
@given(text=TEXT)
def test_same_matches_as_python_re(pattern, text):
    assert _outcomes(linear(pattern), text) == _outcomes(re.compile(pattern, re.DOTALL), text)


@pytest.mark.parametrize("pattern, repl", [(r"<(\w)>(.*?)</\1>", r"[\2|\g<1>]"), (r"x*", "-"), (r"(a)|b", r"<\1>"),
                                           (r"(?P<n>\d+)", r"\g<n>\n\\")])
@given(text=TEXT)
def test_substitutions_as_python_re(pattern, repl, text):
    assert linear(pattern).sub(repl, text) == re.sub(pattern, repl, text, flags=re.DOTALL)
    assert BoundedRegex(pattern).sub(repl, text, 0.0) == re.sub(pattern, repl, text, flags=re.DOTALL)


def _corpus_patterns():
    out = set()

    def walk(node):
        if isinstance(node, dict):
            for key in ("x-regex", "x-regex-iterator", "x-regex-key-value"):
                if isinstance(node.get(key), str):
                    out.add(node[key])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for case in load("transformers_legacy_xregex.json") + load("transformers_model_templates.json"):
        if case["format"] == "legacy_xregex":
            walk(case["template"])
    return sorted(out)


CORPUS = _corpus_patterns()
PIECES = st.lists(st.sampled_from(["<think>", "</think>", "\n", " ", "word", "<tool_call>", "</tool_call>",
                                   '{"name": "f", "arguments": {"a": 1}}', "<|im_end|>", "<|channel|>", "final",
                                   "analysis", "<|message|>", "<|end|>", "<|call|>", "commentary", " to=functions.f",
                                   "<function=f>", "<parameter=k>", "</parameter>", "</function>", "call:f{a:1}",
                                   "<|START_RESPONSE|>", "<|END_RESPONSE|>", "x"]), max_size=10).map("".join)


@pytest.mark.parametrize("pattern", CORPUS, ids=[p[:40] for p in CORPUS])
@given(text=PIECES)
def test_corpus_patterns_match_as_python_re(pattern, text):
    assert _outcomes(linear(pattern), text) == _outcomes(re.compile(pattern, re.DOTALL), text)


# (pattern, text): the regex module takes seconds to hours on each (exponential or high-degree ambiguity)
RUNAWAYS = [
    (r"(a+)+b", "a" * 5_000),
    (r"(a|a)*b", "a" * 5_000),
    (r"(.*?,){11}P", "," * 2_000),
    (r"(\w+\s?)*$", "word " * 1_000 + "!"),
    (r"<parameter=(?P<key>\w+)>\s*(?P<value>.*?)\s*</parameter>", "<parameter=a>" + " " * 5_000 + "x"),
    (r"<t>(.*?)</t>", "<t>" * 5_000),
]


@pytest.mark.parametrize("pattern, text", RUNAWAYS, ids=[p for p, _ in RUNAWAYS])
def test_linear_time_where_the_regex_module_runs_away(pattern, text):
    matcher = LinearRegex(pattern)
    small, _ = linear_steps(lambda: list(matcher.finditer(text)))
    large, _ = linear_steps(lambda: list(matcher.finditer(text * 4)), limit=4.4 * small)
    assert 0 < small and large <= 4.4 * small, (small, large)  # (4x the text: 4x the steps, not 16x)


class _PastItsLimit:
    """A compiled pattern of the regex module whose every limited search runs past its limit, as ``(a+)+b``
    does on a long run of a's: the hand-over happens whatever the machine's speed."""

    def __init__(self, compiled: Any) -> None:
        self.compiled = compiled

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.compiled, name)

        def timed_out(*args: Any, timeout: float | None = None, **kwargs: Any) -> Any:
            if timeout is not None:
                raise TimeoutError("regex timed out")
            return method(*args, **kwargs)
        return timed_out


def test_bounded_regex_hands_over_with_the_same_matches(monkeypatch):
    bounded = BoundedRegex(r"(a+)+b")
    text = "a" * 12 + "b" + "a" * 12  # (short: Python's re takes 2^n steps after the b)
    expected = [m.span() for m in re.finditer(r"(a+)+b", text)]
    # (a limit of zero hands every search over at once)
    assert [m.span() for m in bounded.finditer(text, 0.0)] == expected
    # a search past its limit (the regex module alone: past a second on 5,000 a's) hands over too
    monkeypatch.setattr(bounded, "compiled", _PastItsLimit(bounded.compiled))
    assert [m.span() for m in bounded.finditer(text, 0.05)] == expected
    assert bounded.search(text, 0.05).span() == expected[0]
    steps, found = linear_steps(lambda: bounded.search("a" * 5_000, 0.05))
    assert found is None and steps > 0  # (steps: the linear matcher gave the answer)
    small, _ = linear_steps(lambda: bounded.search("a" * 1_000, 0.05))
    large, _ = linear_steps(lambda: bounded.search("a" * 4_000, 0.05), limit=4.4 * small)
    assert 0 < small and large <= 4.4 * small, (small, large)  # (4x the text: 4x the steps)


def _regex_partial(compiled, text, pos):
    """What the streaming scanner asks the regex module: where a partial match starts (asked only where
    there is no complete one), whether the text at ``pos`` is one, and the first start of a live path."""
    n = len(text)
    found = compiled.search(text, pos, partial=True) if compiled.search(text, pos) is None else None
    partial_search = -1 if found is None or found.start() >= n else found.start()
    at = compiled.match(text, pos, partial=True)
    wants_more = at is not None and at.partial and compiled.match(text, pos) is None
    alive = next((s for s in range(pos, n) if compiled.fullmatch(text, s, partial=True) is not None), -1)
    return partial_search, wants_more, alive


def _linear_partial(matcher, text, pos):
    wants_more = matcher.wants_more(text, pos) and matcher.match(text, pos) is None
    partial_search = matcher.partial_search(text, pos) if matcher.search(text, pos) is None else -1
    return partial_search, wants_more, matcher.first_alive(text, pos, len(text))


# (anchors and lookaheads at the end of the text count as wanting more, and the regex module says a
# lookbehind at the start of the text may still match; with a lazy repeat it reports partial matches that
# cannot complete (`a+?b` on "ac" at 0, `a{2,4}?b` on "aac" at 0), where the linear matcher is exact:
# those are left out here)
PARTIAL_CONSTRUCTS = [p for p in CONSTRUCTS if not any(a in p for a in ("$", "\\b", "\\B", "\\Z", "(?=", "(?!", "(?<"))
                      and not re.search(r"[*+?}]\?", p)]


@pytest.mark.parametrize("pattern", PARTIAL_CONSTRUCTS)
@given(text=TEXT, cut=st.integers(0, 3))
def test_partial_matches_as_the_regex_module(pattern, text, cut):
    """The streaming questions (partial search, partial match, a live path to the end) answered as the
    regex module answers them with ``partial=True``, so a hand-over cannot change what is held."""
    import regex

    pos = min(cut, len(text))
    assert _linear_partial(linear(pattern), text, pos) == _regex_partial(regex.compile(pattern, regex.DOTALL), text, pos)


def test_partial_matches_of_the_built_in_limited_patterns():
    """Every built-in delimiter pattern that searches under a limit (it could backtrack) answers the
    streaming questions the same way in the linear matcher, on texts cut from its own matches."""
    import random

    from goldens import goldens
    from grammar_parse._engine.delimiters import RegexMatcher
    from grammar_parse._engine.library import list_grammars, load_grammar

    matchers = {}
    for name in list_grammars():
        for info in load_grammar(name).tables.states.values():
            for _, matcher, *_ in info.scanner.entries:
                if isinstance(matcher, RegexMatcher) and matcher.limit:
                    matchers[matcher.pattern] = matcher
    assert len(matchers) >= 20
    from test_repairs import CASES as REPAIRS  # (a repair's opener matches only the glitch it repairs)

    texts = [g.text for name in list_grammars() for g in goldens(name)] + [case[2] for case in REPAIRS]
    rng = random.Random(12)
    checked = 0
    for pattern, matcher in matchers.items():
        found = [m.group(0) for text in texts for m in matcher.compiled.finditer(text)]
        assert found, pattern
        pieces = found + sorted(set("".join(found))) + [" ", "\n", "<", "x"]
        for _ in range(60):
            text = "".join(rng.choice(pieces)[:rng.randint(0, 30)] for _ in range(rng.randint(1, 6)))
            for pos in {0, len(text) // 2}:
                assert _linear_partial(matcher.linear, text, pos) == _regex_partial(matcher.compiled, text, pos), \
                    (pattern, text, pos)
                expected = matcher.compiled.search(text, pos)
                got = matcher.linear.search(text, pos)
                assert (got and (got.span(), got.groupdict())) == (expected and (expected.span(), expected.groupdict()))
                checked += 1
    assert checked > 1000
