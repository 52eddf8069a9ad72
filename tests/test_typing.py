"""The types are a checked contract: mypy --strict passes on the package as it is installed, a user's code
type-checks against it with the types it should see, and every event the parser emits has exactly the
keys (and value types) of its TypedDict in grammar_parse._engine.events.Event."""

from __future__ import annotations

import copy
import importlib.util
import json
import re
import runpy
import shutil
import subprocess
import sys
import types
import typing
from pathlib import Path
from typing import Any

import pytest
from mypy import api as mypy_api

import grammar_parse
from conformance import model_template_samples
from grammar_parse._engine.grammar import build_grammar

if sys.version_info >= (3, 11):
    import tomllib
else:  # mypy depends on tomli before 3.11
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).resolve().parent / "golden"


# ---------------------------------------------------------------------------- mypy on the installed layout
@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[str, str]]]:
    """The package tree as setuptools installs it (its package-dir: compat/ and grammars/ become
    grammar_parse/compat and grammar_parse/grammars), copied into a tmp dir, with the renames to map
    mypy's paths back to the project's."""
    tmp = tmp_path_factory.mktemp("installed")
    package_dir = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["package-dir"]
    renames = []
    for package, source in sorted(package_dir.items()):  # parents before their subpackages
        installed = "/".join(package.split("."))
        shutil.copytree(ROOT / source, tmp / installed, ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
        renames.append((installed + "/", source.rstrip("/") + "/"))
    return tmp, sorted(renames, key=lambda r: -len(r[0]))  # subpackages first when mapping back


def run_mypy(layout: tuple[Path, list[tuple[str, str]]], targets: list[str],
             monkeypatch: pytest.MonkeyPatch, *options: str) -> tuple[str, int]:
    """mypy with the project's [tool.mypy] config, run from the layout (so ``grammar_parse`` is the
    copy); its report with paths mapped back to the project's."""
    tmp, renames = layout
    monkeypatch.chdir(tmp)
    stdout, stderr, status = mypy_api.run(["--config-file", str(ROOT / "pyproject.toml"), "--strict",
                                           "--cache-dir", str(tmp / ".mypy_cache"), *options, *targets])
    report = stdout + stderr
    for installed, source in renames:
        report = re.sub(rf"^{re.escape(installed)}", source, report, flags=re.MULTILINE)
    return report, status


@pytest.mark.parametrize("python", ["configured", "running"])
def test_package_is_mypy_strict_clean(layout, monkeypatch, python):
    """With the configured python_version (the oldest supported, 3.10) and the running interpreter's."""
    options = [] if python == "configured" else ["--python-version", f"{sys.version_info[0]}.{sys.version_info[1]}"]
    report, status = run_mypy(layout, ["-p", "grammar_parse"], monkeypatch, *options)
    assert status == 0, f"mypy --strict ({python} Python version) on the installed package:\n{report}"
    assert "no issues found" in report


MESSAGE = "grammar_parse._engine.events.Message"

#: (user code, what mypy must say about it: a revealed type, an error code, or None for nothing). The
#: prelude defines `parser`, `msg`, `batch`, a streamed `event`, a tokenizer `tok` and an `ids_array`.
USER_CODE = [
    ('reveal_type(grammar_parse.parse_response("<think>hm</think>Hi", "qwen3", prefix=""))', MESSAGE),
    ('reveal_type(grammar_parse.parse_response(["Hi", "Yo"], "qwen3", prefix=""))', f"list[{MESSAGE}]"),
    ('reveal_type(grammar_parse.parse_response(["Hi", "Yo"], "qwen3", prefix=["", ""]))', f"list[{MESSAGE}]"),
    ('content: str | None = msg["content"]', None),
    ('first: str = batch[0]["content"]', None),
    ("reveal_type(parser.finalize()[0])", MESSAGE),
    ('grammar_parse.parse_response("Hi", "qwen3", prefix=["a"])', "error: [call-overload]"),
    ('text = event["text"]', "error: [typeddict-item]"),  # not narrowed: only chunks have text
    ('if event["type"] == "region_chunk":\n    reveal_type(event["text"])', "str"),
    ('if event["type"] == "region_chunk":\n    reveal_type(event["dirty"])', "bool"),
    ('if event["type"] == "region_open" and "captures" in event:\n    reveal_type(event["captures"])',
     "dict[str, str]"),
    ('if event["type"] == "region_close":\n    reveal_type(event["value"])', "Any"),
    ('if event["type"] == "parse_error":\n    reveal_type(event["span"])', "list[int] | None"),
    ('if event["type"] == "correction":\n    reveal_type(event["fields"])', "list[str]"),
    ('if event["type"] == "correction":\n    reveal_type(event["message"])', MESSAGE),
    ('if event["type"] == "region_begin":\n    pass', "error: [comparison-overlap]"),
    ("reveal_type(tok_parse(tok, [1, 2, 3]))", MESSAGE),
    ('reveal_type(tok_parse(tok, "Hi"))', MESSAGE),
    ('reveal_type(tok_parse(tok, ["Hi", "Yo"]))', f"list[{MESSAGE}]"),
    ("reveal_type(tok_parse(tok, [[1, 2], [3]]))", f"list[{MESSAGE}]"),
    ("reveal_type(tok_parse(tok, ids_array))", f"{MESSAGE} | list[{MESSAGE}]"),
]

PRELUDE = '''\
from typing import Any
import grammar_parse
from grammar_parse.compat.tokenizer import parse_response as tok_parse

parser = grammar_parse.ResponseParser("qwen3", prefix="")
msg = grammar_parse.parse_response("Hi", "qwen3", prefix="")
batch = grammar_parse.parse_response(["Hi"], "qwen3", prefix="")
event = parser.feed("<think>hm")[0]
tok: Any = None


class Array:  # stands for a numpy array or torch tensor: one sequence or a batch, by its shape
    def tolist(self) -> list[int]:
        return [1, 2]


ids_array = Array()
'''


def spelled(revealed: str) -> str:
    """A revealed type as mypy 2 spells it: older releases write ``builtins.dict[builtins.str, Any]``
    and ``Union[X, None]`` for ``dict[str, Any]`` and ``X | None``."""
    revealed = revealed.replace("builtins.", "")
    while union := re.search(r"\bUnion\[", revealed):
        depth, i, start, parts = 1, union.end(), union.end(), []
        while depth:
            depth += {"[": 1, "]": -1}.get(revealed[i], 0)
            if depth == 0 or (depth == 1 and revealed[i] == ","):
                parts.append(revealed[start:i].strip())
                start = i + 1
            i += 1
        revealed = revealed[:union.start()] + " | ".join(parts) + revealed[i:]
    return revealed


@pytest.mark.parametrize("revealed, spelling", [
    ("builtins.dict[builtins.str, Any]", "dict[str, Any]"),
    ("Union[builtins.list[builtins.int], None]", "list[int] | None"),
    ("Union[builtins.dict[builtins.str, Any], builtins.list[builtins.dict[builtins.str, Any]]]",
     "dict[str, Any] | list[dict[str, Any]]"),
    ("builtins.list[Union[builtins.str, builtins.int]]", "list[str | int]"),
    ("list[str | int]", "list[str | int]"),
])
def test_revealed_types_are_read_in_one_spelling(revealed, spelling):
    assert spelled(revealed) == spelling


def test_user_code_gets_the_types_it_should(layout, monkeypatch):
    lines = PRELUDE.splitlines()
    checked = []  # (the case's line numbers, what mypy must say about them)
    for code, expected in USER_CODE:
        lines.append("")
        checked.append((range(len(lines) + 1, len(lines) + 1 + len(code.splitlines())), code, expected))
        lines += code.splitlines()
    user = layout[0] / "user_code.py"
    user.write_text("\n".join(lines) + "\n", encoding="utf-8")
    report, status = run_mypy(layout, [user.name], monkeypatch)
    said: dict[int, list[str]] = {}
    for line, kind, text in re.findall(r"^user_code\.py:(\d+): (note|error): (.*)$", report, flags=re.MULTILINE):
        revealed = re.fullmatch(r'Revealed type is "(.*)"', text)
        if kind == "note" and revealed is None:
            continue  # context for an error (the overload variants)
        said.setdefault(int(line), []).append(spelled(revealed.group(1)) if revealed else f"{kind}: {text}")
    for numbers, code, expected in checked:
        got = [g for n in numbers for g in said.pop(n, [])]
        if expected is None:
            assert got == [], f"{code}: mypy says {got}"
        elif expected.startswith("error: "):  # (one error per union member that lacks a key)
            error_code = expected[len("error: "):]
            assert got and all(g.startswith("error: ") and g.endswith(error_code) for g in got), \
                f"{code}: expected {expected}, mypy says {got}"
        else:
            assert got == [expected], f"{code}: expected {expected}, mypy says {got}"
    assert not said, f"unexpected mypy output:\n{report}"
    assert status == 1  # the expected errors, and nothing else (checked above)


# ---------------------------------------------------------------------------- emitted events vs their TypedDicts
MEMBERS = {typing.get_type_hints(m)["type"].__args__[0]: m for m in typing.get_args(grammar_parse.Event)}


def conforms(value: Any, hint: Any) -> bool:
    """Whether a JSON-like value fits a type hint (the forms the event TypedDicts use)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if origin is typing.Literal:
        return value in args
    if origin is typing.Union or origin is types.UnionType:
        return any(conforms(value, a) for a in args)
    if origin is list:
        return isinstance(value, list) and all(conforms(v, args[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(conforms(k, args[0]) and conforms(v, args[1]) for k, v in value.items())
    if hint is type(None):
        return value is None
    return isinstance(value, hint) and (hint is bool or not isinstance(value, bool))


def contract_problems(event: dict[str, Any]) -> list[str]:
    member = MEMBERS.get(event.get("type"))
    if member is None:
        return [f"type {event.get('type')!r} is none of Event's members {sorted(MEMBERS)}"]
    keys = set(event)
    problems = []
    if missing := member.__required_keys__ - keys:
        problems.append(f"{member.__name__} lacks {sorted(missing)}")
    if extra := keys - member.__required_keys__ - member.__optional_keys__:
        problems.append(f"{member.__name__} has no keys {sorted(extra)}")
    hints = typing.get_type_hints(member)
    problems += [f"{member.__name__}[{k!r}] = {event[k]!r} is not {hints[k]}"
                 for k in keys & set(hints) if not conforms(event[k], hints[k])]
    return problems


def stream(template: Any, text: str, *, prefix: str | None = "", tools: Any = None, size: int = 7,
           strict: bool = True) -> list[Any]:
    """Every event of one output: streamed in chunks, with captures on region_open and the call events."""
    parser = grammar_parse.ResponseParser(template, prefix, tools=tools, strict=strict, extended_events=True,
                                          call_events=True)
    events = list(parser.initial_events)
    for i in range(0, len(text), size):
        events += parser.feed(text[i:i + size])
    return events + parser.finalize()[1]


def golden_events() -> list[Any]:
    """Lenient runs over every golden case of every built-in grammar (broken ones give parse_error)."""
    events = []
    for path in sorted(GOLDEN.glob("*/*.txt")):
        if path.name.endswith(".prefix.txt"):
            continue
        prefix_file = path.with_name(path.stem + ".prefix.txt")
        tools_file = path.with_name(path.stem + ".tools.json")
        events += stream(path.parent.name, path.read_text(encoding="utf-8"),
                         prefix=prefix_file.read_text(encoding="utf-8") if prefix_file.exists() else "",
                         tools=json.loads(tools_file.read_text(encoding="utf-8")) if tools_file.exists() else None,
                         strict=False)
    return events


SOURCES = {
    "qwen3": lambda: stream("qwen3", '<think>hm</think>Hi <tool_call>\n{"name": "f", "arguments": {"a": 1}}\n'
                                     "</tool_call>"),
    "qwen3 lenient, broken": lambda: stream("qwen3", "<think>hm</think>Hi <tool_call>\n{not json\n</tool_call>",
                                            strict=False),
    "legacy schemas": lambda: [e for s in model_template_samples("legacy_xregex")
                               for e in stream(copy.deepcopy(s["template"]), s["text"], prefix=None, size=4)],
    "golden cases, lenient": golden_events,
}


@pytest.fixture(scope="module")
def emitted() -> dict[str, list[Any]]:
    return {name: source() for name, source in SOURCES.items()}


def test_every_emitted_event_has_exactly_its_typeddicts_keys(emitted):
    for name, events in emitted.items():
        assert events, name
        problems = [(event, p) for event in events for p in contract_problems(event)]
        assert not problems, f"{name}: {problems[:5]}"


def test_the_sources_emit_every_member_and_optional_key(emitted):
    """So the contract above is checked for each member of Event, not only for the common ones."""
    events = [e for es in emitted.values() for e in es]
    assert {e["type"] for e in events} == set(MEMBERS)
    assert {e["type"] for e in emitted["qwen3 lenient, broken"]} >= {"parse_error"}
    assert {e["type"] for e in emitted["legacy schemas"]} >= {"correction"}
    optional = {(e["type"], k) for e in events for k in e if k in MEMBERS[e["type"]].__optional_keys__}
    assert optional == {(m, k) for m, td in MEMBERS.items() for k in td.__optional_keys__}


@pytest.mark.parametrize("event, problem", [
    ({"type": "region_chunk", "field": "content", "text": "hi"}, "RegionChunk lacks ['dirty']"),
    ({"type": "region_open", "field": "content", "value": 1}, "RegionOpen has no keys ['value']"),
    ({"type": "parse_error", "code": "x", "field": None, "span": [1, "2"], "message": "m"},
     "ParseErrorEvent['span'] = [1, '2'] is not"),
    ({"type": "region_chunk", "field": "content", "text": "hi", "dirty": 0}, "RegionChunk['dirty'] = 0 is not"),
    ({"type": "region_begin", "field": "content"}, "type 'region_begin' is none of Event's members"),
])
def test_the_contract_check_refuses_what_does_not_fit(event, problem):
    problems = contract_problems(event)
    assert len(problems) == 1 and problems[0].startswith(problem), problems


# ---------------------------------------------------------------------------- bugs the type checker found
def test_fast_path_in_a_state_without_text():
    """``_fast_path`` read ``info.text.role`` where a state has no text terminal (an AttributeError,
    silenced for mypy by a type: ignore): after ``<a>`` only the delimiter ``<b>`` may come."""
    grammar = build_grammar('start: A B\nA: "<a>"\nB: "<b>"\n')
    parser = grammar_parse.ResponseParser(grammar, prefix="")
    assert parser.feed("<a>") == []
    with pytest.raises(grammar_parse.ParseError) as caught:
        parser.feed("x")
    assert caught.value.code == "parse.unexpected"
    parser = grammar_parse.ResponseParser(grammar, prefix="")
    assert parser.feed("<a>") == [] and parser.feed("<b>") == []
    assert parser.finalize() == ({}, [])


# ---------------------------------------------------------------------------- user code under pyright and mypy
SNIPPETS = sorted((Path(__file__).resolve().parent / "typing_snippets").glob("*.py"))


@pytest.mark.parametrize("snippet", SNIPPETS, ids=lambda p: p.name)
def test_typing_snippets_run(snippet):
    """The snippets are real user code: each runs, and its asserts about what it read hold."""
    runpy.run_path(str(snippet), run_name="__main__")


@pytest.fixture(scope="module")
def snippets_in_layout(layout: tuple[Path, list[tuple[str, str]]]) -> Path:
    """The snippets beside the installed package tree, as a user's project sees an installed grammar_parse."""
    folder = layout[0] / "typing_snippets"
    folder.mkdir(exist_ok=True)
    for snippet in SNIPPETS:
        shutil.copy(snippet, folder / snippet.name)
    return folder


def pyright_command() -> list[str]:
    """pyright's bundled JavaScript run by the machine's node (never the wrapper, which may download node)."""
    spec = importlib.util.find_spec("pyright")
    node = shutil.which("node")
    if spec is None or spec.origin is None or node is None:
        pytest.skip("pyright (pip package) or node is not installed")
    script = Path(spec.origin).parent / "dist" / "index.js"
    if not script.is_file():
        pytest.skip("the pyright package has no bundled dist/index.js")
    return [node, str(script)]


def test_typing_snippets_are_pyright_strict_clean(snippets_in_layout):
    """pyright in strict mode infers a known type for every read of a message (a dict[str, Any] message
    gave ``Any | list[Unknown]`` for ``msg.get("tool_calls") or []``, an error in strict mode)."""
    config = snippets_in_layout / "pyrightconfig.json"
    config.write_text(json.dumps({"typeCheckingMode": "strict", "pythonVersion": "3.10",
                                  "extraPaths": [str(snippets_in_layout.parent)],
                                  "include": [s.name for s in SNIPPETS]}), encoding="utf-8")
    run = subprocess.run([*pyright_command(), "--outputjson", "--pythonpath", sys.executable, "-p", str(config)],
                         capture_output=True, text=True, timeout=120, cwd=snippets_in_layout)
    report = json.loads(run.stdout)
    errors = [f"{Path(d['file']).name}:{d['range']['start']['line'] + 1}: {d['message']} ({d.get('rule')})"
              for d in report["generalDiagnostics"] if d["severity"] == "error"]
    assert report["summary"]["filesAnalyzed"] == len(SNIPPETS), report["summary"]
    assert errors == [], "pyright strict on the snippets:\n" + "\n".join(errors)


def test_typing_snippets_are_mypy_strict_clean(layout, snippets_in_layout, monkeypatch):
    """(The package's own errors are test_package_is_mypy_strict_clean's: only the snippets' count here.)"""
    report, _ = run_mypy(layout, [f"typing_snippets/{s.name}" for s in SNIPPETS], monkeypatch)
    errors = re.findall(r"^typing_snippets/.*: error: .*$", report, flags=re.MULTILINE)
    assert errors == [], "mypy --strict on the snippets:\n" + "\n".join(errors)
    assert re.search(r"^(Success: no issues found|Found \d+ errors?) in", report, flags=re.MULTILINE), report  # (it ran)


# ---------------------------------------------------------------------------- messages vs their declared key types
#: The well-known keys of a message and the type each has (grammar_parse._engine.events: ToolCall, ParseProblem).
MESSAGE_KEYS = {"role": str, "content": str, "reasoning_content": str, "thinking": str,
                "tool_calls": list[grammar_parse._engine.events.ToolCall], "parse_errors": list[grammar_parse._engine.events.ParseProblem]}


def typed_problems(value: Any, hint: Any, where: str) -> list[str]:
    """What in a JSON-like value does not fit a hint, TypedDicts included (their keys exactly)."""
    if typing.is_typeddict(hint):
        if not isinstance(value, dict):
            return [f"{where} = {value!r} is not a {hint.__name__}"]
        keys = set(value)
        problems = [f"{where} lacks {sorted(missing)}" for missing in [hint.__required_keys__ - keys] if missing]
        problems += [f"{where} has no keys {sorted(extra)}"
                     for extra in [keys - hint.__required_keys__ - hint.__optional_keys__] if extra]
        hints = typing.get_type_hints(hint)
        return problems + [p for k in keys & set(hints) for p in typed_problems(value[k], hints[k], f"{where}[{k!r}]")]
    if typing.get_origin(hint) is list:
        if not isinstance(value, list):
            return [f"{where} = {value!r} is not a list"]
        return [p for i, v in enumerate(value) for p in typed_problems(v, typing.get_args(hint)[0], f"{where}[{i}]")]
    return [] if conforms(value, hint) else [f"{where} = {value!r} is not {hint}"]


def golden_messages() -> list[tuple[str, dict[str, Any]]]:
    """Every golden case's expected message (what the parser returns, as the golden test checks)."""
    cases = []
    for path in sorted(GOLDEN.glob("*/*.json")):
        if path.name.endswith(".tools.json"):
            continue
        expected = json.loads(path.read_text(encoding="utf-8"))
        if "error" not in expected:  # (an expected exception, not a message)
            cases.append((f"{path.parent.name}/{path.stem}", expected))
    return cases


def test_golden_messages_have_their_declared_key_types():
    """The types a checker gives the well-known keys hold for every message of every built-in grammar,
    lenient ones (broken calls' ``errors``, ``parse_errors``) included."""
    messages = golden_messages()
    problems = [p for name, message in messages for key in message.keys() & MESSAGE_KEYS
                for p in typed_problems(message[key], MESSAGE_KEYS[key], f"{name}[{key!r}]")]
    assert not problems, problems[:10]
    seen = {key for _, message in messages for key in message}
    assert seen >= set(MESSAGE_KEYS), f"no golden message has {sorted(set(MESSAGE_KEYS) - seen)}"
    calls = [call for _, message in messages for call in message.get("tool_calls", [])]
    assert {"id", "errors"} <= {key for call in calls for key in call}  # (the optional keys are checked too)


@pytest.mark.parametrize("message, problem", [
    ({"content": 1}, "m['content'] = 1 is not"),
    ({"tool_calls": [{"type": "function", "function": {"name": "f"}}]}, "m['tool_calls'][0]['function'] lacks"),
    ({"tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {}}, "index": 0}]},
     "m['tool_calls'][0] has no keys ['index']"),
    ({"parse_errors": [{"code": "c", "field": None, "span": [1, "2"], "message": "m"}]},
     "m['parse_errors'][0]['span'] = [1, '2'] is not"),
    ({"tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{"}, "errors": [{"path": "$"}]}]},
     "m['tool_calls'][0]['errors'][0] lacks ['code', 'message']"),
])
def test_the_message_key_check_refuses_what_does_not_fit(message, problem):
    problems = [p for key in message for p in typed_problems(message[key], MESSAGE_KEYS[key], f"m[{key!r}]")]
    assert len(problems) == 1 and problems[0].startswith(problem), problems
