"""Benchmark: grammar_parse against vLLM 0.33.0's and SGLang 0.5.23's own tool-call and reasoning parsers.

    python benchmarks/bench_peers.py                      # every family, 1 KB / 16 KB / 128 KB and a 64 KB argument
    python benchmarks/bench_peers.py --quick              # 1 KB and 16 KB only, fewer repeats
    python benchmarks/bench_peers.py --family qwen3 --family kimi_k2 --json peers.json

The peers are installed without their GPU stack, in a virtual environment of their own (their pins
conflict with each other and with this package's test dependencies):

    python -m venv venv-peers && . venv-peers/bin/activate
    pip install -e .                       # grammar_parse itself
    pip install torch==2.13.0              # the CPU build (a plain `pip install torch` fetches the CUDA one)
    pip install --no-deps vllm==0.33.0 sglang==0.5.23
    pip install -r benchmarks/requirements-peers.txt

Without vLLM or SGLang the script still runs and leaves that peer's columns empty.

Each peer is driven as its OpenAI chat server drives it:

* vLLM: the unified ``Parser`` class that ``ParserManager.get_parser(tool_parser_name=...,
  reasoning_parser_name=..., enable_auto_tools=True)`` composes, one instance per request, streamed
  through ``ChatStreamProcessor.step(delta_text, delta_token_ids, finish_reason, prompt_token_ids)``
  (the class ``OpenAIServingChat`` streams every choice through) and one-shot through
  ``Parser.parse(text, request, enable_auto_tools=True, model_output_token_ids=...)``.
* SGLang: ``ReasoningParser(name, stream_reasoning, force_reasoning, tokenizer=...,
  tool_call_parser_active=True).parse_stream_chunk(delta)`` and its normal text into
  ``FunctionCallParser(tools, name, tokenizer=...).parse_stream_chunk(...)``, both flushed with
  ``parse_stream_end()`` on the last delta, then the unstreamed-arguments check of
  ``serving_chat``; one-shot ``parse_non_stream`` on both.
* grammar_parse: ``ChatCompletionsStream(grammar, prefix, tools=...)`` fed the same deltas (arguments
  typed and validated against the tools' schemas), one-shot ``parse_response(text, grammar, prefix=...,
  tools=...)``.

The outputs are generated per family in its exact format (reasoning, content and N tool calls, or one
call whose string argument is 64 KB); the end-of-turn token is left out, as a server's stop handling
leaves it out of the text its parsers see. Every delta is one token: text cut in 4-character pieces,
each special token alone, with the token id of a word-level tokenizer built offline from exactly these
pieces (so ``decode(ids) == text`` and every special token the parsers look up has an id).

The first run of every engine is checked: its calls (names and arguments), streamed and one-shot, must
be the calls the output was generated from (ours are held to it too). A mismatch is listed and its cell
marked ✗, never timed as if it were the same work. Reasoning and content are compared with ours,
whitespace aside, and differences listed (those cells are timed).

Times are CPU seconds of this process (``time.process_time``; the machine may be shared), best of N
interleaved runs (ours, vLLM, SGLang, ours, ...), parser construction included (one parser per request,
as in the servers); the tokenizer is built once per family, outside the timing. A one-shot run calls the
parser again and again for a quarter of a CPU second and counts the time per call: the steady state of a
batch job or a server (a single call also times caches warming up). A run past ``--limit``
CPU seconds is stopped and reported as a lower bound (the peers that re-parse the whole output at every
delta are quadratic: a 64 KB argument can take minutes).

A second table says what the performance targets ask of a row: twice the faster peer's speed, streamed and
one-shot, and how grammar_parse, the hand-written floor (``floors.py``, four families) and, where the output
writes the arguments as JSON, their decoding alone (``json.loads`` of each call's arguments, the least any parser
that returns typed arguments pays) compare with it.

Not run: vLLM on gpt_oss (its harmony parser loads openai_harmony's o200k vocabulary, downloaded on first
use), SGLang on llama3_pythonic (see ``Family.skip``).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import logging
import os
import random
import re
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench  # noqa: E402 - the same prose as the main benchmark
import floors  # noqa: E402 - the hand-written parsers: the floor
import grammar_parse  # noqa: E402
from grammar_parse.adapters.chat_completions import ChatCompletionsStream  # noqa: E402

INSTALL = ("pip install torch==2.13.0 && pip install --no-deps vllm==0.33.0 sglang==0.5.23 && "
           "pip install -r benchmarks/requirements-peers.txt")

# ---------------------------------------------------------------------------- tools and calls
TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather forecast for a city.",
                                      "parameters": {"type": "object", "properties": {
                                          "city": {"type": "string"}, "days": {"type": "integer"},
                                          "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                                          "required": ["city"]}}},
    {"type": "function", "function": {"name": "search_web", "description": "Search the web.",
                                      "parameters": {"type": "object", "properties": {
                                          "query": {"type": "string"}, "max_results": {"type": "integer"}},
                                          "required": ["query"]}}},
    {"type": "function", "function": {"name": "write_file", "description": "Write a file.",
                                      "parameters": {"type": "object", "properties": {
                                          "path": {"type": "string"}, "content": {"type": "string"}},
                                          "required": ["path", "content"]}}},
]

CITIES = ["Paris", "Tokyo", "Lima", "Oslo", "Cairo", "Quito", "Hanoi", "Perth"]

Call = tuple[str, dict[str, Any]]  # (name, arguments)


def prose(rng: random.Random, n: int) -> str:
    """bench.py's prose (the same words), without a space at either end."""
    return bench.prose(rng, n).strip()


def make_call(rng: random.Random, i: int) -> Call:
    if i % 2 == 0:
        return "get_weather", {"city": rng.choice(CITIES), "days": 1 + i % 7,
                               "unit": rng.choice(["celsius", "fahrenheit"])}
    return "search_web", {"query": prose(rng, rng.randint(30, 60)), "max_results": 3 + i % 5}


