"""ParseOptions (issue 33, step 2): every per-parse limit in one value that every adapter takes.

Data-driven over the entry points x the limits: each one honours each limit given through ``options=``
(the wire adapters and batch took neither size limit before), the old keywords are shorthands that give
the same result, a keyword that contradicts the options is refused, bad values are refused naming their
field, options pickle, and docs/limits.md lists every option and every serving limit.
"""

from __future__ import annotations

import dataclasses
import pickle
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import grammar_parse as gp
from grammar_parse import ParseOptions
from grammar_parse.batch import parse_many, parse_table
from grammar_parse.adapters.chat_completions import ChatCompletionsStream, chat_message
from grammar_parse.errors import ArgumentError, ParseError
from grammar_parse.adapters.lmsp import ResponseStream, respond
from grammar_parse.serving._server import Limits
from grammar_parse.adapters._stream import open_stream

ROOT = Path(__file__).resolve().parents[1]

# A call whose whole JSON body nests 5 levels ({ "arguments": { "a": [ [ [ ): past a depth limit of 3,
# within the default 256.
DEEP_CALL = '<tool_call>\n{"name": "f", "arguments": {"a": [[[1]]]}}\n</tool_call>'
# Content of 13 characters: past a region limit of 8.
LONG_CONTENT = "Hello, world!"

#: limit name -> (model output, the option's value that it breaks, the error code breaking it gives)
LIMITS = {
    "max_json_depth": (DEEP_CALL, 3, "parse.json_depth"),
    "max_region_chars": (LONG_CONTENT, 8, "parse.region_too_large"),
}


def _ids(kind: str) -> str:
    return f"{kind}_1"


def _codes(message: dict[str, Any]) -> set[str]:
    return {e["code"] for e in message.get("parse_errors") or []}


def _parser(text: str, options: ParseOptions) -> set[str]:
    parser = gp.ResponseParser("qwen3", "", options=options)
    for i in range(0, len(text), 3):
        parser.feed(text[i:i + 3])
    return _codes(parser.finalize()[0])


def _chat_stream(text: str, options: ParseOptions) -> set[str]:
    stream = ChatCompletionsStream("qwen3", "", ids=_ids, options=options)
    for i in range(0, len(text), 3):
        stream.feed(text[i:i + 3])
    stream.finish()
    return _codes(stream.message)


def _lmsp_stream(text: str, options: ParseOptions) -> set[str]:
    stream = ResponseStream("qwen3", "", ids=_ids, options=options)
    events = [e for i in range(0, len(text), 3) for e in stream.feed(text[i:i + 3])] + stream.complete()
    return {e["data"]["code"] for e in events if e["event"] == "response.parse_error"}


def _lmsp_respond(text: str, options: ParseOptions) -> set[str]:
    events: list[str] = []
    response = respond(text, "qwen3", prefix="", model="m", created_at=0, ids=_ids, options=options)
    assert response["status"] == "completed", response
    stream = ResponseStream("qwen3", "", ids=_ids, options=options)  # (the response object holds no codes)
    events = [e["data"]["code"] for e in stream.feed(text) + stream.complete() if e["event"] == "response.parse_error"]
    return set(events)


def _open_stream(text: str, options: ParseOptions) -> set[str]:
    opened = open_stream("qwen3", "", options=options)
    opened.calls.feed(opened.parser.feed(text))
    message, events = opened.parser.finalize()
    opened.calls.feed(events)
    return _codes(message) | {p["code"] for p in opened.calls.problems}


def _parse_many(text: str, options: ParseOptions) -> set[str]:
    rows = list(parse_many([{"completion": text}], gp.load_grammar("qwen3"), options=options))
    return set(rows[0]["parse_errors"] or [])


def _parse_table(text: str, options: ParseOptions) -> set[str]:
    pa = pytest.importorskip("pyarrow")
    result = parse_table(pa.table({"completion": [text]}), gp.load_grammar("qwen3"), options=options)
    return set(result.column("parse_errors").to_pylist()[0] or [])


