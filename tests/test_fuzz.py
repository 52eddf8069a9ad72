"""Fuzzing every built-in grammar with outputs made of its own delimiters, their prefixes and noise.

Fast profile in every run; the deep one (2,200 examples per grammar, over 100,000 in all) with
`HYPOTHESIS_PROFILE=deep python -m pytest tests/test_fuzz.py`. For every output and chunking:
lenient mode never raises; its message is the same streamed as one-shot; every character is accounted
for (text of a field, a delimiter, or a reported discarded span); strict mode gives the lenient message
or raises a documented GrammarParseError.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import grammar_parse as gp
from conformance import jsonable, strict_equal
from grammar_parse.errors import ERROR_CODES
from strategies import chunkings, outputs
from test_robustness import account

NOISE = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)


@pytest.mark.parametrize("name", sorted(gp.list_grammars()))
def test_fuzz(name):
    grammar = gp.load_grammar(name)

    @given(st.data())
    def check(data):
        text = data.draw(st.lists(outputs(grammar, max_pieces=16) | NOISE, max_size=3).map("".join), label="text")
        chunks = data.draw(chunkings(text), label="chunks")
        one_shot = jsonable(gp.parse_response(text, grammar, prefix="", strict=False))
        parser = gp.ResponseParser(grammar, "", strict=False, trace=True)
        for chunk in chunks:
            parser.feed(chunk)
        streamed = jsonable(parser.finalize()[0])
        assert strict_equal(streamed, one_shot)
        if text:
            account(parser, text)
        try:
            strict = jsonable(gp.parse_response(text, grammar, prefix=""))
        except gp.GrammarParseError as e:
            assert e.code in ERROR_CODES and one_shot.get("parse_errors")
        else:
            assert "parse_errors" not in one_shot and strict_equal(strict, one_shot)

    check()
