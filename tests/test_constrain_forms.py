"""Every call form a grammar reads is offered and checked by the constraint exports, or made impossible, and
a template's own call format is never refused (issue 32, item 10). The red team's reproducers, checked byte
by byte with llguidance's and xgrammar's matchers (a few milliseconds each); the data-driven check over
every golden and transcript is tests/constrain/test_call_forms.py (opt-in: --constrain).

Each row: a grammar, an output, the request's tool_choice, and what both engines must say. A call the
parser reads in any form it reads must be "refused" when it names a tool the request does not offer, breaks
its JSON, or when tool_choice is "none"; "accepted" rows are the model's own format for an offered tool.
"""

from __future__ import annotations

from typing import Any

import pytest

import grammar_parse as gp
from grammar_parse import constrain

llguidance = pytest.importorskip("llguidance")
xgrammar = pytest.importorskip("xgrammar")

from constrain_engines import run_llguidance, run_xgrammar  # noqa: E402

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
TOOLS = [WEATHER, TIME]


def _llguidance(grammar: gp.Grammar, text: str, **options: Any) -> bool:
    return run_llguidance(constrain.to_llguidance(grammar, **options), text) == "accept"


def _xgrammar(grammar: gp.Grammar, text: str, **options: Any) -> bool:
    return run_xgrammar(constrain.to_structural_tag(grammar, **options), text) == "accept"


ENGINES = {"llguidance": _llguidance, "xgrammar": _xgrammar}

LLAMA3 = '{"name": "get_weather", "parameters": {"city": "Paris"}}'
XLAM = '[{"name": "get_weather", "arguments": {"city": "Paris"}}]'
GPT_OSS_ROLE = ("<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant to=functions.{name}"
                "<|channel|>commentary json<|message|>{args}<|call|>")
DSML = ("<｜DSML｜{block}>\n<｜DSML｜invoke name=\"{name}\">\n<｜DSML｜parameter name=\"city\" string=\"true\">"
        "Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜{block}>")
COHERE = ('<|START_ACTION|>[{{"tool_call_id": "0", "tool_name": "{name}", "parameters": {{"city": "Paris"}}}}]'
          "<|END_ACTION|>")
HY3 = ("<tool_calls:opensource>\n<tool_call:opensource>{name}<tool_sep:opensource>\n<arg_key:opensource>city"
       "</arg_key:opensource>\n<arg_value:opensource>Paris</arg_value:opensource>\n</tool_call:opensource>\n"
       "</tool_calls:opensource>")
K2_JSON = '<ifm|tool_call>{{"name": "{name}", "arguments": {{"city": "Paris"}}}}</ifm|tool_call>'
K2_TYPED = ("<ifm|tool_calls>\n<ifm|tool_call>{name}\n<ifm|arg_key>city</ifm|arg_key>\n<ifm|arg_type>string"
            "</ifm|arg_type>\n<ifm|arg_value>Paris</ifm|arg_value>\n<ifm|arg_key>days</ifm|arg_key>\n"
            "<ifm|arg_type>integer</ifm|arg_type>\n<ifm|arg_value>3</ifm|arg_value>\n</ifm|tool_call>\n"
            "</ifm|tool_calls>")

