"""The peer benchmark's outputs (benchmarks/bench_peers.py: every family both engines serve, written in
its exact format) give back the calls they were written from, one-shot and streamed token by token, and
the same reasoning and content both ways: the benchmark times real work, and none of it is lost."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import grammar_parse  # noqa: F401 - the package as installed, before the benchmark puts the checkout on the path
from grammar_parse._engine.toolstream import call_regions
from grammar_parse.adapters.chat_completions import ChatCompletionsStream

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import bench_peers  # noqa: E402


@pytest.mark.parametrize("name", sorted(bench_peers.FAMILIES))
def test_each_benchmark_output_gives_its_calls(name):
    family = bench_peers.FAMILIES[name]
    ours = bench_peers.Ours(family)
    for text, calls in (bench_peers.workload(family, 2_000), bench_peers.big_argument(family, 3_000)):
        work = bench_peers.Workload("test", text, calls, bench_peers.Tokens(family.specials).chunks(text))
        assert "".join(work.chunks) == text
        streamed, one_shot = ours.stream(work), ours.oneshot(work)
        assert bench_peers.describe_mismatch(calls, streamed.calls) == ""
        assert bench_peers.describe_mismatch(calls, one_shot.calls) == ""
        assert (streamed.reasoning, streamed.content) == (one_shot.reasoning, one_shot.content)
        assert len(calls) >= 1 and (one_shot.content or one_shot.reasoning or not (family.content or family.reasoning))


@pytest.mark.parametrize("name", bench_peers.FLOORS)
@pytest.mark.parametrize("size", [4, 1])
def test_the_hand_written_floor_reads_what_we_read(name, size):
    """The floor (benchmarks/floors.py) is timed only for the same work: the calls, reasoning and content
    ours gives, streamed token by token or in ``size``-character pieces, and one-shot."""
    family = bench_peers.FAMILIES[name]
    ours, floor = bench_peers.Ours(family), bench_peers.Floor(family)
    for text, calls in (bench_peers.workload(family, 2_000), bench_peers.big_argument(family, 3_000)):
        chunks = bench_peers.Tokens(family.specials).chunks(text) if size == 4 else list(text)
        work = bench_peers.Workload("test", text, calls, chunks)
        expected = ours.oneshot(work)
        for got in (floor.stream(work), floor.oneshot(work)):
            assert bench_peers.describe_mismatch(calls, got.calls) == ""
            assert (got.reasoning, got.content) == (expected.reasoning, expected.content)


@pytest.mark.parametrize("name", sorted(bench_peers.FAMILIES))
def test_the_decode_floor_decodes_the_arguments_as_written(name):
    """The decode figure (json.loads of the arguments alone) is timed only where the output writes each call's
    arguments as that JSON text, and gives the calls."""
    family = bench_peers.FAMILIES[name]
    text, calls = bench_peers.big_argument(family, 3_000)
    work = bench_peers.Workload("test", text, calls)
    applies = bench_peers.Decode.applies(work)
    assert applies == (name not in XML_ARGUMENTS)
    if applies:
        assert bench_peers.describe_mismatch(calls, bench_peers.Decode().oneshot(work).calls) == ""


#: The families whose outputs write arguments as text per parameter (XML), or as Python, not as JSON.
XML_ARGUMENTS = {"qwen3_coder", "glm45", "glm47", "poolside_v1", "minimax_m2", "deepseek_v32", "mimo", "step3",
                 "llama3_pythonic"}


def _json_streamed(name: str) -> bool:
    """Whether the family's calls stream as JSON, their arguments after a head that does not wait for an id the
    model writes in the body (mistral's ``[{"name", "arguments", "id"}]``: a call's arguments never go before its
    head; see the tool-call streamer, grammar_parse._engine.toolstream)."""
    return all(r.shape.mode.startswith("json") and r.shape.id_key is None
               for r in call_regions(grammar_parse.load_grammar(name)))


@pytest.mark.parametrize("name", [n for n in sorted(bench_peers.FAMILIES) if _json_streamed(n)])
def test_a_string_argument_streams_as_it_arrives(name):
    """With tools given, a JSON argument that typing cannot change (a string-only schema: write_file's
    ``content``) goes out as the model writes it, not held to its end: typing leaves it as written. One that
    typing may change (an integer written as a string) is still held and sent typed (test_tool_streaming)."""
    family = bench_peers.FAMILIES[name]
    text, calls = bench_peers.big_argument(family, 3_000)
    chunks = bench_peers.Tokens(family.specials).chunks(text)
    stream = ChatCompletionsStream(grammar_parse.load_grammar(name), family.prefix, tools=bench_peers.TOOLS)
    sent, before_the_end = [], 0
    for i, chunk in enumerate(chunks):
        for delta in stream.feed(chunk):
            pieces = [c["function"].get("arguments", "") for c in delta.get("tool_calls", [])]
            sent += pieces
            if i < len(chunks) - 10:  # (well before the argument's closing quote)
                before_the_end += sum(map(len, pieces))
    stream.finish()
    content = calls[0][1]["content"]
    assert before_the_end >= len(content) // 2, "the string argument was held back"
    assert max(map(len, sent)) < 100  # (no piece carries the whole argument)
    assert "".join(sent) == stream.message["tool_calls"][0]["function"]["arguments"]
