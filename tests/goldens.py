"""The golden samples of the built-in grammars, read once for every test that uses them.

tests/golden/<grammar>/<case>.txt is a model output and <case>.json the message it must give (or
``{"error": {"type", "code"}}``), with an optional <case>.prefix.txt (the prompt) and <case>.tools.json
(the tool schemas).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import grammar_parse
from conformance import jsonable

GOLDEN = Path(__file__).resolve().parent / "golden"


@dataclass(frozen=True)
class Golden:
    grammar: str
    path: Path  # the output's .txt file
    text: str
    prefix: str
    tools: Any
    expected: Any  # the message, or {"error": ...}

    @property
    def name(self) -> str:
        return self.path.stem

    @property
    def expected_path(self) -> Path:
        return self.path.with_suffix(".json")


def _read(grammar: str, path: Path) -> Golden:
    prefix_file = path.with_name(path.stem + ".prefix.txt")
    tools_file = path.with_name(path.stem + ".tools.json")
    return Golden(grammar, path, path.read_text(encoding="utf-8"),
                  prefix_file.read_text(encoding="utf-8") if prefix_file.exists() else "",
                  json.loads(tools_file.read_text(encoding="utf-8")) if tools_file.exists() else None,
                  json.loads(path.with_suffix(".json").read_text(encoding="utf-8")))


@cache
def goldens(grammar: str) -> tuple[Golden, ...]:
    """One grammar's samples, in name order."""
    return samples(GOLDEN, grammar)


def samples(root: Path, grammar: str) -> tuple[Golden, ...]:
    """The samples in ``root``/<grammar>/ (laid out as tests/golden is), in name order."""
    return tuple(_read(grammar, p) for p in sorted((root / grammar).glob("*.txt"))
                 if not p.name.endswith(".prefix.txt"))


def all_goldens() -> list[Golden]:
    """Every grammar's samples (every folder, whether or not a built-in has its name)."""
    return [g for d in sorted(GOLDEN.iterdir()) if d.is_dir() for g in goldens(d.name)]


def parsed(grammar: Any, text: str, prefix: str, tools: Any, chunks: list[str] | None = None, *,
           strict: bool = True) -> Any:
    """The message (JSON-comparable) one-shot or fed in ``chunks``, or the error it raises as
    ``{"error": {"type", "code"}}`` (the form a golden .json gives an expected error)."""
    try:
        parser = grammar_parse.ResponseParser(grammar, prefix, tools=tools, strict=strict)
        if chunks is None:
            return jsonable(parser.finalize(text)[0])
        for chunk in chunks:
            parser.feed(chunk)
        return jsonable(parser.finalize()[0])
    except grammar_parse.GrammarParseError as e:
        return {"error": {"type": type(e).__name__, "code": e.code}}


def _json_type(value: Any) -> str:
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "array",
            dict: "object"}.get(type(value), "null")


def called_tools(sample: Golden, *, open_arguments: bool = False) -> list[dict[str, Any]]:
    """A tool definition per tool the sample's expected message calls: each argument typed as written,
    required where every call of the tool has it; ``open_arguments`` allows others too."""
    seen: dict[str, list[dict[str, Any]]] = {}
    for call in sample.expected.get("tool_calls", []):
        seen.setdefault(call["function"]["name"], []).append(call["function"]["arguments"])
    tools = []
    for name, calls in seen.items():
        parameters: dict[str, Any] = {
            "type": "object", "properties": {k: {"type": _json_type(v)} for args in calls for k, v in args.items()},
            "required": sorted(set.intersection(*(set(a) for a in calls)))}
        if open_arguments:
            parameters["additionalProperties"] = True
        tools.append({"type": "function", "function": {"name": name, "parameters": parameters}})
    return tools


#: A JSON call's arguments member (the comma before it, where one is).
_ARGUMENTS_MEMBER = re.compile(r'(,\s*)?"(?:arguments|parameters|args)"\s*:\s*')


def arguments_members(text: str) -> Iterator[tuple[int | None, int, int, dict[str, Any]]]:
    """Each JSON call's arguments member in ``text`` whose value is an object, in order: where the member starts
    with the comma before it (None where no comma comes before it), where its value starts and ends, the value."""
    for found in _ARGUMENTS_MEMBER.finditer(text):
        try:
            value, end = json.JSONDecoder().raw_decode(text, found.end())
        except ValueError:
            continue
        if isinstance(value, dict):
            yield (found.start() if found.group(1) is not None else None), found.end(), end, value
