"""Parsed messages render back: each golden message of a family's grammar, rendered as an assistant turn
through the family's vendored chat template, is what the template expects (its reasoning, content and
calls are written) and parses back with the same grammar into the same message.

This is the round trip a chat loop makes (parse the generation, append it, render the next prompt), with
real templates and the goldens' own messages rather than the probes.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import grammar_parse as gp
from goldens import goldens
from grammar_parse.templates._probes import Probe, read_back, render_probe
from test_detect import FAMILY, TEMPLATE_KWARGS, detection, template

pytest.importorskip("jinja2")

#: One template per family grammar: the first vendored one (by name) that writes tool calls, else the first
#: (test_the_template_of_each_family_is_its_family_s checks the choice against detect).
TEMPLATE_OF = {
    "apertus": "Apertus-8B-Instruct", "apriel": "Apriel-1.6-15b-Thinker-fixed", "cohere2": "Cohere2MoE",
    "command_r_plus": "CohereForAI-c4ai-command-r-plus-tool_use",
    "deepseek_r1": "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "deepseek_v31": "deepseek-ai-DeepSeek-V3.1",
    "deepseek_v32": "deepseek-ai-DeepSeek-V3.2", "deepseek_v4": "deepseek-ai-DeepSeek-V4",
    "firefunction_v2": "fireworks-ai-llama-3-firefunction-v2",
    "functionary_v31": "meetkai-functionary-medium-v3.1", "functionary_v32": "meetkai-functionary-medium-v3.2",
    "gemma4": "google-gemma-4-31B-it", "gigachat3": "GigaChat3-10B-A1.8B", "glm45": "GLM-4.6",
    "glm47": "GLM-4.7-Flash", "gpt_oss": "openai-gpt-oss-120b", "granite": "ibm-granite-granite-3.3-2B-Instruct",
    "granite4": "ibm-granite-granite-4.0", "hunyuan_v3": "tencent-Hy3", "kimi_k2": "moonshotai-Kimi-K2",
    "kimi_k3": "Kimi-K3", "lfm2": "LFM2.5-8B-A1B", "ling3": "inclusionai-ling-3.0-flash",
    "llama3_json": "meta-llama-Llama-3.1-8B-Instruct", "minicpm5": "openbmb-MiniCPM5-1B",
    "minimax_m1": "MiniMax-M1", "minimax_m2": "MiniMax-M2", "mistral": "mistralai-Mistral-Nemo-Instruct-2407",
    "mistral_v11": "Mistral-Small-3.2-24B-Instruct-2506", "muse_glimmer": "muse-glimmer",
    "nemotron_nano_v2": "NVIDIA-Nemotron-Nano-v2", "poolside_v1": "poolside-Laguna-S-2.1", "qwen3": "MiMo-VL",
    "qwen3_5": "Qwen3.5-4B", "qwen3_coder": "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
    "seed_oss": "ByteDance-Seed-OSS", "smollm3": "HuggingFaceTB-SmolLM3-3B",
}

#: Messages a family's template refuses to render, by what its raise_exception says.
REFUSALS = {
    "gpt_oss": "Cannot pass both content and thinking in an assistant message with tool calls",
    "llama3_json": "This model only supports single tool-calls at once",
}
#: Messages whose rendering the grammar does not read back as the same message, and why.
ASYMMETRIC = {
    "functionary_v31/python_tag": "the template writes a python call's arguments as JSON after <|python_tag|>; "
                                  "the model writes the raw code",
    "deepseek_r1/text_around_calls": "the template writes the calls, then the content as a second assistant turn; "
                                     "a message ends at its first end of sentence",
    "nemotron_nano_v2/text_around_calls": "the template writes the content, then the calls as a second assistant "
                                          "turn; a message ends at its first end of turn",
    "poolside_v1/hermes_json": "the template writes arguments as XML text: without the tools' schemas (the golden "
                               "has none) the number 2 reads back as \"2\"",
}


def _calls(message: dict[str, Any]) -> tuple[tuple[str, dict[str, Any]], ...] | None:
    """The message's calls as (name, arguments), or None when one cannot be written back (broken calls)."""
    out = []
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) or call.get("errors"):
            return None
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            arguments = json.loads(arguments)
        if not isinstance(arguments, dict):
            return None
        out.append((function["name"], arguments))
    return tuple(out)


def _cases() -> list[Any]:
    cases = []
    for grammar, name in sorted(TEMPLATE_OF.items()):
        for golden in goldens(grammar):
            message = golden.expected
            if "error" in message or message.get("parse_errors"):
                continue
            calls = _calls(message)
            if calls is None:
                continue
            cases.append(pytest.param(grammar, name, golden, calls, id=f"{grammar}/{golden.name}"))
    return cases


def test_the_template_of_each_family_is_its_family_s():
    for grammar, name in TEMPLATE_OF.items():
        assert FAMILY[name] == grammar
        better = [t for t, g in sorted(FAMILY.items()) if g == grammar and detection(t).renders_calls]
        assert name == (better or [name])[0]


@pytest.mark.parametrize(("grammar", "name", "golden", "calls"), _cases())
def test_a_parsed_golden_message_renders_back_and_parses_again(grammar, name, golden, calls):
    """Everything the template writes of the message, the grammar reads back: text the template drops
    (content beside calls, past reasoning, calls after the first) is not expected back, but the rest is,
    and something of the message is always written."""
    found = detection(name)
    message = golden.expected
    reasoning = next((message[k] for k in ("reasoning_content", "thinking") if message.get(k)), None)
    probe = Probe(golden.name, reasoning=reasoning.strip() if reasoning else None,
                  content=(message.get("content") or "").strip() or None, calls=calls)
    try:
        rendering = render_probe(template(name), probe, **TEMPLATE_KWARGS.get(name, {}))
    except gp.ChatTemplateError as refused:
        assert refused.code == "chat_template.raised" and REFUSALS.get(grammar, "\0") in str(refused)
        return
    output = rendering.output
    written = [(n, a) for n, a in calls if n in output and _written(a, output)]
    kept = Probe(probe.name, reasoning=probe.reasoning, content=probe.content if probe.content and probe.content in output
                 else None, calls=tuple(calls[:len(written)]) if written == list(calls[:len(written)]) else ())
    rendering = type(rendering)(kept, rendering.prompt, output, rendering.prefilled, rendering.kwargs,
                                rendering.arguments_as_text)
    differences = read_back(rendering, gp.load_grammar(grammar), template_renders_reasoning=found.reasoning.rendered,
                            tools=golden.tools)
    if f"{grammar}/{golden.name}" in ASYMMETRIC:
        assert differences, "a known asymmetry is gone: take it off the list"
    else:
        assert differences == []


def _written(arguments: dict[str, Any], output: str) -> bool:
    return all(any(form in output for form in (v, json.dumps(v)[1:-1]) if isinstance(v, str)) or
               (not isinstance(v, str) and (json.dumps(v) in output or str(v) in output))
               for v in arguments.values() if not isinstance(v, (dict, list)))
