"""grammar_parse behind a tokenizer: template lookup, token ids, batches and token streams, with a small
byte-level BPE tokenizer trained here (the `tokenizers` package, no downloads)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import grammar_parse
from conformance import load
from grammar_parse.compat.tokenizer import TokenStream, get_response_parser, grammar_for, parse_response

tokenizers = pytest.importorskip("tokenizers")  # in the test extra

SAMPLE = (Path(__file__).resolve().parents[1] / "examples" / "qwen3_tool_call.txt").read_text(encoding="utf-8")
SPECIAL = ["<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>"]
TEMPLATE = load("transformers_model_templates.json")[0]["template"]  # the transformers Qwen3 template
SCHEMA = next(e["template"] for e in load("transformers_model_templates.json") if e["format"] == "legacy_xregex")


class Tokenizer:
    """The shape of a transformers tokenizer that the glue relies on: decode() and a response template."""

    def __init__(self, response_template=None, response_schema=None):
        from tokenizers import Tokenizer as Raw, decoders, models, pre_tokenizers, trainers

        raw = Raw(models.BPE())
        raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        raw.decoder = decoders.ByteLevel()
        raw.train_from_iterator([SAMPLE, "Paris is nice. Città é 日本 🙂"] * 3,
                                trainers.BpeTrainer(vocab_size=300, special_tokens=SPECIAL,
                                                    initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
        self.raw = raw
        self.response_template = response_template
        self.init_kwargs = {"response_schema": response_schema} if response_schema else {}

    def encode(self, text):
        return self.raw.encode(text).ids

    def decode(self, ids, skip_special_tokens=False):
        return self.raw.decode(ids, skip_special_tokens=skip_special_tokens)


class Array:
    """What numpy arrays and torch tensors offer the glue: ndim and tolist(); iterating gives scalars
    that are not Python ints (as numpy's int64)."""

    def __init__(self, data, ndim):
        self.data, self.ndim = data, ndim

    def tolist(self):
        return self.data

    def __iter__(self):
        return iter(float(x) for x in self.data)


@pytest.fixture(scope="module")
def tok():
    return Tokenizer(response_template=TEMPLATE)


def test_grammar_comes_from_the_tokenizer(tok):
    assert grammar_for(tok) is grammar_parse.compile_template(TEMPLATE)
    legacy = Tokenizer(response_schema=SCHEMA)
    assert grammar_for(legacy).legacy_schema == SCHEMA
    with pytest.raises(grammar_parse.GrammarError, match="no response_template, response_schema or chat_template"):
        grammar_for(Tokenizer())


def test_token_ids_text_and_batches_agree(tok):
    expected = grammar_parse.parse_response(SAMPLE, TEMPLATE, prefix="")
    ids = tok.encode(SAMPLE)
    assert tok.decode(ids) == SAMPLE
    assert parse_response(tok, ids, prefix="") == expected
    assert parse_response(tok, SAMPLE, prefix=[]) == expected
    assert parse_response(tok, [ids, tok.encode("Hi<|im_end|>")], prefix="") == [
        expected, {"role": "assistant", "content": "Hi"}]
    prompt = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n"
    assert parse_response(tok, [tok.encode("a</think>b")], prefix=[tok.encode(prompt)]) == [
        {"role": "assistant", "reasoning_content": "a", "content": "b"}]
    with pytest.raises(grammar_parse.ArgumentError):
        parse_response(tok, [ids, ids], prefix=[[], [], []])

    assert parse_response(tok, Array(ids, 1), prefix="") == expected
    assert parse_response(tok, Array([ids], 2), prefix="") == [expected]
    parser = get_response_parser(tok, tok.encode(prompt))
    assert parser.initial_events[0] == {"type": "region_open", "field": "reasoning_content"}


@given(st.text(alphabet="Paris is nice. Città é 日本 🙂", max_size=40))
def test_token_stream_equals_one_shot(tok, text):
    full = f"<think>\n{text}\n</think>\n\n{text}<|im_end|>"
    stream = TokenStream(tok, "")
    events = []
    for token in tok.encode(full):  # one token at a time; multi-byte characters span several tokens
        events += stream.feed_ids([token])
    message, final = stream.finalize()
    assert message == grammar_parse.parse_response(full, TEMPLATE, prefix="")
    chunks = "".join(e["text"] for e in events + final if e["type"] == "region_chunk")
    assert "\ufffd" not in chunks
    assert json.dumps(message, ensure_ascii=False)


def test_token_stream_takes_arrays_and_rejects_what_is_not_ids(tok):
    text = "Hi there<|im_end|>"
    stream = TokenStream(tok, "")
    for token in tok.encode(text):
        stream.feed_ids(Array([token], 1))
    assert stream.finalize()[0] == grammar_parse.parse_response(text, TEMPLATE, prefix="")
    with pytest.raises(grammar_parse.ArgumentError):
        TokenStream(tok, "").feed_ids(["Hi"])


# ---------------------------------------------------------------------------- byte tokens (invalid UTF-8)
def _byte_tokens(tok, data: bytes) -> list[int]:
    """One token per byte: the byte-level alphabet (GPT-2's bytes_to_unicode) maps each byte to a character."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars = {b: chr(b) for b in printable}
    chars.update({b: chr(0x100 + i) for i, b in enumerate(b for b in range(256) if b not in chars)})
    return [tok.raw.token_to_id(chars[b]) for b in data]


class CountingTokenizer:
    """Counts the token ids it is asked to decode: the per-token cost of a stream, without a clock."""

    def __init__(self, inner):
        self.inner, self.decoded, self.response_template = inner, 0, inner.response_template

    def decode(self, ids, skip_special_tokens=False):
        self.decoded += len(ids)
        return self.inner.decode(ids, skip_special_tokens=skip_special_tokens)


BYTE_RUNS = [
    ("invalid run", b"\xff" * 40 + b"<|im_end|>"),
    ("invalid run, no end", b"\xfe\xff" * 20),
    ("truncated three-byte", b"ok \xe2\x82 then \xe2\x82\xac done"),
    ("truncated four-byte before invalid", b"\xf0\x9f\x99" + b"\xff" * 10 + b"x"),
    ("complete four-byte after invalid", b"\xff\xff\xf0\x9f\x99\x82\xff\xff"),
    ("lone continuation bytes", b"a\x80\x80\x80\x80b"),
    ("encoded surrogate", b"\xed\xa0\x80 and more"),
    ("overlong", b"\xc0\xaf\xe0\x80\xaf!"),
]


@pytest.mark.parametrize("name, data", BYTE_RUNS, ids=[name for name, _ in BYTE_RUNS])
def test_byte_tokens_stream_their_replacement_characters(tok, name, data):
    """Every byte a token: the text passed on is the whole decode (U+FFFD where a decoder with
    errors="replace" puts it), and at any time at most a few tokens' text is held back."""
    ids = _byte_tokens(tok, data)
    stream = TokenStream(tok, "")
    passed: list[str] = []
    feed = stream.parser.feed
    stream.parser.feed = lambda text: (passed.append(text), feed(text))[1]  # what the parser is given
    for k, token in enumerate(ids, 1):
        stream.feed_ids([token])
        so_far = tok.decode(ids[:k])
        assert so_far.startswith("".join(passed))
        assert len(so_far) - len("".join(passed)) <= 2 * TokenStream.PENDING_TOKENS + 1, (k, passed, so_far)
    message, _ = stream.finalize()
    full = tok.decode(ids)
    assert "".join(passed) == full
    assert message == grammar_parse.parse_response(full, TEMPLATE, prefix="")


@given(st.lists(st.one_of(st.binary(min_size=1, max_size=3), st.text(alphabet="aé日🙂 ", min_size=1, max_size=3)
                          .map(lambda s: s.encode("utf-8"))), max_size=30))
def test_any_byte_tokens_give_the_one_shot_message(tok, parts):
    data = b"".join(parts)
    ids = _byte_tokens(tok, data)
    stream = TokenStream(tok, "")
    for token in ids:
        stream.feed_ids([token])
    message, _ = stream.finalize()
    assert message == grammar_parse.parse_response(tok.decode(ids), TEMPLATE, prefix="")


@pytest.mark.parametrize("n", [1_000, 16_000])
def test_a_run_of_invalid_bytes_costs_the_same_per_token(tok, n):
    """16k invalid byte tokens took 146 s: each token decoded the whole held-back run again."""
    counting = CountingTokenizer(tok)
    stream = TokenStream(counting, "")
    ids = _byte_tokens(tok, b"\xff" * n)
    for token in ids:
        stream.feed_ids([token])
    assert counting.decoded <= 40 * n  # a bounded window per token, not the run so far
    assert stream.finalize()[0]["content"] == "\ufffd" * n
