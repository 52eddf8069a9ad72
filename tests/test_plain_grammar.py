"""A compiled grammar is a plain value (issue 33, step 2): every built-in pickles, before and after use, and
the grammar that comes back parses every golden sample exactly as the one that was built, one-shot and
streamed; nothing of Lark travels with it (Lark is used only while building)."""

from __future__ import annotations

import json
import pickle
from functools import cache
from typing import Any

import pytest

import grammar_parse as gp
from conformance import jsonable, load, model_template_samples, response_template_cases
from goldens import all_goldens, goldens, parsed
from grammar_parse.batch import portable_grammar
from grammar_parse._engine.grammar import Grammar
from grammar_parse._engine.session import resolve_grammar

GOLDENS = [g for g in all_goldens() if g.grammar in set(gp.list_grammars())]


@cache
def travelled(name: str) -> Grammar:
    """The built-in after a round trip through pickle, taken after it was used (its sessions' shared
    caches filled: they stay behind, per process)."""
    grammar = gp.load_grammar(name)
    gp.parse_response("Hello.", grammar, prefix="", strict=False)
    for sample in goldens(name):  # (every matcher's worked-out automata too: they hold closures)
        parsed(grammar, sample.text, sample.prefix, sample.tools, strict=False)
    for terminal in grammar.terminals.values():
        for derived in ("_automaton", "_forward", "_forward_at_start", "linear"):
            getattr(terminal.matcher, derived, None)
    if grammar.start_anchor is not None:
        grammar.start_anchor.bounded  # noqa: B018 - worked out, as a prompt's anchor search does
    copy = pickle.loads(pickle.dumps(grammar))
    assert copy is not grammar and copy.tables.shared == {}
    return copy


@pytest.mark.parametrize("name", sorted(gp.list_grammars()))
def test_every_builtin_pickles_without_lark(name):
    data = pickle.dumps(travelled(name))
    assert b"\x8c\x04lark" not in data and b"lark." not in data  # (no module of Lark's named in the value)
    assert travelled(name).source == gp.load_grammar(name).source


@pytest.mark.parametrize("sample", GOLDENS, ids=lambda g: f"{g.grammar}/{g.path.stem}")
def test_the_travelled_grammar_parses_every_golden_as_the_built_one(sample):
    built, copy = gp.load_grammar(sample.grammar), travelled(sample.grammar)
    for strict in (True, False):
        expected = parsed(built, sample.text, sample.prefix, sample.tools, strict=strict)
        assert parsed(copy, sample.text, sample.prefix, sample.tools, strict=strict) == expected
    chunks = [sample.text[i:i + 7] for i in range(0, len(sample.text), 7)]
    assert parsed(copy, "", sample.prefix, sample.tools, chunks) == parsed(built, "", sample.prefix, sample.tools,
                                                                            chunks)


@pytest.mark.parametrize("given", ["qwen3", {"version": 1, "start_anchor": "<|im_start|>assistant\n",
                                              "fields": {"content": {}}}])
def test_batch_workers_receive_the_compiled_grammar(given):
    """portable_grammar compiles once, in the parent: what travels is the Grammar, not text to rebuild."""
    grammar = portable_grammar(given)
    assert isinstance(grammar, Grammar)
    assert isinstance(pickle.loads(pickle.dumps(grammar)), Grammar)
    assert portable_grammar(None) is None


def _outcome(run: Any) -> Any:
    try:
        return jsonable(run())
    except gp.GrammarParseError as error:
        return {"error": type(error).__name__, "code": error.code}


@cache
def _compiled(template: str) -> tuple[Grammar, Grammar] | None:
    """A corpus template compiled, and its grammar after a round trip through pickle (None: it does not
    compile, which is its case's point)."""
    try:
        grammar = resolve_grammar(json.loads(template))
    except gp.GrammarParseError:
        return None
    return grammar, pickle.loads(pickle.dumps(grammar))


CORPUS = response_template_cases() + model_template_samples("response_template") + load(
    "transformers_legacy_xregex.json") + model_template_samples("legacy_xregex")


@pytest.mark.filterwarnings("ignore::grammar_parse.AnchorWarning")  # (a case's point: both parses warn alike)
@pytest.mark.parametrize("case", CORPUS, ids=lambda c: c["id"])
def test_every_corpus_grammar_travels(case):
    """Templates and legacy schemas of the transformers corpus (legacy grammars carry their schema's
    settling hook): the travelled grammar gives each case's text the same message or error."""
    grammars = _compiled(json.dumps(case["template"], sort_keys=True))
    if grammars is None:
        return
    built, copy = grammars
    prefix, tools = case.get("prefix"), case.get("tools")
    assert _outcome(lambda: gp.parse_response(case["text"], copy, prefix=prefix, tools=tools)) == _outcome(
        lambda: gp.parse_response(case["text"], built, prefix=prefix, tools=tools))
