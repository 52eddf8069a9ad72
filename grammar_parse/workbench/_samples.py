"""The outputs a grammar is tried on, and whether it reads each as expected.

Samples come from a folder laid out as the golden samples are (``NAME.txt``, optional ``NAME.prefix.txt``,
``NAME.tools.json`` and the expected message ``NAME.json``), from a JSONL log read with the batch's column
options (:class:`grammar_parse.batch.Columns`), or pasted. Each is read within limits (a sample's size, how
many), since a log is untrusted. A sample's status against the grammar: ``pass`` (the one-shot parse is its
expected ``.json``), ``differs``, ``error`` (the parse raised, or reported parse errors), ``no_expected``, and
``unchecked`` (no grammar compiles, or the time for checking ran out)."""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from .._engine.grammar import Grammar
from .._engine.json_input import load_user_json
from .._engine.session import ResponseParser
from ..batch import Columns, RowError, decode_line, jsonl_lines, read_row
from ..errors import GrammarParseError
from ._files import atomic_write, safe_name

STATUSES = ("pass", "differs", "error", "no_expected", "unchecked")


@dataclass(frozen=True)
class SampleLimits:
    """How much of a folder or log the workbench reads: characters per sample (output, prompt, tools), and
    samples in all; a larger one is kept as a sample that says why it was not read."""

    max_chars: int = 1_000_000
    max_samples: int = 5_000


@dataclass
class Sample:
    """One output with its prompt and tools, and the message expected of it (``has_expected`` False: none)."""

    id: int
    name: str
    text: str
    prefix: str = ""
    tools: Any = None
    expected: Any = None
    has_expected: bool = False
    origin: str = "pasted"  # folder, jsonl or pasted
    problem: str | None = None  # why it could not be read (the sample is then an error)
    edited: bool = False

    def summary(self, status: str) -> dict[str, Any]:
        """The sample as the samples pane lists it."""
        return {"id": self.id, "name": self.name, "status": status, "origin": self.origin, "chars": len(self.text),
                "has_expected": self.has_expected, "edited": self.edited, "problem": self.problem}

    def detail(self) -> dict[str, Any]:
        """The sample as its editor shows it."""
        return {"id": self.id, "name": self.name, "text": self.text, "prefix": self.prefix, "tools": self.tools,
                "expected": self.expected if self.has_expected else None, "has_expected": self.has_expected,
                "origin": self.origin, "problem": self.problem, "edited": self.edited}


@dataclass
class Samples:
    """The samples in order, where they came from (the folder goldens are written to, if any), and whether
    the source held more than the limit."""

    items: list[Sample] = field(default_factory=list)
    folder: Path | None = None
    source: str = "pasted"
    truncated: bool = False

    def add(self, name: str, text: str, **fields: Any) -> Sample:
        sample = Sample(len(self.items), name, text, **fields)
        self.items.append(sample)
        return sample

    def get(self, sample_id: int) -> Sample | None:
        return self.items[sample_id] if 0 <= sample_id < len(self.items) else None


class TooLarge(ValueError):
    """A file or value past the workbench's limits."""


def _read(path: Path, limit: int) -> str:
    if path.stat().st_size > limit * 4:  # (UTF-8: at most 4 bytes a character; checked again once read)
        raise TooLarge(f"{path.name} is larger than {limit} characters")
    text = path.read_text(encoding="utf-8")
    if len(text) > limit:
        raise TooLarge(f"{path.name} is longer than {limit} characters")
    return text


def load_folder(folder: Path, limits: SampleLimits) -> Samples:
    """The samples of a golden-layout folder, in name order."""
    samples = Samples(folder=folder.resolve(), source=str(folder))
    outputs = sorted(p for p in folder.glob("*.txt") if not p.name.endswith(".prefix.txt"))
    for path in outputs:
        if len(samples.items) >= limits.max_samples:
            samples.truncated = True
            break
        name = path.stem
        try:
            fields = _companions(folder, name, limits.max_chars)
            samples.add(name, _read(path, limits.max_chars), origin="folder", **fields)
        except (OSError, UnicodeDecodeError, ValueError) as e:
            samples.add(name, "", origin="folder", problem=f"not read: {e}")
    return samples


def _companions(folder: Path, name: str, limit: int) -> dict[str, Any]:
    """A sample's prompt, tools and expected message, where its folder has them."""
    fields: dict[str, Any] = {}
    prefix, tools, expected = (folder / f"{name}{suffix}" for suffix in (".prefix.txt", ".tools.json", ".json"))
    if prefix.is_file():
        fields["prefix"] = _read(prefix, limit)
    if tools.is_file():
        fields["tools"] = load_user_json(_read(tools, limit))
    if expected.is_file():
        fields.update(expected=load_user_json(_read(expected, limit)), has_expected=True)
    return fields


def load_jsonl(path: Path, columns: Columns, limits: SampleLimits) -> Samples:
    """The records of a JSONL log as samples, read as the batch reads them (blank lines are no rows); a row
    that cannot be read is a sample saying why."""
    samples = Samples(source=str(path))
    getters = columns.getters()
    with path.open("rb") as lines:
        for row, (number, line) in enumerate(jsonl_lines(_bounded(lines, limits.max_chars * 4 + 1024))):
            if row >= limits.max_samples:
                samples.truncated = True
                break
            name = f"row {row}"
            if line == _TOO_LONG:
                samples.add(name, "", origin="jsonl", problem=f"line {number} is longer than the limit: not read")
                continue
            record = decode_line(number, line)
            try:
                given = read_row(record, getters, columns)
            except RowError as e:
                samples.add(name, "", origin="jsonl", problem=e.detail)
                continue
            if given.id is not None:
                name = f"row {row} (id {given.id})"
            if len(given.text) > limits.max_chars or len(given.prefix) > limits.max_chars:
                samples.add(name, "", origin="jsonl", problem=f"longer than {limits.max_chars} characters: not read")
                continue
            samples.add(name, given.text, prefix=given.prefix, tools=given.tools, origin="jsonl")
    return samples


