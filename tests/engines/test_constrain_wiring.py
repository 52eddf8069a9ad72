"""The engine plugins hand the grammar's decoding constraint (grammar_parse.constrain) to the installed
vLLM and SGLang: built by their own parser managers from their own request classes, serialized the way
each engine serializes it, and compiled with the engine's own xgrammar.

The reference is ``to_structural_tag`` for the same grammar, tools and options: the plugins are glue, and
what they must get right is when a request is constrained, with which options, and what is left alone.
"""

from __future__ import annotations

import json
import logging
import os
import warnings
from typing import Any

import pytest

from char_tokens import CharTokenizer
from goldens import goldens
from grammar_parse import list_grammars
from grammar_parse.constrain import end_of_turn, to_structural_tag
from grammar_parse.errors import ArgumentError
from grammar_parse.integrations import grammar_for, parser_name, tool_dicts

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")  # (vLLM asks the platform; there is no GPU)
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"type": "string"}}}}}
STRICT_WEATHER = {"type": "function", "function": {**WEATHER["function"], "strict": True}}
NAMED = {"type": "function", "function": {"name": "get_weather"}}
PROMPT = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
#: (tool_choice, tools) of the requests the plugins constrain.
CONSTRAINED = {"required": ("required", [WEATHER, TIME]), "named": (NAMED, [WEATHER, TIME]),
               "strict_auto": ("auto", [STRICT_WEATHER, TIME])}


def unsupported_grammar() -> str:
    """A built-in grammar the constraint cannot express (which ones is constrain's business, not this test's)."""
    for name in sorted(list_grammars()):
        try:
            to_structural_tag(grammar_for(parser_name(name)), tools=[WEATHER], tool_choice="required")
        except ArgumentError as e:
            if e.code == "constrain.unsupported":
                return name
    pytest.skip("every built-in grammar exports a constraint")


# ---------------------------------------------------------------------------- the engine's xgrammar
@pytest.fixture(scope="module")
def run_xgrammar():
    """'accept' (complete), 'prefix' (live) or 'reject@N' for a structural-tag JSON text, compiled with the
    installed xgrammar over a byte-level vocabulary (byte tokens and one stop token)."""
    xgrammar = pytest.importorskip("xgrammar")
    eos = 256
    info = xgrammar.TokenizerInfo([bytes([i]) for i in range(256)] + [b"<eos>"], vocab_type=xgrammar.VocabType.RAW,
                                  stop_token_ids=[eos])
    compiler = xgrammar.GrammarCompiler(info, cache_enabled=False)

    def run(tag_json: str, text: str) -> str:
        matcher = xgrammar.GrammarMatcher(compiler.compile_structural_tag(tag_json),
                                          terminate_without_stop_token=False)
        for i, byte in enumerate(text.encode()):
            if not matcher.accept_token(byte):
                return f"reject@{i}"
        return "accept" if matcher.accept_token(eos) else "prefix"

    return run


def golden_call() -> tuple[str, str]:
    """qwen3's one-call golden cut at its end of turn (the server's stop token ends it), and the same call
    to a tool the request does not have."""
    text = next(g for g in goldens("qwen3") if g.name == "one_call").text
    for end in end_of_turn(grammar_for("gp_qwen3")):
        text = text.split(end)[0]
    assert '"get_weather"' in text
    return text, text.replace('"get_weather"', '"get_stock"')


# ---------------------------------------------------------------------------- vLLM
@pytest.fixture(scope="module")
def vllm():
    with warnings.catch_warnings():  # (the engine's own imports warn about torch's deprecations)
        warnings.simplefilter("ignore")
        pytest.importorskip("vllm")
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
        from vllm.entrypoints.openai.chat_completion.stream_processor import ChatStreamProcessor
        from vllm.entrypoints.openai.responses.protocol import ResponsesRequest
        from vllm.parser import ParserManager
        from vllm.v1.structured_output.backend_xgrammar import validate_xgrammar_grammar

        import grammar_parse.integrations.vllm  # noqa: F401

    class Engine:
        Chat, Responses, validate = ChatCompletionRequest, ResponsesRequest, staticmethod(validate_xgrammar_grammar)
        Stream = ChatStreamProcessor

        @staticmethod
        def parser(tool: str, reasoning: str | None, tools: Any, prompt: str = PROMPT) -> Any:
            """The request's parser as vLLM's renderer builds it before ``adjust_request``: composed by
            ParserManager, given the rendered prompt's ids."""
            cls = ParserManager.get_parser(tool_parser_name=tool, reasoning_parser_name=reasoning,
                                           enable_auto_tools=True, model_name="m")
            parser = cls(CharTokenizer(), tools, chat_template_kwargs=None, model_config=None)
            parser.set_prompt_token_ids([ord(c) for c in prompt])
            return parser

        @staticmethod
        def chat(tool_choice: Any, tools: Any, **fields: Any) -> Any:
            return ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}], tools=tools,
                                         tool_choice=tool_choice, **fields)

    return Engine