def code_body(size: int) -> str:
    """A string argument of ``size`` characters: code with quotes, backslashes and non-ASCII."""
    line = 'def f(x):\n    return x * 2  # "quoted" \\ and é, 100% done\n'
    return (line * (size // len(line) + 1))[:size].rstrip() + "."


# ---------------------------------------------------------------------------- family formats
def _json(args: dict[str, Any]) -> str:
    return json.dumps(args, ensure_ascii=False)


def _xml_value(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v)


def _tagged(calls: list[Call], call_open: str, argument: str, call_close: str) -> str:
    """Calls written as tags: ``call_open`` (with ``{name}``), one ``argument`` per key (with ``{key}``,
    ``{value}`` and ``{string}``, whether the value is a string), then ``call_close``."""
    return "".join(call_open.format(name=n) + "".join(
        argument.format(key=k, value=_xml_value(v), string="true" if isinstance(v, str) else "false")
        for k, v in a.items()) + call_close for n, a in calls)


def r_qwen3(reasoning: str, content: str, calls: list[Call]) -> str:
    body = "".join(f'\n<tool_call>\n{_json({"name": n, "arguments": a})}\n</tool_call>' for n, a in calls)
    return f"<think>\n{reasoning}\n</think>\n\n{content}\n{body}"


def r_qwen3_coder(reasoning: str, content: str, calls: list[Call]) -> str:
    body = _tagged(calls, "\n<tool_call>\n<function={name}>\n", "<parameter={key}>\n{value}\n</parameter>\n",
                   "</function>\n</tool_call>")
    return f"<think>\n{reasoning}\n</think>\n\n{content}\n{body}"


def r_deepseek_v3(reasoning: str, content: str, calls: list[Call]) -> str:
    body = "\n".join(f"<｜tool▁call▁begin｜>function<｜tool▁sep｜>{n}\n```json\n{_json(a)}\n```<｜tool▁call▁end｜>"
                     for n, a in calls)
    return f"<think>\n{reasoning}\n</think>\n\n{content}<｜tool▁calls▁begin｜>{body}<｜tool▁calls▁end｜>"


def r_deepseek_v31(reasoning: str, content: str, calls: list[Call]) -> str:  # <think> is in the prompt
    body = "".join(f"<｜tool▁call▁begin｜>{n}<｜tool▁sep｜>{_json(a)}<｜tool▁call▁end｜>" for n, a in calls)
    return f"{reasoning}</think>{content}<｜tool▁calls▁begin｜>{body}<｜tool▁calls▁end｜>"


def r_kimi_k2(reasoning: str, content: str, calls: list[Call]) -> str:
    body = "".join(f"<|tool_call_begin|>functions.{n}:{i}<|tool_call_argument_begin|>{_json(a)}<|tool_call_end|>"
                   for i, (n, a) in enumerate(calls))
    return f"<think>{reasoning}</think>{content}<|tool_calls_section_begin|>{body}<|tool_calls_section_end|>"


def r_mistral(reasoning: str, content: str, calls: list[Call]) -> str:  # tokenizer <= v7: no reasoning
    rng = random.Random(len(calls))
    ids = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") for _ in range(9))
           for _ in calls]
    array = json.dumps([{"name": n, "arguments": a, "id": i} for (n, a), i in zip(calls, ids)], ensure_ascii=False)
    return f"{content} [TOOL_CALLS] {array}"


def r_glm45(reasoning: str, content: str, calls: list[Call]) -> str:
    body = _tagged(calls, "\n<tool_call>{name}\n", "<arg_key>{key}</arg_key>\n<arg_value>{value}</arg_value>\n",
                   "</tool_call>")
    return f"\n<think>{reasoning}</think>\n{content}{body}"


def r_minimax_m2(reasoning: str, content: str, calls: list[Call]) -> str:
    invokes = _tagged(calls, '<invoke name="{name}">\n', '<parameter name="{key}">{value}</parameter>\n', "</invoke>\n")
    return f"<think>\n{reasoning}\n</think>\n\n{content}\n<minimax:tool_call>\n{invokes}</minimax:tool_call>"


def r_gpt_oss(reasoning: str, content: str, calls: list[Call]) -> str:
    body = "".join(f"<|start|>assistant<|channel|>commentary to=functions.{n} <|constrain|>json<|message|>"
                   f"{json.dumps(a, ensure_ascii=False, separators=(',', ':'))}<|call|>" for n, a in calls)
    return (f"<|channel|>analysis<|message|>{reasoning}<|end|>"
            f"<|start|>assistant<|channel|>commentary<|message|>{content}<|end|>{body}")


def r_llama3_json(reasoning: str, content: str, calls: list[Call]) -> str:  # no reasoning, no content
    return "; ".join(_json({"name": n, "parameters": a}) for n, a in calls)


def r_glm47(reasoning: str, content: str, calls: list[Call]) -> str:  # <think> is in the prompt
    body = _tagged(calls, "<tool_call>{name}", "<arg_key>{key}</arg_key><arg_value>{value}</arg_value>", "</tool_call>")
    return f"{reasoning}</think>{content}{body}"


def r_poolside_v1(reasoning: str, content: str, calls: list[Call]) -> str:  # as GLM-4.7
    return r_glm47(reasoning, content, calls)


def r_mistral_v11(reasoning: str, content: str, calls: list[Call]) -> str:
    body = "".join(f"[TOOL_CALLS]{n}[ARGS]{_json(a)}" for n, a in calls)
    return f"[THINK]{reasoning}[/THINK]{content}{body}"


def _py(v: Any) -> str:
    return json.dumps(v, ensure_ascii=False)  # JSON strings and integers are Python literals too


def r_llama3_pythonic(reasoning: str, content: str, calls: list[Call]) -> str:  # no reasoning, no content
    body = ", ".join(f"{n}(" + ", ".join(f"{k}={_py(v)}" for k, v in a.items()) + ")" for n, a in calls)
    return f"[{body}]"


def r_deepseek_v32(reasoning: str, content: str, calls: list[Call]) -> str:  # <think> is in the prompt
    invokes = _tagged(calls, '<｜DSML｜invoke name="{name}">\n',
                      '<｜DSML｜parameter name="{key}" string="{string}">{value}</｜DSML｜parameter>\n', "</｜DSML｜invoke>\n")
    return f"{reasoning}</think>\n\n{content}\n\n<｜DSML｜function_calls>\n{invokes}</｜DSML｜function_calls>"


def r_mimo(reasoning: str, content: str, calls: list[Call]) -> str:
    body = _tagged(calls, "\n<tool_call>\n<function={name}>\n", "<parameter={key}>{value}</parameter>\n",
                   "</function>\n</tool_call>")
    return f"<think>\n{reasoning}\n</think>\n\n{content}{body}"


def r_step3(reasoning: str, content: str, calls: list[Call]) -> str:  # <think> is in the prompt
    body = _tagged(calls, '<｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="{name}">',
                   '<steptml:parameter name="{key}">{value}</steptml:parameter>', "</steptml:invoke><｜tool_call_end｜>")
    return f"{reasoning}\n</think>\n\n{content}<｜tool_calls_begin｜>{body}<｜tool_calls_end｜>"


@dataclass(frozen=True)
class Family:
    name: str                      # our built-in grammar
    render: Callable[[str, str, list[Call]], str]
    specials: tuple[str, ...]      # strings that are one token each
    vllm: tuple[str | None, str | None]     # (--tool-call-parser, --reasoning-parser)
    sglang: tuple[str | None, str | None]   # (--tool-call-parser, --reasoning-parser)
    prefix: str = ""               # the prompt's tail, as our parser and vLLM's prompt_token_ids see it
    force_reasoning: bool = False  # SGLang: the template opened the reasoning (template_manager.force_reasoning)
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    reasoning: bool = True         # the format has reasoning
    content: bool = True           # the format has free text beside the calls
    vllm_harmony: bool = False     # vLLM serves this family through its harmony path
    skip: tuple[tuple[str, str], ...] = ()  # (peer, why): peers that cannot be run on these outputs
    note: str = ""


QWEN_SPECIALS = ("<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>")
DS_SPECIALS = ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<think>", "</think>",
               "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>",
               "<｜tool▁sep｜>")
