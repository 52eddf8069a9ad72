"""The specialised one-shot parser (grammar_parse._engine.oneshot) against the session, for every built-in grammar.

Wherever the specialised parser gives a message, it is the session's message for that output (values compared
strictly, keys in the same order), in lenient and in strict mode; wherever it declines, ``parse_response``
is the session's. The outputs: each grammar's golden samples, transcripts and format-drift rewrites, and
mutants of the goldens (a piece cut out, repeated, or the output cut off), more of them under
``HYPOTHESIS_PROFILE=deep``, and text written into a call (section) outside every call (argument). The share it
takes is held too, so that a change which makes it decline everything cannot pass for exact.
"""

from __future__ import annotations

import os
import pickle
import random
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import grammar_parse
from conformance import strict_equal
from goldens import goldens, samples
from grammar_parse._engine import generated, oneshot, session
from grammar_parse._engine.tools import ToolTypes
from grammar_parse._engine.drafts import draft_states
from strategies import examples
from test_call_boundaries import reported_outputs
from test_drift import TRANSFORMS, opt_outs, variants

TRANSCRIPTS = Path(__file__).resolve().parent / "transcripts"
DEEP = os.environ.get("HYPOTHESIS_PROFILE") == "deep"
MUTANTS = 40 if DEEP else 4
GRAMMARS = sorted(grammar_parse.list_grammars())


