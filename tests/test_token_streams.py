"""Real token-id streams (tests/data/token_streams: Qwen3, Llama 3, Gemma 4 and Mistral tekken
vocabularies) replayed the way a server streams them: text deltas from incremental detokenization, in
steps of one or more tokens, give exactly the one-shot message; so do the token ids fed to TokenStream."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import grammar_parse
from grammar_parse.adapters.chat_completions import ChatCompletionsStream, chat_message
from grammar_parse.compat.tokenizer import TokenStream
from strategies import examples
from token_streams import (IncrementalDetokenizer, Output, chunked, fixture_names, load_fixture,
                           split_character_count, text_deltas)

FIXTURES = fixture_names()
OUTPUTS = [(name, output) for name in FIXTURES for output in load_fixture(name).outputs]
OUTPUT_IDS = [f"{name}:{output.name}" for name, output in OUTPUTS]
STEPS = [1, 2, 3, 7]  # tokens per engine step (1: one token at a time; 7: several characters and markers at once)


def counter_ids() -> Any:
    """Deterministic call ids, the same sequence for the one-shot and the streamed message."""
    numbers = itertools.count()
    return lambda kind: f"{kind}_{next(numbers)}"


def streamed_chat(output: Output, deltas: list[str]) -> tuple[dict[str, Any], dict[str, Any], str]:
    """The message the Chat Completions deltas add up to (as the OpenAI client concatenates them), the
    stream's own message, and its finish_reason."""
    stream = ChatCompletionsStream(output.grammar, output.prefix, strict=False, ids=counter_ids())
    sent: list[dict[str, Any]] = []
    for text in deltas:
        if text:  # a server sends nothing for a step whose text is all held back
            sent += stream.feed(text)
    sent += stream.finish()
    text: dict[str, str] = {}
    calls: dict[int, dict[str, Any]] = {}
    for delta in sent:
        for key in ("content", "reasoning_content"):
            if key in delta:
                text[key] = text.get(key, "") + delta[key]
        for call in delta.get("tool_calls", []):
            entry = calls.setdefault(call["index"], {"id": None, "name": "", "arguments": ""})
            entry["id"] = call.get("id", entry["id"])
            entry["name"] += call.get("function", {}).get("name", "")
            entry["arguments"] += call["function"].get("arguments", "")
    added = {"content": text.get("content") or None, "reasoning_content": text.get("reasoning_content") or None,
             "tool_calls": [calls[i] for i in sorted(calls)]}
    assert stream.finish_reason is not None
    return added, stream.message, stream.finish_reason


