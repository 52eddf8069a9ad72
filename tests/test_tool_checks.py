"""Checking calls against the request's tool schemas: the schema is the request's and the arguments the
model's, so the check neither reaches out (a ``$ref`` to another document is never fetched) nor runs away (a
schema's regexes run bounded), and it says what it could not check. Where nothing of that applies, it says
what jsonschema says."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grammar_parse._engine.tools import CallValidator
from grammar_parse._engine.wire import CallChecker
from grammar_parse.adapters.chat_completions import chat_message
from strategies import examples


def _tool(parameters: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": "f", "parameters": parameters}}]


def _problems(parameters: dict[str, Any], arguments: Any) -> list[dict[str, str]]:
    return CallValidator(_tool(parameters)).problems({"function": {"name": "f", "arguments": arguments}})


@pytest.fixture
def loopback() -> Iterator[tuple[str, list[str]]]:
    """An HTTP server on 127.0.0.1 that records the paths asked of it (and serves a schema at each)."""
    asked: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the server's name for it
            asked.append(self.path)
            body = b'{"type": "integer"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass
    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", asked
    finally:
        server.shutdown()
        server.server_close()


def test_a_ref_to_another_document_is_never_fetched(loopback: tuple[str, list[str]]) -> None:
    """jsonschema fetches a ``$ref`` it does not hold (any URL the schema names): a request's tool schema would
    make the parser's host send requests wherever it says. The check holds the schema and the metaschemas only,
    and says it could not check the call."""
    url, asked = loopback
    parameters = {"type": "object", "properties": {"a": {"$ref": f"{url}/secret.json"}}}
    problems = _problems(parameters, {"a": "x"})
    assert [p["code"] for p in problems] == ["call.schema"] and "never fetched" in problems[0]["message"]
    message, _ = chat_message('<tool_call>\n{"name": "f", "arguments": {"a": "x"}}\n</tool_call>', "qwen3",
                              prefix="", tools=_tool(parameters))
    assert message["tool_calls"][0]["errors"] == problems
    said = CallChecker(_tool(parameters)).client_problems("f", {"a": "x"})
    assert [p["code"] for p in said] == ["call.schema"] and "never fetched" in said[0]["message"]
    assert asked == []


def test_refs_within_the_schema_and_to_the_metaschemas_still_resolve() -> None:
    parameters = {"type": "object", "$defs": {"n": {"type": "integer"}},
                  "properties": {"a": {"$ref": "#/$defs/n"},
                                 "s": {"$ref": "https://json-schema.org/draft/2020-12/schema"}}}
    assert [p["code"] for p in _problems(parameters, {"a": "x"})] == ["call.type"]
    assert _problems(parameters, {"a": 1, "s": {"type": "string"}}) == []
    assert [p["code"] for p in _problems(parameters, {"s": {"type": 5}})] == ["call.schema"]


#: A near miss for each of these takes a backtracking ``re.search`` longer than any test run: 2 ** 40 steps
#: for the first two, the third's text is long for a quadratic search.
_RUNAWAY = [
    ({"type": "object", "properties": {"b": {"type": "string", "pattern": "^(a+)+$"}}},
     {"b": "a" * 40 + "b"}, "$.function.arguments.b"),
    ({"type": "object", "patternProperties": {"^(x|x)+$": {"type": "integer"}}, "additionalProperties": False},
     {"x" * 40 + "y": 1}, "$.function.arguments"),
    ({"type": "object", "propertyNames": {"pattern": "^(\\w+\\s?)*$"}}, {"word " * 30 + "!": 1},
     "$.function.arguments"),
]


@pytest.mark.parametrize(("parameters", "arguments", "path"), _RUNAWAY)
def test_a_schema_regex_runs_bounded_on_a_near_miss(parameters: dict[str, Any], arguments: Any, path: str) -> None:
    """The schema's regexes run in the regex module under a time limit, then in the linear matcher: the near
    miss is found not to match (the answer re.search would give, eventually)."""
    problems = _problems(parameters, arguments)
    assert [p["path"] for p in problems] == [path] and "match" in problems[0]["message"]


def test_what_cannot_be_checked_in_bounded_time_is_said() -> None:
    """jsonschema reads which names ``patternProperties`` took with its own regex search when it checks
    ``unevaluatedProperties``: that pair is not checked, and the call says so; a regex longer than the checker
    takes fails the check, saying it cannot be run."""
    both = {"type": "object", "patternProperties": {"^x": {}}, "unevaluatedProperties": False}
    problems = _problems(both, {"y": 1})
    assert [p["code"] for p in problems] == ["call.schema"] and "bounded time" in problems[0]["message"]
    long = {"type": "object", "properties": {"s": {"type": "string", "pattern": "a" * 5000}}}
    problems = _problems(long, {"s": "x"})
    assert [p["code"] for p in problems] == ["call.schema"] and "cannot be run" in problems[0]["message"]


_PATTERNS = ["^[a-z]+$", "\\d{3}", "^x-", "a|b", "(?i)abc", "^$", "[0-9]+\\.[0-9]*", "^(?:ab)*c?$", "é"]
_TEXTS = st.text(alphabet="abcxyzé0123.-AB ", max_size=8)


@settings(max_examples=examples(4))
@given(pattern=st.sampled_from(_PATTERNS), key_pattern=st.sampled_from(_PATTERNS),
       arguments=st.dictionaries(_TEXTS, _TEXTS, max_size=3),
       additional=st.sampled_from([False, True, {"type": "integer"}]))
def test_where_the_regexes_are_plain_the_check_says_what_jsonschema_says(pattern: str, key_pattern: str,
                                                                          arguments: dict[str, str],
                                                                          additional: Any) -> None:
    """The bounded keywords (pattern, patternProperties, additionalProperties beside it) find what jsonschema's
    own find, with the same messages, in any order."""
    parameters = {"type": "object", "properties": {"p": {"type": "string", "pattern": pattern}},
                  "patternProperties": {key_pattern: {"type": "string", "pattern": pattern}},
                  "additionalProperties": additional}
    plain = jsonschema.Draft202012Validator(parameters)
    expected = sorted(e.message for e in plain.iter_errors(arguments))
    got = sorted(p["message"] for p in _problems(parameters, arguments))
    assert got == expected