def vllm_tag(request: Any) -> dict[str, Any] | None:
    params = request.extract_structured_outputs()
    return None if params is None or params.structural_tag is None else json.loads(params.structural_tag)


@pytest.mark.parametrize("reasoning_parser", ["gp_qwen3", None], ids=["with_reasoning_parser", "tool_parser_alone"])
@pytest.mark.parametrize("kind", list(CONSTRAINED))
def test_vllm_constrains_required_named_and_strict_auto(vllm, kind, reasoning_parser):
    choice, tools = CONSTRAINED[kind]
    request = vllm.chat(choice, tools, skip_special_tokens=True)
    parser = vllm.parser("gp_qwen3", reasoning_parser, request.tools)
    request = parser.adjust_request(request)
    # The prompt opens no reasoning: the tag holds the (optional) reasoning, and vLLM constrains from the
    # first token, with a reasoning parser too (it asks the parser's is_reasoning_end of the prompt).
    want = to_structural_tag(grammar_for("gp_qwen3"), tools=tools, tool_choice=choice, parallel_tool_calls=True,
                             reasoning=True)
    assert vllm_tag(request) == want
    assert request.resolve_reasoning_ended(parser, [ord(c) for c in PROMPT]) is (True if reasoning_parser else None)
    assert request.response_format is None and request.skip_special_tokens is False


def test_vllm_with_a_reasoning_parser_checks_a_call_written_before_any_reasoning(vllm, run_xgrammar):
    """The output may open a call at once: vLLM constrains from the first token, so the call is checked
    from its opener on (were the constraint held back until the reasoning parser saw the reasoning end, it
    would start inside that call)."""
    call, unknown = golden_call()
    assert call.startswith("<tool_call>")
    parser = vllm.parser("gp_qwen3", "gp_qwen3", [WEATHER, TIME])
    request = parser.adjust_request(vllm.chat("required", [WEATHER, TIME]))
    assert request.resolve_reasoning_ended(parser, [ord(c) for c in PROMPT]) is True
    spec = request.to_sampling_params(max_tokens=64, default_sampling_params={}).structured_outputs.structural_tag
    assert run_xgrammar(spec, call) == "accept"
    assert run_xgrammar(spec, unknown).startswith("reject@")
    assert run_xgrammar(spec, "<think>\nCheck.\n</think>\n\n" + call) == "accept"


def test_vllm_with_a_reasoning_parser_holds_the_constraint_back_while_the_prompt_s_reasoning_is_open(vllm):
    prefilled = PROMPT + "<think>\n"
    parser = vllm.parser("gp_qwen3", "gp_qwen3", [WEATHER], prompt=prefilled)
    request = parser.adjust_request(vllm.chat("required", [WEATHER]))
    want = to_structural_tag(grammar_for("gp_qwen3"), tools=[WEATHER], tool_choice="required", reasoning=False)
    assert vllm_tag(request) == want
    assert request.resolve_reasoning_ended(parser, [ord(c) for c in prefilled]) is False
    reasoner = parser._reasoning_parser  # (what vLLM asks at each step until the reasoning ends)
    assert not reasoner.is_reasoning_end([ord(c) for c in prefilled + "Still thinking"])
    assert reasoner.is_reasoning_end([ord(c) for c in prefilled + "Done.\n</think>\n\n"])


def test_vllm_streams_reasoning_and_calls_of_a_request_constrained_from_the_start(vllm):
    """vLLM treats the reasoning as ended from the prompt on: the deltas still tell reasoning from calls."""
    call, _ = golden_call()
    parser = vllm.parser("gp_qwen3", "gp_qwen3", [WEATHER])
    request = parser.adjust_request(vllm.chat("required", [WEATHER], stream=True))
    processor = vllm.Stream(request, parser, enable_auto_tools=True, parser_cls=type(parser))
    text = "<think>\nCheck.\n</think>\n\n" + call
    reasoning, names = [], []
    for i in range(0, len(text), 7):
        chunk = text[i:i + 7]
        step = processor.step(chunk, [ord(c) for c in chunk], "stop" if i + 7 >= len(text) else None,
                              [ord(c) for c in PROMPT])
        if step.delta is not None:
            reasoning.append(step.delta.reasoning or "")
            names += [tc.function.name for tc in step.delta.tool_calls or () if tc.function and tc.function.name]
    assert "".join(reasoning).strip() == "Check."
    assert names == ["get_weather"]


