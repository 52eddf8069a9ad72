"""A call's arguments stream in fragments as the model writes them, for every built-in grammar whose calls
carry arguments, except the shapes that cannot (listed below with why); and whatever the chunking, the
fragments of a call join into exactly the arguments text of the one-shot message, and a call's head is sent
once. Both with a strict parser (``lenient=False``: every shape streams) and a lenient one (a broken call
keeps to the valid JSON of its raw text, so arguments whose raw text is not JSON go out per call)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

import grammar_parse as gp
from grammar_parse.adapters.chat_completions import ChatCompletionsStream
from grammar_parse._engine.toolstream import ToolCallStreamer, call_regions
from test_tool_streaming import CASES, counter, load_case

#: Grammars whose every call still arrives whole, and why no streamer can do better.
WHOLE = {
    # The model writes the call's id after its arguments (``{"name": ..., "arguments": ..., "id": ...}``):
    # the head, which carries the id, waits for it, and the arguments cannot go before their head.
    "apriel": "id after the arguments",
    "mistral": "id after the arguments",
    # A repeated parameter tag merges into a list (``<a>1</a><a>2</a>`` is ``"a": [1, 2]``): no
    # parameter is final before the call closes.
    "minimax_m3": "repeated parameters merge",
}
#: Grammars whose arguments' raw text is not JSON (Python calls, a JSON dialect): streamed member by member
#: by a strict parser's streamer only.
NOT_JSON = {"function_gemma", "gemma4", "llama3_pythonic", "llama4_pythonic", "olmo3"}


def split(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


def uneven(text: str) -> list[str]:
    """Chunks of 1, 2, 3, 5, 8, ... characters, over and over (cuts in every kind of place)."""
    out, i, sizes = [], 0, [1, 2, 3, 5, 8, 13]
    while i < len(text):
        size = sizes[len(out) % len(sizes)]
        out.append(text[i:i + size])
        i += size
    return out


CHUNKINGS = {"1": lambda t: split(t, 1), "7": lambda t: split(t, 7), "uneven": uneven}


def streamed(grammar: str, path: Path, chunks: list[str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The message and the tool-call deltas of one sample fed in ``chunks``."""
    case = load_case(grammar, path)
    s = ChatCompletionsStream(grammar, case.prefix, tools=case.tools, ids=counter())
    deltas: list[dict[str, Any]] = []
    for chunk in chunks:
        deltas += s.feed(chunk)
    deltas += s.finish()
    return s.message, [call for d in deltas for call in d.get("tool_calls", [])]


def streamer_deltas(grammar: str, path: Path, chunks: list[str], lenient: bool) -> list[dict[str, Any]]:
    """The tool-call streamer's own deltas for one sample, behind a parser of the same strictness."""
    case = load_case(grammar, path)
    parser = gp.ResponseParser(grammar, case.prefix, tools=case.tools, strict=not lenient, extended_events=True)
    streamer = ToolCallStreamer(parser.grammar, case.tools, lenient=lenient)
    deltas: list[dict[str, Any]] = list(streamer.feed(parser.initial_events))
    for chunk in chunks:
        deltas += streamer.feed(parser.feed(chunk))
    return deltas + list(streamer.feed(parser.finalize()[1]))


def fragments(grammar: str, path: Path, chunks: list[str], lenient: bool) -> dict[int, int]:
    """How many non-empty argument fragments each call got before its end."""
    counts: dict[int, int] = defaultdict(int)
    done: set[int] = set()
    for delta in streamer_deltas(grammar, path, chunks, lenient):
        assert delta["index"] not in done, "nothing of a call after its end"
        if delta.get("done"):
            done.add(delta["index"])
        elif delta.get("arguments"):
            counts[delta["index"]] += 1
    return counts


BY_GRAMMAR: dict[str, list[Path]] = defaultdict(list)
for _grammar, _path in CASES:
    BY_GRAMMAR[_grammar].append(_path)


def with_arguments(grammar: str) -> list[Path]:
    return [p for p in BY_GRAMMAR[grammar]
            if any(c["function"].get("arguments") for c in load_case(grammar, p).expected["tool_calls"])]


@pytest.mark.parametrize("lenient", [False, True], ids=["strict", "lenient"])
@pytest.mark.parametrize("grammar", sorted(BY_GRAMMAR))
def test_arguments_stream_in_fragments(grammar, lenient):
    paths = with_arguments(grammar)
    assert paths, "every grammar has a sample whose call carries arguments"
    streams = any(n > 1 for p in paths
                  for n in fragments(grammar, p, split(load_case(grammar, p).text, 1), lenient).values())
    whole = grammar in WHOLE or (lenient and grammar in NOT_JSON)
    assert streams == (not whole), WHOLE.get(grammar, "arguments sent whole at the call's end")


@pytest.mark.parametrize("grammar", sorted(gp.list_grammars()))
def test_every_call_region_has_a_streaming_plan(grammar):
    """Each tool-call region of every grammar (a field's second shape too, such as Functionary's python
    call) is read by a plan that streams, except the shape that cannot (WHOLE)."""
    for region in call_regions(gp.load_grammar(grammar)):
        assert (region.shape.kind == "at_close") == (grammar == "minimax_m3"), region.rule


