"""The compiled walk (grammar_parse._engine.generated) against the walk it is compiled from, for every built-in
grammar.

The specialised one-shot parser's configs are first worked out by the generic walk on every output, then
written out as one function; each output is parsed again with it. The message, the discarded spans and the
session's events (a fresh parser's finalize with the call events; also without them in the deep profile)
must be the walk's, and the
parser must decline exactly where the walk declines. test_specialised holds the walk equal to the session,
so this makes the compiled walk the session's too. The share of outputs it reads to the end is held, so
that a change which makes it hand every output back cannot pass for exact; so is the rule that the source
holds no text a grammar wrote.
"""

from __future__ import annotations

import re
import warnings
from typing import Any

import pytest

import grammar_parse
from conformance import strict_equal
from grammar_parse._engine import generated, oneshot, session
from grammar_parse._engine.delimiters import RegexMatcher
from grammar_parse._engine.scanner import search_key
from grammar_parse._engine.tools import ToolTypes
from test_specialised import DEEP, GRAMMARS, outputs


@pytest.fixture(autouse=True)
def specialised_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(oneshot, "SPECIALISED", True)


class Fixed:
    """Compiled walks that stay what they are (oneshot.CompiledWalk), counting the parses they hand over: the
    one for parses without events and the one for parses with them."""

    def __init__(self, walk: Any, with_events: Any) -> None:
        self.walks, self.handed = {False: walk, True: with_events}, 0

    def current(self, events: bool) -> Any:
        return self.walks[events]

    def handed_over(self) -> None:
        self.handed += 1


def results(name: str, cases: list[tuple[str, str, Any]], walk: Fixed | None) -> list[Any]:
    """Each output's message and discarded spans (None: declined) in lenient and strict mode, and a fresh
    parser's finalize (message, events, spans) with and without the extended events, with ``walk`` as the
    specialised parser's compiled walk (None: the generic walk only)."""
    grammar = grammar_parse.load_grammar(name)
    shot = generated.specialised(grammar)
    kept = shot.compiled
    shot.compiled = walk
    out: list[Any] = []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (drift rewrites may lack a start anchor)
            for text, prefix, tools in cases:
                for strict in (False, True):
                    options = grammar_parse.ParseOptions(strict=strict)
                    grammar_parse.ResponseParser(grammar, prefix, tools=tools, options=options)  # (the prompt's
                    # tail replayed, as a parser with these options leaves it for the specialised parser)
                    found = session.specialised_parse(grammar, text, prefix, ToolTypes.from_tools(tools), options)
                    out.append(None if found is None else (found.message, found.discarded, found.spans))
                for extended in (False, True) if DEEP else (True,):
                    parser = grammar_parse.ResponseParser(grammar, prefix, tools=tools, strict=False,
                                                          extended_events=extended, call_events=extended)
                    message, events = parser.finalize(text)
                    out.append((message, events, [list(span) for span in parser.discarded_spans]))
    finally:
        shot.compiled = kept
    return out


