"""Transcripts (issue 31): long, realistic outputs per model family, written by hand from the family's
documentation (the grammar's header, its goldens and chat template). Each one reasons about
the tool format (quotes the call markup inside the reasoning, then closes it), passes code with indentation,
inner blank lines and a trailing newline as an argument, makes several calls and writes text between and
after them.

tests/transcripts/<grammar>/<case>.txt is the output, <case>.json the message written by hand from the
format's rules, with an optional <case>.prefix.txt (the prompt the model continued) and <case>.tools.json.
Where tests/golden holds one feature per sample, these hold them together, as agents' turns do.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import grammar_parse
from conformance import strict_equal
from goldens import Golden, parsed, samples
from test_drift import REASONING_FIELDS, markup

TRANSCRIPTS = Path(__file__).resolve().parent / "transcripts"
CASES = [t for d in sorted(TRANSCRIPTS.iterdir()) if d.is_dir() for t in samples(TRANSCRIPTS, d.name)]
IDS = [f"{t.grammar}/{t.name}" for t in CASES]
TEXT_FIELDS = ("content",) + REASONING_FIELDS


def show(message: Any) -> str:
    return json.dumps(message, ensure_ascii=False)


def run(case: Golden, chunks: list[str] | None = None, *, strict: bool = True) -> Any:
    return parsed(case.grammar, case.text, case.prefix, case.tools, chunks, strict=strict)


def test_every_transcript_is_for_a_builtin_grammar() -> None:
    names = set(grammar_parse.list_grammars())
    assert CASES and {t.grammar for t in CASES} <= names


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_one_shot_gives_the_expected_message(case: Golden) -> None:
    got = run(case)
    assert strict_equal(got, case.expected), show(got)


@pytest.mark.parametrize("size", [1, 3, 7])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_streamed_equals_one_shot(case: Golden, size: int) -> None:
    chunks = [case.text[i:i + size] for i in range(0, len(case.text), size)]
    streamed, one_shot = run(case, chunks), run(case)
    assert strict_equal(streamed, one_shot), show(streamed)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_no_markup_beyond_what_the_model_quoted(case: Golden) -> None:
    """Each delimiter occurs in a text field no more often than in the expected text, where the model
    quoted it (a draft in the reasoning): a delimiter the parser failed to consume shows up here by name."""
    got = run(case)
    delimiters = markup(grammar_parse.load_grammar(case.grammar))
    leaks = [(field, d) for field in TEXT_FIELDS for d in sorted(delimiters)
             if isinstance(got.get(field), str)
             and got[field].count(d) > (case.expected.get(field) or "").count(d)]
    assert not leaks, leaks


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_lenient_mode_gives_the_same_message_without_errors(case: Golden) -> None:
    got = run(case, strict=False)
    assert "parse_errors" not in got, got.get("parse_errors")
    assert strict_equal(got, case.expected), show(got)
