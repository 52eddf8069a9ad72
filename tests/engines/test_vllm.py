"""The vLLM plugin against the installed vLLM: loaded by its own command-line flags, composed by its own
ParserManager, driven by its own ChatStreamProcessor and Parser.parse as its chat server drives them.

The reference is grammar_parse's own one-shot message (chat_message) for the same text: the plugin is
glue, and what it must not do is lose or change anything on the way through vLLM.
"""

from __future__ import annotations

import json
import os
import random
import textwrap
import warnings
from importlib import resources

import pytest

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")  # (vLLM's serve flags ask the platform; there is no GPU)
with warnings.catch_warnings():  # (the engine's own imports warn about torch's deprecations: not ours to fix)
    warnings.simplefilter("ignore")
    pytest.importorskip("vllm")
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.entrypoints.openai.chat_completion.stream_processor import ChatStreamProcessor
    from vllm.parser import ParserManager
    import grammar_parse.integrations.vllm  # noqa: F401

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

from conformance import load  # noqa: E402
from char_tokens import CharTokenizer  # noqa: E402
from goldens import all_goldens  # noqa: E402
from token_streams import chunked  # noqa: E402
from grammar_parse.adapters.chat_completions import chat_message  # noqa: E402
from grammar_parse.integrations import parser_name  # noqa: E402

PLUGIN = "grammar_parse.integrations.vllm"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}]
CASES = [g for g in all_goldens() if "error" not in g.expected and (g.path.parent.parent / g.grammar).is_dir()]


def serve_flags(tool: str | None, reasoning: str | None, plugin: str = PLUGIN):
    """Parse ``vllm serve`` flags with vLLM's own parser and load the plugins the way its server does."""
    from vllm.entrypoints.common.cli_args import (
        init_parser_plugin,
        make_arg_parser,
        validate_api_server_args,
        validate_parsed_serve_args,
    )
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    argv = ["--model", "m", "--enable-auto-tool-choice"]
    if tool:
        argv += ["--tool-parser-plugin", plugin, "--tool-call-parser", tool]
    if reasoning:
        argv += ["--reasoning-parser-plugin", plugin, "--reasoning-parser", reasoning]
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(argv)
    init_parser_plugin(args)
    validate_parsed_serve_args(args)
    validate_api_server_args(args)
    return args


def composed(tool: str | None, reasoning: str | None, tokenizer=None):
    tokenizer = tokenizer or CharTokenizer()
    return ParserManager.get_parser(tool_parser_name=tool, reasoning_parser_name=reasoning, enable_auto_tools=True,
                                    model_name="m", tokenizer=tokenizer), tokenizer


def request(tools=None, tool_choice="auto"):
    return ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}], tools=tools or TOOLS,
                                 tool_choice=tool_choice)


def stream(parser_cls, tokenizer, req, ids, sizes, prompt_ids, finish="stop"):
    """Feed ``ids`` in chunks of the given sizes through vLLM's ChatStreamProcessor: the message the
    client assembles, and the last finish_reason."""
    parser = parser_cls(tokenizer, req.tools, chat_template_kwargs=None, model_config=None)
    proc = ChatStreamProcessor(req, parser, enable_auto_tools=True, parser_cls=parser_cls)
    reasoning, content, calls = [], [], {}
    steps = chunked(ids, sizes) or [[]]  # (an empty output is one last step)
    for i, chunk in enumerate(steps):
        step = proc.step(tokenizer.decode(chunk), chunk, finish if i == len(steps) - 1 else None, prompt_ids)
        finish_reason = step.finish_reason
        delta = step.delta
        if delta is not None:
            reasoning.append(delta.reasoning or "")
            content.append(delta.content or "")
            for tc in delta.tool_calls or ():
                entry = calls.setdefault(tc.index, {"name": None, "arguments": "", "id": None})
                entry["id"] = entry["id"] or tc.id
                if tc.function is not None:
                    entry["name"] = entry["name"] or tc.function.name
                    entry["arguments"] += tc.function.arguments or ""
    message = {"reasoning": "".join(reasoning) or None, "content": "".join(content) or None,
               "tool_calls": [calls[k] for k in sorted(calls)]}
    return message, finish_reason, parser