FAMILIES: dict[str, Family] = {f.name: f for f in [
    Family("qwen3", r_qwen3, QWEN_SPECIALS, ("hermes", "qwen3"), ("qwen25", "qwen3"),
           prefix="<|im_start|>assistant\n"),
    Family("qwen3_coder", r_qwen3_coder, QWEN_SPECIALS, ("qwen3_coder", "qwen3"), ("qwen3_coder", "qwen3"),
           prefix="<|im_start|>assistant\n"),
    Family("deepseek_v3", r_deepseek_v3, DS_SPECIALS, ("deepseek_v3", "deepseek_r1"), ("deepseekv3", "deepseek-r1"),
           prefix="<｜Assistant｜>"),
    Family("deepseek_v31", r_deepseek_v31, DS_SPECIALS, ("deepseek_v31", "deepseek_v3"), ("deepseekv31", "deepseek-v3"),
           prefix="<｜Assistant｜><think>", force_reasoning=True, chat_template_kwargs={"thinking": True}),
    Family("kimi_k2", r_kimi_k2,
           ("<|im_end|>", "<|im_assistant|>", "<think>", "</think>", "<|tool_calls_section_begin|>",
            "<|tool_calls_section_end|>", "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"),
           ("kimi_k2", "kimi_k2"), ("kimi_k2", "kimi_k2"), prefix="<|im_assistant|>assistant<|im_middle|>"),
    Family("mistral", r_mistral, ("<s>", "</s>", "[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]",
                                  "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]"),
           ("mistral", None), ("mistral", None), reasoning=False),
    Family("glm45", r_glm45, ("<|assistant|>", "<|user|>", "<|observation|>", "<think>", "</think>", "<tool_call>",
                              "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"),
           ("glm45", "glm45"), ("glm45", "glm45"), prefix="<|assistant|>"),
    Family("minimax_m2", r_minimax_m2, ("]~b]", "[e~[", "<think>", "</think>", "<minimax:tool_call>",
                                        "</minimax:tool_call>"),
           ("minimax_m2", "minimax_m2"), ("minimax-m2", "minimax"), prefix="]~b]ai\n", force_reasoning=True),
    Family("gpt_oss", r_gpt_oss, ("<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>",
                                  "<|return|>", "<|call|>"),
           ("openai", "openai_gptoss"), ("gpt-oss", "gpt-oss"), prefix="<|start|>assistant", vllm_harmony=True),
    Family("llama3_json", r_llama3_json, ("<|begin_of_text|>", "<|eot_id|>", "<|eom_id|>", "<|python_tag|>",
                                          "<|start_header_id|>", "<|end_header_id|>"),
           ("llama3_json", None), ("llama3", None), prefix="<|start_header_id|>assistant<|end_header_id|>\n\n",
           reasoning=False, content=False),
    Family("glm47", r_glm47, ("<|assistant|>", "<|user|>", "<|observation|>", "<think>", "</think>", "<tool_call>",
                              "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"),
           ("glm47", "glm47"), ("glm47", "glm45"), prefix="<|assistant|><think>", force_reasoning=True),
    Family("poolside_v1", r_poolside_v1, ("<assistant>", "</assistant>", "<think>", "</think>", "<tool_call>",
                                          "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"),
           ("poolside_v1", "poolside_v1"), ("poolside_v1", "poolside_v1"), prefix="<assistant><think>",
           force_reasoning=True, chat_template_kwargs={"enable_thinking": True}),
    Family("mistral_v11", r_mistral_v11, ("<s>", "</s>", "[THINK]", "[/THINK]", "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]",
                                          "[INST]", "[/INST]"),
           ("mistral", "mistral"), ("mistral", "mistral")),
    Family("llama3_pythonic", r_llama3_pythonic, ("<|begin_of_text|>", "<|eot_id|>", "<|eom_id|>", "<|python_tag|>",
                                                  "<|start_header_id|>", "<|end_header_id|>"),
           ("pythonic", None), ("pythonic", None), prefix="<|start_header_id|>assistant<|end_header_id|>\n\n",
           reasoning=False, content=False,
           skip=(("SGLang", "PythonicDetector.tool_call_regex backtracks exponentially: it is searched on the whole "
                            "buffer at every delta, and on an unclosed list of 4 calls one search takes 10 s, each "
                            "call more 25 times that"),),
           note="no content: vLLM's pythonic parser takes calls only when the output starts with '['"),
    Family("deepseek_v32", r_deepseek_v32, DS_SPECIALS, ("deepseek_v32", "deepseek_v3"), ("deepseekv32", "deepseek-v3"),
           prefix="<｜Assistant｜><think>", force_reasoning=True, chat_template_kwargs={"thinking": True}),
    Family("mimo", r_mimo, QWEN_SPECIALS, ("mimo", "mimo"), ("mimo", "mimo"), prefix="<|im_start|>assistant\n",
           force_reasoning=True, chat_template_kwargs={"enable_thinking": True}),
    Family("step3", r_step3, ("<|BOT|>", "<|EOT|>", "<think>", "</think>", "<｜tool_calls_begin｜>", "<｜tool_calls_end｜>",
                              "<｜tool_call_begin｜>", "<｜tool_call_end｜>", "<｜tool_sep｜>"),
           ("step3", "step3"), ("step3", "step3"), prefix="<|BOT|>assistant\n<think>\n", force_reasoning=True),
]}


