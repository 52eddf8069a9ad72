"""Invariants: for every built-in grammar, any chunking of any output gives the one-shot message and the
same events once adjacent chunks of a field are merged."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import grammar_parse
from conformance import jsonable, strict_equal
from grammar_parse.events import merge_chunks
from strategies import chunkings, grammar_outputs

GRAMMARS = sorted(grammar_parse.list_grammars())


def outcome(grammar: grammar_parse.Grammar, chunks: list[str] | None, text: str) -> tuple[Any, ...]:
    """(message, merged events) or (error class, code); chunks=None parses one-shot."""
    try:
        parser = grammar_parse.ResponseParser(grammar, prefix="")
        events = list(parser.initial_events)
        if chunks is None:
            message, final = parser.finalize(text)
        else:
            for c in chunks:
                events += parser.feed(c)
            message, final = parser.finalize()
        return ("ok", jsonable(message), jsonable(merge_chunks(events + final)))
    except grammar_parse.GrammarParseError as e:
        return ("error", type(e).__name__, e.code)


@pytest.mark.parametrize("name", GRAMMARS)
@given(data=st.data())  # on the parametrized test, so each grammar keeps its own database entry
def test_any_chunking_gives_the_oneshot_result(name, data):
    grammar = grammar_parse.load_grammar(name)
    text = data.draw(grammar_outputs(name), label="text")
    chunks = data.draw(chunkings(text), label="chunks")
    expected = outcome(grammar, None, text)
    assert strict_equal(outcome(grammar, chunks, text), expected)
    assert strict_equal(outcome(grammar, [text], text), expected)
