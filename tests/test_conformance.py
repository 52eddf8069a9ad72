"""The transformers conformance corpus, replayed case by case (see tests/data/conformance/README.md).

Every response_template case and every new-format model-template sample must match transformers 5.23:
the same message, the same events feed by feed, the same exception type. The exceptions are the cases
listed in docs/divergences.md, where transformers' streaming disagrees with its own one-shot result and
we follow one-shot.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest

import grammar_parse
from conformance import jsonable, model_template_samples, oneshot, response_template_cases, run_case, stream, strict_equal

DOCS = Path(__file__).resolve().parents[1] / "docs" / "divergences.md"
DIVERGENT = set(re.findall(r"^\| `([^`]+)` \|", DOCS.read_text(encoding="utf-8"), re.M))

CASES = response_template_cases() + model_template_samples("response_template")
BY_ID = {c["id"]: c for c in CASES}


def test_corpus_is_complete():
    assert len(response_template_cases()) == 511
    assert len(model_template_samples("response_template")) == 73
    assert DIVERGENT <= BY_ID.keys(), DIVERGENT - BY_ID.keys()


@pytest.mark.parametrize("case", [c for c in CASES if c["id"] not in DIVERGENT], ids=lambda c: c["id"])
def test_matches_transformers(case):
    assert run_case(case) == []


@pytest.mark.parametrize("case_id", sorted(DIVERGENT))
def test_divergence_follows_oneshot(case_id):
    case = BY_ID[case_id]
    ours = stream(case, case["chunks"])["message"]
    assert strict_equal(ours, oneshot(case))
    assert not strict_equal(ours, case["expect"]["message"]), "transformers agrees now: drop the entry"
    reference = case["expect"].get("oneshot_message")
    for other in CASES:  # a one-shot case of the same template and text records the oracle's one-shot
        if other["chunks"] is None and other["text"] == case["text"] and other["template"] == case["template"]:
            reference = other["expect"].get("message", reference)
    if reference is not None:
        assert strict_equal(ours, reference)


@pytest.mark.parametrize(
    "case", [c for c in model_template_samples("response_template")], ids=lambda c: c["id"]
)
def test_every_fixed_chunk_size_gives_the_oneshot_message(case):
    expected = case["expect"].get("oneshot_message", case["expect"]["message"])
    text = case["text"]
    for size in range(1, 9):
        got = stream(case, [text[i : i + size] for i in range(0, len(text), size)])["message"]
        assert strict_equal(got, expected), f"chunk size {size}: {got}"


def test_feed_and_finalize_after_finalize_raise_runtime_errors():
    parser = grammar_parse.ResponseParser(copy.deepcopy(CASES[0]["template"]), prefix="")
    parser.finalize()
    for call in (lambda: parser.feed("x"), parser.finalize):
        with pytest.raises(RuntimeError) as info:
            call()
        assert isinstance(info.value, grammar_parse.FinalizedError)
        assert info.value.code == "usage.finalized"


def test_prefix_is_required():
    with pytest.raises(ValueError, match="prefix"):
        grammar_parse.parse_response("hi", copy.deepcopy(CASES[0]["template"]))
    assert jsonable(grammar_parse.parse_response("hi", "qwen3", prefix="")) == {"role": "assistant", "content": "hi"}
