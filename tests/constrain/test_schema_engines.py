"""Tool schemas as pydantic writes them (``$defs`` / ``$ref``: nested, optional, listed, mapped and recursive
models; draft-7 ``definitions``), exported for every grammar the exports take, compiled by llguidance and by
xgrammar, and drawn from: what a model writes under the constraint parses into calls the pydantic model
validates (issue 32, item 2: the nested arguments' ``#/$defs/X`` pointed at the wrapper's root, and neither
engine compiled the constraint for 41 of 54 grammars).

A call syntax (Python, Gemma's dialect) spells each value out as a regex, which has no recursion: a recursive
model is written a few levels inside itself there (grammar_parse.constrain._pythonic.RECURSION_DEPTH).
"""

from __future__ import annotations

import json
import random
from typing import Any, Optional

import pytest
from pydantic import BaseModel

import grammar_parse as gp
from grammar_parse import constrain
from grammar_parse.constrain import schemas

llguidance = pytest.importorskip("llguidance")
xgrammar = pytest.importorskip("xgrammar")

from goldens import goldens  # noqa: E402
from test_constrain import (  # noqa: E402
    LLG_TOKENIZER, XGR_COMPILER, NOT_OFFERED_ANYWHERE, SUPPORTED, _Drawing, complete, cut, has_calls, sample_from,
)
from test_constrain_schemas import NESTED, RECURSIVE, Node  # noqa: E402

CASES = {**{k: v[0] for k, v in NESTED.items()}, **RECURSIVE}


def _compiles(backend: str, grammar: gp.Grammar, tools: list[dict[str, Any]]) -> None:
    if backend == "llguidance":
        matcher = llguidance.LLMatcher(LLG_TOKENIZER, constrain.to_llguidance(grammar, tools=tools), log_level=0)
        assert not matcher.is_error(), matcher.get_error()
    else:
        XGR_COMPILER.compile_structural_tag(json.dumps(constrain.to_structural_tag(grammar, tools=tools)))


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("name", SUPPORTED)
@pytest.mark.parametrize("backend", ["llguidance", "xgrammar"])
def test_pydantic_schemas_compile(backend: str, name: str, case: str) -> None:
    _compiles(backend, gp.load_grammar(name), CASES[case])


class Point(BaseModel):
    x: int
    y: int


class Move(BaseModel):
    to: Point
    via: Optional[Point] = None  # (anyOf: [$ref, null])
    stops: list[Point] = []  # (items: $ref)


class Forest(BaseModel):
    root: Node  # (recursive: Node.children is list[Node])


#: Models to draw calls of: numbers only, so that a random draw closes within a few hundred bytes.
MODELS: dict[str, type[BaseModel]] = {"move": Move, "plant": Forest}


@pytest.mark.parametrize("tool", sorted(MODELS))
@pytest.mark.parametrize("name", SUPPORTED)
@pytest.mark.parametrize("backend", ["llguidance", "xgrammar"])
def test_drawn_calls_validate_against_the_pydantic_model(backend: str, name: str, tool: str) -> None:
    """What the constraint lets a model write parses into calls whose arguments the model validates: 8 draws
    a grammar, from the trigger of a golden call on."""
    model = MODELS[tool]
    grammar = gp.load_grammar(name)
    tools = [{"type": "function", "function": {"name": tool, "parameters": model.model_json_schema()}}]
    resolved = [{"type": "function", "function": {"name": tool, "parameters": schemas.self_contained(
        tool, model.model_json_schema())}}]
    # (one whose call starts at a trigger: a bare call at the answer's start has none to begin the draw after)
    triggers = constrain._call_format(grammar).trigger
    sample = sorted((s for s in goldens(name) if has_calls(s)),
                    key=lambda s: (not any(t in s.text for t in triggers), not complete(s),
                                   s.name in NOT_OFFERED_ANYWHERE))[0]
    text = cut(grammar, sample.text)
    triggers = [t for t in constrain._call_format(grammar).trigger if t in text]
    start = text[:text.find(min(triggers, key=text.find)) + len(min(triggers, key=text.find))]
    rng = random.Random(f"{name}-{tool}")
    validated = 0
    for _ in range(8):
        # (no delimiter words inserted: a closer written inside a JSON argument's string is a known limit,
        # docs/constraints.md)
        drawn = sample_from(_Drawing(backend, grammar, tools), start, rng)
        if drawn is None:
            continue
        # (the parser is given the schema the constraint was built from, its references resolved: the
        # parser's own typing of a tagged argument does not follow a $ref)
        message = gp.parse_response(drawn, grammar, prefix=sample.prefix, tools=resolved, strict=False)
        assert message.get("tool_calls"), drawn
        for call in message["tool_calls"]:
            assert call["function"]["name"] == tool and not call.get("errors"), (drawn, call)
            model.model_validate(call["function"]["arguments"])
            validated += 1
    assert validated >= 3, validated