# ---------------------------------------------------------------------------- workloads
@dataclass
class Workload:
    label: str
    text: str
    calls: list[Call]
    chunks: list[str] = field(default_factory=list)
    ids: list[list[int]] = field(default_factory=list)
    flat_ids: list[int] = field(default_factory=list)


def workload(fam: Family, size: int, seed: int = 0) -> tuple[str, list[Call]]:
    """An output of about ``size`` characters: a third reasoning, a sixth content, the rest tool calls."""
    rng = random.Random(seed)
    share = (1 if fam.reasoning else 0) * 2 + (1 if fam.content else 0)
    calls_budget = size // 2 if share else size
    calls: list[Call] = []
    probe = fam.render("", "", [])
    while len(fam.render("", "", calls)) - len(probe) < calls_budget or not calls:
        calls.append(make_call(rng, len(calls)))
    rest = max(size - len(fam.render("", "", calls)), 60)
    reasoning = prose(rng, rest * 2 // share) if fam.reasoning else ""
    content = prose(rng, rest // share if fam.reasoning else rest) if fam.content else ""
    return fam.render(reasoning, content, calls), calls


def big_argument(fam: Family, size: int = 64_000) -> tuple[str, list[Call]]:
    rng = random.Random(1)
    calls: list[Call] = [("write_file", {"path": "src/app.py", "content": code_body(size)})]
    return (fam.render(prose(rng, 200) if fam.reasoning else "", prose(rng, 80) if fam.content else "", calls),
            calls)


class Tokens:
    """Cuts text into token-sized deltas and gives each its id in a word-level vocabulary of those deltas."""

    def __init__(self, specials: tuple[str, ...]) -> None:
        self.specials = specials
        self.split = re.compile("(" + "|".join(re.escape(s) for s in sorted(specials, key=len, reverse=True)) + ")")
        self.vocab: dict[str, int] = {"<unk>": 0}
        for s in specials:
            self.vocab.setdefault(s, len(self.vocab))

    def chunks(self, text: str) -> list[str]:
        out: list[str] = []
        for piece in self.split.split(text):
            if piece in self.specials:
                out.append(piece)
            else:
                out.extend(piece[i:i + 4] for i in range(0, len(piece), 4))
        return out

    def ids(self, chunks: list[str]) -> list[list[int]]:
        return [[self.vocab.setdefault(c, len(self.vocab))] for c in chunks]

    def save(self, directory: str) -> None:
        from tokenizers import AddedToken, Tokenizer, decoders, models
        tk = Tokenizer(models.WordLevel(dict(self.vocab), unk_token="<unk>"))
        tk.decoder = decoders.Fuse()
        tk.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in self.specials])
        tk.save(os.path.join(directory, "tokenizer.json"))
        with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
            json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "<unk>",
                       "model_max_length": 1 << 30}, f)


# ---------------------------------------------------------------------------- results
@dataclass
class Outcome:
    reasoning: str
    content: str
    calls: list[Call]


class StreamedCalls:
    """Calls streamed as deltas, folded as a client folds them: a name once it comes, arguments appended."""

    def __init__(self) -> None:
        self.calls: dict[int, list[Any]] = {}

    def add(self, index: int, name: str | None = None, arguments: str | None = None) -> None:
        entry = self.calls.setdefault(index, [None, ""])
        if name:
            entry[0] = name
        if arguments:
            entry[1] += arguments

    def folded(self) -> list[Call]:
        return norm_calls([tuple(self.calls[k]) for k in sorted(self.calls)])


def norm_calls(calls: list[tuple[str | None, Any]]) -> list[Call]:
    out: list[Call] = []
    for name, args in calls:
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except ValueError:
                args = {"<unparsed>": args}
        out.append((name or "", args))
    return out


def squash(text: str) -> str:
    return " ".join(text.split())


def text_notes(ours: Outcome, got: Outcome) -> list[str]:
    """Differences in reasoning or content beyond whitespace (reported, not counted as mismatches)."""
    notes = []
    for what in ("reasoning", "content"):
        a, b = squash(getattr(ours, what)), squash(getattr(got, what))
        if a != b:
            i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            notes.append(f"{what} differs from ours at character {i} ({len(b)} vs our {len(a)} characters): "
                         f"{b[max(0, i - 20):i + 40]!r} vs our {a[max(0, i - 20):i + 40]!r}")
    return notes


def describe_mismatch(expected: list[Call], got: list[Call]) -> str:
    if len(expected) != len(got):
        return f"{len(got)} calls, expected {len(expected)}"
    for i, (e, g) in enumerate(zip(expected, got)):
        if e != g:
            if e[0] != g[0]:
                return f"call {i}: name {g[0]!r}, expected {e[0]!r}"
            keys = sorted(set(e[1]) | set(g[1]))
            for k in keys:
                if e[1].get(k) != g[1].get(k):
                    ev, gv = repr(e[1].get(k)), repr(g[1].get(k))
                    return f"call {i} ({e[0]}): argument {k!r} is {gv[:80]}, expected {ev[:80]}"
    return ""


# ---------------------------------------------------------------------------- grammar_parse
class Ours:
    label = "ours"

    def __init__(self, fam: Family) -> None:
        self.fam = fam
        self.grammar = grammar_parse.load_grammar(fam.name)

    def stream(self, w: Workload) -> Outcome:
        s = ChatCompletionsStream(self.grammar, prefix=self.fam.prefix, tools=TOOLS)
        for i, c in enumerate(w.chunks):
            Deadline.check(i)
            s.feed(c)
        s.finish()
        m = s.message
        return Outcome(m.get("reasoning_content") or "", m.get("content") or "",
                       norm_calls([(c["function"]["name"], c["function"]["arguments"])
                                   for c in m.get("tool_calls") or []]))

    def oneshot(self, w: Workload) -> Outcome:
        m = grammar_parse.parse_response(w.text, self.grammar, prefix=self.fam.prefix, tools=TOOLS)
        reasoning = next((m[k] for k in ("reasoning_content", "thinking", "reasoning") if m.get(k)), "")
        return Outcome(reasoning, m.get("content") or "",
                       norm_calls([(c["function"]["name"], c["function"]["arguments"])
                                   for c in m.get("tool_calls") or []]))


