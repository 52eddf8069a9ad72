"""A grammar's delimiters as a tokenizer's added tokens (grammar_parse.constrain, ``tokens=``).

A real tokenizer holds ``<tool_call>`` or ``<|python_tag|>`` as one added token, and llguidance matches such a
token only by a token reference: a constraint that spells the delimiter as text forbids the token the model
writes. Each grammar is checked with a Hugging Face tokenizer built here (a byte-level vocabulary, so any
text can be written, plus the grammar's control-token-shaped delimiters as added tokens), through
llguidance's and xgrammar's own Hugging Face loaders: every golden sample written with the tokens is
accepted, the same text with a call trigger spelled in bytes is not, and ``tool_choice`` still holds.
And with real vocabularies (tests/data/token_streams: Qwen3's, Llama 3's, Gemma 4's, Mistral's Tekken):
the golden outputs as those tokenizers wrote them, id by id, are accepted by both engines.
"""

from __future__ import annotations

from typing import Any

import pytest

import grammar_parse as gp
from grammar_parse import constrain
from grammar_parse.errors import ArgumentError
from vocabularies import EOS, byte_level, delimiter_tokens

llguidance = pytest.importorskip("llguidance")
xgrammar = pytest.importorskip("xgrammar")
transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from goldens import goldens  # noqa: E402
from test_constrain import (  # noqa: E402
    _exports, _malformed, cases, complete, cut, drive_llguidance, drive_xgrammar, has_calls, tools_for)
from token_streams import fixture_names, load_fixture  # noqa: E402

class Vocabulary:
    """A Hugging Face tokenizer: token i < 256 is byte i, then the end of sequence, then the added tokens."""

    def __init__(self, added: list[str]) -> None:
        tk = byte_level(added)
        self.hf = transformers.PreTrainedTokenizerFast(tokenizer_object=tk, eos_token=EOS)
        self.ids = constrain.added_tokens(self.hf)
        self.added = sorted(added, key=len, reverse=True)
        self.llg = llguidance.LLTokenizer(tk.to_str(), eos_token=self.ids[EOS])
        self.xgr = xgrammar.GrammarCompiler(xgrammar.TokenizerInfo.from_huggingface(self.hf), cache_enabled=False)

    def encode(self, text: str, spelled: tuple[str, ...] = ()) -> list[int]:
        """Each added token's text as its token (but those in ``spelled``, written in bytes), the rest as bytes."""
        out: list[int] = []
        i = 0
        while i < len(text):
            token = next((t for t in self.added if t not in spelled and text.startswith(t, i)), None)
            if token is not None:
                out.append(self.ids[token])
                i += len(token)
            else:
                out.extend(text[i].encode())
                i += 1
        return out

    def llguidance(self, lark: str, ids: list[int]) -> str:
        return drive_llguidance(self.llg, lark, ids)

    def xgrammar(self, tag: dict[str, Any], ids: list[int]) -> str:
        return drive_xgrammar(self.xgr, tag, ids, self.ids[EOS])


_VOCABULARIES: dict[str, Vocabulary] = {}


def vocabulary(grammar: gp.Grammar) -> Vocabulary:
    assert grammar.name is not None
    if grammar.name not in _VOCABULARIES:
        _VOCABULARIES[grammar.name] = Vocabulary(delimiter_tokens(grammar))
    return _VOCABULARIES[grammar.name]


def tokened(wanted: Any) -> list[Any]:
    """The cases of grammars with delimiters that look like tokens."""
    return [p for p in cases(wanted) if delimiter_tokens(gp.load_grammar(p.values[0]))]


def _trigger_tokens(grammar: gp.Grammar) -> tuple[str, ...]:
    """The added tokens a call's trigger is spelled with."""
    tokens = delimiter_tokens(grammar)
    return tuple(t for t in tokens if any(t in trigger for trigger in constrain._call_format(grammar).trigger))