@pytest.mark.parametrize("chunking", sorted(CHUNKINGS))
@pytest.mark.parametrize("grammar, path", CASES, ids=[f"{g}/{p.stem}" for g, p in CASES])
def test_strict_fragments_join_into_the_typed_arguments(grammar, path, chunking):
    """A strict parser's streamer, whatever the chunking, sends what it sends in one piece."""
    text = load_case(grammar, path).text
    def joined(chunks: list[str]) -> dict[int, str]:
        out: dict[int, str] = defaultdict(str)
        for delta in streamer_deltas(grammar, path, chunks, lenient=False):
            out[delta["index"]] += delta.get("arguments", "")
        return out
    got, want = joined(CHUNKINGS[chunking](text)), joined([text])
    assert got == want
    expected = load_case(grammar, path).expected["tool_calls"]
    assert [json.loads(got[i]) for i in range(len(expected))] == [c["function"].get("arguments", {}) for c in expected]


@pytest.mark.parametrize("chunking", sorted(CHUNKINGS))
@pytest.mark.parametrize("grammar, path", CASES, ids=[f"{g}/{p.stem}" for g, p in CASES])
def test_fragments_join_into_the_one_shot_arguments(grammar, path, chunking):
    case = load_case(grammar, path)
    message, calls = streamed(grammar, path, CHUNKINGS[chunking](case.text))
    assert message == case.one_shot
    heads: set[int] = set()
    parts: dict[int, list[str]] = defaultdict(list)
    for call in calls:
        index = call["index"]
        if "id" in call:
            assert index not in heads, "a call's head is sent once"
            heads.add(index)
        assert index in heads
        parts[index].append(call.get("function", {}).get("arguments", ""))
    want = case.one_shot["tool_calls"]
    assert sorted(heads) == list(range(len(want)))
    for index, call in enumerate(want):
        text = "".join(parts[index])
        assert text == call["function"]["arguments"], "the fragments are the one-shot arguments text"
        assert isinstance(json.loads(text), dict)


#: Text each streaming shape must cut right wherever the chunks end: separators inside strings and brackets,
#: a dialect's quotes split, escapes, whitespace a strip removes.
EDGES = [
    ("gemma4", '<|tool_call>call:f{a:<|"|>x, }y<|"|>,b:{c:[1,2,{d:<|"|>]<|"|>}]},e:"q\\",}",f:<|"|>"<|"|>}'
               '<tool_call|>'),
    ("function_gemma", '<start_function_call>call:f{a:<escape>x, }y<escape>,b:{c:[1,2]},e:"q\\",}"}'
                       '<end_function_call>'),
    ("llama3_pythonic", '[f(a="x, )", b=[1, (2), {"c": ")"}], c=\'\'\'it\'s, "x"\'\'\'), g(), h(x=1)]'),
    ("olmo3", '<function_calls>f(a="x, )", b=[1, 2])\ng(c={"d": ","})</function_calls>'),
    ("functionary_v31", '<|python_tag|>  \n x = "a\\tb"\n\n print(x) \n  <|eom_id|>'),
    ("apertus", '<|tools_prefix|>[{"f": {"a": "x, }", "b": [1, {"c": 2}]}, "g": {}}, {"h": {"q": "\\"}"}}]'
                '<|tools_suffix|>'),
]


@pytest.mark.parametrize("grammar, text", EDGES, ids=[g for g, _ in EDGES])
def test_edge_text_streams_the_same_at_every_chunk_size(grammar, text):
    def run(chunks: list[str]) -> tuple[dict[int, str], dict[str, Any], int]:
        parser = gp.ResponseParser(grammar, "", strict=True, extended_events=True)
        streamer = ToolCallStreamer(parser.grammar, lenient=False)
        deltas = [d for chunk in chunks for d in streamer.feed(parser.feed(chunk))]
        message, events = parser.finalize()
        deltas += streamer.feed(events)
        joined: dict[int, str] = defaultdict(str)
        for delta in deltas:
            joined[delta["index"]] += delta.get("arguments", "")
        return joined, message, sum(1 for d in deltas if d.get("arguments"))
    want, message, _ = run([text])
    assert [json.loads(want[i]) for i in range(len(want))] == \
        [c["function"]["arguments"] for c in message["tool_calls"]]
    for size in range(1, 12):
        got, _, pieces = run(split(text, size))
        assert got == want, size
    assert pieces > len(want), "the arguments came in fragments"


@pytest.mark.parametrize("grammar", sorted(NOT_JSON))
def test_a_strict_wire_stream_sends_python_and_dialect_arguments_in_fragments(grammar):
    """The adapters stream with the parser's own leniency: a strict Chat Completions stream (a broken call
    fails it, so no raw text can follow a member already sent) sends these calls' arguments member by
    member; a lenient one sends them whole (test_arguments_stream_in_fragments)."""
    path = with_arguments(grammar)[0]
    case = load_case(grammar, path)
    stream = ChatCompletionsStream(grammar, case.prefix, tools=case.tools, ids=counter(), strict=True)
    deltas = [delta for chunk in split(case.text, 1) for delta in stream.feed(chunk)] + stream.finish()
    pieces = [call["function"]["arguments"] for d in deltas for call in d.get("tool_calls", [])
              if call.get("index") == 0 and call.get("function", {}).get("arguments")]
    assert len(pieces) > 1 and "".join(pieces) == case.one_shot["tool_calls"][0]["function"]["arguments"]
