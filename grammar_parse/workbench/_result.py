"""Everything the result pane shows of one sample under the grammar: the view's page, the one-shot message
(strict, as a golden holds it, and lenient with its errors and their spans), the event timeline and the Chat
Completions deltas fed in chunks of the chosen size, whether the streamed message is the one-shot one (and
where it first differs), and whether the grammar exports as a decoding constraint for llguidance and
xgrammar."""

from __future__ import annotations

import json
import math
import warnings
from typing import Any

from .._engine.grammar import Grammar
from .._engine.session import ResponseParser
from ..adapters.chat_completions import ChatCompletionsStream
from ..constrain import to_llguidance, to_structural_tag
from ..errors import GrammarParseError, ParseError
from ..view import to_html
from ._samples import Sample, first_difference, jsonable, parse_outcome, status_of

#: At most this many chunks are fed (a smaller chunk size over a long sample is raised to fit), and this
#: many events and deltas are shown (the counts are given in full).
MAX_CHUNKS = 20_000
MAX_SHOWN = 2_000
#: The tool offered to the constraint export when the sample has none (an export needs a tool to call).
PLACEHOLDER_TOOLS = [{"type": "function", "function": {"name": "example_tool", "description": "placeholder",
                                                      "parameters": {"type": "object", "properties": {
                                                          "arg": {"type": "string"}}}}}]


def failure(error: GrammarParseError) -> dict[str, Any]:
    """A parse failure as the page shows it: its type, code, message, hint and place."""
    found: dict[str, Any] = {"type": type(error).__name__, "code": error.code, "message": error.detail[:2000],
                             "hint": error.hint}
    if isinstance(error, ParseError):
        found.update(field=error.field, position=error.position, line=error.line, column=error.column)
    return found


def chunks(text: str, size: int) -> tuple[list[str], int]:
    """``text`` cut in pieces of ``size`` characters (raised so that there are at most MAX_CHUNKS), and the
    size used."""
    size = max(size, 1, math.ceil(len(text) / MAX_CHUNKS))
    return [text[i:i + size] for i in range(0, len(text), size)] or [""], size


def _streamed(grammar: Grammar, sample: Sample, pieces: list[str]) -> tuple[Any, list[Any], int]:
    """The strict message fed in ``pieces`` (or its failure, as parse_outcome gives it), the events (at most
    MAX_SHOWN) and how many there were."""
    events: list[Any] = []
    count = 0
    try:
        parser = ResponseParser(grammar, sample.prefix, tools=sample.tools)
        for batch in (parser.initial_events, *(parser.feed(piece) for piece in pieces)):
            count += len(batch)
            events += batch[:max(0, MAX_SHOWN - len(events))]
        message, last = parser.finalize()
        count += len(last)
        events += last[:max(0, MAX_SHOWN - len(events))]
        return jsonable(message), jsonable(events), count
    except GrammarParseError as e:
        return {"error": {"type": type(e).__name__, "code": e.code}}, jsonable(events), count


def _deltas(grammar: Grammar, sample: Sample, pieces: list[str]) -> tuple[list[Any], int, str | None]:
    """The Chat Completions deltas (lenient, as a server streams them), how many, and the finish reason."""
    stream = ChatCompletionsStream(grammar, sample.prefix, tools=sample.tools, strict=False,
                                   ids=lambda kind: f"{kind}_0")
    deltas: list[Any] = []
    count = 0
    for batch in (*(stream.feed(piece) for piece in pieces), stream.finish()):
        count += len(batch)
        deltas += batch[:max(0, MAX_SHOWN - len(deltas))]
    return jsonable(deltas), count, stream.finish_reason


def exports(grammar: Grammar, sample: Sample) -> dict[str, Any]:
    """Whether the grammar exports as a decoding constraint, for each engine library: ``ok`` and the size of
    the export, or the error's code and message (a grammar whose calls cannot be constrained says why)."""
    tools = sample.tools if isinstance(sample.tools, list) and sample.tools else PLACEHOLDER_TOOLS
    found: dict[str, Any] = {"tools": "the sample's" if tools is sample.tools else "a placeholder tool"}
    for engine, export in (("llguidance", to_llguidance), ("xgrammar", to_structural_tag)):
        try:
            made = export(grammar, tools=tools, prefix=sample.prefix)
            text = made if isinstance(made, str) else json.dumps(made, ensure_ascii=False)
            found[engine] = {"ok": True, "chars": len(text), "preview": text[:1500]}
        except GrammarParseError as e:
            found[engine] = {"ok": False, "code": e.code, "message": str(e)[:1000]}
    return found


def _lenient(grammar: Grammar, sample: Sample) -> dict[str, Any]:
    message = ResponseParser(grammar, sample.prefix, tools=sample.tools, strict=False).finalize(sample.text)[0]
    errors = [{"code": e.get("code"), "message": str(e.get("message", ""))[:500], "field": e.get("field"),
               "span": e.get("span")} for e in message.get("parse_errors") or []]
    return {"message": jsonable(message), "errors": errors}


def result(grammar: Grammar, sample: Sample, chunk: int) -> dict[str, Any]:
    """The result pane of one sample (module doc)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        one_shot, error = parse_outcome(grammar, sample)
        pieces, size = chunks(sample.text, chunk)
        streamed, events, event_count = _streamed(grammar, sample, pieces)
        deltas, delta_count, finish_reason = _deltas(grammar, sample, pieces)
        page = to_html(sample.text, grammar, prefix=sample.prefix, tools=sample.tools,
                       title=f"{grammar.name or 'grammar'}: {sample.name}")
        lenient = _lenient(grammar, sample)
        exported = exports(grammar, sample)
    difference = first_difference(one_shot, streamed, ("one_shot", "streamed"))
    return {"id": sample.id, "name": sample.name, "html": page, "message": one_shot,
            "failure": None if error is None else failure(error), "status": status_of(sample, one_shot),
            "expected": sample.expected if sample.has_expected else None, "has_expected": sample.has_expected,
            "lenient": lenient, "events": events, "event_count": event_count, "deltas": deltas,
            "delta_count": delta_count, "finish_reason": finish_reason,
            "stream": {"chunk": size, "chunks": len(pieces), "message": streamed, "same": difference is None,
                       "difference": difference},
            "expected_difference": first_difference(sample.expected, one_shot, ("expected", "parsed"))
            if sample.has_expected else None,
            "exports": exported, "warnings": list(dict.fromkeys(str(w.message)[:500] for w in caught))}


__all__ = ["chunks", "exports", "failure", "result"]
