"""Differential tests of legacy response_schema parsing against transformers 5.13 (optional: in an
environment with `pip install transformers==5.13.0`, run `python -m pytest tests/differential --oracle`).

Random outputs built from each real schema's own delimiters: the same message or the same error type,
one-shot and streamed with any chunking, with and without the regex time limit.
"""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import grammar_parse
from conformance import jsonable, load, strict_equal
from grammar_parse.compat import legacy_grammar
from strategies import chunkings, outputs

legacy = pytest.importorskip("transformers.utils.chat_parsing_utils")

SCHEMAS = [(e["model_family"], e["template"]) for e in load("transformers_model_templates.json")
           if e["format"] == "legacy_xregex"]
EXTRA = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<|im_end|>", "\n", '{"name": "f", "arguments": {}}']


def outcome(fn):
    try:
        return ("ok", jsonable(fn()))
    except (ValueError, TypeError) as e:
        return ("error", "TypeError" if isinstance(e, TypeError) else "ValueError")


@pytest.mark.parametrize("family, schema", SCHEMAS, ids=[s[0] for s in SCHEMAS])
@settings(max_examples=150)
@given(data=st.data())
def test_same_as_transformers_5_13(family, schema, data):
    grammar = legacy_grammar(schema)
    text = data.draw(outputs(grammar) | st.lists(st.sampled_from(EXTRA), max_size=10).map("".join), label="text")
    expected = outcome(lambda: legacy.recursive_parse(text, copy.deepcopy(schema)))
    assert strict_equal(outcome(lambda: grammar_parse.parse_response(text, schema)), expected)
    assert strict_equal(outcome(lambda: grammar_parse.parse_response(text, legacy_grammar(schema, timeout=None))),
                        expected)
    chunks = data.draw(chunkings(text), label="chunks")

    def streamed():
        parser = grammar_parse.ResponseParser(schema)
        for c in chunks:
            parser.feed(c)
        return parser.finalize()[0]

    assert strict_equal(outcome(streamed), expected)