def test_vllm_passes_parallel_tool_calls_and_drops_reasoning_only_when_the_engine_would(vllm):
    prefilled = PROMPT + "<think>\n"
    request = vllm.chat("required", [WEATHER], parallel_tool_calls=False, include_reasoning=False)
    request = vllm.parser("gp_qwen3", "gp_qwen3", request.tools, prompt=prefilled).adjust_request(request)
    # include_reasoning=false: vLLM constrains from the first token, so the tag covers the (pre-filled) reasoning.
    want = to_structural_tag(grammar_for("gp_qwen3"), tools=[WEATHER], tool_choice="required",
                             parallel_tool_calls=False, prefix=prefilled, reasoning=True)
    assert vllm_tag(request) == want
    assert want != to_structural_tag(grammar_for("gp_qwen3"), tools=[WEATHER], tool_choice="required",
                                     parallel_tool_calls=False, reasoning=True)  # (the prompt decided the start)


def test_vllm_responses_requests_keep_their_text_settings(vllm):
    tools = [{"type": "function", **WEATHER["function"]}]
    request = vllm.Responses(model="m", input="hi", tools=tools, tool_choice="required",
                             text={"format": {"type": "text"}})
    request = vllm.parser("gp_qwen3", None, request.tools).adjust_request(request)
    want = to_structural_tag(grammar_for("gp_qwen3"), tools=[WEATHER], tool_choice="required", reasoning=True)
    assert vllm_tag(request) == want
    assert request.text is not None and request.structured_outputs is None