# ---------------------------------------------------------------------------- the tests
@pytest.mark.parametrize(("name", "sample"), tokened(complete))
def test_a_valid_output_written_with_the_tokens_is_accepted(name: str, sample: Any) -> None:
    grammar = gp.load_grammar(name)
    vocab = vocabulary(grammar)
    text = cut(grammar, sample.text)
    tools = tools_for(sample)
    lark = constrain.to_llguidance(grammar, tools=tools, prefix=sample.prefix, tokens=vocab.ids)
    assert vocab.llguidance(lark, vocab.encode(text)) == "accept", text
    # xgrammar reads a token by its text: the structural tag, which spells delimiters, takes the tokens as is.
    tag = constrain.to_structural_tag(grammar, tools=tools, prefix=sample.prefix)
    assert vocab.xgrammar(tag, vocab.encode(text)) == "accept", text


@pytest.mark.parametrize(("name", "sample"), [p for p in tokened(lambda s: has_calls(s) and complete(s))
                                              if any(t in p.values[1].text  # (not a bare call, which has none)
                                                     for t in _trigger_tokens(gp.load_grammar(p.values[0])))])
def test_a_call_trigger_spelled_in_bytes_is_not_a_call(name: str, sample: Any) -> None:
    """The parser reads the spelled text as the delimiter too: a constraint that let it through as free text
    would let through a call it never checked."""
    grammar = gp.load_grammar(name)
    spelled = _trigger_tokens(grammar)
    vocab = vocabulary(grammar)
    lark = constrain.to_llguidance(grammar, tools=tools_for(sample), prefix=sample.prefix, tokens=vocab.ids)
    text = cut(grammar, sample.text)
    assert vocab.llguidance(lark, vocab.encode(text, spelled)).startswith("reject@"), text


@pytest.mark.parametrize("kind", ["unknown_tool", "missing_required"])  # (the kinds every call can have)
@pytest.mark.parametrize(("name", "sample"), tokened(lambda s: has_calls(s) and complete(s)))
def test_a_malformed_call_written_with_the_tokens_is_rejected(name: str, sample: Any, kind: str) -> None:
    grammar = gp.load_grammar(name)
    vocab = vocabulary(grammar)
    text, tools = _malformed(kind, sample, cut(grammar, sample.text))
    lark = constrain.to_llguidance(grammar, tools=tools, prefix=sample.prefix, tokens=vocab.ids)
    assert vocab.llguidance(lark, vocab.encode(text)).startswith("reject@"), text


@pytest.mark.parametrize(("name", "sample"), tokened(lambda s: has_calls(s) and complete(s)))
def test_tool_choice_none_rejects_the_call_and_required_rejects_text_only(name: str, sample: Any) -> None:
    grammar = gp.load_grammar(name)
    vocab = vocabulary(grammar)
    tools = tools_for(sample)
    text = cut(grammar, sample.text)
    none = constrain.to_llguidance(grammar, tools=tools, tool_choice="none", prefix=sample.prefix, tokens=vocab.ids)
    assert vocab.llguidance(none, vocab.encode(text)).startswith("reject@")
    required = constrain.to_llguidance(grammar, tools=tools, tool_choice="required", prefix=sample.prefix,
                                       tokens=vocab.ids)
    assert vocab.llguidance(required, vocab.encode(text)) == "accept"
    assert vocab.llguidance(required, vocab.encode("Just an answer.")) != "accept"


def test_added_tokens_reads_a_transformers_and_a_tokenizers_tokenizer() -> None:
    vocab = Vocabulary(["<tool_call>", "</tool_call>"])
    expected = {EOS: 256, "<tool_call>": 257, "</tool_call>": 258}
    assert constrain.added_tokens(vocab.hf) == expected
    assert constrain.added_tokens(vocab.hf.backend_tokenizer) == expected


@pytest.mark.parametrize("tokens", [{"<tool_call>": "257"}, {"<tool_call>": -1}, {"<tool_call>": True}, ["<x>"]])
def test_tokens_that_are_not_text_to_id_are_refused(tokens: Any) -> None:
    with pytest.raises(ArgumentError) as e:
        constrain.to_llguidance(gp.load_grammar("qwen3"), tools=[], tokens=tokens)
    assert e.value.code == "constrain.tokens"