@pytest.fixture(autouse=True)
def specialised_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about the specialised parser: on, whatever GRAMMAR_PARSE_SPECIALISED says."""
    monkeypatch.setattr(oneshot, "SPECIALISED", True)


def outputs(name: str, drift: bool = True) -> Iterator[tuple[str, str, Any]]:
    """(output, prompt, tools): the grammar's goldens, transcripts, mutants of its goldens and (``drift``) its
    drift rewrites."""
    grammar = grammar_parse.load_grammar(name)
    rng = random.Random(name)
    for g in goldens(name):
        yield g.text, g.prefix, g.tools
        for _ in range(MUTANTS if g.text else 0):
            i = rng.randrange(len(g.text))
            j = min(len(g.text), i + rng.randint(1, 12))
            cut = rng.random()
            text = g.text[:i] + g.text[j:] if cut < 0.4 else g.text[:j] + g.text[i:] if cut < 0.7 else g.text[:i]
            yield text, g.prefix, g.tools
    for t in samples(TRANSCRIPTS, name):
        yield t.text, t.prefix, t.tools
    for tname, transform in TRANSFORMS.items() if drift else ():
        if transform.applies(grammar) and tname not in opt_outs(grammar):
            for v in variants(name, tname):
                yield v.text, v.prefix, v.tools
    yield from reported_outputs(name)  # (text in a call section, or in a call read from tags: reported)


def session_result(name: str, text: str, prefix: str, tools: Any, strict: bool) -> tuple[str, Any]:
    oneshot.SPECIALISED = False
    try:
        return "message", grammar_parse.parse_response(text, name, prefix=prefix, tools=tools, strict=strict)
    except grammar_parse.GrammarParseError as e:
        return "error", (type(e).__name__, e.code)
    finally:
        oneshot.SPECIALISED = True


def specialised_result(name: str, text: str, prefix: str, tools: Any, strict: bool) -> Any:
    """The specialised parser's message, or None where it declines (the prompt's tail replayed first, as a
    parser with these options leaves it for the next)."""
    grammar = grammar_parse.load_grammar(name)
    options = grammar_parse.ParseOptions(strict=strict)
    parser = grammar_parse.ResponseParser(grammar, prefix, tools=tools, options=options)
    found = session.specialised_parse(grammar, text, prefix, ToolTypes.from_tools(tools), options)
    if found is None:
        return None
    oneshot.SPECIALISED = False  # (the session's own spans: a fresh parser's finalize would take the fast path)
    try:  # what the batch path reads beside the message: the characters that went into no field
        parser.finalize(text)
        assert found[1] == sum(end - start for start, end in parser.discarded_spans), text[:200]
    except grammar_parse.GrammarParseError:
        pass  # (strict: the message comparison reports it)
    finally:
        oneshot.SPECIALISED = True
    return found[0]


@pytest.mark.parametrize("name", GRAMMARS)
def test_the_specialised_parser_gives_the_sessions_message_or_declines(name: str) -> None:
    taken = total = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (drift rewrites may lack a start anchor: the session warns, both ways)
        for text, prefix, tools in outputs(name):
            for strict in (False, True):
                total += 1
                fast = specialised_result(name, text, prefix, tools, strict)
                if fast is None:
                    continue
                taken += 1
                kind, expected = session_result(name, text, prefix, tools, strict)
                assert kind == "message", f"{name}: the session raised {expected} where the specialised parser " \
                                          f"gave {fast!r} for {text[:200]!r}"
                assert strict_equal(fast, expected) and list(fast) == list(expected), \
                    f"{name}: {text[:200]!r}\nsession:     {expected!r}\nspecialised: {fast!r}"
    assert taken > 0, f"{name}: the specialised parser took none of {total} outputs"


DRAFTING = [name for name in GRAMMARS if draft_states(grammar_parse.load_grammar(name), "never")]


@pytest.mark.parametrize("reading", ["never", "fallback", "always"])
def test_markup_in_reasoning_is_read_as_the_session_reads_it(reading: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Call markup inside an open reasoning block (a draft, drafts.py), under each ``calls_in_reasoning`` reading,
    for every grammar with reasoning: the specialised parser's message and the characters it leaves out are the
    session's, or it declines; a draft the output closes is reasoning, one it ends inside is read again as
    markup. The drafts read, the rewinds and the parses the compiled walk took back after a draft are counted,
    so that declining them cannot pass."""
    read: list[int] = []
    given_back: list[bool] = []
    real, real_walk, real_rewind = oneshot._DraftWatch.take, oneshot.OneShot._walk, oneshot._DraftWatch.rewind
    rewound: list[bool] = []

    def rewind(self: Any, build: Any) -> Any:
        rewound.append(True)
        return real_rewind(self, build)
    monkeypatch.setattr(oneshot._DraftWatch, "rewind", rewind)

    def counted(self: Any, *args: Any) -> int:
        upto = real(self, *args)
        read.append(upto)
        return upto

    def walked(self: Any, *args: Any) -> Any:
        found = real_walk(self, *args)
        given_back.append(not found[2])  # (the compiled walk goes on after a draft)
        return found
    monkeypatch.setattr(oneshot._DraftWatch, "take", counted)
    monkeypatch.setattr(oneshot.OneShot, "_walk", walked)
    taken = drafted = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in DRAFTING:
            grammar = grammar_parse.load_grammar(name)
            drift = [v for tname in ("drafted_call", "drafted_only") if TRANSFORMS[tname].applies(grammar)
                     and tname not in opt_outs(grammar) for v in variants(name, tname)]
            cases = [(g.text, g.prefix, g.tools) for g in [*goldens(name), *samples(TRANSCRIPTS, name), *drift]]
            for text, prefix, tools in cases:
                options = grammar_parse.ParseOptions(strict=False, calls_in_reasoning=reading)
                grammar_parse.ResponseParser(grammar, prefix, tools=tools, options=options)  # (the prompt's replay)
                del read[:]
                found = session.specialised_parse(grammar, text, prefix, ToolTypes.from_tools(tools), options)
                if found is None:
                    continue
                taken += 1
                drafted += any(upto >= 0 for upto in read)
                oneshot.SPECIALISED = False
                try:
                    parser = grammar_parse.ResponseParser(grammar, prefix, tools=tools, options=options)
                    expected = parser.finalize(text)[0]
                    spans = sum(end - start for start, end in parser.discarded_spans)
                finally:
                    oneshot.SPECIALISED = True
                assert strict_equal(found[0], expected) and list(found[0]) == list(expected), \
                    f"{name} ({reading}): {text[:300]!r}\nsession:     {expected!r}\nspecialised: {found[0]!r}"
                assert found[1] == spans, text[:200]
    assert taken > 100
    assert (drafted == 0) == (reading == "always"), drafted
    assert any(given_back) == (reading != "always"), sum(given_back)
    assert any(rewound) == (reading != "always"), len(rewound)  # (outputs that end inside a draft, read again)


def _session_message(grammar: Any, text: str, prefix: str, tools: Any, options: Any) -> Any:
    """``parse_response`` by the session (the specialised parser off)."""
    oneshot.SPECIALISED = False
    try:
        return grammar_parse.parse_response(text, grammar, prefix=prefix, tools=tools, options=options)
    finally:
        oneshot.SPECIALISED = True