@pytest.mark.parametrize("name", GRAMMARS)
def test_the_compiled_walk_is_the_walk(name: str) -> None:
    cases = list(outputs(name, drift=DEEP))
    expected = results(name, cases, None)  # (every config these outputs reach is worked out here)
    shot = generated.specialised(grammar_parse.load_grammar(name))
    finished: list[bool] = []

    def compiled(events: bool) -> Any:
        made = generated.walk_source(shot, events)
        assert made is not None, f"{name}: no walk compiled from {len(shot.configs)} configs"
        # Terminals, patterns, literals and regions are constants the walk reads by index: the only text in
        # the source is the empty string, so no grammar (an authored one is untrusted) can put code into it.
        assert not re.search("[\"']", made[0].replace('""', "").replace("''", "")), f"{name}: text in the source"
        walk = generated.compile_source(*made)

        def counted(*args: Any) -> Any:
            ended = walk(*args)
            finished.append(ended[2])
            return ended
        return counted
    got = results(name, cases, Fixed(compiled(False), compiled(True)))
    for i, (want, have) in enumerate(zip(expected, got)):
        text = cases[i // (4 if DEEP else 3)][0]
        assert (want is None) == (have is None) and strict_equal(want, have), \
            f"{name}: {text[:200]!r}\nwalk:     {want!r}\ncompiled: {have!r}"
    assert finished and sum(finished) >= 0.5 * len(finished), \
        f"{name}: the compiled walk finished {sum(finished)} of " \
                                                 f"{len(finished)} parses"


def test_the_walk_is_made_again_only_where_parses_hand_over(monkeypatch: pytest.MonkeyPatch) -> None:
    """Compiled: the function is made at the FIRST_BUILD-th parse, and made again at the next due parse only
    where new configs appeared and one parse in REBUILD_SHARE was handed to the walk since (configs only
    malformed outputs reach do not make it again)."""
    made: list[int] = []

    class Shot:
        configs: dict[int, int] = {}

    def compile_walk(shot: Any, events: bool = False) -> Any:
        made.append(len(shot.configs))
        return lambda *args: None
    monkeypatch.setattr(generated, "compile_walk", compile_walk)
    compiled = generated.Compiled(Shot())  # type: ignore[arg-type]
    Shot.configs = {1: 1}
    walks = [compiled.current() for _ in range(generated.FIRST_BUILD)]
    assert walks[-2] is None and walks[-1] is not None and made == [1]
    # the function for parses that ask for events is made at the first such parse after a build, once
    assert compiled.current(True) is not None and compiled.current(True) is not None and made == [1, 1]
    compiled.parses -= 2  # (those two parses did not happen, for the counts below)
    Shot.configs = {1: 1, 2: 2}  # new configs, no parse handed over: not made again
    for _ in range(generated.FIRST_BUILD * 4):
        compiled.current()
    assert made == [1, 1]
    compiled.handed = compiled.parses  # every parse since handed over: made again at the next due parse
    for _ in range(generated.FIRST_BUILD * 16):
        compiled.current()
        compiled.handed_over()
    assert made == [1, 1, 2]


def test_a_walk_past_its_size_limits_is_not_compiled(monkeypatch: pytest.MonkeyPatch) -> None:
    """An authored grammar whose outputs reach many configs, each watching many delimiters, would make a long
    function, compiled inside a parse: past MAX_LINES (or MAX_CONFIGS) none is made, and the walk parses."""
    grammar = grammar_parse.load_grammar("qwen3")
    text = '<think>\nhm\n</think>\n\nHi <tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>'
    expected = grammar_parse.parse_response(text, grammar, prefix="")
    shot = generated.specialised(grammar)
    assert generated.walk_source(shot) is not None
    monkeypatch.setattr(generated, "MAX_LINES", 20)
    assert generated.walk_source(shot) is None and generated.compile_walk(shot) is None
    monkeypatch.setattr(shot, "compiled", generated.Compiled(shot))
    for _ in range(generated.FIRST_BUILD + 2):
        assert grammar_parse.parse_response(text, grammar, prefix="") == expected
    assert shot.compiled is not None and shot.compiled.current(False) is None



def _timed_cases(name: str) -> list[tuple[str, str, Any]]:
    return list(outputs(name, drift=False))[:12]


def _writes_timed(name: str) -> bool:
    """Whether the walk compiled from the first outputs of ``name`` writes out a search under a time limit."""
    grammar = grammar_parse.load_grammar(name)
    if not any(isinstance(t.matcher, RegexMatcher) and t.matcher.timed for t in grammar.terminals.values()):
        return False
    results(name, _timed_cases(name), None)  # (the configs those outputs reach, worked out)
    made = generated.walk_source(generated.specialised(grammar), False)
    return made is not None and "except TimeoutError" in made[0]


TIMED = [name for name in GRAMMARS if _writes_timed(name)]


def test_the_compiled_walk_writes_timed_searches_out() -> None:
    assert len(TIMED) >= 12, TIMED  # (kimi_k2, glm45, llama3_json, deepseek_v32, step3, ...)


@pytest.mark.parametrize("name", TIMED)
def test_a_search_past_its_time_limit_in_the_compiled_walk_is_the_walks(name: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A delimiter whose regex is searched under a time limit (RegexMatcher.timed) has that search written out in
    the compiled walk, with the linear matcher past the limit, as RegexMatcher.search does. Compiled with no time
    at all, every such search runs past it, and the results are still the walk's."""
    cases = _timed_cases(name)
    expected = results(name, cases, None)
    shot = generated.specialised(grammar_parse.load_grammar(name))
    monkeypatch.setattr(generated, "search_budget", lambda chars, rate=0.0: 0.0)
    made = [generated.walk_source(shot, events) for events in (False, True)]
    got = results(name, cases, Fixed(*(generated.compile_source(*m) for m in made if m is not None)))
    for i, (want, have) in enumerate(zip(expected, got)):
        assert (want is None) == (have is None) and strict_equal(want, have), \
            f"{name}: {cases[i // 3][0][:200]!r}\nwalk:     {want!r}\ncompiled: {have!r}"


QWEN3_DRAFT = ('<think>\nI could write <tool_call>\n{"name": "f", "arguments": {}}\n</tool_call> but first.\n</think>\n\n'
               'Sure. <tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>')


def _compiled_qwen3() -> Any:
    grammar = grammar_parse.load_grammar("qwen3")
    for _ in range(generated.FIRST_BUILD + 1):  # (configs worked out, then the walk compiled)
        grammar_parse.parse_response(QWEN3_DRAFT, grammar, prefix="")
    shot = generated.specialised(grammar)
    walk = generated.compile_walk(shot)
    assert walk is not None
    return grammar, shot, walk


def test_the_walks_hand_each_other_their_searches(monkeypatch: pytest.MonkeyPatch) -> None:
    """At a draft the compiled walk hands the output to the generic walk with the searches it made (a delimiter
    absent from the rest is not searched to the end again), and takes them back with the output."""
    grammar, shot, walk = _compiled_qwen3()
    handed: list[dict[str, Any]] = []
    real = oneshot.OneShot._walk

    def seen(self: Any, buf: str, pos: int, *args: Any) -> Any:
        hits = args[-1]
        handed.append({key: found for key, found in hits.items() if found[0] is buf and found[1] <= pos})
        return real(self, buf, pos, *args)
    monkeypatch.setattr(oneshot.OneShot, "_walk", seen)
    monkeypatch.setattr(shot, "compiled", Fixed(walk, walk))
    found = session.specialised_parse(grammar, QWEN3_DRAFT, "", None, grammar_parse.ParseOptions())
    assert found is not None and found[0] == grammar_parse.parse_response(QWEN3_DRAFT, grammar, prefix="")
    assert handed and handed[0], "the compiled walk handed over without its searches"


def test_the_compiled_walk_takes_the_searches_it_is_handed() -> None:
    """What the compiled walk reads from the memo it is handed (a planted answer: no reasoning close from the
    start) is what it goes by: it searches nothing it was told of."""
    grammar, shot, walk = _compiled_qwen3()
    text = "<think>\nhm\n</think>\n\nHi"
    close = next(t for t in grammar.terminals.values() if t.role == "close" and t.region is not None
                 and t.region.is_reasoning)
    reasoning = []
    for memo in ({search_key(close): (text, 0, None)}, {}):
        build = oneshot.Builder(dict(grammar.defaults), [], None, 10**6, shot.closer, 0)
        build.memo = memo
        walk(text, 0, shot.start, build, {})
        reasoning.append(build.output.get("reasoning_content"))
    assert reasoning[0] != "hm" and reasoning[1] == "hm", reasoning
