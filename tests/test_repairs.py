"""Known model glitches that lenient mode repairs (issue 31, class 9), one table row per glitch and grammar.

A grammar declares a repair with ``//@ repair TERMINAL "repair.<what>"``: an opener that reads the glitch as
a call. Lenient mode makes the call and records a ``parse_errors`` entry (the repair's code, the field, the
span of the repaired call); strict mode reads the same text as it did before the repair existed (checked
against the grammar with its repair openers disabled, on the table and on generated outputs). Ambiguous text
(prose naming the markup, a repaired call inside a reasoning block that never closes) is never repaired.
Every row is parsed one-shot and streamed in 1, 3 and 7-character chunks, through the parser and the Chat
Completions stream.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import grammar_parse as gp
from conformance import jsonable, strict_equal
from goldens import goldens
from grammar_parse.adapters.chat_completions import ChatCompletionsStream, chat_message
from grammar_parse.errors import ERROR_CODES
from grammar_parse._engine.toolstream import call_regions
from strategies import chunkings, examples, grammar_outputs


def call(name: str, arguments: Any, **extra: Any) -> dict[str, Any]:
    return {**extra, "type": "function", "function": {"name": name, "arguments": arguments}}


WEATHER = call("get_weather", {"city": "Paris"})
QWEN = "<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>"
SEED = "<function=get_weather>\n<parameter=city>Paris</parameter>\n</function>"
KIMI = '<|tool_call_begin|>functions.{name}:{i}<|tool_call_argument_begin|>{args}<|tool_call_end|>'
KIMI_WEATHER = KIMI.format(name="get_weather", i=0, args='{"city": "Paris"}')
KIMI_TIME = KIMI.format(name="get_time", i=1, args='{"tz": "UTC"}')
SECTION_END = "<|tool_calls_section_end|>"
PREFILLED = "<|im_start|>assistant\n<think>\n"
DS = "<｜tool▁call▁begin｜>{name}<｜tool▁sep｜>{args}<｜tool▁call▁end｜>"
DS_WEATHER = DS.format(name="get_weather", args='{"city": "Paris"}')
DS_TIME = DS.format(name="get_time", args='{"tz": "UTC"}')
DS_PROMPT = "<｜Assistant｜></think>"
DS3 = "<｜tool▁call▁begin｜>function<｜tool▁sep｜>{name}\n```json\n{args}\n```<｜tool▁call▁end｜>"
DS3_WEATHER = DS3.format(name="get_weather", args='{"city": "Paris"}')
DS3_TIME = DS3.format(name="get_time", args='{"tz": "UTC"}')
DSML = [("deepseek_v32", "<｜DSML｜"), ("deepseek_v4", "<｜DSML｜"), ("deepseek_v41", "<｜DSML｜ ")]


def dsml(prefix: str, name: str = "get_weather", key: str = "city", value: str = "Paris") -> str:
    close = prefix.replace("<", "</")
    return (f'{prefix}invoke name="{name}">\n{prefix}parameter name="{key}" string="true">{value}{close}parameter>\n'
            f'{close}invoke>')

# (grammar, prompt, output, the lenient message without its role and parse_errors, the repairs as (code, the
# text their span covers)); a row without repairs is a negative case: lenient mode reads it as strict mode does
CASES: list[tuple[str, str, str, dict[str, Any], list[tuple[str, str]]]] = [
    # (a) Qwen3-Coder XML calls without their <tool_call> opener
    ("qwen3_coder", "", QWEN + "\n</tool_call>", {"tool_calls": [WEATHER]},
     [("repair.tool_call_opener", QWEN + "\n</tool_call>")]),
    ("qwen3_coder", "", "Let me check.\n" + QWEN + "\nDone.", {"content": "Let me check.\n\nDone.", "tool_calls": [WEATHER]},
     [("repair.tool_call_opener", QWEN)]),
    ("qwen3_coder", "", "<function=get_time>\n</function>\n" + QWEN + "\n</tool_call><|im_end|>",
     {"tool_calls": [call("get_time", {}), WEATHER]},
     [("repair.tool_call_opener", "<function=get_time>\n</function>"), ("repair.tool_call_opener", QWEN + "\n</tool_call>")]),
    ("qwen3_coder", "", "<tool_call>\n<function=get_time>\n</function>\n</tool_call>\n" + QWEN,
     {"tool_calls": [call("get_time", {}), WEATHER]}, [("repair.tool_call_opener", QWEN)]),
    # cut off inside its parameter: the call as far as it goes, as a proper call cut there
    ("qwen3_coder", "", "<function=get_weather>\n<parameter=city>\nPar",
     {"tool_calls": [call("get_weather", {"city": "Par"})]},
     [("repair.tool_call_opener", "<function=get_weather>\n<parameter=city>\nPar")]),
    # without its close: it ends where the end of turn, a proper call or the reasoning's close begins
    ("qwen3_coder", "", "<function=get_weather>\n<parameter=city>\nParis<|im_end|>ignored",
     {"tool_calls": [WEATHER]}, [("repair.tool_call_opener", "<function=get_weather>\n<parameter=city>\nParis")]),
    ("qwen3_coder", "", "Hi <function=get_time>\n<parameter=tz>\nUTC\n<tool_call>\n<function=get_weather>\n"
     "<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call> bye",
     {"content": "Hi  bye", "tool_calls": [call("get_time", {"tz": "UTC"}), WEATHER]},
     [("repair.tool_call_opener", "<function=get_time>\n<parameter=tz>\nUTC\n")]),
    # in reasoning, a call the block's close ends; no call follows the block, so it counts (the family's
    # calls_in_reasoning "fallback" reading)
    ("qwen3_coder", "", "<think>Let me try " + QWEN.removesuffix("\n</parameter>\n</function>") + "\n</think>\n\nIt is sunny.",
     {"reasoning_content": "Let me try", "content": "It is sunny.", "tool_calls": [WEATHER]},
     [("repair.tool_call_opener", "<function=get_weather>\n<parameter=city>\nParis\n")]),
    ("qwen3_coder", "", "Call tools as <function=NAME> with parameters.", {"content": "Call tools as <function=NAME> with "
                                                                          "parameters."}, []),
    ("qwen3_coder", "", "<function=f> opens a call and </function> closes it.",
     {"content": "<function=f> opens a call and </function> closes it."}, []),
    ("qwen3_coder", "", "Checking.\n<function=get_weather>\n", {"content": "Checking.\n<function=get_weather>"}, []),
    ("qwen3_5", PREFILLED, "Need the weather.\n</think>\n\n" + QWEN + "\n</tool_call>",
     {"reasoning_content": "Need the weather.", "tool_calls": [WEATHER]},
     [("repair.tool_call_opener", QWEN + "\n</tool_call>")]),
    ("qwen3_5", "", "Use <function=get_weather> for it.<|im_end|>", {"content": "Use <function=get_weather> for it."}, []),
    ("mimo", "", SEED + "\n</tool_call>", {"tool_calls": [WEATHER]}, [("repair.tool_call_opener", SEED + "\n</tool_call>")]),
    ("mimo", "", "Use <function=get_weather> for it.", {"content": "Use <function=get_weather> for it."}, []),
    ("mimo", "", "<function=find>\n< parameter = q >x y</parameter>\n</function>", {"tool_calls": [call("find", {"q": "x y"})]},
     [("repair.tool_call_opener", "<function=find>\n< parameter = q >x y</parameter>\n</function>")]),
    ("seed_oss", "", "<seed:think>Weather.</seed:think>" + SEED + "\n</seed:tool_call>Done.<seed:eos>",
     {"reasoning_content": "Weather.", "content": "Done.", "tool_calls": [WEATHER]},
     [("repair.tool_call_opener", SEED + "\n</seed:tool_call>")]),
    ("seed_oss", "", "<function=f>\n<parameter=a>x<seed:eos>ignored", {"tool_calls": [call("f", {"a": "x"})]},
     [("repair.tool_call_opener", "<function=f>\n<parameter=a>x")]),
    # written in a reasoning block that never closes: reasoning text (two slips at once)
    ("seed_oss", "", "<seed:think>Maybe " + SEED, {"reasoning_content": "Maybe " + SEED}, []),
    # (b) Kimi K2 calls without the section marker
    ("kimi_k2", "", KIMI_WEATHER, {"tool_calls": [{"id": "functions.get_weather:0", **WEATHER}]},
     [("repair.tool_call_section", KIMI_WEATHER)]),
    ("kimi_k2", "", "<think>Weather.</think>" + KIMI_WEATHER + SECTION_END,
     {"reasoning_content": "Weather.", "tool_calls": [{"id": "functions.get_weather:0", **WEATHER}]},
     [("repair.tool_call_section", KIMI_WEATHER + SECTION_END)]),
    ("kimi_k2", "", "Sure. " + KIMI_WEATHER + KIMI_TIME + " Done.<|im_end|>",
     {"content": "Sure.  Done.", "tool_calls": [{"id": "functions.get_weather:0", **WEATHER},
                                               {"id": "functions.get_time:1", **call("get_time", {"tz": "UTC"})}]},
     [("repair.tool_call_section", KIMI_WEATHER), ("repair.tool_call_section", KIMI_TIME)]),
    ("kimi_k2", "", "(no content)" + KIMI_WEATHER, {"tool_calls": [{"id": "functions.get_weather:0", **WEATHER}]},
     [("repair.tool_call_section", KIMI_WEATHER)]),
    ("kimi_k2", "", KIMI_WEATHER[:-len("<|tool_call_end|>")] + "<|im_end|>",
     {"tool_calls": [{"id": "functions.get_weather:0", **WEATHER}]},
     [("repair.tool_call_section", KIMI_WEATHER[:-len("<|tool_call_end|>")])]),
    ("kimi_k2", "", "<think>Maybe " + KIMI_WEATHER + " later", {"reasoning_content": "Maybe " + KIMI_WEATHER + " later"}, []),
    ("kimi_k2", "", "<|tool_call_begin|>functions.get_weather:0 is how it starts.",
     {"content": "<|tool_call_begin|>functions.get_weather:0 is how it starts."}, []),
    # ... and DeepSeek V3.1's (SGLang's tests: the section marker left out)
    ("deepseek_v31", DS_PROMPT, "Let me check.\n" + DS_WEATHER, {"content": "Let me check.", "tool_calls": [WEATHER]},
     [("repair.tool_call_section", DS_WEATHER)]),
    ("deepseek_v31", "<｜Assistant｜><think>", "Weather.</think>" + DS_WEATHER + DS_TIME + "<｜tool▁calls▁end｜> ok",
     {"reasoning_content": "Weather.", "content": "ok", "tool_calls": [WEATHER, call("get_time", {"tz": "UTC"})]},
     [("repair.tool_call_section", DS_WEATHER), ("repair.tool_call_section", DS_TIME + "<｜tool▁calls▁end｜>")]),
    ("deepseek_v31", DS_PROMPT, DS_WEATHER[:-len("<｜tool▁call▁end｜>")] + "<｜end▁of▁sentence｜>", {"tool_calls": [WEATHER]},
     [("repair.tool_call_section", DS_WEATHER[:-len("<｜tool▁call▁end｜>")])]),
    ("deepseek_v31", "<｜Assistant｜><think>", "Maybe " + DS_WEATHER, {"reasoning_content": "Maybe " + DS_WEATHER}, []),
    ("deepseek_v31", DS_PROMPT, "Write <｜tool▁call▁begin｜>NAME to start.",
     {"content": "Write <｜tool▁call▁begin｜>NAME to start."}, []),
    # ... and DeepSeek V3's (0324, R1-0528: the fenced form, the same slip)
    ("deepseek_v3", "<｜Assistant｜>", "Let me check.\n" + DS3_WEATHER, {"content": "Let me check.", "tool_calls": [WEATHER]},
     [("repair.tool_call_section", DS3_WEATHER)]),
    ("deepseek_v3", "<｜Assistant｜>", "<think>Weather.</think>" + DS3_WEATHER + DS3_TIME + "<｜tool▁calls▁end｜> ok",
     {"reasoning_content": "Weather.", "content": "ok", "tool_calls": [WEATHER, call("get_time", {"tz": "UTC"})]},
     [("repair.tool_call_section", DS3_WEATHER), ("repair.tool_call_section", DS3_TIME + "<｜tool▁calls▁end｜>")]),
    ("deepseek_v3", "<｜Assistant｜>", DS3_WEATHER[:-len("<｜tool▁call▁end｜>")] + "<｜end▁of▁sentence｜>",
     {"tool_calls": [WEATHER]}, [("repair.tool_call_section", DS3_WEATHER[:-len("<｜tool▁call▁end｜>")])]),
    ("deepseek_v3", "<｜Assistant｜>", "<think>Maybe " + DS3_WEATHER, {"reasoning_content": "Maybe " + DS3_WEATHER}, []),
    ("deepseek_v3", "<｜Assistant｜>", "Write <｜tool▁call▁begin｜>function to start.",
     {"content": "Write <｜tool▁call▁begin｜>function to start."}, []),
    # ... and DeepSeek V3.2's and V4's DSML invokes without their block (SGLang's tests: V4 "frequently")
    *[(g, DS_PROMPT, "Let me look.\n" + dsml(prefix), {"content": "Let me look.", "tool_calls": [WEATHER]},
       [("repair.tool_call_section", dsml(prefix))]) for g, prefix in DSML],
    *[(g, DS_PROMPT, dsml(prefix) + dsml(prefix, "get_time", "tz", "UTC") + " ok",
       {"content": "ok", "tool_calls": [WEATHER, call("get_time", {"tz": "UTC"})]},
       [("repair.tool_call_section", dsml(prefix)), ("repair.tool_call_section", dsml(prefix, "get_time", "tz", "UTC"))])
      for g, prefix in DSML],
    *[(g, "<｜Assistant｜><think>", "Maybe " + dsml(prefix), {"reasoning_content": "Maybe " + dsml(prefix)}, [])
      for g, prefix in DSML],
    # (c) Mistral v11 calls without [ARGS]
    ("mistral_v11", "", '[TOOL_CALLS]add{"a": 1, "b": 2}', {"tool_calls": [call("add", {"a": 1, "b": 2})]},
     [("repair.args_token", '[TOOL_CALLS]add{"a": 1, "b": 2}')]),
    ("mistral_v11", "", '[THINK]Sum.[/THINK][TOOL_CALLS]add{"a": 1}[TOOL_CALLS]neg{"x": 3}</s>',
     {"reasoning_content": "Sum.", "tool_calls": [call("add", {"a": 1}), call("neg", {"x": 3})]},
     [("repair.args_token", '[TOOL_CALLS]add{"a": 1}'), ("repair.args_token", '[TOOL_CALLS]neg{"x": 3}')]),
    ("mistral_v11", "", 'Sure. [TOOL_CALLS]add[CALL_ID]a1b2c3d4e{"a": 1} done',
     {"content": "Sure.  done", "tool_calls": [call("add", {"a": 1}, id="a1b2c3d4e")]},
     [("repair.args_token", '[TOOL_CALLS]add[CALL_ID]a1b2c3d4e{"a": 1}')]),
    ("mistral_v11", "", '[TOOL_CALLS]a[ARGS]{}[TOOL_CALLS]b{}', {"tool_calls": [call("a", {}), call("b", {})]},
     [("repair.args_token", "[TOOL_CALLS]b{}")]),
    ("mistral_v11", "", "[TOOL_CALLS]Sure, {name} is it.", {"content": "[TOOL_CALLS]Sure, {name} is it."}, []),
    ("mistral_v11", "", '[TOOL_CALLS]add {"a": 1}', {"content": '[TOOL_CALLS]add {"a": 1}'}, []),
    ("mistral_v11", "", '[TOOL_CALLS]add</s>{"a": 1}', {"content": "[TOOL_CALLS]add"}, []),  # (the turn ended)
    ("mistral_v11", "", '[THINK]Try [TOOL_CALLS]add{"a": 1}', {"reasoning_content": 'Try [TOOL_CALLS]add{"a": 1}'}, []),
]
IDS = [f"{c[0]}-{i}" for i, c in enumerate(CASES)]


@cache
def unrepaired(name: str) -> gp.Grammar:
    """The built-in grammar with its repair openers disabled (spelled as text no output holds): what strict
    mode reads, and what every mode read before the repairs."""
    grammar = gp.load_grammar(name)
    source = grammar.source
    lines = []
    for line in source.splitlines():
        if line.startswith("//@ repair "):
            continue
        head = line.split(":", 1)[0].split(".", 1)[0]
        term = grammar.terminals.get(head)
        if term is not None and term.repair is not None and not line.startswith("//"):
            line = f'{head}: "\u27e6unrepaired\u27e7"'
        lines.append(line)
    return _build("\n".join(lines), name)


def _build(source: str, name: str) -> gp.Grammar:
    from grammar_parse._engine.grammar import build_grammar

    return build_grammar(source, name=f"{name} unrepaired")


def repair_grammars() -> list[str]:
    return sorted(n for n in gp.list_grammars() if any(t.repair for t in gp.load_grammar(n).terminals.values()))


def parse(grammar: Any, prefix: str, text: str, chunks: list[str] | None = None, *, strict: bool = False) -> Any:
    """The message (JSON-comparable) one-shot or streamed in ``chunks``, or ``{"error": code}``."""
    try:
        parser = gp.ResponseParser(grammar, prefix, strict=strict, trace=not strict)
        if chunks is None:
            message = parser.finalize(text)[0]
        else:
            for chunk in chunks:
                parser.feed(chunk)
            message = parser.finalize()[0]
    except gp.GrammarParseError as e:
        return {"error": e.code}
    if not strict and text:
        account(parser, text)
    return jsonable(message)


def account(parser: gp.ResponseParser, text: str) -> None:
    """Spans tile the output (a delimiter that began in the replayed prompt counts from 0)."""
    spans = [{**s, "start": max(s["start"], 0)} for s in parser.spans if s["end"] > 0]
    assert spans[0]["start"] == 0 and spans[-1]["end"] == len(text)
    for before, after in zip(spans, spans[1:]):
        assert before["end"] == after["start"], (before, after)


def without_messages(message: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in message.items() if k not in ("role", "parse_errors")}


@pytest.mark.parametrize("grammar, prefix, text, expected, repairs", CASES, ids=IDS)
def test_a_glitch_is_repaired_in_lenient_mode_only(grammar, prefix, text, expected, repairs):
    message = parse(grammar, prefix, text)
    assert message["role"] == "assistant"
    assert without_messages(message) == expected
    errors = message.get("parse_errors", [])
    got = [(e["code"], e["field"], text[e["span"][0]:e["span"][1]]) for e in errors if e["code"].startswith("repair.")]
    assert got == [(code, "tool_calls", spanned) for code, spanned in repairs]
    assert all(e["code"] in ERROR_CODES and e["message"] for e in errors)
    if not repairs:  # ambiguous: no repair, and lenient mode reads it as strict mode does
        assert strict_equal(message, parse(grammar, prefix, text, strict=True))
    for size in (1, 3, 7):
        chunks = [text[i:i + size] for i in range(0, len(text), size)]
        assert strict_equal(parse(grammar, prefix, text, chunks), message), f"streamed in {size}-character chunks"


@pytest.mark.parametrize("grammar, prefix, text, expected, repairs", CASES, ids=IDS)
def test_strict_mode_reads_a_glitch_as_before(grammar, prefix, text, expected, repairs):
    before = parse(unrepaired(grammar), prefix, text, strict=True)
    assert strict_equal(parse(grammar, prefix, text, strict=True), before)
    assert strict_equal(parse(grammar, prefix, text, [text[i:i + 3] for i in range(0, len(text), 3)], strict=True), before)
    if repairs:
        assert "tool_calls" not in before or len(before["tool_calls"]) < len(expected["tool_calls"])


@pytest.mark.parametrize("grammar, prefix, text, expected, repairs", [c for c in CASES if c[4]],
                         ids=[i for i, c in zip(IDS, CASES) if c[4]])
def test_the_chat_completions_stream_carries_the_repaired_calls(grammar, prefix, text, expected, repairs):
    stream = ChatCompletionsStream(grammar, prefix, strict=False, ids=lambda kind: f"{kind}_1")
    for i in range(0, len(text), 3):
        stream.feed(text[i:i + 3])
    stream.finish()
    sent = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in stream.message["tool_calls"]]
    made = [(c["function"]["name"], c["function"]["arguments"]) for c in expected["tool_calls"]]
    whole = [(n, a) for n, a in made if not isinstance(a, str)]  # (a broken call sends the valid part of its text)
    assert [n for n, _ in sent] == [n for n, _ in made] and [s for s in sent if (s[0], s[1]) in whole] == whole
    codes = [e["code"] for e in stream.message["parse_errors"]]
    assert codes[:len(repairs)] == [code for code, _ in repairs]


def test_every_repair_grammar_has_rows():
    assert repair_grammars() == sorted({c[0] for c in CASES})
    for name in repair_grammars():
        rows = [c for c in CASES if c[0] == name]
        assert any(c[4] for c in rows) and any(not c[4] for c in rows), f"{name}: a repair and a negative case"


def test_a_repair_directive_names_a_repair_code_and_an_opener():
    base = '//@ grammar_parse 1\n//@ region content {}\n//@ region tool_calls {"content": "json"}\n' \
           'start: content?\ncontent: (CONTENT_TEXT | tool_calls)+\ntool_calls: TOOL_CALLS_OPEN TOOL_CALLS_TEXT* TOOL_CALLS_CLOSE\n' \
           'TOOL_CALLS_OPEN.1: "<c>"\nTOOL_CALLS_CLOSE: "</c>"\n%declare CONTENT_TEXT TOOL_CALLS_TEXT\n'
    assert _build(base + '//@ repair TOOL_CALLS_OPEN "repair.tool_call_opener"\n', "x").terminals[
        "TOOL_CALLS_OPEN"].repair == "repair.tool_call_opener"
    for bad in ('//@ repair TOOL_CALLS_OPEN "parse.json"', '//@ repair TOOL_CALLS_OPEN "repair.nothing"',
                '//@ repair TOOL_CALLS_CLOSE "repair.tool_call_opener"', '//@ repair NOPE "repair.tool_call_opener"',
                "//@ repair TOOL_CALLS_OPEN repair.tool_call_opener"):
        with pytest.raises(gp.GrammarError) as raised:
            _build(base + bad + "\n", "x")
        assert raised.value.code == "grammar.directive"


# Pieces of glitches, for outputs mixed with each grammar's own delimiters and noise
PIECES = sorted({piece for c in CASES for piece in (c[2], c[2][: len(c[2]) // 2], c[2][len(c[2]) // 2:])})


@pytest.mark.parametrize("grammar", repair_grammars())
@settings(max_examples=examples(0.3))
@given(data=st.data())
def test_strict_mode_reads_any_output_as_before(grammar, data):
    """Whatever the output, strict mode gives what the grammar gave before its repairs (or the same error),
    and lenient mode the same message one-shot and streamed."""
    text = data.draw(st.lists(st.sampled_from(PIECES) | grammar_outputs(grammar, 8), max_size=4).map("".join))
    assert strict_equal(parse(grammar, "", text, strict=True), parse(unrepaired(grammar), "", text, strict=True))
    assert strict_equal(parse(grammar, "", text, data.draw(chunkings(text))), parse(grammar, "", text))


# ---------------------------------------------------------------------------- (d) Python-style calls stream as they are written
def pythonic_grammars() -> list[str]:
    return sorted(n for n in gp.list_grammars()
                  if any(getattr(r.spec, "content", None) == "pythonic" for r in call_regions(gp.load_grammar(n))))


PYTHONIC = [(g, case.path.stem) for g in pythonic_grammars() for case in goldens(g)]


def golden(grammar: str, stem: str) -> Any:
    return next(c for c in goldens(grammar) if c.path.stem == stem)


@pytest.mark.parametrize("grammar, stem", PYTHONIC, ids=[f"{g}/{s}" for g, s in PYTHONIC])
def test_a_python_style_call_streams_what_a_one_shot_parse_of_the_output_so_far_gives(grammar, stem):
    """Fed a character at a time, the stream has sent, after every character, the names of the calls a
    lenient one-shot parse of the output so far makes, and the whole arguments of every call but the last
    (those it has finished are the one-shot ones)."""
    case = golden(grammar, stem)
    stream = ChatCompletionsStream(grammar, case.prefix, tools=case.tools, strict=False, ids=lambda kind: f"{kind}_1")
    for k in range(1, len(case.text) + 1):
        stream.feed(case.text[k - 1])
        want = gp.parse_response(case.text[:k], grammar, prefix=case.prefix, tools=case.tools, strict=False)
        want = [c["function"] for c in want.get("tool_calls", [])]
        sent = stream.calls.sent_calls()
        assert [c.name for c in sent] == [w["name"] for w in want], f"after {case.text[:k]!r}"
        for call, made in zip(sent, want):
            if call.closed and not isinstance(made["arguments"], str):  # (a broken call's text: the wire sends its valid part)
                assert strict_equal(json.loads(call.arguments), made["arguments"]), f"after {case.text[:k]!r}"
        assert all(call.closed for call in sent[:-1]), f"a call before the last is still open after {case.text[:k]!r}"


@pytest.mark.parametrize("grammar, stem", PYTHONIC, ids=[f"{g}/{s}" for g, s in PYTHONIC])
def test_a_python_style_output_cut_anywhere_streams_its_one_shot_message(grammar, stem):
    """Every prefix, streamed in 3 and 7-character chunks and finished, gives the one-shot Chat Completions
    message of that prefix and the parser's one-shot calls."""
    case = golden(grammar, stem)
    for k in range(1, len(case.text) + 1):
        text = case.text[:k]
        one_shot, _ = chat_message(text, grammar, prefix=case.prefix, tools=case.tools, strict=False,
                                   ids=lambda kind: f"{kind}_1")
        parsed = gp.parse_response(text, grammar, prefix=case.prefix, tools=case.tools, strict=False)
        assert [c["function"]["name"] for c in one_shot.get("tool_calls", [])] == \
            [c["function"]["name"] for c in parsed.get("tool_calls", [])]
        for size in (3, 7):
            stream = ChatCompletionsStream(grammar, case.prefix, tools=case.tools, strict=False,
                                           ids=lambda kind: f"{kind}_1")
            for i in range(0, k, size):
                stream.feed(text[i:i + size])
            stream.finish()
            assert stream.message == one_shot, f"{text!r} in {size}-character chunks"


def test_every_pythonic_grammar_is_streamed():
    assert {g for g, _ in PYTHONIC} == set(pythonic_grammars()) >= {"lfm2", "llama3_pythonic", "llama4_pythonic", "olmo3"}