def _specialised(grammar: Any, text: str, prefix: str, tools: Any, options: Any, compiled: bool = True) -> Any:
    """The specialised parser's result, with its compiled walk (where made) or without it (the generic walk)."""
    shot = generated.specialised(grammar)
    kept = shot.compiled
    if not compiled:
        shot.compiled = None
    try:
        return session.specialised_parse(grammar, text, prefix, ToolTypes.from_tools(tools), options)
    finally:
        shot.compiled = kept


@pytest.mark.parametrize("reading", ["never", "fallback"])
def test_a_draft_ends_at_its_blocks_close_spelled_like_another_delimiter(reading: str) -> None:
    """plamo3's stray reasoning close (drafts.closes_at): the draft before it ends there, and the output is taken
    (a walk that read the close as more of the draft would decline it, the output ending inside the draft)."""
    grammar = grammar_parse.load_grammar("plamo3")
    options = grammar_parse.ParseOptions(strict=False, calls_in_reasoning=reading)
    for sample in variants("plamo3", "drafted_call"):
        grammar_parse.ResponseParser(grammar, sample.prefix, tools=sample.tools, options=options)
        found = _specialised(grammar, sample.text, sample.prefix, sample.tools, options)
        assert found is not None, sample.name
        assert strict_equal(found[0], _session_message(grammar, sample.text, sample.prefix, sample.tools, options))


def _muse_blocks() -> dict[str, str]:
    """Pieces of a muse output (its reasoning repeats): a reasoning block holding a draft, closed; one without a
    draft; a call; an answer; a block holding two drafts; and a block whose draft the output ends inside."""
    text = variants("muse", "drafted_call")[0].text
    cut = text.index("<|eom|>") + len("<|eom|>")
    drafted, draft = text[:cut], text[:text.index(" but first")]
    return {"drafted": drafted, "plain": " to=self<|message|>Thinking it over.<|eom|>",
            "call": text[cut:].removeprefix("<|start|>assistant"), "answer": " to=user<|message|>Done.<|eot|>",
            "two": draft + " and " + drafted[drafted.index("I could"):], "unclosed": draft}


@pytest.mark.parametrize("reading", ["never", "fallback"])
@pytest.mark.parametrize("compiled", [False, True])
def test_a_later_draft_the_output_ends_in_goes_back_to_its_own_delimiter(reading: str, compiled: bool) -> None:
    """muse repeats its reasoning: a draft in a closed block, then a second block whose draft the output ends inside.
    Read again as markup from the second draft's delimiter, not the first's (the session's undo), with the compiled
    walk or without it (one generic walk then reads both drafts)."""
    grammar, sample, pieces = grammar_parse.load_grammar("muse"), variants("muse", "drafted_call")[0], _muse_blocks()
    text = pieces["drafted"] + "<|start|>assistant" + pieces["unclosed"]
    options = grammar_parse.ParseOptions(strict=False, calls_in_reasoning=reading)
    grammar_parse.ResponseParser(grammar, sample.prefix, tools=sample.tools, options=options)
    if compiled:
        for _ in range(generated.FIRST_BUILD):  # (the walk is compiled at the FIRST_BUILD-th parse)
            _specialised(grammar, text, sample.prefix, sample.tools, options)
        shot = generated.specialised(grammar).compiled
        assert shot is not None and shot.current() is not None
    found = _specialised(grammar, text, sample.prefix, sample.tools, options, compiled)
    expected = _session_message(grammar, text, sample.prefix, sample.tools, options)
    assert found is not None and strict_equal(found[0], expected), (found, expected)


@settings(max_examples=examples(1), deadline=None)
@given(blocks=st.lists(st.sampled_from(["drafted", "plain", "call", "answer", "two"]), min_size=1, max_size=5),
       end=st.sampled_from(["", "unclosed", "cut"]), cut=st.integers(min_value=1), data=st.data())
def test_drafts_across_repeated_reasoning_are_read_as_the_session_reads_them(blocks: list[str], end: str, cut: int,
                                                                            data: st.DataObject) -> None:
    """Any sequence of muse's reasoning blocks, drafts, calls and answers, ending in a draft or cut anywhere: under
    each reading, with the compiled walk and without it, the specialised parser's message is the session's."""
    pieces = _muse_blocks()
    text = "<|start|>assistant".join(pieces[b] for b in blocks + (["unclosed"] if end == "unclosed" else []))
    if end == "cut":
        text = text[:1 + cut % len(text)]
    grammar, sample = grammar_parse.load_grammar("muse"), variants("muse", "drafted_call")[0]
    reading = data.draw(st.sampled_from(["never", "fallback"]))
    options = grammar_parse.ParseOptions(strict=False, calls_in_reasoning=reading)
    grammar_parse.ResponseParser(grammar, sample.prefix, tools=sample.tools, options=options)
    expected = _session_message(grammar, text, sample.prefix, sample.tools, options)
    for compiled in (False, True):
        found = _specialised(grammar, text, sample.prefix, sample.tools, options, compiled)
        assert found is None or strict_equal(found[0], expected), (blocks, end, reading, compiled, found, expected)


