"""The call reader (grammar_parse._engine.callreader) against the session, for every grammar it reads calls of.

The grammars are found, not listed: a grammar is tested where parsing its goldens made a reader that read a
call. For each call a reader read, mutants are written at the places its pattern decides: characters inserted
into an argument's value (at its start, middle and end) and into the whitespace around arguments, a value
emptied, an argument written twice, the call's close cut off. Each parse gives the session's message or the
specialised parser declines, in lenient and strict mode; readers must have read calls of the mutants and handed
others to the walk, so that neither path passes untested.
"""

from __future__ import annotations

import os
import random
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

import grammar_parse
from conformance import strict_equal
from goldens import goldens
from grammar_parse._engine import callreader, generated, oneshot
from grammar_parse._engine.grammar import build_grammar
from test_specialised import GRAMMARS, session_result, specialised_result

DEEP = os.environ.get("HYPOTHESIS_PROFILE") == "deep"
#: Mutants parsed per grammar (a seeded sample of all of them; all under the deep profile).
SAMPLE = 10_000 if DEEP else 40
#: What is written into a value or a gap: the characters delimiters start with, whitespace a gap may or may not
#: hold (vertical tab, a file separator, a Unicode line separator, a no-break space), and other markup.
INSERTS = ["<", ">", "/", "=", '"', "'", "\n", "\t", "\r", "\x0b", "\x1c", "\u2028", "\xa0", " ", "{", "}", "|",
           "\uff5c", "\\", "x", "</", "<parameter=", "<arg_key>"]


@pytest.fixture(autouse=True)
def specialised_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(oneshot, "SPECIALISED", True)


class Reads:
    """The calls readers read (where in the buffer: the call's opener, gaps, values, the call's end) and how
    many they left to the walk, while installed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.read: list[tuple[str, int, list[tuple[int, int]], list[tuple[int, int]], int]] = []
        self.taken = self.left = 0
        real = callreader.CallReader.read

        def read(reader: Any, buf: str, pos: int, build: Any, config: Any, drafts: Any) -> Any:
            opener = build.frames[-1].text_start - len(build.frames[-1].open_text) if build.frames else pos
            found = real(reader, buf, pos, build, config, drafts)
            if found is None:
                self.left += 1
                return found
            self.taken += 1
            m = reader.pattern.match(buf, pos)
            values = sorted(span for kind in reader.kinds for span in m.spans(kind.value))
            self.read.append((buf, opener, m.spans(reader.gaps), values, m.end()))
            return found
        monkeypatch.setattr(callreader.CallReader, "read", read)


def mutants(text: str, offset: int, opener: int, gaps: list[tuple[int, int]], values: list[tuple[int, int]],
            end: int) -> Iterator[str]:
    """``text`` changed at the places a call reader's pattern decides (positions in a buffer whose output starts
    at ``offset``), and the call written twice in a row, with each of INSERTS between."""
    gaps = [(a - offset, b - offset) for a, b in gaps]
    values = [(a - offset, b - offset) for a, b in values]
    end, opener = end - offset, opener - offset
    if opener >= 0:
        yield text[:end] + text[opener:end] + text[end:]
        for ch in INSERTS:
            yield text[:end] + ch + text[opener:end] + text[end:]
    for v0, v1 in values:
        for at in sorted({v0, (v0 + v1) // 2, v1}):
            for ch in INSERTS:
                yield text[:at] + ch + text[at:]
        yield text[:v0] + text[v1:]
    for g0, g1 in gaps:
        for at in sorted({g0, g1}):
            for ch in INSERTS:
                yield text[:at] + ch + text[at:]
    for (g0, _), (n0, _) in zip(gaps, gaps[1:]):  # an argument written twice
        yield text[:n0] + text[g0:n0] + text[n0:]
    yield text[:gaps[-1][1]] + text[end:]  # the call's close cut off
    yield text[:gaps[-1][1]]  # the output cut off before it


def _compare(name: str, text: str, prefix: str, tools: Any) -> None:
    for strict in (False, True):
        fast = specialised_result(name, text, prefix, tools, strict)
        if fast is None:
            continue
        kind, expected = session_result(name, text, prefix, tools, strict)
        assert kind == "message" and strict_equal(fast, expected) and list(fast) == list(expected), \
            f"{name} (strict={strict}): {text[:300]!r}\nsession:     {expected!r}\nspecialised: {fast!r}"


@pytest.mark.parametrize("name", GRAMMARS)
def test_a_call_the_reader_reads_is_the_sessions_and_so_are_its_mutants(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    reads = Reads(monkeypatch)
    cases = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for g in goldens(name):
            del reads.read[:]
            _compare(name, g.text, g.prefix, g.tools)
            for buf, opener, gaps, values, end in reads.read:
                cases += [(text, g.prefix, g.tools) for text in mutants(g.text, len(buf) - len(g.text), opener,
                                                                         gaps, values, end)]
        if not cases:
            pytest.skip(f"{name}: no call of its goldens is read whole (no reader, or its pattern declines them)")
        read = reads.taken
        reads.taken = reads.left = 0
        twice = cases[:len(INSERTS) + 1]  # (the first call read, written twice in a row, always)
        for text, prefix, tools in twice + random.Random(name).sample(cases, min(SAMPLE, len(cases))):
            _compare(name, text, prefix, tools)
    assert read > 0
    assert reads.taken > 0 and reads.left > 0, f"{name}: of the mutants, readers read {reads.taken} calls and " \
                                               f"left {reads.left} to the walk"


@pytest.mark.parametrize("name", ["qwen3_coder", "minimax_m2", "step3", "poolside_v1", "glm47", "mimo"])
def test_the_xml_argument_formats_are_read_a_call_at_a_time(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The formats whose arguments are XML-like elements (Qwen3-Coder, MiniMax-M2, Step-3, Laguna, GLM-4.7,
    MiMo) get a reader for the calls their goldens write: their delimiters are ones no other live beside them
    starts like (MiMo's ``<[ \\t]{0,8}parameter`` and ``<[ \\t]{0,8}/`` told apart by their automata), and
    GLM's argument opener, searched under a time limit, is matched under it."""
    reads = Reads(monkeypatch)
    grammar = grammar_parse.load_grammar(name)
    for g in goldens(name):
        grammar_parse.parse_response(g.text, grammar, prefix=g.prefix, tools=g.tools, strict=False)
    assert reads.taken > 0


