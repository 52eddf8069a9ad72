"""derive_grammar on the vendored chat templates: every template that renders tool calls either derives a
grammar that reads all its probe renderings back, or is listed below with the error it raises and why (and
is held to raising it, so the list stays honest both ways). Derived grammars also read realistic output
beyond the probes, and markers are markup, never the probes' own words.

``python tests/test_derive.py`` prints the coverage table (templates that render tool calls, how many derive
and round-trip, by argument encoding, and each failure's reason).
"""

from __future__ import annotations

import functools
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import regex
from test_linear_patterns import problems

import grammar_parse as gp
from grammar_parse.templates._chat_template import ChatTemplate
from grammar_parse._engine.delimiters import RegexMatcher
from grammar_parse.templates._derive import Derived, derive_grammar
from grammar_parse.errors import ERROR_CODES, GrammarError
from grammar_parse.templates._probes import CONTENT, PROBES, REASONING, TOOLS, USER, Rendering, render_probes

TEMPLATES = Path(__file__).parent / "data" / "chat_templates"
NAMES = sorted(p.stem for p in TEMPLATES.glob("*.jinja"))
SPECIAL_TOKENS = {"bos_token": "<s>", "eos_token": "</s>"}

# Templates that render no assistant tool calls: derivation refuses them with derive.no_calls.
NO_CALLS = {
    "HuggingFaceTB-SmolLM3-3B": "drops an assistant message's tool_calls",
    "Kimi-K2-Instruct": "renders calls with list.append, which the sandbox refuses (as transformers')",
    "Kimi-K2-Thinking": "renders calls with list.append, which the sandbox refuses (as transformers')",
    "LFM2-8B-A1B": "drops an assistant message's tool_calls",
    "LFM2.5-Instruct": "drops an assistant message's tool_calls",
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": "drops an assistant message's tool_calls",
    "fireworks-ai-llama-3-firefunction-v2": "needs a 'functions' variable instead of tools",
    "google-gemma-2-2b-it": "has no tool support",
    "ibm-granite-granite-3.3-2B-Instruct": "drops an assistant message's tool_calls",
    "llama-cpp-deepseek-r1": "refuses every probe conversation",
    "llama-cpp-rwkv-world": "has no tool support",
    "microsoft-Phi-3.5-mini-instruct": "has no tool support",
}

# Templates that render tool calls but from which no grammar is derived yet: the code raised and why.
NOT_DERIVED = {
    # The generation prompt pre-writes "Here are my reasoning steps:" and past turns write the reasoning bare,
    # ended by [BEGIN FINAL RESPONSE]: unmarked text at the start is reasoning or content depending on what
    # comes later, which an LALR grammar cannot tell (the built-in apriel grammar assumes reasoning).
    "Apriel-1.6-15b-Thinker-fixed": "derive.shape",
}