def test_it_takes_most_golden_outputs() -> None:
    """The share of golden outputs the specialised parser takes (93% when it was written): what makes it
    worth having, held against a change that makes it decline."""
    found = [specialised_result(name, g.text, g.prefix, g.tools, False) is not None
             for name in GRAMMARS for g in goldens(name) if "error" not in g.expected]
    assert sum(found) / len(found) > 0.85, f"{sum(found)} of {len(found)}"


def test_the_switch_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    grammar = grammar_parse.load_grammar("qwen3")
    text = "<think>\nhmm\n</think>\n\nHello."
    calls: list[Any] = []
    real = oneshot.OneShot.parse
    monkeypatch.setattr(oneshot.OneShot, "parse", lambda self, *a: calls.append(a) or real(self, *a))
    on = grammar_parse.parse_response(text, grammar, prefix="")
    monkeypatch.setattr(oneshot, "SPECIALISED", False)
    off = grammar_parse.parse_response(text, grammar, prefix="")
    assert len(calls) == 1 and on == off == {"role": "assistant", "reasoning_content": "hmm", "content": "Hello."}


def test_a_generator_of_tools_is_read_once_whoever_parses() -> None:
    """The specialised parser reads the tools, and the session again where it declines: a generator given
    as the tools must reach both."""
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "n": {"type": "integer"}}}}}
    for text in ('<tool_call>\n{"name": "f", "arguments": {"n": "3"}}\n</tool_call>',  # taken
                 '<tool_call>\n{"name": "f", "arguments": {"n": "3"}\n</tool_call>'):  # broken: declined
        message = grammar_parse.parse_response(text, "qwen3", prefix="", tools=(t for t in [tool]), strict=False)
        assert message["tool_calls"][0]["function"]["name"] == "f"
        assert message["tool_calls"][0]["function"]["arguments"] == {"n": 3}  # (typed: the tools were read)


def test_a_tool_list_changed_between_parses_is_read_again() -> None:
    """The types of a tool list are kept per list while it stays equal to what it was (ToolTypes.from_tools):
    a list changed in place, or another list, is read again."""
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "n": {"type": "integer"}}}}}
    tools = [tool]
    text = '<tool_call>\n{"name": "f", "arguments": {"n": "3"}}\n</tool_call>'

    def argument() -> Any:
        return grammar_parse.parse_response(text, "qwen3", prefix="", tools=tools)["tool_calls"][0]["function"][
            "arguments"]["n"]
    assert argument() == 3 and argument() == 3
    tool["function"]["parameters"]["properties"]["n"]["type"] = "string"  # (the same list, changed in place)
    assert argument() == "3"
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "n": {"type": "integer"}}}}}]
    assert argument() == 3
    tools[0]["x-handle"] = threading.Lock()  # (a value that cannot be copied: the list is read as it is)
    assert argument() == 3 and argument() == 3


def test_tool_lists_of_the_same_content_are_read_once_and_only_those() -> None:
    """A server decodes each request's tools afresh: lists of the same content share what reading gave (the
    types, the call checks), whatever list object holds them; ``1``, ``1.0`` and ``True`` (equal to ``==``)
    are different content, and the kept reading is of a copy, which a caller changing its list leaves be."""
    from grammar_parse._engine.tools import CallValidator, ToolTypes

    def tools(const: Any, kind: str = "integer") -> list[Any]:
        return [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
            "n": {"type": kind}, "c": {"const": const}}}}}]
    first = tools(1)
    assert ToolTypes.from_tools(first) is ToolTypes.from_tools(tools(1))  # (another list, the same content)
    call = {"function": {"name": "f", "arguments": {"c": True}}}
    assert CallValidator(tools(1)).problems(call) and CallValidator(tools(1.0)).problems(call)
    assert not CallValidator(tools(True)).problems(call)  # (jsonschema tells True from 1: so does the key)
    assert CallValidator(tools(1)).problems(call)
    kept = ToolTypes.from_tools(first)
    assert kept is not None
    first[0]["function"]["parameters"]["properties"]["n"]["type"] = "string"
    assert kept.types_of("f", "n") == ("integer",)  # (read from a copy)
    again = ToolTypes.from_tools(first)
    assert again is not None and again.types_of("f", "n") == ("string",)
    assert CallValidator(tools(1, "string")).problems({"function": {"name": "f", "arguments": {"n": 1}}})