def test_added_tokens_refuses_an_object_that_is_no_tokenizer() -> None:
    with pytest.raises(ArgumentError) as e:
        constrain.added_tokens(object())
    assert e.value.code == "constrain.tokens"


def test_without_tokens_an_added_token_is_refused_by_llguidance() -> None:
    """Why tokens= exists: the spelled delimiter does not match the token the model writes."""
    grammar = gp.load_grammar("qwen3")
    vocab = vocabulary(grammar)
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]
    text = '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>'
    assert vocab.llguidance(constrain.to_llguidance(grammar, tools=tools), vocab.encode(text)) == "reject@0"
    assert vocab.llguidance(constrain.to_llguidance(grammar, tools=tools, tokens=vocab.ids),
                            vocab.encode(text)) == "accept"


# ---------------------------------------------------------------------------- real vocabularies
class _RealVocabulary:
    """A real vocabulary's ids, with the bytes of those its fixture uses (the others never come up: empty)
    and its markers and special tokens special, as llguidance's Hugging Face loader makes added tokens;
    one more id is the end of sequence. For llguidance's TokenizerWrapper (which never encodes here)."""

    def __init__(self, name: str) -> None:
        self.fixture = load_fixture(name)
        decoder = self.fixture.decoder
        size = max({*decoder.tokens, *self.fixture.markers.values()}) + 1
        self.tokens = [decoder.tokens.get(i, b"") for i in range(size)] + [b"<eos>"]
        self.eos_token_id, self.bos_token_id = size, None
        self.special_token_ids = sorted({*self.fixture.markers.values(), *decoder.special, size})
        self.llg = llguidance.LLTokenizer(llguidance.TokenizerWrapper(self))
        info = xgrammar.TokenizerInfo(self.tokens, vocab_type=xgrammar.VocabType.RAW, stop_token_ids=[size])
        self.xgr = xgrammar.GrammarCompiler(info, cache_enabled=False)

    def __call__(self, text: Any) -> list[int]:
        raise AssertionError("the tests give token ids; nothing is encoded")


_REAL: dict[str, _RealVocabulary] = {}


def _real_cases() -> list[Any]:
    out = []
    for name in fixture_names():
        for output in load_fixture(name).outputs:
            sample = next((s for s in goldens(output.grammar) if f"{output.grammar}/{s.name}" == output.name), None)
            if sample is not None and _exports(output.grammar) and "error" not in sample.expected and complete(sample):
                out.append(pytest.param(name, output, sample, id=output.name))
    return out


@pytest.mark.parametrize(("vocabulary", "output", "sample"), _real_cases())
def test_a_golden_output_as_a_real_vocabulary_s_ids_is_accepted(vocabulary: str, output: Any, sample: Any) -> None:
    if vocabulary not in _REAL:
        _REAL[vocabulary] = _RealVocabulary(vocabulary)
    vocab = _REAL[vocabulary]
    grammar = gp.load_grammar(output.grammar)
    text = cut(grammar, sample.text)
    # (the ids up to the end of turn the constraint leaves to the server)
    ids = next(output.ids[:k] for k in range(len(output.ids) + 1) if vocab.fixture.decoder.decode(output.ids[:k]) == text)
    tools = tools_for(sample)
    lark = constrain.to_llguidance(grammar, tools=tools, prefix=sample.prefix, tokens=vocab.fixture.markers)
    assert drive_llguidance(vocab.llg, lark, ids) == "accept", text
    tag = constrain.to_structural_tag(grammar, tools=tools, prefix=sample.prefix)
    assert drive_xgrammar(vocab.xgr, tag, ids, vocab.eos_token_id) == "accept", text


def test_the_real_vocabularies_hold_the_calls_their_grammars_constrain() -> None:
    """(So the test above is not vacuous: most of its outputs write a call with the vocabulary's tokens.)"""
    calls = [p for p in _real_cases() if has_calls(p.values[2])]
    assert len(calls) >= 20
    assert {p.values[0] for p in calls} == set(fixture_names())