def expected(text, grammar, prefix, tools):
    message, _ = chat_message(text, grammar, prefix=prefix, tools=tools, reasoning_field="reasoning", strict=False)
    return {"reasoning": message.get("reasoning") or None, "content": message.get("content") or None,
            "tool_calls": [(c["function"]["name"], json.loads(c["function"]["arguments"]))
                           for c in message.get("tool_calls") or ()]}


def calls_of(message):
    return [(c["name"], json.loads(c["arguments"])) for c in message["tool_calls"]]


# ---------------------------------------------------------------------------- loading
def test_serve_flags_load_every_grammar_by_name():
    args = serve_flags("gp_qwen3", "gp_qwen3")
    from vllm.reasoning import ReasoningParserManager
    from vllm.tool_parsers import ToolParserManager

    for name in ("gp_qwen3", "gp_glm45", "gp_kimi_k2", "gp_mistral", "gp_gemma4", "gp_qwen3_5", "gp"):
        assert name in ToolParserManager.list_registered()
        assert name in ReasoningParserManager.list_registered()
    parser_cls, _ = composed(args.tool_call_parser, args.reasoning_parser)
    assert type(parser_cls(CharTokenizer(), TOOLS)._tool_parser).parser_name == "gp_qwen3"


def test_a_plugin_file_serves_a_grammar_of_ones_own(tmp_path):
    grammar = tmp_path / "house.lark"
    qwen3 = resources.files("grammar_parse.grammars").joinpath("qwen3.lark").read_text(encoding="utf-8")
    grammar.write_text(qwen3.replace('//@ name "qwen3"', '//@ name "house"'), encoding="utf-8")
    plugin = tmp_path / "house_plugin.py"
    plugin.write_text(textwrap.dedent(f"""
        from grammar_parse.integrations.vllm import register
        register("house", {str(grammar)!r})
    """), encoding="utf-8")
    serve_flags("gp_house", "gp_house", plugin=str(plugin))
    parser_cls, tok = composed("gp_house", "gp_house")
    text = '<think>hm</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    prompt = "<|im_start|>assistant\n"
    message, finish, _ = stream(parser_cls, tok, request(), tok.encode(text), [3], tok.encode(prompt))
    assert (message["reasoning"], calls_of(message), finish) == ("hm", [("get_weather", {"city": "Oslo"})], "tool_calls")


def test_gp_reads_the_tokenizers_response_template():
    template = load("transformers_model_templates.json")[0]["template"]  # transformers' Qwen3 template

    class WithTemplate(CharTokenizer):
        response_template = template

    parser_cls, tok = composed("gp", "gp", WithTemplate())
    text = '<think>a</think>b<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>'
    message, _, _ = stream(parser_cls, tok, request(), tok.encode(text), [2], tok.encode("<|im_start|>assistant\n"))
    want = expected(text, template, "<|im_start|>assistant\n", TOOLS)
    assert (message["reasoning"], message["content"], calls_of(message)) == \
        (want["reasoning"], want["content"], want["tool_calls"])


def test_an_unknown_name_is_refused_at_startup_by_vllm():
    serve_flags("gp_qwen3", None)
    with pytest.raises(KeyError, match="gp_no_such"):
        serve_flags("gp_no_such", None)