#: entry point -> its codes for an output parsed with options (all lenient, so problems are recorded)
ADAPTERS: dict[str, Callable[[str, ParseOptions], set[str]]] = {
    "ResponseParser": _parser,
    "parse_response": lambda text, options: _codes(gp.parse_response(text, "qwen3", prefix="", options=options)),
    "chat_message": lambda text, options: _codes(chat_message(text, "qwen3", prefix="", ids=_ids, options=options)[0]),
    "ChatCompletionsStream": _chat_stream,
    "lmsp.ResponseStream": _lmsp_stream,
    "lmsp.respond": _lmsp_respond,
    "open_stream": _open_stream,
    "parse_many": _parse_many,
    "parse_table": _parse_table,
}


@pytest.mark.parametrize("limit", sorted(LIMITS))
@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
def test_every_adapter_honours_every_limit(adapter, limit):
    text, value, code = LIMITS[limit]
    run = ADAPTERS[adapter]
    assert code not in run(text, ParseOptions(strict=False)), "the output is within the default limit"
    assert code in run(text, ParseOptions(strict=False, **{limit: value}))


@pytest.mark.parametrize("limit", sorted(LIMITS))
def test_strict_options_raise_at_the_limit(limit):
    text, value, code = LIMITS[limit]
    with pytest.raises(ParseError) as raised:
        gp.parse_response(text, "qwen3", prefix="", options=ParseOptions(**{limit: value}))
    assert raised.value.code == code


#: entry points that take the shorthand keywords, each called with keywords or options
SHORTHANDS: dict[str, Callable[..., Any]] = {
    "ResponseParser": lambda text, **kw: gp.ResponseParser("qwen3", "", **kw).finalize(text)[0],
    "parse_response": lambda text, **kw: gp.parse_response(text, "qwen3", prefix="", **kw),
    "chat_message": lambda text, **kw: chat_message(text, "qwen3", prefix="", ids=_ids, **kw)[0],
}
KEYWORDS = [("strict", False), ("max_json_depth", 3), ("max_region_chars", 8), ("calls_in_reasoning", "always")]


@pytest.mark.parametrize("name, value", KEYWORDS)
@pytest.mark.parametrize("entry", sorted(SHORTHANDS))
def test_a_keyword_is_a_shorthand_for_its_option(entry, name, value):
    run = SHORTHANDS[entry]
    text = "<think>a<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call></think>" + DEEP_CALL + LONG_CONTENT
    lenient = {} if name == "strict" else {"strict": False}

    def outcome(**kw: Any) -> Any:
        try:
            return run(text, **kw)
        except ParseError as e:
            return e.code

    assert outcome(**lenient, **{name: value}) == outcome(options=ParseOptions(**lenient, **{name: value}))


@pytest.mark.parametrize("name, value", KEYWORDS)
@pytest.mark.parametrize("entry", sorted(SHORTHANDS))
def test_a_keyword_that_contradicts_the_options_is_refused(entry, name, value):
    default = getattr(ParseOptions(), name)
    other = "never" if default is None else default  # (a value other than the options', given as a keyword)
    options = ParseOptions(**{"strict": False, name: value})
    with pytest.raises(ArgumentError, match=name):
        SHORTHANDS[entry](LONG_CONTENT, options=options, **{name: other})
    SHORTHANDS[entry](LONG_CONTENT, options=options, **{name: value})  # (the same value twice: no conflict)


@pytest.mark.parametrize("name, bad", [
    ("strict", 1), ("strict", "no"), ("trace", None), ("trace", 0),
    ("max_region_chars", 0), ("max_region_chars", -5), ("max_region_chars", 1.5), ("max_region_chars", True),
    ("max_json_depth", 0), ("max_json_depth", "256"), ("max_json_depth", False),
    ("calls_in_reasoning", "sometimes"), ("calls_in_reasoning", 1),
    ("start_anchor_seconds", -1.0), ("start_anchor_seconds", float("nan")), ("start_anchor_seconds", "1"),
])
def test_bad_option_values_are_refused_naming_the_field(name, bad):
    with pytest.raises(ArgumentError, match=name) as raised:
        ParseOptions(**{name: bad})
    assert raised.value.hint