def _bounded(lines: IO[bytes], limit: int) -> Iterator[bytes]:
    """The file's lines, each read at most ``limit`` bytes at a time: a longer line is given as
    :data:`_TOO_LONG` (still a row, never decoded), and the rest of it skipped unread into memory."""
    while line := lines.readline(limit + 1):
        if len(line) > limit and not line.endswith(b"\n"):
            while (rest := lines.readline(limit + 1)) and not rest.endswith(b"\n"):
                pass
            line = _TOO_LONG
        yield line


#: A line past the limit, as :func:`_bounded` gives it (not blank, so it counts as a row).
_TOO_LONG = b"\x00too-long\n"


def jsonable(value: Any) -> Any:
    """``value`` as JSON data (what a golden file holds, and the page is sent)."""
    return json.loads(json.dumps(value, ensure_ascii=False, default=str))


def parse_outcome(grammar: Grammar, sample: Sample) -> tuple[Any, GrammarParseError | None]:
    """The one-shot, strict parse of the sample as a golden ``.json`` holds it (the message, or
    ``{"error": {"type", "code"}}``), and the error it raised, if any."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (a prompt without the grammar's anchor: the result says so)
            message = ResponseParser(grammar, sample.prefix, tools=sample.tools).finalize(sample.text)[0]
        return jsonable(message), None
    except GrammarParseError as e:
        return {"error": {"type": type(e).__name__, "code": e.code}}, e


def outcome(grammar: Grammar, sample: Sample) -> Any:
    """The one-shot, strict parse of the sample as a golden ``.json`` holds it (see parse_outcome)."""
    return parse_outcome(grammar, sample)[0]


def first_difference(a: Any, b: Any, labels: tuple[str, str] = ("a", "b"), path: str = "$") -> dict[str, Any] | None:
    """Where two JSON values first differ (a JSONPath-like path, and both values there under ``labels``),
    or None. Types count: True is not 1, and 1 is not 1.0 (as the golden tests compare)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in [*a, *(k for k in b if k not in a)]:
            if key not in a or key not in b:
                return {"path": f"{path}.{key}", labels[0]: a.get(key), labels[1]: b.get(key)}
            found = first_difference(a[key], b[key], labels, f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b)):
            found = first_difference(x, y, labels, f"{path}[{i}]")
            if found:
                return found
        if len(a) != len(b):
            i = min(len(a), len(b))
            return {"path": f"{path}[{i}]", labels[0]: a[i] if i < len(a) else None,
                    labels[1]: b[i] if i < len(b) else None}
        return None
    return None if a == b and type(a) is type(b) else {"path": path, labels[0]: a, labels[1]: b}


def status_of(sample: Sample, got: Any) -> str:
    """The sample's status, given its one-shot outcome ``got`` (module doc)."""
    if sample.problem is not None:
        return "error"
    if sample.has_expected and first_difference(sample.expected, got) is None:
        return "pass"
    if "error" in got or got.get("parse_errors"):
        return "error"
    return "differs" if sample.has_expected else "no_expected"


def status(grammar: Grammar | None, sample: Sample) -> str:
    """The sample's status against ``grammar`` (module doc)."""
    if grammar is None:
        return "unchecked"
    return status_of(sample, outcome(grammar, sample) if sample.problem is None else {})


def statuses(grammar: Grammar | None, samples: Iterable[Sample], seconds: float) -> dict[int, str]:
    """Every sample's status, checked until ``seconds`` have passed (the rest ``unchecked``)."""
    deadline = time.monotonic() + seconds
    found: dict[int, str] = {}
    for sample in samples:
        found[sample.id] = status(grammar, sample) if time.monotonic() < deadline else "unchecked"
    return found


def golden_text(value: Any) -> str:
    """A golden file's text for a JSON value (as ``pytest --update-golden`` writes them)."""
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


def write_golden(sample: Sample, grammar: Grammar, folder: Path, samples_folder: Path | None = None) -> list[Path]:
    """Write the sample's current parse as its expected ``NAME.json`` in ``folder``, with its output, prompt
    and tools unless ``folder`` is the one it was read from (``samples_folder``) and it is unedited: the
    files of one sample always agree (a prompt or tools file it no longer has is removed). Returns the
    files written."""
    name = safe_name(sample.name)
    written = []
    if sample.origin != "folder" or sample.edited or folder != samples_folder:
        written.append((folder / f"{name}.txt", sample.text))
        companions = ((folder / f"{name}.prefix.txt", sample.prefix or None),
                      (folder / f"{name}.tools.json", None if sample.tools is None else golden_text(sample.tools)))
        for path, text in companions:
            if text is not None:
                written.append((path, text))
            else:
                path.unlink(missing_ok=True)
    got = outcome(grammar, sample)
    written.append((folder / f"{name}.json", golden_text(got)))
    for path, text in written:
        atomic_write(path, text)
    sample.expected, sample.has_expected = got, True
    return [path for path, _ in written]


__all__ = ["STATUSES", "Sample", "SampleLimits", "Samples", "TooLarge", "first_difference", "golden_text", "jsonable",
           "load_folder", "load_jsonl", "outcome", "parse_outcome", "status", "status_of", "statuses", "write_golden"]
