"""The SGLang plugin against the installed SGLang: loaded by SGLang's own plugin loader from an entry point,
resolved by name through FunctionCallParser and ReasoningParser, and driven as serving_chat drives them.

The reference is grammar_parse's own one-shot message (chat_message) for the same text: the plugin is
glue, and what it must not do is lose or change anything on the way through SGLang.
"""

from __future__ import annotations

import json
import logging
import os
import random
import sys
import warnings
from importlib import invalidate_caches

import pytest

with warnings.catch_warnings():  # (the engine's own imports warn about torch's deprecations: not ours to fix)
    warnings.simplefilter("ignore")
    pytest.importorskip("sglang")
    from sglang.srt import plugins
    from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest
    from sglang.srt.function_call.function_call_parser import FunctionCallParser
    from sglang.srt.parser.reasoning_parser import ReasoningParser

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

from goldens import all_goldens, goldens  # noqa: E402
from grammar_parse import list_grammars  # noqa: E402
from grammar_parse.adapters.chat_completions import chat_message  # noqa: E402
from grammar_parse.integrations import parser_name, register  # noqa: E402

FAMILIES = ["qwen3", "qwen3_coder", "llama3_json", "mistral", "deepseek_v3", "glm45", "kimi_k2", "gemma4"]
CASES = [g for g in all_goldens() if "error" not in g.expected and g.grammar in list_grammars()]
ENTRY_POINT = "grammar_parse = grammar_parse.integrations.sglang:install"


@pytest.fixture(scope="module", autouse=True)
def loaded(tmp_path_factory):
    """Install the plugin the way a server process does: an entry point in group ``sglang.srt.plugins``
    (a dist-info on sys.path, as pip writes it), found and run by ``load_plugins``."""
    site = tmp_path_factory.mktemp("site")
    dist = site / "grammar_parse_sglang_plugin-0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: grammar-parse-sglang-plugin\nVersion: 0\n")
    (dist / "entry_points.txt").write_text(f"[sglang.srt.plugins]\n{ENTRY_POINT}\n")
    sys.path.insert(0, str(site))
    invalidate_caches()
    saved = os.environ.get("SGLANG_PLUGINS")
    os.environ["SGLANG_PLUGINS"] = "grammar_parse"  # (only ours, whatever else the environment has)
    plugins._plugins_loaded = False
    logging.disable(logging.CRITICAL)  # (serving_chat's hook needs torchvision to import; logged, not raised)
    try:
        plugins.load_plugins()
    finally:
        logging.disable(logging.NOTSET)
        sys.path.remove(str(site))
        if saved is None:
            os.environ.pop("SGLANG_PLUGINS")
        else:
            os.environ["SGLANG_PLUGINS"] = saved
    yield


# ---------------------------------------------------------------------------- serving_chat, replayed
def request_for(g) -> ChatCompletionRequest:
    """The request as serving_chat leaves it for the parsers: tools, and the rendered prompt recorded by
    ``_set_response_parser_context`` (the plugin's hook turns that on for our parsers)."""
    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}], tools=g.tools or None)
    request._response_parser_prefix = g.prefix
    return request


def reasoning_parser(name, request, stream, active=True):
    return ReasoningParser(name, request.stream_reasoning if stream else False, False, request,
                           tokenizer=None, tool_call_parser_active=active)


def tool_parser(name, request):
    return FunctionCallParser(tools=request.tools or [], tool_call_parser=name, tokenizer=None,
                              tool_choice=request.tool_choice, prefix=request._response_parser_prefix)


def oneshot(name, g, reasoning=True, tools=True):
    """``_build_chat_response``: the reasoning parser's parse_non_stream, then ``_process_tool_calls``."""
    request = request_for(g)
    text, reasoning_text = g.text, None
    if reasoning:
        reasoning_text, text = reasoning_parser(name, request, stream=False, active=tools).parse_non_stream(text)
    calls = []
    if tools:
        parser = tool_parser(name, request)
        if parser.has_tool_call(text):
            text, calls = parser.parse_non_stream(text)
    return reasoning_text or "", text or "", [(c.name, json.loads(c.parameters)) for c in calls]