def summary(message: dict[str, Any]) -> dict[str, Any]:
    """The parts of a Chat Completions message the deltas carry."""
    return {"content": message.get("content"), "reasoning_content": message.get("reasoning_content"),
            "tool_calls": [{"id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                           for c in message.get("tool_calls") or []]}


def one_shot(output: Output) -> Any:
    """parse_response's message, or the error it raises (the reference for TokenStream)."""
    try:
        return grammar_parse.parse_response(output.text, output.grammar, prefix=output.prefix)
    except grammar_parse.GrammarParseError as e:
        return {"error": (type(e).__name__, e.code)}


def token_stream(fixture: str, output: Output, chunks: list[list[int]]) -> Any:
    try:
        stream = TokenStream(load_fixture(fixture).decoder, output.prefix, template=output.grammar)
        for chunk in chunks:
            stream.feed_ids(chunk)
        return stream.finalize()[0]
    except grammar_parse.GrammarParseError as e:
        return {"error": (type(e).__name__, e.code)}


# ---------------------------------------------------------------------------- the fixtures themselves
@pytest.mark.parametrize("name", FIXTURES)
def test_the_table_decodes_every_output_and_marker(name):
    fixture = load_fixture(name)
    assert len(fixture.outputs) >= 10
    for output in fixture.outputs:
        assert fixture.decoder.decode(output.ids) == output.text, output.name
        assert split_character_count(fixture.decoder, output.ids) == output.split_characters, output.name
    for marker, token_id in fixture.markers.items():
        assert fixture.decoder.token_bytes(token_id) == marker.encode("utf-8")
        # markers arrive as their own ids: no output spells one out in pieces
        for output in fixture.outputs:
            assert output.text.count(marker) == output.ids.count(token_id), (output.name, marker)
    special = sorted(fixture.decoder.special)
    assert special and fixture.decoder.decode(special, skip_special_tokens=True) == ""


@pytest.mark.parametrize("name", FIXTURES)
def test_every_fixture_splits_characters_across_tokens(name):
    """Each vocabulary keeps covering the hard case: a multi-byte character cut between tokens, held back
    by the detokenizer until it is whole."""
    fixture = load_fixture(name)
    split = [o for o in fixture.outputs if split_character_count(fixture.decoder, o.ids)]
    assert split
    for output in split:
        detok = IncrementalDetokenizer(fixture.decoder)
        held = [detok.step(i) == "" and fixture.decoder.token_bytes(i) != b"" for i in output.ids]
        assert any(held), output.name
        assert detok.text == output.text and "\ufffd" not in detok.text


@pytest.mark.parametrize("name", FIXTURES)
def test_the_detokenizer_streams_what_tokenizers_decode_stream_does(name):
    """The rule matches ``tokenizers``' DecodeStream (what vLLM v1 steps per token) on a byte-level
    tokenizer spelled from the same table."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import AddedToken, decoders, models
    from tokenizers.decoders import DecodeStream

    fixture = load_fixture(name)
    alphabet = byte_alphabet()
    markers = set(fixture.markers.values()) | set(fixture.decoder.special)
    plain = [i for i in sorted(fixture.decoder.tokens) if i not in markers]
    # (ids made dense: tokenizers gives an added token the id after the vocabulary's size)
    raw = tokenizers.Tokenizer(models.BPE(vocab={"".join(alphabet[b] for b in fixture.decoder.tokens[i]): k
                                                 for k, i in enumerate(plain)}, merges=[]))
    raw.decoder = decoders.ByteLevel()
    raw.add_tokens([AddedToken(fixture.decoder.tokens[i].decode("utf-8"), special=True) for i in sorted(markers)])
    remap = {i: k for k, i in enumerate(plain)}
    remap.update({i: raw.token_to_id(fixture.decoder.tokens[i].decode("utf-8")) for i in markers})
    assert len(set(remap.values())) == len(remap)
    for output in fixture.outputs:
        stream = DecodeStream(skip_special_tokens=False)
        theirs = [stream.step(raw, remap[i]) or "" for i in output.ids]
        detok = IncrementalDetokenizer(fixture.decoder)
        assert [detok.step(i) for i in output.ids] == theirs, output.name


def byte_alphabet() -> dict[int, str]:
    """GPT-2's bytes_to_unicode: the character a byte-level vocabulary spells each byte with."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars = {b: chr(b) for b in printable}
    chars.update({b: chr(0x100 + i) for i, b in enumerate(b for b in range(256) if b not in chars)})
    return chars


# ---------------------------------------------------------------------------- streaming equals one-shot
@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("name, output", OUTPUTS, ids=OUTPUT_IDS)
def test_chat_completions_deltas_give_the_one_shot_message(name, output, step):
    expected, finish = chat_message(output.text, output.grammar, prefix=output.prefix, strict=False, ids=counter_ids())
    deltas = text_deltas(load_fixture(name).decoder, chunked(output.ids, step))
    assert "".join(deltas) == output.text
    added, message, finish_reason = streamed_chat(output, deltas)
    assert added == summary(expected)
    assert message == expected
    assert finish_reason == finish


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("name, output", OUTPUTS, ids=OUTPUT_IDS)
def test_token_stream_gives_the_one_shot_message(name, output, step):
    assert token_stream(name, output, chunked(output.ids, step)) == one_shot(output)


@st.composite
def random_chunking(draw: Any) -> tuple[str, Output, list[int]]:
    name, output = draw(st.sampled_from(OUTPUTS))
    sizes = draw(st.lists(st.integers(1, 12), min_size=1, max_size=len(output.ids)))
    return name, output, sizes


@settings(max_examples=examples(2))
@given(random_chunking())
def test_random_chunkings_give_the_one_shot_message(case):
    name, output, sizes = case
    chunks = chunked(output.ids, sizes)
    expected, _ = chat_message(output.text, output.grammar, prefix=output.prefix, strict=False, ids=counter_ids())
    added, message, _ = streamed_chat(output, text_deltas(load_fixture(name).decoder, chunks))
    assert (added, message) == (summary(expected), expected)
    assert token_stream(name, output, chunks) == one_shot(output)
