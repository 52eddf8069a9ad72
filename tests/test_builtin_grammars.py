"""Built-in grammars: each reproduces the transformers template it was written from, on the corpus samples."""

from __future__ import annotations

import copy

import pytest

import grammar_parse
from conformance import model_template_samples, run_case

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


def test_every_builtin_is_covered():
    assert set(BUILTIN_FOR.values()) <= {alias for name, aliases in grammar_parse.list_grammars().items()
                                          for alias in [name, *aliases]}
    assert len(SAMPLES) == 33


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s["id"])
def test_builtin_matches_its_template(sample):
    case = copy.deepcopy(sample)
    case["template"] = BUILTIN_FOR[sample["id"].split("::")[0]]
    assert run_case(case) == []


@pytest.mark.parametrize("name", sorted(grammar_parse.list_grammars()))
def test_builtin_loads_with_header_and_source(name):
    grammar = grammar_parse.load_grammar(name)
    source = grammar.lark_source
    assert source.startswith("// ")
    assert "Source:" in source and "Quirks:" in source
    assert grammar.name == name
    for alias in grammar_parse.list_grammars()[name]:
        assert grammar_parse.load_grammar(alias) is grammar


def test_unknown_grammar_name_lists_the_builtins():
    with pytest.raises(grammar_parse.GrammarError) as info:
        grammar_parse.load_grammar("no-such-model")
    assert info.value.code == "grammar.not_found"
    assert "qwen3" in str(info.value)
