"""A call's arguments stream in fragments as the model writes them, for every built-in grammar whose calls
carry arguments, except the shapes that cannot (listed below with why); and whatever the chunking, the
fragments of a call join into exactly the arguments text of the one-shot message and a call's head is sent
once."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from grammar_parse.chat_completions import ChatCompletionsStream
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


CHUNKINGS = {"whole": lambda t: [t], "1": lambda t: split(t, 1), "2": lambda t: split(t, 2),
             "7": lambda t: split(t, 7), "uneven": uneven}


def streamed(grammar: str, path: Path, chunks: list[str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The message and the tool-call deltas of one sample fed in ``chunks``."""
    case = load_case(grammar, path)
    s = ChatCompletionsStream(grammar, case.prefix, tools=case.tools, ids=counter())
    deltas: list[dict[str, Any]] = []
    for chunk in chunks:
        deltas += s.feed(chunk)
    deltas += s.finish()
    return s.message, [call for d in deltas for call in d.get("tool_calls", [])]


def fragments(grammar: str, path: Path, chunks: list[str]) -> dict[int, int]:
    """How many non-empty argument deltas each call got."""
    counts: dict[int, int] = defaultdict(int)
    for call in streamed(grammar, path, chunks)[1]:
        if call.get("function", {}).get("arguments"):
            counts[call["index"]] += 1
    return counts


BY_GRAMMAR: dict[str, list[Path]] = defaultdict(list)
for _grammar, _path in CASES:
    BY_GRAMMAR[_grammar].append(_path)


def with_arguments(grammar: str) -> list[Path]:
    return [p for p in BY_GRAMMAR[grammar]
            if any(c["function"].get("arguments") for c in load_case(grammar, p).expected["tool_calls"])]


@pytest.mark.parametrize("grammar", sorted(BY_GRAMMAR))
def test_arguments_stream_in_fragments(grammar):
    paths = with_arguments(grammar)
    assert paths, "every grammar has a sample whose call carries arguments"
    streams = any(n > 1 for p in paths for n in fragments(grammar, p, split(load_case(grammar, p).text, 1)).values())
    assert streams == (grammar not in WHOLE), WHOLE.get(grammar, "arguments sent whole at the call's end")


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