def test_options_that_are_not_options_are_refused():
    with pytest.raises(ArgumentError, match="ParseOptions"):
        gp.parse_response("hi", "qwen3", prefix="", options={"strict": False})  # type: ignore[arg-type]


@pytest.mark.parametrize("options", [ParseOptions(), ParseOptions(strict=False, max_region_chars=8, max_json_depth=3,
                                                                  trace=True, calls_in_reasoning="fallback",
                                                                  start_anchor_seconds=0.5)])
def test_options_pickle(options):
    travelled = pickle.loads(pickle.dumps(options))
    assert travelled == options and travelled is not options


def test_batch_workers_receive_the_options():
    text, value, code = LIMITS["max_json_depth"]
    rows = list(parse_many([{"completion": text}] * 4, gp.load_grammar("qwen3"), workers=2, chunk_rows=2,
                           options=ParseOptions(strict=False, max_json_depth=value)))
    assert [row["parse_errors"] for row in rows] == [[code]] * 4


def test_batch_stays_lenient_by_default():
    text, _, code = LIMITS["max_json_depth"]
    row = next(iter(parse_many([{"completion": text}], gp.load_grammar("qwen3"), max_json_depth=3)))
    assert row["parse_errors"] == [code] and row["error"] is None


def test_the_parser_exposes_its_options():
    options = ParseOptions(strict=False, max_json_depth=7)
    assert gp.ResponseParser("qwen3", "", options=options).options == options
    assert gp.ResponseParser("qwen3", "", max_json_depth=7, strict=False).options == options


def test_trace_through_options_records_spans():
    parser = gp.ResponseParser("qwen3", "", options=ParseOptions(trace=True))
    parser.finalize("Hi")
    spans = parser.spans  # (the content's text, in the pieces the scanner read it in, covering both characters)
    assert {(s["kind"], s["field"]) for s in spans} == {("text", "content")}
    assert [s["start"] for s in spans] == [0] + [s["end"] for s in spans[:-1]] and spans[-1]["end"] == 2


def _table_names(text: str) -> set[str]:
    return {m for row in re.findall(r"^\|\s*`([^`]+)`", text, re.M) for m in [row]}


def test_docs_limits_lists_every_option_and_every_serving_limit():
    names = _table_names((ROOT / "docs" / "limits.md").read_text(encoding="utf-8"))
    fields = {f"ParseOptions.{f.name}" for f in dataclasses.fields(ParseOptions)}
    fields |= {f"Limits.{f.name}" for f in dataclasses.fields(Limits)}
    assert fields <= names, f"docs/limits.md does not list {sorted(fields - names)}"


@pytest.mark.parametrize("flag, name", [(True, "always"), (False, "never")])
def test_a_bool_calls_in_reasoning_is_the_same_option_as_its_name(flag, name):
    assert ParseOptions(calls_in_reasoning=flag) == ParseOptions(calls_in_reasoning=name)
    parser = gp.ResponseParser("qwen3", "", options=ParseOptions(calls_in_reasoning=name), calls_in_reasoning=flag)
    assert parser.options.calls_in_reasoning == name  # (the same reading said two ways: no conflict)


def test_the_recipes_table_parser_takes_options():
    """The distributed recipes' per-worker state (batch.TableParser) takes the same options as parse_table,
    and stays lenient by default as every batch path does."""
    pa = pytest.importorskip("pyarrow")
    from grammar_parse.batch import TableParser

    table = pa.table({"completion": ['<tool_call>{"name": "f", "arguments": {"a": [[[[1]]]]}}</tool_call>']})
    shallow = TableParser("qwen3", options=ParseOptions(strict=False, max_json_depth=3))(table).to_pylist()[0]
    deep = TableParser("qwen3")(table).to_pylist()[0]
    assert "parse.json_depth" in (shallow["parse_errors"] or []) and not deep["parse_errors"]