# ---------------------------------------------------------------------------- every golden, through vLLM
@pytest.mark.parametrize("case", CASES, ids=lambda g: f"{g.grammar}/{g.name}")
def test_golden_streamed_and_one_shot_through_vllm_equal_grammar_parse(case):
    name = parser_name(case.grammar)
    parser_cls, tok = composed(name, name)
    tools = case.tools or TOOLS
    req = request(tools)
    want = expected(case.text, case.grammar, case.prefix, tools)
    ids, prompt_ids = tok.encode(case.text), tok.encode(case.prefix)
    rng = random.Random(case.name)
    for sizes in ([1], [rng.randint(1, 9) for _ in range(7)], [len(ids) or 1]):
        message, finish, parser = stream(parser_cls, tok, req, ids, sizes, prompt_ids)
        assert (message["reasoning"], message["content"], calls_of(message)) == \
            (want["reasoning"], want["content"], want["tool_calls"]), sizes
        assert finish == ("tool_calls" if want["tool_calls"] else "stop")
        # vLLM hands engine-based parsers each step's new text only: nothing re-reads the output so far.
        assert parser._stream_state.previous_text == "" and parser._engine_based
    parser = parser_cls(tok, req.tools, chat_template_kwargs=None, model_config=None)
    parser.set_prompt_token_ids(prompt_ids)
    reasoning, content, calls = parser.parse(case.text, req, enable_auto_tools=True, model_output_token_ids=ids)
    assert (reasoning, content or None, [(c.name, json.loads(c.arguments)) for c in calls or ()]) == \
        (want["reasoning"], want["content"], want["tool_calls"])


def test_calls_inside_reasoning_reach_the_client():
    case = next(g for g in CASES if g.grammar == "qwen3" and g.name == "call_in_reasoning")
    parser_cls, tok = composed("gp_qwen3", "gp_qwen3")
    message, _, _ = stream(parser_cls, tok, request(case.tools), tok.encode(case.text), [4], tok.encode(case.prefix))
    assert message["tool_calls"] and message["reasoning"]
    assert "<tool_call>" not in (message["reasoning"] + (message["content"] or ""))


def test_truncated_output_keeps_finish_reason_length_and_the_call():
    parser_cls, tok = composed("gp_qwen3", "gp_qwen3")
    text = '<think>x</think><tool_call>\n{"name": "get_weather", "arguments": {"city": "Par'
    message, finish, _ = stream(parser_cls, tok, request(), tok.encode(text), [3], tok.encode("<|im_start|>assistant\n"),
                                finish="length")
    assert finish == "length"
    assert [c["name"] for c in message["tool_calls"]] == ["get_weather"]
    assert message["tool_calls"][0]["arguments"].startswith('{"city": "Par')


def test_tool_choice_none_sends_no_calls():
    parser_cls, tok = composed("gp_qwen3", "gp_qwen3")
    text = '<tool_call>\n{"name": "get_weather", "arguments": {}}\n</tool_call>'
    message, finish, _ = stream(parser_cls, tok, request(tool_choice="none"), tok.encode(text), [5],
                                tok.encode("<|im_start|>assistant\n"))
    assert message["tool_calls"] == [] and finish == "stop"


def test_tool_parser_alone_keeps_reasoning_text_in_content():
    parser_cls, tok = composed("gp_qwen3", None)
    text = '<think>why</think>\n\nso <tool_call>\n{"name": "get_weather", "arguments": {"days": 2}}\n</tool_call>'
    for sizes in ([1], [len(text)]):
        message, _, _ = stream(parser_cls, tok, request(), tok.encode(text), sizes, tok.encode("<|im_start|>assistant\n"))
        assert (message["reasoning"], message["content"], calls_of(message)) == \
            (None, "whyso", [("get_weather", {"days": 2})])
    parser = parser_cls(tok, TOOLS, chat_template_kwargs=None, model_config=None)
    reasoning, content, calls = parser.parse(text, request(), enable_auto_tools=True)
    assert (reasoning, content, [c.name for c in calls]) == (None, "whyso", ["get_weather"])


def test_special_tokens_are_kept_in_the_text_vllm_decodes():
    parser_cls, tok = composed("gp_qwen3", "gp_qwen3")
    req = request()
    req.skip_special_tokens = True
    parser_cls(tok, req.tools, chat_template_kwargs=None, model_config=None).adjust_request(req)
    assert req.skip_special_tokens is False


