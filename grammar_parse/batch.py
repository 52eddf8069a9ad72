"""Parsing generation logs at scale: many outputs, one grammar, lenient by default, every row accounted for.

:func:`parse_many` parses an iterable of outputs (plain strings, or records with the output under a key,
plus optional prompt, tools and id keys) into one result per row, in order: the message's reasoning,
content and tool calls as plain columns, the parse errors by code, and the row's id. The grammar and the
tools' schemas are built once (once per worker process with ``workers > 1``), never per row. A row that
is not text, or whose parse raises in strict mode, is a result with an ``error``, not an exception: one
bad row never fails the batch.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, TextIO

import jmespath

from .errors import GrammarParseError
from .grammar import Grammar, build_grammar
from .session import parse_response, resolve_grammar
from .wire_stream import REASONING_FIELDS

#: Rows handed to a worker at a time: large enough that the inter-process cost is small against the
#: parse (about 50 µs a short row), small enough that progress stays current.
CHUNK_ROWS = 512
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class _BadLine:
    """A JSONL line that is not JSON: it still becomes its row (with the error), so rows stay aligned."""

    line: int
    reason: str


@dataclass(frozen=True)
class Columns:
    """Where a record keeps its output, prompt, tools and id (None: the record has none): a key, or a
    JMESPath expression for nested records (``response.choices[0].text``)."""

    text: str = "completion"
    prompt: str | None = None
    tools: str | None = None
    id: str | None = None
    #: the row's grammar name (a log of several models): built once per name and worker
    grammar: str | None = None

    def getters(self) -> tuple[Callable[[Mapping[str, Any]], Any], ...]:
        """One reader per column, compiled once: a plain key is a dict lookup, anything else JMESPath."""
        def reader(expression: str | None) -> Callable[[Mapping[str, Any]], Any]:
            if expression is None:
                return lambda record: None
            if _PLAIN_KEY.fullmatch(expression):
                return lambda record: record.get(expression)
            compiled = jmespath.compile(expression)
            return lambda record: compiled.search(record)
        return tuple(reader(e) for e in (self.text, self.prompt, self.tools, self.id, self.grammar))


def result_row(message: Mapping[str, Any] | None, *, row_id: Any = None, error: str | None = None) -> dict[str, Any]:
    """One output row: ``id``, ``reasoning``, ``content``, ``tool_calls`` (``{"name", "arguments"}``, plus
    ``errors`` for a broken call), ``parse_errors`` (their codes, in order) and ``error`` (why the row
    could not be parsed at all: not text, or a strict-mode failure), each None when absent."""
    if message is None:
        return {"id": row_id, "reasoning": None, "content": None, "tool_calls": None, "parse_errors": None,
                "error": error}
    reasoning = next((message[k] for k in REASONING_FIELDS if isinstance(message.get(k), str)), None)
    calls = []
    for call in message.get("tool_calls") or []:
        function = call.get("function", {}) if isinstance(call, Mapping) else {}
        entry = {"name": function.get("name"), "arguments": function.get("arguments")}
        if isinstance(call, Mapping) and call.get("errors"):
            entry["errors"] = [e.get("code") if isinstance(e, Mapping) else str(e) for e in call["errors"]]
        calls.append(entry)
    problems = [p.get("code") for p in message.get("parse_errors") or [] if isinstance(p, Mapping)]
    content = message.get("content")
    return {"id": row_id, "reasoning": reasoning, "content": content if isinstance(content, str) else None,
            "tool_calls": calls or None, "parse_errors": problems or None, "error": error}


@dataclass(frozen=True)
class _LarkText:
    """A grammar sent to a worker process as its Lark text (a Grammar itself does not pickle)."""

    text: str
    name: str | None


class _Parser:
    """The per-process state: the grammar, built once, and the settings every row is parsed with."""

    def __init__(self, grammar: Any, prefix: str, tools: Any, strict: bool, columns: Columns) -> None:
        if isinstance(grammar, _LarkText):
            grammar = build_grammar(grammar.text, source_name=grammar.name or "<grammar>", name=grammar.name)
        self.grammar: Grammar | None = resolve_grammar(grammar) if grammar is not None else None
        self.prefix, self.tools, self.strict, self.columns = prefix, tools, strict, columns
        self.getters = columns.getters()
        self.named: dict[str, Grammar] = {}

    def row(self, record: Any) -> dict[str, Any]:
        columns = self.columns
        grammar = self.grammar
        if isinstance(record, str):
            text, prefix, tools, row_id = record, self.prefix, self.tools, None
        elif isinstance(record, _BadLine):
            return result_row(None, error=f"usage.json: line {record.line} is not JSON: {record.reason}")
        elif isinstance(record, Mapping):
            get_text, get_prompt, get_tools, get_id, get_grammar = self.getters
            text, prefix, tools, row_id = get_text(record), get_prompt(record), get_tools(record), get_id(record)
            prefix = self.prefix if prefix is None else prefix
            tools = self.tools if tools is None else tools
            name = get_grammar(record)
            if isinstance(name, str):
                try:
                    grammar = self.named.get(name) or self.named.setdefault(name, resolve_grammar(name))
                except GrammarParseError as e:
                    return result_row(None, row_id=row_id, error=f"{e.code}: {e.detail}")
        else:
            return result_row(None, error=f"usage.batch: a row is a {type(record).__name__}, not text or a record")
        if not isinstance(text, str):
            return result_row(None, row_id=row_id, error=f"usage.batch: the row's {columns.text!r} is not text")
        if not isinstance(prefix, str):
            return result_row(None, row_id=row_id, error="usage.batch: the row's prompt is not text")
        if isinstance(tools, str):
            try:
                tools = json.loads(tools)
            except ValueError:
                return result_row(None, row_id=row_id, error="usage.json: the row's tools are not JSON")
        if grammar is None:
            return result_row(None, row_id=row_id, error="usage.grammar: the row names no grammar, and none was given")
        try:
            message = parse_response(text, grammar, prefix=prefix, tools=tools, strict=self.strict)
        except GrammarParseError as e:
            return result_row(None, row_id=row_id, error=f"{e.code}: {e.detail}")
        return result_row(message, row_id=row_id)

    def rows(self, records: list[Any]) -> list[dict[str, Any]]:
        return [self.row(record) for record in records]


_worker: _Parser | None = None


def _start_worker(grammar: Any, prefix: str, tools: Any, strict: bool, columns: Columns) -> None:
    global _worker  # (the one state a worker process keeps: its parser, built once)
    _worker = _Parser(grammar, prefix, tools, strict, columns)


def _work(records: list[Any]) -> list[dict[str, Any]]:
    assert _worker is not None
    return _worker.rows(records)


def _chunks(records: Iterable[Any], size: int) -> Iterator[list[Any]]:
    iterator = iter(records)
    while chunk := list(islice(iterator, size)):
        yield chunk


def parse_many(records: Iterable[Any], grammar: Any, *, prefix: str = "", tools: Any = None, strict: bool = False,
               columns: Columns | None = None, workers: int = 1, chunk_rows: int = CHUNK_ROWS,
               progress: Callable[[int], None] | None = None) -> Iterator[dict[str, Any]]:
    """One :func:`result_row` per record, in order.

    ``records`` are output strings, or mappings holding the output under ``columns.text`` (and the prompt,
    tools and id under the other ``columns``; a row without them uses ``prefix`` and ``tools``). ``grammar``
    is anything ``load_grammar`` takes, or a Grammar (None when every row names its own, ``columns.grammar``);
    with ``workers > 1`` it is passed to each worker process as its name or its Lark text and built there
    once. ``progress`` is called with the number of
    rows done after each chunk. Lenient by default (``strict=False``): problems are in ``parse_errors``.
    """
    columns = columns or Columns()
    if workers <= 1:
        parser = _Parser(grammar, prefix, tools, strict, columns)
        for chunk in _chunks(records, chunk_rows):
            yield from parser.rows(chunk)
            if progress is not None:
                progress(len(chunk))
        return
    portable: Any = grammar
    if isinstance(grammar, Grammar):
        portable = grammar.legacy_schema if grammar.legacy_schema is not None else _LarkText(grammar.source, grammar.name)
    context = multiprocessing.get_context("spawn" if os.name == "nt" else "forkserver")
    with context.Pool(workers, initializer=_start_worker, initargs=(portable, prefix, tools, strict, columns)) as pool:
        for rows in pool.imap(_work, _chunks(records, chunk_rows)):
            yield from rows
            if progress is not None:
                progress(len(rows))


def read_jsonl(lines: Iterable[str], *, skip: int = 0) -> Iterator[Any]:
    """The records of a JSONL stream (blank lines skipped, a line that is not JSON a :class:`_BadLine`),
    after the first ``skip`` records (``--resume``)."""
    seen = 0
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        seen += 1
        if seen <= skip:
            continue
        try:
            yield json.loads(line)
        except ValueError as e:
            yield _BadLine(number, str(e))
        except RecursionError:
            yield _BadLine(number, "nested too deeply")


@dataclass
class Summary:
    """What a batch run did: rows, calls, and the rows with problems by code."""

    rows: int = 0
    calls: int = 0
    rows_with_errors: int = 0
    codes: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0

    def add(self, row: Mapping[str, Any]) -> None:
        self.rows += 1
        self.calls += len(row["tool_calls"] or [])
        codes = list(row["parse_errors"] or [])
        codes += [c for call in row["tool_calls"] or [] for c in call.get("errors", [])]
        if row["error"]:
            codes.append(row["error"].split(":", 1)[0])
        if codes:
            self.rows_with_errors += 1
            self.codes.update(set(codes))

    def text(self) -> str:
        rate = f", {self.rows / self.seconds:,.0f} rows/s" if self.seconds > 0 else ""
        lines = [f"{self.rows:,} rows, {self.calls:,} tool calls, {self.rows_with_errors:,} rows with errors"
                 f" ({self.seconds:.1f} s{rate})"]
        lines += [f"  {code}: {count:,} rows" for code, count in self.codes.most_common()]
        return "\n".join(lines)


class Progress:
    """A one-line progress display on a terminal (rows, rows/s, ETA when the total is known)."""

    def __init__(self, out: TextIO, total: int | None, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.out, self.total, self.clock = out, total, clock
        self.done, self.start, self.shown = 0, clock(), 0.0

    def __call__(self, rows: int) -> None:
        self.done += rows
        now = self.clock()
        if now - self.shown < 0.2 and (self.total is None or self.done < self.total):
            return  # (a few updates a second)
        self.shown = now
        rate = self.done / max(now - self.start, 1e-9)
        line = f"{self.done:,} rows, {rate:,.0f} rows/s"
        if self.total:
            left = max(self.total - self.done, 0) / rate if rate else 0.0
            line = f"{self.done:,}/{self.total:,} rows ({100 * self.done / self.total:.0f}%), {rate:,.0f} rows/s, " \
                   f"ETA {left:.0f} s"
        self.out.write("\r" + line.ljust(72))
        self.out.flush()

    def close(self) -> None:
        if self.shown:
            self.out.write("\n")
            self.out.flush()


def run_jsonl(source: TextIO, sink: TextIO, grammar: Any, *, columns: Columns | None = None, prefix: str = "",
              tools: Any = None, strict: bool = False, workers: int = 1, skip: int = 0,
              progress: Callable[[int], None] | None = None) -> Summary:
    """Parse a JSONL stream of records (or of JSON strings) into a JSONL stream of result rows, one line
    per input line, flushed as they come (so an interrupted run resumes with ``skip``)."""
    summary = Summary()
    started = time.monotonic()
    for row in parse_many(read_jsonl(source, skip=skip), grammar, prefix=prefix, tools=tools, strict=strict,
                          columns=columns, workers=workers, progress=progress):
        sink.write(json.dumps(row, ensure_ascii=False) + "\n")
        summary.add(row)
    sink.flush()
    summary.seconds = time.monotonic() - started
    return summary


def default_workers() -> int:
    """All the cores this process may use."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # (not on Linux)
        return os.cpu_count() or 1


__all__ = ["CHUNK_ROWS", "Columns", "Progress", "Summary", "default_workers", "parse_many", "read_jsonl",
           "result_row", "run_jsonl"]
