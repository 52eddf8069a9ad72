"""The issue's hostile outputs cost linear work: the text the delimiter searches cover, summed over a
whole parse, grows in proportion to the output, one-shot and streamed.

Work is counted, not timed (tests do not time things; ``benchmarks/bench_hostile.py`` measures seconds):
every delimiter search is charged the buffer it reads (to its match, or to the end), every streaming
probe the buffer it may read (to the end, or one match's width for a bounded pattern). A parse that restarts from a held position on every feed, or that searches from
every start of a flood, is charged quadratically and fails the ratio below; resumed scans
(``delimiters.Progress``) are charged only for the text they read.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import pytest

import grammar_parse as gp
from grammar_parse.adapters.chat_completions import ChatCompletionsStream
from grammar_parse._engine.delimiters import LiteralMatcher, RegexMatcher
from grammar_parse._engine.toolstream import _XmlCallReader
from test_coalesce import AFTER_TEXT

SMALL, LARGE = 4_000, 32_000  # 8x the text


def charged(monkeypatch: pytest.MonkeyPatch, run: Callable[[], object]) -> int:
    total = [0]

    def wrap(cls: type, name: str) -> None:
        original = getattr(cls, name)

        def counted(self, buf, pos, *args):  # type: ignore[no-untyped-def]
            result = original(self, buf, pos, *args)
            if name == "search":  # up to the match it found, or to the end
                total[0] += (len(buf) if result is None else result[1]) - pos
            else:  # a streaming probe may read from the match (or its start position) to the end, or
                # as far as one match reaches for a bounded pattern
                hit = args[0]
                total[0] += min(len(buf) - (pos if hit is None else hit[0]), self.max_width + 1)
            return result
        monkeypatch.setattr(cls, name, counted)

    for cls in (LiteralMatcher, RegexMatcher):
        wrap(cls, "search")
        wrap(cls, "probe")
    scan = _XmlCallReader._scan

    def tag_scan(self, final):  # type: ignore[no-untyped-def]
        total[0] += sum(map(len, self.body)) - self.scanned  # the tool streamer's argument tags
        return scan(self, final)
    monkeypatch.setattr(_XmlCallReader, "_scan", tag_scan)
    run()
    monkeypatch.undo()
    return total[0]


def one_shot(grammar: str, build: Callable[[int], str], prefix: str = "") -> Callable[[int], Callable[[], object]]:
    return lambda n: lambda: gp.parse_response(build(n), grammar, prefix=prefix, strict=False)


def streamed(grammar: str, build: Callable[[int], str], prefix: str = "", chat: bool = False,
             calls_in_reasoning: str | None = None):
    def make(n: int) -> Callable[[], object]:
        def run() -> object:
            text = build(n)
            if chat:
                s = ChatCompletionsStream(grammar, prefix, strict=False, calls_in_reasoning=calls_in_reasoning)
                for i in range(0, len(text), 16):
                    s.feed(text[i:i + 16])
                return s.finish()
            p = gp.ResponseParser(grammar, prefix, strict=False, calls_in_reasoning=calls_in_reasoning)
            for i in range(0, len(text), 16):
                p.feed(text[i:i + 16])
            return p.finalize()
        return run
    return make


CASES = {
    # the issue's reproducers (class 1: one-shot; class 2: streamed)
    "kimi_k2 spaces then x, one-shot": one_shot("kimi_k2", lambda n: " " * n + "x"),
    "granite newlines then the response marker, one-shot": one_shot("granite", lambda n: "\n" * n + "Here is my response:"),
    "glm45 spaces then </think>, streamed": streamed("glm45", lambda n: " " * n + "</think>", "<|assistant|><think>"),
    "glm47 spaces then </think>, streamed": streamed("glm47", lambda n: " " * n + "</think>", "<|assistant|><think>"),
    "qwen3 <tool_call> then whitespace, streamed": streamed("qwen3", lambda n: "<tool_call>" + " \n" * (n // 2)),
    "functionary_v32 >>> then whitespace, streamed": streamed("functionary_v32", lambda n: ">>>get_weather\n" + " " * n),
    "inkling tool opener then whitespace, streamed": streamed(
        "inkling", lambda n: "<|message_model|><|content_invoke_tool_json|>" + " " * n),
    "gemma4 <|tool_call> then whitespace, streamed": streamed("gemma4", lambda n: "<|tool_call>" + " " * n),
    "function_gemma call opener then whitespace, streamed": streamed(
        "function_gemma", lambda n: "<start_function_call>" + " " * n),
    "apriel <tool_calls> then whitespace, streamed": streamed("apriel", lambda n: "<tool_calls>" + " " * n),
    "xlam </think> then whitespace, streamed": streamed("xlam", lambda n: "<think>a</think>" + " " * n + "ok"),
    "hunyuan_v3 unclosed arguments, Chat Completions": streamed(
        "hunyuan_v3", lambda n: "<tool_calls>\n<tool_call>f<tool_sep>\n" + "<arg_key>" * (n // 9), chat=True),
    # drafts (issue 31): call markup in an open reasoning block is held, then read again when no close comes
    "qwen3 openers quoted in reasoning never closed, streamed": streamed(
        "qwen3", lambda n: "<think>" + "<tool_call>{} " * (n // 14), calls_in_reasoning="never"),
    "qwen3 openers quoted in reasoning then closed, streamed": streamed(
        "qwen3", lambda n: "<think>" + "<tool_call>{} " * (n // 14) + "</think>ok", calls_in_reasoning="never"),
    "deepseek_r1 call sections quoted in reasoning, Chat Completions": streamed(
        "deepseek_r1", lambda n: "<think>" + "<｜tool▁calls▁begin｜> " * (n // 21), chat=True),
    # a call's part whose pieces wait for the next one (coalesce_calls), and floods of what stops them waiting
    "qwen3_coder a long part, Chat Completions": streamed(
        "qwen3_coder", lambda n: "<tool_call>\n<function=f>\n<parameter=a>\n" + "x y\n" * (n // 4), chat=True),
    "qwen3_coder a part of delimiter starts, Chat Completions": streamed(
        "qwen3_coder", lambda n: "<tool_call>\n<function=f>\n<parameter=a>\n" + "</" * (n // 2), chat=True),
    "qwen3_coder a part of delimiter ends, Chat Completions": streamed(
        "qwen3_coder", lambda n: "<tool_call>\n<function=f>\n<parameter=a>\n" + "<=>" * (n // 3), chat=True),
    "glm45 a long argument value, Chat Completions": streamed(
        "glm45", lambda n: "<tool_call>f\n<arg_key>a</arg_key>\n<arg_value>" + "x<" * (n // 2), chat=True),
    # an argument's close written again and again inside a call, then text (stray_text reads past each)
    "glm45 a flood of argument closes in a call, one-shot": one_shot(
        "glm45", lambda n: "<tool_call>f\n<arg_key>a</arg_key>\n<arg_value>1</arg_value>\n" + "</arg_value>" * (n // 12)
        + "x</tool_call>"),
    "qwen3_coder a flood of parameter closes in a call, streamed": streamed(
        "qwen3_coder", lambda n: "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n"
        + "</parameter>" * (n // 12) + "x\n</function>\n</tool_call>"),
}
# (Work inside one regex search, such as a lazy run retried from every start of a flood, is not visible
# here: tests/test_linear_patterns.py rules those patterns out of the built-in grammars.)


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_output_costs_linear_work(name, monkeypatch):
    make = CASES[name]
    small, large = charged(monkeypatch, make(SMALL)), charged(monkeypatch, make(LARGE))
    # linear: 8x the text, about 8x the work (a margin for fixed costs); quadratic would be ~64x
    assert large <= 12 * max(small, SMALL), (small, large)


HELD_FLOODS = [  # (grammar, before the flood, after it): a whitespace run that a leading \s* may still claim
    ("apriel", 'Hi\n<tool_calls>', '[{"name": "f", "arguments": {}}]</tool_calls>'),
    ("apriel", 'Hi\n<tool_calls>[{"name": "f", "arguments": {}}]', "</tool_calls>"),
    ("qwen3", "<think>a", "</think>b"),
    # a run the scan holds that is not all whitespace: ``;\s*(?=\{...)`` pending after a call, over the flood
    ("llama3_json", '<|python_tag|>{"name": "f", "arguments": {}};', '{"name": "g", "arguments": {}}'),
]


@pytest.mark.parametrize("grammar, head, tail", HELD_FLOODS)
@pytest.mark.parametrize("unit", [" ", "\n"])
def test_a_held_whitespace_flood_is_not_copied_per_chunk(grammar, head, tail, unit):
    """Whitespace the scan holds for a leading ``\\s*`` waits beside the buffer while more of it arrives:
    joining each chunk into the buffer copied the whole run per chunk (apriel, a newline flood after
    ``<tool_calls>``: 2.6x slower per MB at 1 MB than at 10 KB). So does whitespace after a long run the scan
    holds for another reason (llama3_json: 2.6x at 1 MB). Charged: the buffer each feed leaves."""
    def copied(n: int) -> int:
        text = head + unit * n + tail
        parser = gp.ResponseParser(grammar, "", strict=False)
        total = 0
        for i in range(0, len(text), 16):
            parser.feed(text[i:i + 16])
            total += len(parser._buf)
        assert parser.finalize()[0] == gp.parse_response(text, grammar, prefix="", strict=False)
        return total

    small, large = copied(SMALL), copied(LARGE)
    assert large <= 8 * 1.5 * max(small, 1_000), (small, large)


# ---------------------------------------------------------------------------------------------------------
# Issue 32, item 6 (a): a delimiter held at the edge while it keeps growing, in 64-character feeds: a call
# name (gemma4 ``<|tool_call>call:f`` + ``x``*n: 5 / 10 / 20 KB took 0.028 / 0.100 / 0.435 s), spaces
# after command_r_plus' ``Action:...```\t``, a name at the start of a functionary_v32 output. Each feed
# re-matched the held run from its start; now it resumes where the last feed's scan stopped.

def streamed_in(grammar: str | gp.Grammar, build: Callable[[int], str],
                chunk: int) -> Callable[[int], Callable[[], object]]:
    def make(n: int) -> Callable[[], object]:
        def run() -> object:
            text = build(n)
            parser = gp.ResponseParser(grammar, "", strict=False)
            for i in range(0, len(text), chunk):
                parser.feed(text[i:i + chunk])
            return parser.finalize()
        return run
    return make


GROWING = {
    "gemma4 call name": ("gemma4", "<|tool_call>call:f", "x"),
    "function_gemma call name": ("function_gemma", "<start_function_call>call:f", "x"),
    "iquest_q1 call name": ("iquest_q1", "<iquest_tool_call>f", "x"),
    "command_r_plus spaces after the action fence": ("command_r_plus", "Action:\n```\t", " "),
    "functionary_v32 a name at the start": ("functionary_v32", "", "x"),
    # runs the grammars bounded instead (their delimiters' whitespace, names and tag suffixes had no limit)
    "glm45 spaces after </arg_key>": ("glm45", "<tool_call>get_weather\n<arg_key>city</arg_key>\n", " "),
    "glm47 spaces after </arg_key>": ("glm47", "<tool_call>get_weather\n<arg_key>city</arg_key>\n", " "),
    "gpt_oss spaces after a channel": ("gpt_oss", "<|start|>assistant<|channel|>commentary ", " "),
    "hunyuan_v3 a tag suffix": ("hunyuan_v3", "<tool_calls>\n<tool_call>get_weather<tool_sep:opensource", "x"),
    "hunyuan_v3 call name": ("hunyuan_v3", "<tool_calls>\n<tool_call>f", "x"),
}


@pytest.mark.parametrize("name", sorted(GROWING))
def test_a_growing_held_delimiter_costs_linear_work(name, monkeypatch):
    grammar, head, unit = GROWING[name]
    make = streamed_in(gp.load_grammar(grammar), lambda n: head + unit * n, 64)
    small, large = charged(monkeypatch, make(SMALL)), charged(monkeypatch, make(LARGE))
    assert large <= 12 * max(small, SMALL), (small, large)


UNITS = ["x", " ", "\n"]  # a name, and the whitespace a leading or trailing \s* takes


@cache
def held_runs(grammar: str) -> list[tuple[str, str]]:
    """(head, unit) pairs built from the grammar's delimiters whose text the parser still holds after 160
    characters fed 64 at a time: a delimiter (complete or partial) growing at the edge. (One example per
    regex keeps the search to about a second over all grammars.)"""
    from strategies import delimiter_examples

    found = []
    for head in ["", *delimiter_examples(gp.load_grammar(grammar), per_regex=1)]:
        for unit in UNITS:
            text = head + unit * (160 // len(unit))
            parser = gp.ResponseParser(grammar, "", strict=False)
            try:
                for i in range(0, len(text), 64):
                    parser.feed(text[i:i + 64])
            except gp.GrammarParseError:
                continue
            if len(parser._buf) >= 128:
                found.append((head, unit))
    return found


@pytest.mark.parametrize("grammar", sorted(gp.list_grammars()))
def test_every_held_delimiter_grows_in_linear_work(grammar, monkeypatch):
    """For every grammar, every run its delimiters hold while it grows (found by feeding each delimiter's
    examples followed by a repeated character) costs linear work in 64-character feeds."""
    for head, unit in held_runs(grammar):
        make = streamed_in(grammar, lambda n: head + unit * (n // len(unit)), 64)
        small, large = charged(monkeypatch, make(SMALL // 4)), charged(monkeypatch, make(LARGE // 4))
        assert large <= 12 * max(small, SMALL // 4), (head, unit, small, large)


@pytest.mark.parametrize("grammar", sorted(gp.list_grammars()))
def test_a_held_run_is_not_copied_per_piece(grammar):
    """Past HELD_RUN characters, the pieces of a run the scan holds (gemma4's ``<|tool_call>call:`` + a name,
    minimax_m2's ``<invoke name="`` + one) are kept aside while the scanner can tell from each piece alone that
    the scan would hold it again: joined into the buffer, each piece copied the whole run (1 MB of name in
    4-character pieces: minutes). Charged: the buffer each feed leaves; and the message is the one-shot one."""
    for head, unit in held_runs(grammar) + [(h, u) for g, h, u in LONG_NAMES if g == grammar]:
        def copied(n: int) -> int:
            text = head + unit * (n // len(unit))
            parser = gp.ResponseParser(grammar, "", strict=False)
            total = 0
            for i in range(0, len(text), 16):
                parser.feed(text[i:i + 16])
                total += len(parser._buf)
            assert parser.finalize()[0] == gp.parse_response(text, grammar, prefix="", strict=False), head
            return total

        small, large = copied(SMALL), copied(LARGE)
        assert large <= 12 * max(small, SMALL), (head, unit, small, large)


#: Runs held in a call's own state, which the delimiter examples above do not reach from the start.
LONG_NAMES = [("minimax_m2", '<minimax:tool_call>\n<invoke name="', "x"),
              ("qwen3_coder", "<tool_call>\n<function=f>\n<parameter=", "x")]


@pytest.mark.parametrize("grammar", sorted({g for g, *_ in LONG_NAMES} | {"gemma4", "iquest_q1", "function_gemma",
                                                                          "inkling", "functionary_v32"}))
def test_a_kept_run_gives_the_events_of_a_joined_one(grammar, monkeypatch):
    """Keeping a long run's pieces aside changes no event, piece by piece, against joining each one (as
    before), for the run and what ends it."""
    from grammar_parse._engine import session

    for head, unit in held_runs(grammar) + [(h, u) for g, h, u in LONG_NAMES if g == grammar]:
        text = head + unit * 700 + "\n<|im_end|>}\n\"> ok"
        pieces = [text[i:i + 16] for i in range(0, len(text), 16)]
        runs, kept = [], []
        keeps = session._LongRun.keeps
        for keep in (True, False):
            monkeypatch.setattr(session._LongRun, "keeps", lambda self, parser, text, keep=keep:
                                keep and keeps(self, parser, text) and not kept.append(text))
            parser = gp.ResponseParser(grammar, "", strict=False)
            runs.append([parser.feed(piece) for piece in pieces] + [parser.finalize()])
        assert runs[0] == runs[1], head
        assert len(kept) > 20 or not unit.strip(), (head, len(kept))  # (past HELD_RUN; whitespace waits anyway)
        monkeypatch.undo()


def test_the_held_runs_include_the_issue_reproducers():
    """The search above finds the growing call names the issue reports (so it would see them again)."""
    import re

    # (gemma4's opener takes a stray colon or space before call:, so its example may hold one)
    for grammar, head in [("gemma4", r"<\|tool_call>[ \t\n:]{0,4}call:"), ("function_gemma", r"<start_function_call>call:"),
                          ("iquest_q1", r"<iquest_tool_call>")]:
        assert any(re.match(head, h) and u == "x" for h, u in held_runs(grammar)), grammar


# ---------------------------------------------------------------------------------------------------------
# Issue 32, item 6 (b): one big feed. The regex module's partial search (what may still be arriving at the
# edge) costs about the square of the span it reads, and a single feed handed it the whole chunk:
# functionary_v32 ``feed("a." * n)`` took 0.23 / 0.86 / 3.7 s at 50 / 100 / 200 KB, inkling on ``<`` more,
# while one-shot parsing and 64-character feeds were instant. The search now reads the span a window at a
# time. This cost is inside one regex call, where counting characters cannot see it: these are best-of
# timings, with a floor for the clock's noise.

BIG_SMALL, BIG_LARGE = 3_000, 48_000  # (16x: functionary_v32 took 0.15 s at 48 KB before, 2.5x the bar)


def floods(grammar: str) -> list[str]:
    """What one big feed repeats: the issue's ``a.`` and ``<``, whitespace, and each first character of the
    grammar's delimiters."""
    firsts: set[str] = set()
    for term in gp.load_grammar(grammar).terminals.values():
        firsts.update(getattr(term.matcher, "first_chars", None) or "")
        firsts.update(getattr(term.matcher, "spaced_first_chars", None) or "")  # (after a whitespace run)
    return ["a.", "<", " ", "\n", "x", *sorted(firsts - {"<", " ", "\n", "x"})]


