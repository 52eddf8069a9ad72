"""Hypothesis strategies: model outputs built from a grammar's own delimiters, text and noise."""

from __future__ import annotations

import random
from functools import cache
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st

import grammar_parse
from grammar_parse._engine.delimiters import LiteralMatcher, RegexMatcher
from grammar_parse._engine.grammar import Grammar

def examples(fraction: float) -> int:
    """``max_examples`` for a test that runs ``fraction`` of the active profile's budget, so that the deep
    profile scales it up with the rest of the suite instead of a fixed count (see conftest.py)."""
    return max(1, round(settings().max_examples * fraction))


FILLER = [
    "Hello", "world", " ", "\n", "\n\n", "  ", "\t", "ok.", "The answer is 42.", "é", "日本", "🙂",
    '{"name": "get_weather", "arguments": {"city": "Paris"}}', '{"a": 1}', "[1, 2]", '"', "{", "}",
    "<", ">", "/", "|", "<|", "</", "=", "\\", "null", "true", "x=1", "key: value\n",
]


def delimiter_examples(grammar: Grammar, per_regex: int = 6, seed: int = 0) -> list[str]:
    """Strings that match each delimiter of ``grammar`` (literals as they are, regexes by random walks)."""
    rng = random.Random(seed)
    out: list[str] = []
    for term in grammar.terminals.values():
        m = term.matcher
        if isinstance(m, LiteralMatcher):
            out.extend(m.literals)
        elif isinstance(m, RegexMatcher):
            automaton = m._automaton
            if automaton is None:
                continue
            for _ in range(per_regex):
                s = _walk(automaton, rng)
                if s is not None and m.compiled.fullmatch(s):
                    out.append(s)
    if grammar.start_anchor is not None and grammar.start_anchor.literals:
        out.extend(grammar.start_anchor.literals)
    return sorted(set(out))


def _walk(automaton: Any, rng: random.Random, limit: int = 40) -> str | None:
    state, text = automaton.initial, list[str]()
    for _ in range(limit):
        if state in automaton.finals and (rng.random() < 0.4 or not automaton.trans.get(state)):
            return "".join(text)
        moves = [(sym, t) for sym, t in automaton.trans.get(state, {}).items()
                 if t in automaton.live and sym in automaton.reps]
        if not moves:
            break
        sym, state = rng.choice(sorted(moves, key=repr))
        text.append(automaton.reps[sym])
    return "".join(text) if state in automaton.finals else None


def outputs(grammar: Grammar, max_pieces: int = 24) -> st.SearchStrategy[str]:
    """Texts made of the grammar's delimiters, their prefixes, filler and random characters."""
    delims = delimiter_examples(grammar) or ["<", ">", "\n"]  # a grammar without delimiters still gets text
    prefixes = sorted({d[:k] for d in delims for k in range(1, len(d))})[:200]
    alphabet = "".join(sorted(set("".join(delims)) | set(" \n<>/|{}\":,")))
    piece = st.one_of(
        st.sampled_from(delims),
        st.sampled_from(delims),
        st.sampled_from(FILLER),
        st.sampled_from(prefixes) if prefixes else st.sampled_from(FILLER),
        st.text(alphabet=alphabet, max_size=6),
    )
    return st.lists(piece, max_size=max_pieces).map("".join)


@cache
def grammar_outputs(name: str, max_pieces: int = 24) -> st.SearchStrategy[str]:
    """:func:`outputs` of a built-in grammar, built once per run: the random walks over its delimiters and
    the strategy's validation, redone per example, made the fuzz test 1.7x as slow (20 -> 12 s CPU)."""
    return outputs(grammar_parse.load_grammar(name), max_pieces)


@st.composite
def chunkings(draw: st.DrawFn, text: str) -> list[str]:
    """``text`` split at random places (including single characters and empty chunks)."""
    ends = st.sampled_from([list[str](), [""]])
    if not text:
        return draw(ends)
    cuts = draw(st.lists(st.integers(min_value=0, max_value=len(text)), max_size=min(len(text) + 1, 40)))
    points = sorted(set(cuts) | {0, len(text)})
    return [text[a:b] for a, b in zip(points, points[1:])] + draw(ends)