def streamed(name, g, chunks, reasoning=True, tools=True):
    """``_generate_stream_content`` step by step: ``_process_reasoning_stream``, ``_process_tool_call_stream``
    (flushed at the last step), ``_check_for_unstreamed_tool_args``, and the client joining the deltas."""
    request = request_for(g)
    rp = reasoning_parser(name, request, stream=True, active=tools) if reasoning else None
    fp = tool_parser(name, request) if tools else None
    reasoning_out, content, calls = [], [], {}
    for i, delta in enumerate(chunks):
        end = i == len(chunks) - 1
        if rp is not None:
            reasoning_text, delta = rp.parse_stream_chunk(delta)
            if end:
                end_reasoning, end_normal = rp.parse_stream_end()
                if end_reasoning:
                    reasoning_text = (reasoning_text or "") + end_reasoning
                if end_normal:
                    delta = (delta or "") + end_normal
            if reasoning_text:
                reasoning_out.append(reasoning_text)
        if fp is None:
            content.append(delta or "")
            continue
        normal, items = fp.parse_stream_chunk(delta)
        if end:
            end_text, end_items = fp.parse_stream_end()
            normal, items = (normal or "") + end_text, list(items) + end_items
        content.append(normal or "")
        for item in items:
            entry = calls.setdefault(item.tool_index, [None, ""])
            entry[0] = item.name or entry[0]
            entry[1] += item.parameters
        if end:
            det = fp.detector
            if det.prev_tool_call_arr and det.streamed_args_for_tool:
                index = len(det.prev_tool_call_arr) - 1
                expected = det.prev_tool_call_arr[index].get("arguments", {})
                expected = expected if isinstance(expected, str) else json.dumps(expected, ensure_ascii=False)
                actual = det.streamed_args_for_tool[index]
                if expected.startswith(actual):
                    calls.setdefault(index, [None, ""])[1] += expected[len(actual):]
    return ("".join(reasoning_out), "".join(content),
            [(calls[k][0], json.loads(calls[k][1])) for k in sorted(calls)])


def reference(g, reasoning_as_content=False):
    """grammar_parse's own one-shot message, in the same shape."""
    message = chat_message(g.text, g.grammar, prefix=g.prefix, tools=g.tools, strict=False)[0]
    reasoning, content = message.get("reasoning_content") or "", message.get("content") or ""
    if reasoning_as_content:
        reasoning, content = "", reasoning + content
    return reasoning, content, [(c["function"]["name"], json.loads(c["function"]["arguments"]))
                                for c in message.get("tool_calls") or ()]


def pieces(text, seed):
    rng = random.Random(seed)
    out, i = [], 0
    while i < len(text):
        n = rng.choice([1, 1, 2, 3, 5, 8, 13])
        out.append(text[i:i + n])
        i += n
    return out or [""]


def ids(cases):
    return [f"{g.grammar}/{g.name}" for g in cases]


# ---------------------------------------------------------------------------- registration
def test_the_loader_registers_every_name():
    for name in ["gp", *(parser_name(n) for n in list_grammars())]:
        assert name in FunctionCallParser.ToolCallParserEnum
        assert name in ReasoningParser.DetectorMap
    assert FunctionCallParser([], "gp_qwen3").detector.parser_name == "gp_qwen3"
    assert ReasoningParser("gp_qwen3").detector.parser_name == "gp_qwen3"
    from sglang.srt.function_call.parser_names import TOOL_CALL_PARSER_NAMES
    from sglang.srt.parser.reasoning_parser_names import REASONING_PARSER_NAMES

    assert "gp_glm45" in TOOL_CALL_PARSER_NAMES and "gp_glm45" in REASONING_PARSER_NAMES


def test_install_is_idempotent():
    from sglang.srt.plugins.hook_registry import HookRegistry

    from grammar_parse.integrations.sglang import install

    before = {target: len(hooks) for target, hooks in HookRegistry._hooks.items()}
    install()
    install()
    assert {target: len(hooks) for target, hooks in HookRegistry._hooks.items()} == before
    assert FunctionCallParser.ToolCallParserEnum["gp_qwen3"] is not FunctionCallParser.ToolCallParserEnum["qwen"]


def test_serving_chat_keeps_special_tokens_and_the_prompt_for_our_parsers():
    from grammar_parse.integrations.sglang import after_requires_response_template_detokenization as hook

    class Serving:
        def __init__(self, tool, reasoning):
            self.tool_call_parser, self.reasoning_parser = tool, reasoning

    assert hook(False, Serving("gp_qwen3", None), None)
    assert hook(False, Serving(None, "gp_qwen3"), None)
    assert not hook(False, Serving("qwen25", "qwen3"), None)
    assert hook(True, Serving("qwen25", "qwen3"), None)


def test_a_grammar_registered_later_is_served():
    name = register("gp_test_later", "qwen3")
    parser = FunctionCallParser([], name)
    text = '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>'
    assert parser.has_tool_call(text)
    assert [(c.name, json.loads(c.parameters)) for c in parser.parse_non_stream(text)[1]] == [("f", {"a": 1})]
    assert ReasoningParser(name).parse_non_stream("<think>r</think>x") == ("r", "x")


# ---------------------------------------------------------------------------- the goldens
@pytest.mark.parametrize("g", CASES, ids=ids(CASES))
def test_oneshot_equals_chat_message(g):
    assert oneshot(parser_name(g.grammar), g) == reference(g)