@pytest.mark.parametrize("case", ["plain_auto", "none", "response_format", "structured_outputs"])
def test_vllm_leaves_other_requests_alone(vllm, case):
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}}
    fields: dict[str, Any] = {
        "plain_auto": {"tool_choice": "auto"},
        "none": {"tool_choice": "none"},
        "response_format": {"tool_choice": NAMED, "response_format": {
            "type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}},
        # (vLLM refuses structured_outputs with a named tool itself)
        "structured_outputs": {"tool_choice": "required", "structured_outputs": {"json": schema}},
    }[case]
    request = vllm.chat(tools=[WEATHER], **fields)
    before = request.model_dump()
    request = vllm.parser("gp_qwen3", "gp_qwen3", request.tools).adjust_request(request)
    assert {**request.model_dump(), "skip_special_tokens": before["skip_special_tokens"]} == before


def test_vllm_leaves_an_unsupported_grammar_unconstrained_and_says_so_once(vllm, caplog):
    name = parser_name(unsupported_grammar())
    with caplog.at_level(logging.INFO, logger="grammar_parse.integrations.vllm"):
        for _ in range(2):
            request = vllm.chat("required", [WEATHER])
            request = vllm.parser(name, name, request.tools).adjust_request(request)
            assert request.structured_outputs is None and request.response_format is None
            assert request.skip_special_tokens is False
    logged = [r.getMessage() for r in caplog.records if "unconstrained" in r.getMessage()]
    assert len(logged) == 1 and "constrain.unsupported" in logged[0]


@pytest.mark.parametrize("reasoning_parser", ["gp_qwen3", None], ids=["with_reasoning_parser", "tool_parser_alone"])
def test_vllm_tag_compiles_and_checks_calls_with_the_engines_xgrammar(vllm, run_xgrammar, reasoning_parser):
    call, unknown = golden_call()
    request = vllm.chat("required", [WEATHER, TIME])
    request = vllm.parser("gp_qwen3", reasoning_parser, request.tools).adjust_request(request)
    params = request.to_sampling_params(max_tokens=64, default_sampling_params={})
    vllm.validate(params)  # (vLLM's own check before the request reaches the engine)
    spec = params.structured_outputs.structural_tag
    assert run_xgrammar(spec, call) == "accept"
    assert run_xgrammar(spec, unknown).startswith("reject@")
    assert run_xgrammar(spec, "Just text.").startswith(("reject@", "prefix"))  # (required: a call must come)


# ---------------------------------------------------------------------------- SGLang
@pytest.fixture(scope="module")
def sglang():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pytest.importorskip("sglang")
        from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest
        from sglang.srt.function_call.function_call_parser import FunctionCallParser

        from grammar_parse.integrations.sglang import install

    logging.disable(logging.CRITICAL)  # (serving_chat's hook needs torchvision to import; logged, not raised)
    try:
        install()
    finally:
        logging.disable(logging.NOTSET)

    class Engine:
        Chat, ToolCallParser = ChatCompletionRequest, FunctionCallParser

        @staticmethod
        def constrained(name: str, request: Any, thinking_mode: bool = False) -> tuple[Any, dict[str, Any], Any]:
            """What serving_chat's ``_process_messages`` and ``to_sampling_params`` do with a request's tools:
            the constraint FunctionCallParser asks the detector for, the sampling params it becomes, and
            the detector."""
            parser = FunctionCallParser(request.tools, name)
            constraint = parser.get_structure_constraint(request.tool_choice,
                                                         parallel_tool_calls=request.parallel_tool_calls,
                                                         thinking_mode=thinking_mode)
            params = request.to_sampling_params(stop=[], model_generation_config={}, tool_call_constraint=constraint)
            return constraint, params, parser.detector

    return Engine


@pytest.mark.parametrize("thinking_mode", [False, True], ids=["reasoner_owns_reasoning", "tag_covers_reasoning"])
@pytest.mark.parametrize("kind", list(CONSTRAINED))
def test_sglang_constrains_required_named_and_strict_auto(sglang, kind, thinking_mode):
    from xgrammar import StructuralTag

    choice, tools = CONSTRAINED[kind]
    request = sglang.Chat(model="m", messages=[{"role": "user", "content": "hi"}], tools=tools, tool_choice=choice)
    constraint, params, detector = sglang.constrained("gp_qwen3", request, thinking_mode)
    want = to_structural_tag(grammar_for("gp_qwen3"), tools=tools, tool_choice=choice, parallel_tool_calls=True,
                             reasoning=thinking_mode)
    assert constraint[0] == "structural_tag"
    assert constraint[1].model_dump(by_alias=True) == StructuralTag.model_validate(want).model_dump(by_alias=True)
    assert json.loads(params["structural_tag"]) == constraint[1].model_dump(by_alias=True)
    assert detector.supports_structural_tag() and not detector.parses_required_natively()


def test_sglang_passes_parallel_tool_calls(sglang):
    from xgrammar import StructuralTag

    request = sglang.Chat(model="m", messages=[{"role": "user", "content": "hi"}], tools=[WEATHER],
                          tool_choice="required", parallel_tool_calls=False)
    constraint, _, _ = sglang.constrained("gp_qwen3", request)
    want = to_structural_tag(grammar_for("gp_qwen3"), tools=[WEATHER], tool_choice="required",
                             parallel_tool_calls=False, reasoning=False)
    assert constraint[1].model_dump(by_alias=True) == StructuralTag.model_validate(want).model_dump(by_alias=True)


def test_sglang_leaves_plain_auto_alone_and_the_clients_own_output_constraint_wins(sglang):
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}}
    plain = sglang.Chat(model="m", messages=[{"role": "user", "content": "hi"}], tools=[WEATHER], tool_choice="auto")
    constraint, params, _ = sglang.constrained("gp_qwen3", plain)
    assert constraint is None and params.get("structural_tag") is None and params.get("json_schema") is None
    own = sglang.Chat(model="m", messages=[{"role": "user", "content": "hi"}], tools=[STRICT_WEATHER],
                      tool_choice="auto", response_format={"type": "json_schema",
                                                           "json_schema": {"name": "answer", "schema": schema}})
    constraint, params, _ = sglang.constrained("gp_qwen3", own)
    assert constraint is not None  # (SGLang drops it for the client's own: to_sampling_params decides)
    assert params.get("structural_tag") is None and json.loads(params["json_schema"]) == schema


def test_sglang_leaves_an_unsupported_grammar_unconstrained(sglang):
    name = parser_name(unsupported_grammar())
    for choice in ("required", NAMED):
        request = sglang.Chat(model="m", messages=[{"role": "user", "content": "hi"}], tools=[WEATHER],
                              tool_choice=choice)
        constraint, params, detector = sglang.constrained(name, request)
        assert constraint is None and params.get("structural_tag") is None and params.get("json_schema") is None
        # (serving_chat adds its JSON-array constraint for required calls unless the detector reads them natively)
        assert detector.parses_required_natively() and not detector.supports_structural_tag()
    assert sglang.ToolCallParser([], name).owns_tool_format()


def test_sglang_tag_compiles_and_checks_calls_with_the_engines_xgrammar(sglang, run_xgrammar):
    call, unknown = golden_call()
    request = sglang.Chat(model="m", messages=[{"role": "user", "content": "hi"}], tools=[WEATHER, TIME],
                          tool_choice="required")
    _, params, _ = sglang.constrained("gp_qwen3", request)
    spec = params["structural_tag"]  # (the JSON text SGLang's grammar backend compiles)
    assert run_xgrammar(spec, call) == "accept"
    assert run_xgrammar(spec, unknown).startswith("reject@")
    assert tool_dicts(request.tools) and run_xgrammar(spec, "Just text.").startswith(("reject@", "prefix"))