# ---------------------------------------------------------------------------- the hand-written floor
class Floor:
    """A parser written by hand for this one format (floors.py): what plain Python reaches."""

    label = "floor"

    def __init__(self, fam: Family) -> None:
        self.fam = fam

    def stream(self, w: Workload) -> Outcome:
        parser = _FLOOR_PARSERS[self.fam.name][0]()
        reasoning: list[str] = []
        content: list[str] = []
        calls = StreamedCalls()
        for i, c in enumerate([*w.chunks, None]):
            Deadline.check(i)
            r, t, deltas = parser.feed(c) if c is not None else parser.finish()
            reasoning.append(r)
            content.append(t)
            for index, name, arguments in deltas:
                calls.add(index, name, arguments)
        return Outcome("".join(reasoning).strip(), "".join(content).strip(), calls.folded())

    def oneshot(self, w: Workload) -> Outcome:
        reasoning, content, calls = _FLOOR_PARSERS[self.fam.name][1](w.text)
        return Outcome(reasoning, content, norm_calls(list(calls)))


#: The families with a hand-written floor: (its streaming parser, its one-shot parser), made for the benchmark's tools.
_FLOOR_PARSERS: dict[str, tuple[Callable[[], Any], Callable[[str], tuple[str, str, list[Call]]]]] = {
    "qwen3": (floors.Qwen3Stream, floors.qwen3_oneshot),
    "qwen3_coder": (lambda: floors.Qwen3CoderStream(TOOLS), lambda text: floors.qwen3_coder_oneshot(text, TOOLS)),
    "deepseek_v3": (floors.DeepseekV3Stream, floors.deepseek_v3_oneshot),
    "kimi_k2": (floors.KimiK2Stream, floors.kimi_k2_oneshot),
}
FLOORS = tuple(_FLOOR_PARSERS)


class Decode:
    """``json.loads`` of each call's arguments as the output writes them, and nothing else: the least that any
    parser returning typed arguments pays (one-shot only; families whose arguments are JSON text)."""

    label = "decode"
    stream = None  # (not a streaming parser: run_interleaved leaves it out of the streamed runs)

    def __init__(self) -> None:
        self.texts: dict[int, list[str]] = {}

    @staticmethod
    def written(w: Workload) -> list[str] | None:
        """Each call's arguments as the output writes them (JSON, spaced or compact), or None where one is not."""
        found = [next((t for t in (_json(args), json.dumps(args, ensure_ascii=False, separators=(",", ":")))
                       if t in w.text), None) for _, args in w.calls]
        return None if None in found else found  # type: ignore[return-value]

    @classmethod
    def applies(cls, w: Workload) -> bool:
        return cls.written(w) is not None

    def oneshot(self, w: Workload) -> Outcome:
        texts = self.texts.get(id(w))
        if texts is None:
            texts = self.texts[id(w)] = self.written(w) or []
        return Outcome("", "", norm_calls([(name, json.loads(t)) for (name, _), t in zip(w.calls, texts)]))


# ---------------------------------------------------------------------------- vLLM
class VLLM:
    label = "vLLM"

    def __init__(self, fam: Family, tokenizer_dir: str, prompt_ids: list[int],
                 names: tuple[str | None, str | None] | None = None, label: str = "vLLM") -> None:
        """``names``: (--tool-call-parser, --reasoning-parser), the family's vLLM parsers by default."""
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
        from vllm.entrypoints.openai.chat_completion.stream_processor import ChatStreamProcessor
        from vllm.parser import ParserManager
        from vllm.tokenizers.hf import CachedHfTokenizer

        self.fam = fam
        self.tokenizer = CachedHfTokenizer.from_pretrained(tokenizer_dir)  # as the server loads it (cached vocab)
        self.label = label
        tool, reasoning = names or fam.vllm
        self.parser_cls = ParserManager.get_parser(
            tool_parser_name=tool, reasoning_parser_name=reasoning, enable_auto_tools=True,
            model_name=fam.name, is_harmony=fam.vllm_harmony and names is None, tokenizer=self.tokenizer)
        self.request = ChatCompletionRequest(
            model=fam.name, messages=[{"role": "user", "content": "What is the weather?"}], tools=TOOLS,
            tool_choice="auto", chat_template_kwargs=fam.chat_template_kwargs or None)
        self.processor_cls = ChatStreamProcessor
        self.prompt_ids = prompt_ids
        if fam.vllm_harmony and names is None:  # the harmony parser needs openai_harmony's o200k vocabulary, fetched on first use
            from vllm.entrypoints.openai.parser.harmony_utils import get_encoding
            get_encoding()

    def _parser(self) -> Any:
        return self.parser_cls(self.tokenizer, self.request.tools,
                               chat_template_kwargs=self.fam.chat_template_kwargs, model_config=None)

    def stream(self, w: Workload) -> Outcome:
        proc = self.processor_cls(self.request, self._parser(), enable_auto_tools=True, parser_cls=self.parser_cls)
        reasoning: list[str] = []
        content: list[str] = []
        calls = StreamedCalls()
        last = len(w.chunks) - 1
        for i, (c, ids) in enumerate(zip(w.chunks, w.ids)):
            Deadline.check(i)
            delta = proc.step(c, ids, "stop" if i == last else None, self.prompt_ids).delta
            if delta is None:
                continue
            if delta.reasoning:
                reasoning.append(delta.reasoning)
            if delta.content:
                content.append(delta.content)
            for tc in delta.tool_calls or []:
                calls.add(tc.index, *((tc.function.name, tc.function.arguments) if tc.function is not None else ()))
        return Outcome("".join(reasoning), "".join(content), calls.folded())

    def oneshot(self, w: Workload) -> Outcome:
        parser = self._parser()
        parser.set_prompt_token_ids(self.prompt_ids)
        reasoning, content, calls = parser.parse(w.text, self.request, enable_auto_tools=True,
                                                 model_output_token_ids=w.flat_ids)
        return Outcome(reasoning or "", content or "", norm_calls([(c.name, c.arguments) for c in calls or []]))