@pytest.mark.parametrize("g", CASES, ids=ids(CASES))
def test_streamed_equals_chat_message(g):
    name, expected = parser_name(g.grammar), reference(g)
    for chunks in ([g.text], list(g.text), pieces(g.text, 0), pieces(g.text, 1)):
        assert streamed(name, g, chunks) == expected


def test_the_named_families_are_covered():
    covered = {g.grammar for g in CASES}
    assert set(FAMILIES) <= covered
    assert all(goldens(f) for f in FAMILIES)


@pytest.mark.parametrize("family", FAMILIES)
def test_tool_parser_alone_sends_reasoning_as_content(family):
    for g in goldens(family):
        if "error" in g.expected:
            continue
        expected = reference(g, reasoning_as_content=True)
        assert oneshot(parser_name(family), g, reasoning=False) == expected
        assert streamed(parser_name(family), g, pieces(g.text, 2), reasoning=False) == expected


@pytest.mark.parametrize("family", FAMILIES)
def test_reasoning_parser_alone_sends_clean_content(family):
    for g in goldens(family):
        if "error" in g.expected:
            continue
        reasoning, content, _ = reference(g)
        assert oneshot(parser_name(family), g, tools=False) == (reasoning, content, [])
        assert streamed(parser_name(family), g, pieces(g.text, 3), tools=False) == (reasoning, content, [])


def test_a_call_inside_reasoning_is_kept():
    g = next(g for g in goldens("qwen3") if g.name == "call_in_reasoning")
    reasoning, content, calls = reference(g)
    assert "<tool_call>" in g.text.split("</think>")[0]  # (the call is written inside the reasoning)
    assert reasoning and content and calls == [("lookup", {"q": "x"})]
    assert oneshot("gp_qwen3", g) == streamed("gp_qwen3", g, list(g.text)) == (reasoning, content, calls)


def test_the_prompt_decides_where_the_parse_starts():
    g = next(g for g in goldens("qwen3") if g.name == "prefilled")
    assert g.prefix.endswith("<think>\n") and "<think>" not in g.text
    reasoning, content, _ = oneshot("gp_qwen3", g)
    assert reasoning and "</think>" not in content
    assert (reasoning, content) == reference(g)[:2]


def test_streamed_reasoning_can_be_held_until_it_ends():
    g = next(g for g in goldens("qwen3") if g.name == "reasoning")
    request = request_for(g)
    parser = ReasoningParser("gp_qwen3", False, False, request, tool_call_parser_active=False)
    out = [parser.parse_stream_chunk(c)[0] for c in list(g.text)]
    out.append(parser.parse_stream_end()[0])
    sent = [r for r in out if r]
    assert len(sent) == 1 and sent[0] == reference(g)[0]


def test_the_generic_parser_reads_the_tokenizers_template():
    class Tokenizer:
        response_template = {
            "start_anchor": "<|im_start|>assistant\n", "defaults": {"role": "assistant"},
            "fields": {"tool_calls": {"open_pattern": r"<tool_call>\s*<function=(?P<name>\w+)>",
                                      "close": "</tool_call>", "repeats": True, "content": "xml-inline",
                                      "content_args": {"tag_pattern":
                                                       r"<parameter=(?P<key>\w+)>\s*(?P<value>.*?)\s*</parameter>"},
                                      "transform": {"type": "function",
                                                    "function": {"name": "{name}", "arguments": "{content}"}}},
                       "content": {"close": "<|im_end|>"}}}

    parser = FunctionCallParser([], "gp", tokenizer=Tokenizer())
    text = "Sure.<tool_call><function=set_alarm><parameter=hour>7</parameter></tool_call>"
    normal, calls = parser.parse_non_stream(text)
    assert normal == "Sure." and [(c.name, json.loads(c.parameters)) for c in calls] == [("set_alarm", {"hour": "7"})]


def token_cases():
    from token_streams import fixture_names, load_fixture

    return [(name, output) for name in fixture_names() for output in load_fixture(name).outputs]


@pytest.mark.parametrize("case", token_cases(), ids=lambda c: f"{c[0]}:{c[1].name}")
def test_real_token_id_streams_give_the_one_shot_message(case):
    """Token ids of real vocabularies (special tokens as their ids, characters split across tokens),
    detokenized as SGLang's detokenizer manager does, in steps of 1, 2 and 5 tokens."""
    from token_streams import chunked, load_fixture, text_deltas

    fixture_name, output = case
    decoder = load_fixture(fixture_name).decoder

    class Case:  # (the shape streamed() and reference() read: a golden's)
        grammar, text, prefix, tools = output.grammar, output.text, output.prefix, None

    want = reference(Case)
    for size in (1, 2, 5):
        deltas = text_deltas(decoder, chunked(output.ids, size))
        assert "".join(deltas) == output.text
        assert streamed(parser_name(output.grammar), Case, deltas) == want, size