def test_reasoning_end_for_structured_outputs():
    parser_cls, tok = composed("gp_qwen3", "gp_qwen3")
    reasoning = parser_cls(tok, TOOLS)._reasoning_parser
    assert not reasoning.is_reasoning_end(tok.encode("<|im_start|>assistant\n<think>\nstill"))
    assert reasoning.is_reasoning_end(tok.encode("<|im_start|>assistant\n<think>\ndone</think>\n\nNow"))
    assert not reasoning.is_reasoning_end(tok.encode("<|im_start|>assistant\n"))


def test_a_call_against_its_schema_is_returned_and_logged_by_code_not_text(caplog):
    parser_cls, tok = composed("gp_qwen3", "gp_qwen3")
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"days": "soon-SECRET"}}\n</tool_call>'
    with caplog.at_level("WARNING"):
        message, _, _ = stream(parser_cls, tok, request(), tok.encode(text), [4], tok.encode("<|im_start|>assistant\n"))
    assert calls_of(message) == [("get_weather", {"days": "soon-SECRET"})]
    logged = [r.getMessage() for r in caplog.records if "grammar_parse" in r.getMessage()]
    assert logged and all("$.function.arguments.days" in m and "SECRET" not in m for m in logged)


# ---------------------------------------------------------------------------- real token streams
class WithPrompt:
    """A fixture's table decoder (real token ids and bytes of the output) that also decodes a prompt: the
    fixtures hold the outputs' ids only, so the prompt's ids here are its characters, offset past any
    vocabulary (PROMPT_BASE + code point)."""

    PROMPT_BASE = 1 << 24

    def __init__(self, decoder):
        self.decoder = decoder

    def prompt_ids(self, text):
        return [self.PROMPT_BASE + ord(c) for c in text]

    def decode(self, ids, skip_special_tokens=False):
        ids = list(ids)
        prompt = "".join(chr(i - self.PROMPT_BASE) for i in ids if i >= self.PROMPT_BASE)
        return prompt + self.decoder.decode([i for i in ids if i < self.PROMPT_BASE], skip_special_tokens)

    def get_vocab(self):
        return {}


def token_cases():
    from token_streams import fixture_names, load_fixture

    return [(name, output) for name in fixture_names() for output in load_fixture(name).outputs]


@pytest.mark.parametrize("case", token_cases(), ids=lambda c: f"{c[0]}:{c[1].name}")
def test_real_token_id_streams_through_vllm_give_the_one_shot_message(case):
    """Token ids of real vocabularies (special tokens as their ids, characters split across tokens),
    detokenized as vLLM does, in engine steps of 1, 2 and 5 tokens."""
    from token_streams import IncrementalDetokenizer, load_fixture

    fixture_name, output = case
    tok = WithPrompt(load_fixture(fixture_name).decoder)
    name = parser_name(output.grammar)
    parser_cls, _ = composed(name, name, tok)
    want = expected(output.text, output.grammar, output.prefix, TOOLS)
    prompt_ids = tok.prompt_ids(output.prefix)
    for size in (1, 2, 5):
        parser = parser_cls(tok, TOOLS, chat_template_kwargs=None, model_config=None)
        proc = ChatStreamProcessor(request(), parser, enable_auto_tools=True, parser_cls=parser_cls)
        detok = IncrementalDetokenizer(tok.decoder)
        steps = chunked(output.ids, size)
        reasoning, content, calls = [], [], {}
        for i, ids in enumerate(steps):
            last = i == len(steps) - 1
            text = detok.feed(ids) + (detok.flush() if last else "")
            delta = proc.step(text, list(ids), "stop" if last else None, prompt_ids).delta
            if delta is None:
                continue
            reasoning.append(delta.reasoning or "")
            content.append(delta.content or "")
            for tc in delta.tool_calls or ():
                entry = calls.setdefault(tc.index, {"name": None, "arguments": ""})
                entry["name"] = entry["name"] or (tc.function.name if tc.function else None)
                entry["arguments"] += (tc.function.arguments or "") if tc.function else ""
        got = ("".join(reasoning) or None, "".join(content) or None,
               [(c["name"], json.loads(c["arguments"])) for c in (calls[k] for k in sorted(calls))])
        assert got == (want["reasoning"], want["content"], want["tool_calls"]), size