def feed_once(grammar: str, text: str, reps: int) -> float:
    import time

    best = float("inf")
    for _ in range(reps):
        parser = gp.ResponseParser(grammar, "", strict=False)
        started = time.perf_counter()
        parser.feed(text)
        parser.finalize()
        best = min(best, time.perf_counter() - started)
    return best


def big_feed_cost(grammar: str, head: str, unit: str) -> tuple[float, float] | None:
    """None if one feed of ``head`` + a flood of ``unit`` costs linear time, else the two timings."""
    feed_once(grammar, head + unit * 100, 1)  # (the first parse builds what the grammar's matchers cache)
    for reps in (1, 3):  # (measured again, best of three, before a slow reading counts)
        small = feed_once(grammar, head + unit * (BIG_SMALL // len(unit)), reps)
        large = feed_once(grammar, head + unit * (BIG_LARGE // len(unit)), reps)
        # linear: 16x the text, about 16x the time; quadratic 256x (the issue's feeds: 60-130x here)
        if large <= 40 * max(small, 0.0015):
            return None
    return small, large


@pytest.mark.parametrize("grammar", sorted(gp.list_grammars()))
def test_one_big_feed_costs_linear_time(grammar):
    slow = {unit: cost for unit in floods(grammar) if (cost := big_feed_cost(grammar, "", unit)) is not None}
    assert not slow


#: The worst single feeds a sweep of every grammar found (each delimiter example, then a flood: 8 KB
#: against 64 KB) beyond the floods above: a call's parameter opener, then '<' (0.5-1.1 s at 64 KB before
#: the windowed partial search, 0.02-0.04 s after).
BIG_FEEDS = [
    ("mimo", "<tool_call>\n\n\n<function=_iucoocf=>", "<"),
    ("qwen3_5", "<tool_call>\n\n\n<function=_iucoocf=>", "<"),
    ("qwen3_coder", "<tool_call>\n\n\n<function=_iucoocf=>", "<|"),
]


@pytest.mark.parametrize("grammar, head, unit", BIG_FEEDS)
def test_the_sweeps_worst_big_feeds_cost_linear_time(grammar, head, unit):
    assert big_feed_cost(grammar, head, unit) is None


# ---------------------------------------------------------------------------- a delimiter's automaton
#: Counted repeats that read the same characters one after another make a delimiter's automaton count both:
#: its states grow with the product of their bounds (8,500 states and 14 s to build for two of 128, a minute for
#: two of 256), and a stream that needs the automaton for a pending match would stall while it is built.
COSTS = [
    (r'<f name=[^"<>\s]{1,128}"?[^<>\n]{0,128}>', 128 * 128),  # (an optional quote between them: still adjacent)
    (r'(?=<f\s{0,8}name=[^<>\n]{1,256}>)', 0),  # (space, then a literal: nothing counted twice)
    (r'<t>\s{0,16}[^\s<]{1,256}\s{0,16}<', 0),  # (the classes do not overlap; the name must read one)
    (r'a[^<]{0,256}?\s{0,16}<', 256 * 16),  # (whitespace is in both)
    (r'(?:x{1,64}|y)z?x{0,64}', 64 * 64),  # (in a group, then after it)
    (r'\w{1,100}-\w{1,100}', 0),  # (a character between them that both must pass)
]


@pytest.mark.parametrize("pattern, cost", COSTS, ids=[c[0] for c in COSTS])
def test_the_automaton_cost_counts_adjacent_overlapping_repeats(pattern: str, cost: int) -> None:
    from grammar_parse._engine.regex_safety import automaton_cost

    assert automaton_cost(pattern) == cost


#: test_coalesce's grammar of calls made of arguments, its opener written with two counted repeats side by side.
EXPLODING = AFTER_TEXT.replace(r"TOOL_CALLS_OPEN: /<call (?P<name>\w+)>/",
                               r'TOOL_CALLS_OPEN: /<call name=(?P<name>[^"<>\s]{1,60})"?[^<>\n]{0,60}>/')


def test_a_delimiter_whose_automaton_would_explode_streams_without_it() -> None:
    """Such an authored delimiter (or a template's) gets no automaton: its pending match is matched again as
    the stream grows (bounded by the pattern's width), where building the automaton took minutes; the stream
    gives the one-shot message character by character."""
    from grammar_parse._engine.grammar import build_grammar
    from grammar_parse._engine.regex_safety import AUTOMATON_BUDGET, automaton_cost

    grammar = build_grammar(EXPLODING, source_name="exploding.lark")
    opener = grammar.terminals["TOOL_CALLS_OPEN"].matcher
    assert isinstance(opener, RegexMatcher) and automaton_cost(opener.pattern) > AUTOMATON_BUDGET
    assert EXPLODING != AFTER_TEXT
    text = 'Hi <call name=get_weather" extra="1"><p city>Paris#</call> bye'
    parser = gp.ResponseParser(grammar, "")
    for character in text:
        parser.feed(character)
    assert parser.finalize()[0] == gp.parse_response(text, grammar, prefix="") == {
        "content": "Hi  bye", "tool_calls": [{"type": "function", "function": {"name": "get_weather",
                                                                              "arguments": {"city": "Paris"}}}]}
    assert opener.forwards == (None, None) and opener._automaton is None