def test_a_tool_schema_nested_past_recursion_is_a_call_problem_not_an_exception() -> None:
    """A parameters schema nested past what Python's recursion reaches (only a Python caller can pass one: a
    server refuses a body past 64 levels) gives each call of the tool a ``call.schema`` problem, as an invalid
    schema does; the message still comes out."""
    from grammar_parse._engine.tools import CallValidator
    from grammar_parse.adapters.chat_completions import chat_message

    deep: dict[str, Any] = {}
    node = deep
    for _ in range(5000):
        node["x"] = node = {}
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "a": deep}}}}]
    problems = CallValidator(tools).problems({"function": {"name": "f", "arguments": {"a": 1}}})
    assert [p["code"] for p in problems] == ["call.schema"] and "too deeply" in problems[0]["message"]
    message, _ = chat_message('<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>', "qwen3",
                              prefix="", tools=tools)
    assert message["tool_calls"][0]["errors"] == problems


def test_a_scan_that_fails_is_the_sessions_to_report(monkeypatch: pytest.MonkeyPatch) -> None:
    """A delimiter's regex past its time limit fails the scan: lenient mode records it (the session does),
    and it never escapes the specialised parser."""
    from grammar_parse._engine.delimiters import RegexMatcher

    def timed_out(*args: Any) -> Any:
        raise TimeoutError
    monkeypatch.setattr(RegexMatcher, "search", timed_out)
    grammar = pickle.loads(pickle.dumps(grammar_parse.load_grammar("qwen3")))  # (its parsers built from here on)
    message = grammar_parse.parse_response("Hello.", grammar, prefix="", strict=False)
    assert [e["code"] for e in message["parse_errors"]] == ["parse.timeout"]
    with pytest.raises(grammar_parse.ParseError, match="time limit"):
        grammar_parse.parse_response("Hello.", grammar, prefix="", strict=True)


def finalized(name: str, text: str, prefix: str, tools: Any, extended: bool, on: bool) -> tuple[str, Any]:
    """``finalize(text)`` of a fresh parser (as ``chat_message`` and ``respond`` run it): the message, every
    event (with the call events when ``extended``) and the discarded spans, with the specialised parser on
    or off."""
    oneshot.SPECIALISED = on
    try:
        parser = grammar_parse.ResponseParser(name, prefix, tools=tools, strict=False, extended_events=extended,
                                              call_events=extended)
        message, events = parser.finalize(text)
        return "message", [message, events, [list(span) for span in parser.discarded_spans], parser.message]
    except grammar_parse.GrammarParseError as e:
        return "error", (type(e).__name__, e.code)
    finally:
        oneshot.SPECIALISED = True


@pytest.mark.parametrize("name", GRAMMARS)
def test_a_fresh_parsers_finalize_gives_the_sessions_events(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the specialised parser takes a whole output given to a fresh parser's finalize, its events are
    the session's, one for one (what the Chat Completions and LMSP adapters and the call streamer read). The
    drift rewrites only in the deep profile: test_drift holds the message of a fresh parser's finalize of each
    (this path) equal to the session's, streamed."""
    taken: list[bool] = []
    real = session._specialised_finalize

    def counted(parser: Any, text: str) -> Any:
        done = real(parser, text)
        taken.append(done is not None)
        return done
    monkeypatch.setattr(session, "_specialised_finalize", counted)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for text, prefix, tools in outputs(name, drift=DEEP):
            for extended in (False, True):
                expected = finalized(name, text, prefix, tools, extended, on=False)
                got = finalized(name, text, prefix, tools, extended, on=True)
                assert got[0] == expected[0] and strict_equal(got[1], expected[1]), \
                    f"{name} (extended={extended}): {text[:200]!r}\nsession:     {expected[1]!r}\nspecialised: {got[1]!r}"
    assert any(taken), f"{name}: the specialised parser took no fresh parser's output"