# ---------------------------------------------------------------------------- SGLang
class SGLang:
    label = "SGLang"

    def __init__(self, fam: Family, tokenizer_dir: str, names: tuple[str | None, str | None] | None = None,
                 label: str = "SGLang") -> None:
        """``names``: (--tool-call-parser, --reasoning-parser), the family's SGLang parsers by default."""
        from sglang.srt.entrypoints.openai.protocol import Tool
        from sglang.srt.function_call.function_call_parser import FunctionCallParser
        from sglang.srt.parser.reasoning_parser import ReasoningParser
        from transformers import AutoTokenizer

        self.fam = fam
        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
        from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest

        self.tools = [Tool.model_validate(t) for t in TOOLS]
        self.fcp, self.rp = FunctionCallParser, ReasoningParser
        # The request as serving_chat hands it to the parsers: the tools, and the rendered prompt's tail it
        # records for the parsers that read it (its response_template parsers, and ours through our hooks).
        self.request = ChatCompletionRequest(model=fam.name, messages=[{"role": "user", "content": "hi"}],
                                             tools=TOOLS, chat_template_kwargs=fam.chat_template_kwargs or None)
        self.request._response_parser_prefix = fam.prefix
        self.label = label
        self.tool_name, self.reasoning_name = names or fam.sglang

    def _reasoning(self, stream: bool) -> Any:
        if self.reasoning_name is None:
            return None
        return self.rp(self.reasoning_name, stream, self.fam.force_reasoning, self.request, tokenizer=self.tokenizer,
                       tool_call_parser_active=True)

    def _tools(self) -> Any:
        return self.fcp(tools=self.tools, tool_call_parser=self.tool_name, tokenizer=self.tokenizer)

    def stream(self, w: Workload) -> Outcome:
        rp = self._reasoning(True)
        fp = self._tools()
        reasoning: list[str] = []
        content: list[str] = []
        calls = StreamedCalls()
        last = len(w.chunks) - 1
        for i, delta in enumerate(w.chunks):
            Deadline.check(i)
            end = i == last
            if rp is not None:
                r, delta = rp.parse_stream_chunk(delta)
                if end:  # (as serving_chat._process_reasoning_stream joins them: only what is there)
                    er, en = rp.parse_stream_end()
                    if er:
                        r = (r or "") + er
                    if en:
                        delta = (delta or "") + en
                if r:
                    reasoning.append(r)
            normal, items = fp.parse_stream_chunk(delta)
            if end:
                end_text, end_items = fp.parse_stream_end()
                normal = (normal or "") + end_text
                items = list(items) + end_items
            if normal:
                content.append(normal)
            for item in items:
                calls.add(item.tool_index, item.name, item.parameters)
            if end:  # serving_chat._check_for_unstreamed_tool_args
                det = fp.detector
                arr, streamed = getattr(det, "prev_tool_call_arr", None), getattr(det, "streamed_args_for_tool", None)
                if arr and streamed and len(arr) - 1 < len(streamed):
                    idx = len(arr) - 1
                    expected = arr[idx].get("arguments", {})
                    expected = expected if isinstance(expected, str) else json.dumps(expected, ensure_ascii=False)
                    if expected.startswith(streamed[idx]) and expected[len(streamed[idx]):]:
                        calls.add(idx, arguments=expected[len(streamed[idx]):])
        return Outcome("".join(reasoning), "".join(content), calls.folded())

    def oneshot(self, w: Workload) -> Outcome:
        reasoning, text = None, w.text
        rp = self._reasoning(False)
        if rp is not None:
            reasoning, text = rp.parse_non_stream(w.text)
        fp = self._tools()
        calls: list[Any] = []
        if fp.has_tool_call(text):  # (as serving_chat passes it: the reasoning parser's text, unchanged)
            text, calls = fp.parse_non_stream(text)
        return Outcome(reasoning or "", text or "", norm_calls([(c.name, c.parameters) for c in calls]))


# ---------------------------------------------------------------------------- harness
@contextlib.contextmanager
def quiet() -> Any:
    """The peers log warnings per request (unparsed calls, deprecations): keep them off the table."""
    logging.disable(logging.CRITICAL)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with contextlib.redirect_stderr(io.StringIO()):
            yield
    logging.disable(logging.NOTSET)


def peer_available(module: str, name: str, pip: str) -> bool:
    try:
        with quiet():
            __import__(module)
        return True
    except Exception as e:  # noqa: BLE001 - any import failure means the peer is not usable here
        print(f"{name} not installed or not importable ({type(e).__name__}: {e}): {pip} ; skipping its columns")
        return False


class Cut(Exception):
    """A streamed run passed its CPU-time cap (``Deadline.limit``) after ``done`` deltas."""

    def __init__(self, done: int) -> None:
        super().__init__(f"cut after {done} deltas")
        self.done = done


class Deadline:
    at = float("inf")

    @classmethod
    def check(cls, i: int) -> None:
        if not i & 63 and time.process_time() > cls.at:
            raise Cut(i)


@dataclass
class Cell:
    """One engine's figures for one workload and mode."""

    best: float = float("inf")   # CPU seconds of the fastest full run
    runs: int = 0
    cut: int = 0                 # deltas done when the first run was cut off (0: not cut)
    cut_seconds: float = 0.0
    outcome: Outcome | None = None
    error: str = ""


#: CPU seconds each one-shot run keeps calling the parser for (its time is per call).
ONESHOT_CPU = 0.25