def test_a_grammar_whose_delimiters_start_alike_gets_no_reader() -> None:
    """Where an argument's close and another delimiter live beside it may match at one place (here ``</a>``
    and ``</a>>``), the scan's tie-break decides between them, which a pattern cannot: no reader, and the
    walk's message."""
    source = "\n".join([
        '//@ grammar_parse 1',
        '//@ region content {"content": "text"}',
        '//@ region tool_calls {"repeats": true, "scope": {"arguments": {}}, "transform": {"type": "function", '
        '"function": {"name": "{name}", "arguments": "{arguments}"}}}',
        '//@ region arg {"parent": "tool_calls", "key": "arguments", "entry_key": "{key}", "content": "text", '
        '"content_args": {"strip": false}}',
        'start: content?',
        'content: (CONTENT_TEXT | tool_calls)+',
        'tool_calls: TOOL_CALLS_OPEN (TOOL_CALLS_TEXT | arg)* TOOL_CALLS_CLOSE',
        'arg: ARG_OPEN ARG_TEXT* (ARG_CLOSE | ARG_CLOSE_LONG)',
        'TOOL_CALLS_OPEN.1: /<call (?P<name>\\w+)>/',
        'TOOL_CALLS_CLOSE: "</call>"',
        'ARG_OPEN.1: /<a (?P<key>\\w+)>/',
        'ARG_CLOSE: "</a>"',
        'ARG_CLOSE_LONG: "</a>>"',
        '%declare CONTENT_TEXT TOOL_CALLS_TEXT ARG_TEXT',
    ])
    grammar = build_grammar(source, source_name="alike.lark")
    text = "hi <call f>\n<a x>1</a>\n<a y>2</a>></call>"
    got = [grammar_parse.parse_response(text, grammar, prefix="") for _ in range(12)]  # (past the compiled walk's making)
    shot = generated.specialised(grammar)
    assert shot.readers is not None and not any(shot.readers.known(c) for c in list(shot.configs.values()))
    oneshot.SPECIALISED = False
    try:
        expected = grammar_parse.parse_response(text, grammar, prefix="")
    finally:
        oneshot.SPECIALISED = True
    assert all(strict_equal(message, expected) for message in got)
    assert expected["tool_calls"][0]["function"]["arguments"] == {"x": "1", "y": "2"}