@functools.lru_cache(maxsize=None)
def template(name: str) -> ChatTemplate:
    return ChatTemplate((TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8"), special_tokens=SPECIAL_TOKENS,
                        origin=name)


@functools.lru_cache(maxsize=None)
def renderings(name: str) -> tuple[Rendering, ...]:
    return tuple(render_probes(template(name)))


@functools.lru_cache(maxsize=None)
def derived(name: str) -> Derived | GrammarError:
    try:
        return derive_grammar(template(name), name=name, renderings=list(renderings(name)))
    except GrammarError as exc:
        return exc


def renders_calls(name: str) -> bool:
    """The figure's population: the one-call probe's rendering shows the call's name and argument."""
    one = next((r for r in renderings(name) if r.probe.name == "one_call"), None)
    return one is not None and "get_weather" in one.output and "Paris" in one.output


@pytest.mark.parametrize("name", NAMES)
def test_derive(name: str) -> None:
    result = derived(name)
    if name in NO_CALLS:
        assert not renders_calls(name)
        assert isinstance(result, GrammarError) and result.code == "derive.no_calls", result
    elif name in NOT_DERIVED:
        assert renders_calls(name)
        assert isinstance(result, GrammarError) and result.code == NOT_DERIVED[name], result
    else:
        assert renders_calls(name)
        assert isinstance(result, Derived), str(result)
        assert {"content", "one_call"} <= set(result.round_trip)
        assert all(diffs == [] for diffs in result.round_trip.values()), result.round_trip
        assert result.grammar.lark_source == result.lark
        assert result.lark.startswith(f"// Derived from {name} ")
        # Checked here, not in tests of their own, so that under xdist each template is derived in one worker.
        assert_markup_only(result)
        assert_linear(result)
    if isinstance(result, GrammarError):
        assert result.code in ERROR_CODES and result.hint


def test_coverage() -> None:
    """The issue's target: at least 90% of the templates that render tool calls derive and round-trip
    (test_derive holds every template to its list, both ways)."""
    population = [n for n in NAMES if n not in NO_CALLS]
    assert len(population) - len(NOT_DERIVED) >= 0.9 * len(population)
    assert set(NOT_DERIVED) <= set(population) and set(NO_CALLS) <= set(NAMES)


# The probes' own words: none may become part of a marker.
PROBE_WORDS = ["Paris", "sunny", "weather in", "get_weather", "get_time", "celsius", "Europe", "timezone",
               CONTENT, REASONING, "city"]


def assert_markup_only(result: Derived) -> None:
    """No probe word in a marker the report names, nor anywhere in the grammar below its header."""
    r = result.report
    markers = [r.start_anchor, *r.end_of_turn, r.reasoning_open, r.reasoning_close, *r.content_markers,
               r.section_open, r.section_close, r.call_open, r.call_close, r.separator]
    grammar = [line for line in result.lark.splitlines() if not line.startswith("// ")]
    for marker in [*filter(None, markers), *grammar]:
        for word in PROBE_WORDS:
            assert word not in marker, (marker, word)


def assert_linear(result: Derived) -> None:
    """The rule the built-in grammars are held to (tests/test_linear_patterns.py), on the derived ones."""
    for terminal in result.grammar.terminals.values():
        matcher = terminal.matcher
        if isinstance(matcher, RegexMatcher) and matcher.lowered is None:
            pattern = regex.sub(r"\(\?P=\w+\)", "x", matcher.pattern)  # (a back-reference: a name written twice)
            assert problems(pattern, matcher.flags) == [], (terminal.name, matcher.pattern)


def call(name: str, arguments: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return name, arguments


# Model output beyond the probes (other arguments, content before calls, reasoning then calls, text after the
# end of turn), parsed after the generation prompt: (template, output, reasoning, content, calls).
REALISTIC = [
    ("Qwen-Qwen2.5-7B-Instruct",
     'Let me look that up.\n<tool_call>\n{"name": "get_time", "arguments": {"timezone": "Asia/Tokyo"}}\n</tool_call>\n'
     '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Tokyo", "days": 2}}\n</tool_call><|im_end|>\nnoise',
     None, "Let me look that up.", [call("get_time", {"timezone": "Asia/Tokyo"}), call("get_weather", {"city": "Tokyo", "days": 2})]),
    ("meta-llama-Llama-3.1-8B-Instruct", '{"name": "get_time", "parameters": {"timezone": "UTC"}}<|eot_id|>',
     None, None, [call("get_time", {"timezone": "UTC"})]),
    ("meta-llama-Llama-3.1-8B-Instruct", 'It is noon in UTC.<|eot_id|>{"name": "get_time"}',
     None, "It is noon in UTC.", []),
    ("Qwen3-Coder",
     "I will check both.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n"
     "<parameter=days>\n5\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_time>\n"
     "<parameter=timezone>\nAmerica/New_York\n</parameter>\n</function>\n</tool_call><|im_end|>",
     None, "I will check both.", [call("get_weather", {"city": "New York", "days": 5}),
                                   call("get_time", {"timezone": "America/New_York"})]),
    # A value's own whitespace is the model's (an indented line of code); only the template's newlines go.
    ("Qwen3-Coder",
     "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n<parameter=note>\n    indented\n\n"
     "    twice\n\n</parameter>\n</function>\n</tool_call><|im_end|>",
     None, None, [call("get_weather", {"city": "Oslo", "note": "    indented\n\n    twice\n"})]),
    # Objects and lists written as nested elements, typed by the tool's schema; a leaf's whitespace kept.
    ("MiniMax-M3",
     "<mm:think>Rome, twice a day.</mm:think>]<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name=\"get_weather\">"
     "]<]minimax[>[<city>Rome]<]minimax[>[</city>]<]minimax[>[<hours>]<]minimax[>[<item>8]<]minimax[>[</item>"
     "]<]minimax[>[<item>20]<]minimax[>[</item>]<]minimax[>[</hours>]<]minimax[>[<options>]<]minimax[>[<units>metric"
     "]<]minimax[>[</units>]<]minimax[>[</options>]<]minimax[>[<note>  first\n\n  second\n]<]minimax[>[</note>"
     "]<]minimax[>[</invoke>\n]<]minimax[>[</tool_call>[e~[\n",
     "Rome, twice a day.", None, [call("get_weather", {"city": "Rome", "hours": [8, 20], "options": {"units": "metric"},
                                                      "note": "  first\n\n  second\n"})]),
    ("moonshotai-Kimi-K2",
     "Checking.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_time:0<|tool_call_argument_begin|>"
     '{"timezone": "Europe/Berlin"}<|tool_call_end|><|tool_call_begin|>functions.get_weather:1'
     '<|tool_call_argument_begin|>{"city": "Berlin", "metric": false}<|tool_call_end|><|tool_calls_section_end|><|im_end|>',
     None, "Checking.", [call("get_time", {"timezone": "Europe/Berlin"}), call("get_weather", {"city": "Berlin", "metric": False})]),
    ("GLM-4.7-Flash",
     "Two lookups needed.</think>On it.<tool_call>get_weather<arg_key>city</arg_key><arg_value>Rome</arg_value>"
     "<arg_key>hours</arg_key><arg_value>[8, 20]</arg_value></tool_call><tool_call>get_time<arg_key>timezone</arg_key>"
     "<arg_value>Europe/Rome</arg_value></tool_call>",
     "Two lookups needed.", "On it.", [call("get_weather", {"city": "Rome", "hours": [8, 20]}),
                                       call("get_time", {"timezone": "Europe/Rome"})]),
    ("mistralai-Mistral-Nemo-Instruct-2407",
     '[TOOL_CALLS][{"name": "get_time", "arguments": {"timezone": "Asia/Kolkata"}, "id": "abcdefghi"}, '
     '{"name": "get_weather", "arguments": {"city": "Delhi"}, "id": "jklmnopqr"}]</s>',
     None, None, [call("get_time", {"timezone": "Asia/Kolkata"}), call("get_weather", {"city": "Delhi"})]),
    ("Mistral-Small-3.2-24B-Instruct-2506",
     'Sure.[TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]{"city": "Lyon", "days": 1}'
     '[TOOL_CALLS]get_time[CALL_ID]f5g6h7i8j[ARGS]{"timezone": "Europe/Paris"}</s>',
     None, "Sure.", [call("get_weather", {"city": "Lyon", "days": 1}), call("get_time", {"timezone": "Europe/Paris"})]),
    ("openai-gpt-oss-120b",
     "<|channel|>analysis<|message|>Need the weather in Oslo.<|end|><|start|>assistant to=functions.get_weather"
     '<|channel|>commentary json<|message|>{"city": "Oslo"}<|call|>',
     "Need the weather in Oslo.", None, [call("get_weather", {"city": "Oslo"})]),
    ("deepseek-ai-DeepSeek-V3.2",
     'Let me check.\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_weather">\n<｜DSML｜parameter name="city" '
     'string="true">Madrid</｜DSML｜parameter>\n<｜DSML｜parameter name="days" string="false">4</｜DSML｜parameter>\n'
     "</｜DSML｜invoke>\n</｜DSML｜function_calls><｜end▁of▁sentence｜>",
     None, "Let me check.", [call("get_weather", {"city": "Madrid", "days": 4})]),
    ("LFM2.5-8B-A1B",
     '<think>Two cities.</think>Checking.<|tool_call_start|>[get_weather(city="Lima"), get_time(timezone="America/Lima")]'
     "<|tool_call_end|><|im_end|>",
     "Two cities.", "Checking.", [call("get_weather", {"city": "Lima"}), call("get_time", {"timezone": "America/Lima"})]),
    ("MiniMax-M2",
     'The user asks about Oslo.\n</think>\n\n<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">'
     'Oslo</parameter>\n<parameter name="metric">true</parameter>\n</invoke>\n</minimax:tool_call>[e~[\n',
     "The user asks about Oslo.", None, [call("get_weather", {"city": "Oslo", "metric": True})]),
    ("Qwen-Qwen3-0.6B", "<think>\nShort.\n</think>\n\nHello there!<|im_end|>\n<|im_start|>user", "Short.", "Hello there!", []),
    # The generation prompt ends with the first call's opener (">>>"), or content's (">>>all").
    ("meetkai-functionary-medium-v3.2", "all\nSure.<|eot_id|>", None, "Sure.", []),
    ("meetkai-functionary-medium-v3.2", 'get_time\n{"timezone": "UTC"}>>>get_weather\n{"city": "Rome"}<|eot_id|>',
     None, None, [call("get_time", {"timezone": "UTC"}), call("get_weather", {"city": "Rome"})]),
    # Turns the history renders with no end token: the end is what the template writes once a message follows.
    ("GLM-4.6", "\n<think>Need it.</think>\n<tool_call>get_time\n<arg_key>timezone</arg_key>\n<arg_value>UTC"
     "</arg_value>\n</tool_call><|observation|>\n<tool_response>", "Need it.", None, [call("get_time", {"timezone": "UTC"})]),
    ("Apertus-8B-Instruct", "Hello!<|assistant_end|><|user_start|>more", None, "Hello!", []),
    ("google-gemma-4-31B-it",
     'Checking.<|tool_call>call:get_weather{city:<|"|>Los Angeles<|"|>,days:2}<tool_call|>'
     '<|tool_call>call:get_time{timezone:<|"|>America/Los_Angeles<|"|>}<tool_call|><|tool_response>',
     None, "Checking.", [call("get_weather", {"city": "Los Angeles", "days": 2}),
                         call("get_time", {"timezone": "America/Los_Angeles"})]),
]


@pytest.mark.parametrize(("name", "output", "reasoning", "content", "calls"), REALISTIC,
                         ids=[f"{case[0]}-{i}" for i, case in enumerate(REALISTIC)])
def test_realistic_output(name: str, output: str, reasoning: str | None, content: str | None,
                          calls: list[tuple[str, dict[str, Any]]]) -> None:
    result = derived(name)
    assert isinstance(result, Derived), str(result)
    prompt = template(name).render([{"role": "user", "content": USER}], tools=TOOLS, add_generation_prompt=True)
    message = gp.parse_response(output, result.grammar, prefix=prompt, tools=TOOLS)
    assert (message.get("reasoning_content") or "").strip() == (reasoning or "")
    assert (message.get("content") or "").strip() == (content or "")
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or []] == calls
    # Streamed three characters at a time, the derived grammar gives the same message.
    parser = gp.ResponseParser(result.grammar, prompt, tools=TOOLS)
    for at in range(0, len(output), 3):
        parser.feed(output[at:at + 3])
    assert parser.finalize()[0] == message


NO_TOOLS = ("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}<|end|>{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")
# Calls written as prose, with no markup around the arguments.
PROSE_CALLS = ("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% for c in m.tool_calls or [] %}"
               "CALL {{ c.function.name }} WITH{% for k, v in c.function.arguments.items() %} {{ k }} = {{ v }}"
               "{% endfor %}. {% endfor %}<|end|>{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}")
# Content rewritten (upper-cased) in past turns: the markup is found, but the probes do not read back.
REWRITTEN = ("{% for m in messages %}<|{{ m.role }}|>{% if m.role == 'assistant' %}{{ (m.content or '') | upper }}"
             "{% for c in m.tool_calls or [] %}<tool>{{ c.function | tojson }}</tool>{% endfor %}{% else %}"
             "{{ m.content }}{% endif %}<|end|>{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}")
ERRORS = [
    ("no tool support", NO_TOOLS, "derive.no_calls"),
    ("calls in prose", PROSE_CALLS, "derive.shape"),
    ("content rewritten", REWRITTEN, "derive.round_trip"),
]


@pytest.mark.parametrize(("source", "code"), [case[1:] for case in ERRORS], ids=[case[0] for case in ERRORS])
def test_errors(source: str, code: str) -> None:
    with pytest.raises(GrammarError) as raised:
        derive_grammar(ChatTemplate(source))
    assert raised.value.code == code and code in ERROR_CODES and raised.value.hint is not None


def test_probes_are_the_shared_ones() -> None:
    """derive reads the probes detect reads (a template is judged by one set of conversations)."""
    assert [r.probe for r in renderings("Qwen-Qwen2.5-7B-Instruct")] == list(PROBES)


#: One way to name a chat template everywhere (issue 32, c): each form of the same template, as a function of
#: a folder to write files in. Before, derive_grammar took only a ChatTemplate and raised AttributeError
#: ("... has no attribute 'render'") for every other form.
ONE_TEMPLATE = "Qwen-Qwen3-0.6B"


def _model_dir(folder: Path) -> Path:
    source = (TEMPLATES / f"{ONE_TEMPLATE}.jinja").read_text(encoding="utf-8")
    (folder / "chat_template.jinja").write_text(source, encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": source, "eos_token": "<|im_end|>"}),
                                                  encoding="utf-8")
    return folder


TEMPLATE_FORMS = {
    "ChatTemplate": lambda folder: ChatTemplate((TEMPLATES / f"{ONE_TEMPLATE}.jinja").read_text(encoding="utf-8")),
    "Jinja text": lambda folder: (TEMPLATES / f"{ONE_TEMPLATE}.jinja").read_text(encoding="utf-8"),
    ".jinja path (str)": lambda folder: str(TEMPLATES / f"{ONE_TEMPLATE}.jinja"),
    ".jinja Path": lambda folder: TEMPLATES / f"{ONE_TEMPLATE}.jinja",
    "model directory": _model_dir,
    "tokenizer_config.json": lambda folder: _model_dir(folder) / "tokenizer_config.json",
    "tokenizer config dict": lambda folder: json.loads((_model_dir(folder) / "tokenizer_config.json").read_text()),
}


@pytest.mark.parametrize("form", sorted(TEMPLATE_FORMS))
def test_derive_grammar_takes_every_way_to_name_a_template(form: str, tmp_path: Path) -> None:
    expected = derive_grammar(ChatTemplate((TEMPLATES / f"{ONE_TEMPLATE}.jinja").read_text(encoding="utf-8")))
    derived = derive_grammar(TEMPLATE_FORMS[form](tmp_path))
    assert derived.grammar.fields == expected.grammar.fields
    assert derived.round_trip == expected.round_trip and not any(derived.round_trip.values())
    assert gp.parse_response('<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>', derived.grammar,
                             prefix="")["tool_calls"][0]["function"] == {"name": "f", "arguments": {"x": 1}}


@pytest.mark.parametrize("value", [42, None, b"{{ messages }}", [{"role": "user", "content": "hi"}]],
                         ids=["int", "None", "bytes", "messages"])
def test_derive_grammar_refuses_what_is_no_template(value: Any) -> None:
    with pytest.raises(gp.ArgumentError) as raised:
        derive_grammar(value)
    assert raised.value.code == "usage.argument" and "chat template" in str(raised.value)


def coverage_table() -> str:
    """The measured figure, by argument encoding, and each failure with its reason."""
    population = [n for n in NAMES if renders_calls(n)]
    by_shape: Counter[str] = Counter()
    lines = []
    for name in population:
        result = derived(name)
        if isinstance(result, Derived):
            by_shape[result.report.argument_encoding] += 1
        else:
            lines.append(f"  FAIL {name}: {result.code}: {result.detail}")
    ok = sum(by_shape.values())
    head = [f"{ok} of {len(population)} templates that render tool calls derive and round-trip "
            f"({100 * ok / len(population):.0f}%)"]
    head += [f"  {count:3d}  {shape}" for shape, count in by_shape.most_common()]
    return "\n".join(head + lines)


if __name__ == "__main__":
    print(coverage_table())
