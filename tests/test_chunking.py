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
from goldens import goldens
from strategies import chunkings, grammar_outputs

GRAMMARS = sorted(grammar_parse.list_grammars())


def outcome(grammar: grammar_parse.Grammar, chunks: list[str] | None, text: str) -> tuple[Any, ...]:
    """(message, merged events) or (error class, code); chunks=None parses one-shot."""
    return outcome_with(grammar, "", None, chunks, text)


@pytest.mark.parametrize("name", GRAMMARS)
@given(data=st.data())  # on the parametrized test, so each grammar keeps its own database entry
def test_any_chunking_gives_the_oneshot_result(name, data):
    grammar = grammar_parse.load_grammar(name)
    text = data.draw(grammar_outputs(name), label="text")
    chunks = data.draw(chunkings(text), label="chunks")
    expected = outcome(grammar, None, text)
    assert strict_equal(outcome(grammar, chunks, text), expected)
    assert strict_equal(outcome(grammar, [text], text), expected)


def _space_runs_alone(text: str) -> list[str]:
    """The text cut so that every whitespace run arrives alone, one character at a time: what feed()
    holds aside for a leading \\s* (and must give back, whatever route the next chunk takes)."""
    import re

    chunks: list[str] = []
    for piece in re.split(r"(\s+)", text):
        if piece.isspace():
            chunks += list(piece)
        elif piece:
            chunks.append(piece)
    return chunks


SAMPLES = [c for name in GRAMMARS for c in goldens(name)]


@pytest.mark.parametrize("case", SAMPLES, ids=[f"{c.grammar}/{c.name}" for c in SAMPLES])
def test_whitespace_held_aside_is_given_back(case):
    """Each golden sample with its whitespace fed apart from the text around it gives the one-shot
    outcome. (A space held aside was lost when the next chunk ended a JSON value: apriel's
    ``{"city":`` + `` `` + ``"Paris"}}]`` streamed ``{"city":"Paris"}``.)"""
    grammar = grammar_parse.load_grammar(case.grammar)
    parser_outcome = outcome_with(grammar, case.prefix, case.tools, _space_runs_alone(case.text))
    assert strict_equal(parser_outcome, outcome_with(grammar, case.prefix, case.tools, None, case.text))


def outcome_with(grammar: grammar_parse.Grammar, prefix: str, tools: Any, chunks: list[str] | None,
                 text: str = "") -> tuple[Any, ...]:
    """:func:`outcome` with a prompt and tools."""
    try:
        parser = grammar_parse.ResponseParser(grammar, prefix=prefix, tools=tools)
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