# (grammar, output, prefix, tool_choice, expected in both engines)
ROWS: list[tuple[str, str, str, str, str]] = [
    # Llama 3 without <|python_tag|>: how it usually writes calls.
    ("llama3_json", LLAMA3, "", "auto", "accepted"),
    ("llama3_json", '{"type": "function", "name": "get_weather", "parameters": {"city": "Paris"}}', "", "auto",
     "accepted"),
    ("llama3_json", f"{LLAMA3}; " + '{"name": "get_time", "parameters": {}}', "", "auto", "accepted"),
    ("llama3_json", '{"name": "zz_unknown_tool", "parameters": {"city": "Paris"}}', "", "auto", "refused"),
    ("llama3_json", '{"name": "get_weather", "parameters": {"city": Paris}}', "", "auto", "refused"),
    ("llama3_json", '{"name": "get_weather", "parameters": {"city": 7}}', "", "auto", "refused"),
    ("llama3_json", LLAMA3, "", "none", "refused"),
    ("llama3_json", "The weather is mild.", "", "auto", "accepted"),
    # xLAM-2's bare array (its default), its [TOOL_CALLS] form and its opening ```json fence.
    ("xlam", XLAM, "", "auto", "accepted"),
    ("xlam", f"Let me check. [TOOL_CALLS] {XLAM}", "", "auto", "accepted"),
    ("xlam", f"```json\n{XLAM}\n```", "", "auto", "accepted"),
    ("xlam", XLAM.replace("get_weather", "zz_unknown_tool"), "", "auto", "refused"),
    ("xlam", f"[TOOL_CALLS] {XLAM.replace('get_weather', 'zz_unknown_tool')}", "", "auto", "refused"),
    ("xlam", f"```json\n{XLAM.replace('get_weather', 'zz_unknown_tool')}\n```", "", "auto", "refused"),
    ("xlam", XLAM, "", "none", "refused"),
    ("xlam", f"[TOOL_CALLS] {XLAM}", "", "none", "refused"),
    # gpt-oss with the recipient in the role header (how its chat template renders earlier calls).
    ("gpt_oss", GPT_OSS_ROLE.format(name="get_weather", args='{"city": "Paris"}'), "", "auto", "accepted"),
    ("gpt_oss", GPT_OSS_ROLE.format(name="zz_unknown_tool", args='{"city": "Paris"}'), "", "auto", "refused"),
    ("gpt_oss", GPT_OSS_ROLE.format(name="get_weather", args='{"city": }'), "", "auto", "refused"),
    ("gpt_oss", GPT_OSS_ROLE.format(name="get_weather", args='{"city": "Paris"}'), "", "none", "refused"),
    # DeepSeek V4's other block spellings.
    ("deepseek_v4", DSML.format(block="toolcalls", name="get_weather"), "<｜Assistant｜></think>", "auto",
     "accepted"),
    ("deepseek_v4", DSML.format(block="tool", name="get_weather"), "<｜Assistant｜></think>", "auto", "accepted"),
    ("deepseek_v4", DSML.format(block="toolcalls", name="zz_unknown_tool"), "<｜Assistant｜></think>", "auto",
     "refused"),
    ("deepseek_v4", DSML.format(block="tool", name="get_weather"), "<｜Assistant｜></think>", "none", "refused"),
    # Command R7B writes a tool_call_id first in every call.
    ("cohere2", COHERE.format(name="get_weather"), "", "auto", "accepted"),
    ("cohere2", COHERE.format(name="zz_unknown_tool"), "", "auto", "refused"),
    # The released Hy3 template's :opensource spellings.
    ("hunyuan_v3", HY3.format(name="get_weather"), "", "auto", "accepted"),
    ("hunyuan_v3", HY3.format(name="zz_unknown_tool"), "", "auto", "refused"),
    # K2 Horizon's JSON call beside its tagged one.
    ("k2_horizon", K2_JSON.format(name="get_weather"), "", "auto", "accepted"),
    ("k2_horizon", K2_JSON.format(name="zz_unknown_tool"), "", "auto", "refused"),
    ("k2_horizon", K2_JSON.format(name="get_weather"), "", "none", "refused"),
    # ... and its typed-XML arguments (<ifm|arg_type>integer</ifm|arg_type>), as its golden calls write them.
    ("k2_horizon", K2_TYPED.format(name="get_weather"), "", "auto", "accepted"),
    ("k2_horizon", K2_TYPED.format(name="zz_unknown_tool"), "", "auto", "refused"),
    # A repaired call without its <tool_call> (the parser reads it as a call): made impossible.
    ("qwen3_5", "<function=zz_unknown_tool>\n<parameter=city>\nParis\n</parameter>\n</function>", "", "auto",
     "refused"),
    ("qwen3_coder", "<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>", "", "none",
     "refused"),
    # Kimi K2's call without its section (a repair the parser reads in content): made impossible.
    ("kimi_k2", 'Checking.<|tool_call_begin|>functions.zz_unknown_tool:0<|tool_call_argument_begin|>{"city": '
     '"Paris"}<|tool_call_end|>', "", "auto", "refused"),
]


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize(("name", "text", "prefix", "choice", "expected"), ROWS,
                         ids=[f"{r[0]}-{i}" for i, r in enumerate(ROWS)])
def test_every_call_form_is_checked(engine: str, name: str, text: str, prefix: str, choice: str,
                                    expected: str) -> None:
    grammar = gp.load_grammar(name)
    accepted = ENGINES[engine](grammar, text, tools=TOOLS, tool_choice=choice, prefix=prefix)
    assert ("accepted" if accepted else "refused") == expected


@pytest.mark.parametrize(("name", "text", "prefix"), [(r[0], r[1], r[2]) for r in ROWS if r[4] == "accepted"
                                                     or "zz_unknown_tool" in r[1]])
def test_the_rows_write_calls_the_parser_reads(name: str, text: str, prefix: str) -> None:
    """What the rows write is a call for the parser (so a refused row is a call held back, and an accepted
    one a call in the model's own format), or plain text where the row writes no tool's name."""
    message = gp.parse_response(text, gp.load_grammar(name), prefix=prefix, strict=False)
    names = [c["function"]["name"] for c in message.get("tool_calls") or []]
    written = [n for n in ("get_weather", "zz_unknown_tool") if n in text]
    assert names[:1] == written[:1]
