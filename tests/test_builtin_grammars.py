"""Built-in grammars: each reproduces the transformers template it was written from, on the corpus samples."""

from __future__ import annotations

import copy

import pytest

import grammar_parse
import grammar_parse as gp
from conformance import jsonable, model_template_samples, strict_equal

# corpus model family -> the built-in grammar written from its template
BUILTIN_FOR = {
    "qwen2 / qwen2.5 / qwen3 family (Hermes JSON tool calls)": "qwen3",
    "qwen3.5 family (XML function/parameter tool calls)": "qwen3_5",
    "gemma4": "gemma4",
    "smollm3 (test fixture, also the docs walkthrough)": "smollm3",
    "gpt-oss harmony (test fixture)": "gpt-oss",
    "cohere command (test fixture)": "cohere2",
    "ernie 4.5 (test fixture)": "ernie4_5",
    "inkling / TMLv0 (test fixture)": "inkling",
}

SAMPLES = [s for s in model_template_samples("response_template") if s["id"].split("::")[0] in BUILTIN_FOR]


def harmony_return(message: dict) -> dict:
    """gpt-oss: the built-in follows the harmony format, where <|return|> ends the final message; the
    transformers fixture keeps the token in content."""
    content = message.get("content")
    if isinstance(content, str) and content.endswith("<|return|>"):
        return {**message, "content": content[: -len("<|return|>")]}
    return message


# Where a built-in follows the model's own format over the transformers template it was written from.
FOLLOWS_THE_FORMAT = {"gpt-oss": harmony_return}


def test_every_builtin_is_covered():
    assert set(BUILTIN_FOR.values()) <= {alias for name, aliases in grammar_parse.list_grammars().items()
                                          for alias in [name, *aliases]}
    assert len(SAMPLES) == 33


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s["id"])
def test_builtin_gives_the_oracle_message(sample):
    """The built-in grammar gives transformers' message on its template's samples, one-shot and streamed.
    (Its events may differ: a built-in may keep text that the transformers template drops, such as text
    before a tool call, which changes where regions open.)"""
    grammar = BUILTIN_FOR[sample["id"].split("::")[0]]
    expected = sample["expect"].get("oneshot_message", sample["expect"]["message"])
    expected = FOLLOWS_THE_FORMAT.get(grammar, lambda message: message)(expected)
    assert strict_equal(jsonable(gp.parse_response(sample["text"], grammar, prefix=sample["prefix"],
                                                   tools=copy.deepcopy(sample["tools"]))), expected)
    if sample["chunks"] is not None:
        parser = gp.ResponseParser(grammar, sample["prefix"], tools=copy.deepcopy(sample["tools"]))
        for chunk in sample["chunks"]:
            parser.feed(chunk)
        assert strict_equal(jsonable(parser.finalize()[0]), expected)


@pytest.mark.parametrize("name", sorted(grammar_parse.list_grammars()))
def test_builtin_loads_with_header_and_source(name):
    grammar = grammar_parse.load_grammar(name)
    source = grammar.lark_source
    assert source.startswith("// ")
    assert "Source:" in source and "Quirks:" in source
    assert grammar.name == name
    for alias in grammar_parse.list_grammars()[name]:
        assert grammar_parse.load_grammar(alias) is grammar


def test_unknown_grammar_name_suggests_the_closest_builtin():
    with pytest.raises(grammar_parse.GrammarError) as info:
        grammar_parse.load_grammar("qwen-4")
    assert info.value.code == "grammar.not_found"
    assert "Did you mean 'qwen3'" in str(info.value) and "grammar-parse list" in str(info.value)