def run_interleaved(engines: list[Any], mode: str, w: Workload, repeat: int, budget: float,
                    limit: float) -> list[Cell | None]:
    """Runs (engine 0, engine 1, ..., engine 0, ...) ``repeat`` times: each engine's fastest CPU time and the
    outcome of its first run. An engine whose run took more than ``budget`` seconds is not run again; a
    streamed run past ``limit`` seconds is cut off, and the engine is not run again."""
    cells: list[Cell | None] = [None if e is None or getattr(e, mode) is None else Cell() for e in engines]
    for r in range(repeat):
        for eng, cell in zip(engines, cells):
            if cell is None or cell.error or cell.cut or (r > 0 and cell.best > budget):
                continue
            gc.collect()
            t0 = time.process_time()
            Deadline.at = t0 + limit
            calls = 0
            try:
                with quiet():
                    outcome = getattr(eng, mode)(w)
                    calls = 1
                    # One-shot: calls until ONESHOT_CPU seconds have passed, timed per call (the steady state
                    # a batch or a server sees, as bench.py times it; a single call measures caches warming up).
                    while mode == "oneshot" and time.process_time() - t0 < ONESHOT_CPU:
                        getattr(eng, mode)(w)
                        calls += 1
            except Cut as c:
                cell.cut, cell.cut_seconds = c.done, time.process_time() - t0
                continue
            except Exception as e:  # noqa: BLE001 - a peer that raises is reported, not timed
                cell.error = f"{type(e).__name__}: {e}"
                continue
            finally:
                Deadline.at = float("inf")
            cell.best = min(cell.best, (time.process_time() - t0) / calls)
            cell.runs += 1
            if cell.outcome is None:
                cell.outcome = outcome
    return cells


def judge(cell: Cell, mode: str, w: Workload) -> tuple[dict[str, Any], str]:
    """One cell's figures (for the table and the JSON) and the problem to report after its place (empty when
    it was timed: right, or cut off). A cell whose calls are wrong is not timed."""
    if cell.error:
        return {"error": cell.error}, f" raised {cell.error}"
    if cell.cut:
        return {"cut_after_deltas": cell.cut, "cut_cpu_s": cell.cut_seconds,
                "us_per_delta_at_least": cell.cut_seconds / cell.cut * 1e6}, ""
    assert cell.outcome is not None
    why = describe_mismatch(w.calls, cell.outcome.calls)
    if why:
        return {"mismatch": why}, f": {why}"
    figures: dict[str, Any] = {"cpu_s": cell.best, "runs": cell.runs}
    if mode == "stream":
        figures["us_per_delta"] = cell.best / len(w.chunks) * 1e6
    else:
        mb = len(w.text.encode()) / 1e6
        figures["mb_s"] = mb / cell.best if cell.best > 0 else float("inf")
    return figures, ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1 KB and 16 KB only, fewer repeats")
    ap.add_argument("--family", action="append", choices=sorted(FAMILIES), help="repeatable; default: all")
    ap.add_argument("--json", metavar="FILE", help="write the raw figures here")
    ap.add_argument("--limit", type=float, default=None,
                    help="CPU seconds after which one streamed run is cut off (default 30, 10 with --quick)")
    args = ap.parse_args()
    started = time.perf_counter()

    have_vllm = peer_available("vllm.parser", "vLLM", INSTALL)
    have_sglang = peer_available("sglang.srt.function_call.function_call_parser", "SGLang", INSTALL)
    gc.collect()
    gc.freeze()  # the peers' import graph (torch, transformers, ...): kept out of every later collection
    sizes = [1_000, 16_000] if args.quick else [1_000, 16_000, 128_000]
    repeats = {"1 KB": 3 if args.quick else 7, "16 KB": 2 if args.quick else 3, "128 KB": 3, "64 KB arg": 3}
    budget = 2.0 if args.quick else 10.0  # CPU seconds past which a slow run is not repeated
    limit = args.limit or (10.0 if args.quick else 30.0)
    rows: list[dict[str, Any]] = []
    problems: list[str] = []
    notes: list[str] = []

    for fam_name in args.family or list(FAMILIES):
        fam = FAMILIES[fam_name]
        tokens = Tokens(fam.specials)
        loads: list[Workload] = []
        for size in sizes:
            text, calls = workload(fam, size)
            loads.append(Workload(f"{size // 1000} KB", text, calls))
        if not args.quick:
            text, calls = big_argument(fam)
            loads.append(Workload("64 KB arg", text, calls))
        for w in loads:
            w.chunks = tokens.chunks(w.text)
            w.ids = tokens.ids(w.chunks)
            w.flat_ids = [i for ids in w.ids for i in ids]
        prompt_ids = [i for ids in tokens.ids(tokens.chunks(fam.prefix)) for i in ids]

        engines: list[Any] = [Ours(fam), Floor(fam) if fam.name in FLOORS else None]
        with tempfile.TemporaryDirectory() as tmp:
            if have_vllm or have_sglang:  # the tokenizer is the peers' (tokenizers comes with transformers)
                tokens.save(tmp)
            for have, make, name, which in ((have_vllm, lambda: VLLM(fam, tmp, prompt_ids), "vLLM", fam.vllm),
                                            (have_sglang, lambda: SGLang(fam, tmp), "SGLang", fam.sglang)):
                if not have:
                    engines.append(None)
                    continue
                if name in dict(fam.skip):
                    problems.append(f"{fam.name}: {name} {which} not run: {dict(fam.skip)[name]}")
                    engines.append(None)
                    continue
                try:
                    with quiet():
                        engines.append(make())
                except Exception as e:  # noqa: BLE001 - reported, the column stays empty for this family
                    problems.append(f"{fam.name}: {name} {which} cannot be set up here: {type(e).__name__}: {e}")
                    engines.append(None)

        gc.collect()
        gc.freeze()
        decode = Decode()
        for w in loads:
            row: dict[str, Any] = {"family": fam.name, "workload": w.label, "bytes": len(w.text.encode()),
                                   "deltas": len(w.chunks), "calls": len(w.calls)}
            timed = [*engines, decode if Decode.applies(w) else None]
            for mode in ("stream", "oneshot"):
                cells = run_interleaved(timed, mode, w, repeats[w.label], budget, limit)
                ours = cells[0].outcome if cells[0] else None
                for eng, cell in zip(timed, cells):
                    if eng is None or cell is None:
                        continue
                    where = f"{fam.name} {w.label}: {eng.label} {'streamed' if mode == 'stream' else 'one-shot'}"
                    row[f"{eng.label}_{mode}"], problem = judge(cell, mode, w)
                    if problem:
                        problems.append(where + problem)
                    elif ours is not None and eng.label not in ("ours", "decode") and cell.outcome is not None \
                            and not cell.cut:
                        notes.extend(f"{where}: {n}" for n in text_notes(ours, cell.outcome))
            rows.append(row)
            print(f"  {fam.name} {w.label} done ({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)

    elapsed = time.perf_counter() - started
    print_table(rows, limit)
    print_targets(rows)
    if problems:
        print("\nMismatches and failures (their cells are marked ✗ or -):")
        for p in problems:
            print(f"- {p}")
    if notes:
        print("\nReasoning or content that differs from ours beyond whitespace (calls agree; timed all the same):")
        for n in notes:
            print(f"- {n}")
    print(f"\n{len(rows)} workloads in {elapsed:.0f} s (wall)")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "problems": problems, "notes": notes, "seconds": elapsed,
                                               "limit_cpu_s": limit, "versions": versions()}, indent=2))
    if have_sglang:  # xgrammar's nanobind module reports "leaked" objects at interpreter exit: not ours to show
        sys.stdout.flush()
        os._exit(0)


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version
    out = {"python": sys.version.split()[0]}
    for pkg in ("grammar-parse", "vllm", "sglang", "transformers", "torch"):
        with contextlib.suppress(PackageNotFoundError):
            out[pkg] = version(pkg)
    return out


def print_table(rows: list[dict[str, Any]], limit: float) -> None:
    def stream(r: dict[str, Any], label: str) -> tuple[str, float | None]:
        cell = r.get(f"{label}_stream")
        if cell is None:
            return "-", None
        if "us_per_delta" in cell:
            return f"{cell['us_per_delta']:.2f}", cell["us_per_delta"]
        if "us_per_delta_at_least" in cell:
            return f"≥ {cell['us_per_delta_at_least']:.0f} (cut)", None
        return "✗", None

    def shot(r: dict[str, Any], label: str) -> tuple[str, float | None]:
        cell = r.get(f"{label}_oneshot")
        if cell is None:
            return "-", None
        if "mb_s" in cell:
            return f"{cell['mb_s']:.1f}", cell["mb_s"]
        return "✗", None

    def ratio(a: float | None, b: float | None) -> str:
        return "-" if a is None or b is None or b == 0 else f"{a / b:.1f}x"

    v = versions()
    print(f"\ngrammar_parse {v.get('grammar-parse', '?')}, vLLM {v.get('vllm', 'not installed')}, "
          f"SGLang {v.get('sglang', 'not installed')}, Python {v['python']}; CPU time, best of N interleaved runs")
    print()
    print("| family | workload | deltas | calls | ours µs/delta | vLLM µs/delta | SGLang µs/delta | vLLM ÷ ours "
          "| SGLang ÷ ours | ours MB/s | vLLM MB/s | SGLang MB/s | ours ÷ vLLM | ours ÷ SGLang | ours 128 KB ÷ 1 KB "
          "| floor µs/delta | ours ÷ floor (delta) | floor MB/s | floor ÷ ours (MB/s) |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
          "| ---: | ---: | ---: | ---: |")
    first: dict[str, float] = {}
    for r in rows:
        (os_, o), (vs, vl), (ss, sg) = stream(r, "ours"), stream(r, "vLLM"), stream(r, "SGLang")
        (om_, om), (vm_, vm), (sm_, sm) = shot(r, "ours"), shot(r, "vLLM"), shot(r, "SGLang")
        if r["workload"] == "1 KB" and o:
            first[r["family"]] = o
        flat = f"{o / first[r['family']]:.2f}" if r["workload"] == "128 KB" and o and r["family"] in first else ""
        (fs_, fl), (fm_, fm) = stream(r, "floor"), shot(r, "floor")
        print(f"| {r['family']} | {r['workload']} | {r['deltas']:,} | {r['calls']} | {os_} | {vs} | {ss} | "
              f"{ratio(vl, o)} | {ratio(sg, o)} | {om_} | {vm_} | {sm_} | {ratio(om, vm)} | {ratio(om, sm)} | {flat} "
              f"| {fs_} | {ratio(o, fl)} | {fm_} | {ratio(fm, om)} |")
    print(f"\nµs/delta: streaming CPU cost per delta, parser construction included (lower is better); MB/s: one-shot "
          f"throughput (higher is better). ≥ N (cut): the run passed {limit:.0f} CPU seconds and was stopped; N is its "
          f"cost per delta so far, a lower bound when the cost per delta grows with the output. ✗: the calls disagree "
          f"with the expected ones (listed below); -: not run. The last column is our cost per delta at 128 KB over "
          f"that at 1 KB (1.0 = flat).")


def print_targets(rows: list[dict[str, Any]]) -> None:
    """What the targets ask (twice as fast as the faster peer, streamed and one-shot), and who meets them:
    grammar_parse, the hand-written floor, and for JSON arguments their decoding alone. Each ratio is a speed
    over the target's: 1.0 or more meets it."""
    def figure(r: dict[str, Any], label: str, key: str) -> float | None:
        cell = r.get(f"{label}_{'stream' if key == 'us_per_delta' else 'oneshot'}")
        return cell.get(key) if isinstance(cell, dict) else None

    def ratio(a: float | None, b: float | None) -> str:
        return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}"

    print("\nWhat the targets ask (twice the faster peer's speed) and who meets them: each ratio is a speed over the "
          "target's (1.00 or more meets it); decode: json.loads of the calls' arguments alone, where they are JSON.")
    print()
    print("| family | workload | target µs/delta | ours ÷ target | floor ÷ target | target MB/s | ours ÷ target "
          "| floor ÷ target | decode ÷ target |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        peers_delta = [v for label in ("vLLM", "SGLang") if (v := figure(r, label, "us_per_delta")) is not None]
        peers_mb = [v for label in ("vLLM", "SGLang") if (v := figure(r, label, "mb_s")) is not None]
        delta = min(peers_delta) / 2 if peers_delta else None
        mb = max(peers_mb) * 2 if peers_mb else None
        ours_d, floor_d = figure(r, "ours", "us_per_delta"), figure(r, "floor", "us_per_delta")
        ours_mb, floor_mb, decode_mb = (figure(r, label, "mb_s") for label in ("ours", "floor", "decode"))
        print(f"| {r['family']} | {r['workload']} | {'-' if delta is None else f'{delta:.2f}'} | {ratio(delta, ours_d)} "
              f"| {ratio(delta, floor_d)} | {'-' if mb is None else f'{mb:.1f}'} | {ratio(ours_mb, mb)} "
              f"| {ratio(floor_mb, mb)} | {ratio(decode_mb, mb)} |")


if __name__ == "__main__":
    main()
