"""Parsing generation logs at scale: many outputs, one grammar, lenient by default, every row accounted for.

:func:`parse_many` parses an iterable of outputs (plain strings, or records with the output under a key,
plus optional prompt, tools and id keys) into one result per row, in order: the message's reasoning,
content and tool calls as plain columns, the parse errors by code, the number of characters the parser
discarded (text after the end of turn, or where the grammar allows none), and the row's id. The grammar and the
tools' schemas are built once (once per worker process with ``workers > 1``), never per row. A row that
is not text, or whose parse raises in strict mode, is a result with an ``error``, not an exception: one
bad row never fails the batch.

JSONL input is read as bytes and split at ``\\n`` only (a raw CR or U+2028 inside a string is no line end), and
each line is decoded on its own: a line that is not UTF-8 is its row's error, with its line number. A lone
surrogate (a ``\\ud800`` escape in a JSON log or in the model's text) is kept: JSONL writes it as its
``\\uXXXX`` escape (the same JSON value, valid UTF-8), a call's arguments in Arrow are JSON text written the
same way, and the other Arrow strings, which must be UTF-8, hold U+FFFD in its place, their row saying
``batch.surrogate`` in ``parse_errors``.

:func:`parse_table` does the same for a pyarrow Table (or RecordBatch) or a pandas DataFrame, and answers
in kind: Arrow columns, the tool calls a list of structs (:func:`result_schema`). :func:`read_parquet` and
:class:`ParquetSink` are the batch command's Parquet input and output. pyarrow (and pandas, for
DataFrames) are the ``tables`` extra, imported on first use.
"""

from __future__ import annotations

import codecs
import json
import multiprocessing
import os
import re
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain, islice
from typing import IO, TYPE_CHECKING, Any, TextIO

import jmespath

from ._engine.arguments import print_warning_line
from ._engine.grammar import Grammar
from ._engine.reading import LONE_SURROGATE
from ._engine import oneshot
from ._engine.session import ResponseParser, parse_response, resolve_grammar, specialised_parse
from ._engine.shapes import REASONING_FIELDS
from ._engine.tools import ToolTypes, check_tools
from .errors import ArgumentError, GrammarParseError
from .options import ParseOptions, merge_options

if TYPE_CHECKING:
    import pyarrow as pa

#: Rows handed to a worker at a time: large enough that the inter-process cost is small against the
#: parse (about 50 µs a short row), small enough that progress stays current.
CHUNK_ROWS = 512
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: What a blank JSONL line may hold: JSON's whitespace (a line of other characters is a row, and its error).
_JSON_SPACE = " \t\r\n"
_JSON_SPACE_BYTES = _JSON_SPACE.encode()


@dataclass(frozen=True)
class BadLine:
    """A JSONL line that is not JSON: it still becomes its row (with the error), so rows stay aligned."""

    line: int
    reason: str
    #: what the line is not: "JSON", or "UTF-8 text" (the row's error says "line N is not ...")
    not_what: str = "JSON"


def _root(expression: str | None) -> str | None:
    """The top-level column a key or JMESPath expression reads (``response.choices[0].text``: response)."""
    found = re.match(r'\s*(?:"([^"]+)"|([A-Za-z_][A-Za-z0-9_]*))', expression or "")
    return (found.group(1) or found.group(2)) if found else None


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

    def specs(self) -> list[str]:
        """The column specs given, in order (text, prompt, tools, id, grammar)."""
        return [spec for spec in (self.text, self.prompt, self.tools, self.id, self.grammar) if spec is not None]

    def roots(self) -> list[str]:
        """The top-level columns the specs read (a JMESPath spec reads its root), each once, in order: what
        a table is narrowed to before its rows are read, so a wide log's other columns stay behind."""
        return list(dict.fromkeys(root for root in map(_root, self.specs()) if root is not None))

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


def result_row(message: Mapping[str, Any] | None, *, row_id: Any = None, error: str | None = None,
               discarded: int | None = None, reasoning_fields: Sequence[str] = REASONING_FIELDS,
               content_fields: Sequence[str] = ("content",), calls: Sequence[Any] | None = None) -> dict[str, Any]:
    """One output row: ``id``, ``reasoning``, ``content``, ``tool_calls`` (``{"name", "arguments"}``, plus
    ``errors`` for a broken call), ``parse_errors`` (their codes, in order), ``discarded_chars`` (how many
    characters of the output went into no field: text after the end of turn, or where the grammar allows
    none; ``discarded``) and ``error`` (why the row could not be parsed at all: not text, or a strict-mode
    failure), each None when absent. ``reasoning_fields``, ``content_fields``: the message keys that hold
    reasoning and content; ``calls``: the message's calls (the grammar's format says, Format.calls_in; by default
    the usual names and the ``tool_calls`` list)."""
    if message is None:
        return {"id": row_id, "reasoning": None, "content": None, "tool_calls": None, "parse_errors": None,
                "discarded_chars": None, "error": error}
    reasoning = next((message[k] for k in reasoning_fields if isinstance(message.get(k), str)), None)
    entries = []
    for call in (message.get("tool_calls") or []) if calls is None else calls:
        function = call.get("function", {}) if isinstance(call, Mapping) else {}
        entry = {"name": function.get("name"), "arguments": function.get("arguments")}
        if isinstance(call, Mapping) and call.get("errors"):
            entry["errors"] = [e.get("code") if isinstance(e, Mapping) else str(e) for e in call["errors"]]
        entries.append(entry)
    problems = [p.get("code") for p in message.get("parse_errors") or [] if isinstance(p, Mapping)]
    content = next((message[k] for k in content_fields if isinstance(message.get(k), str)), None)
    return {"id": row_id, "reasoning": reasoning, "content": content,
            "tool_calls": entries or None, "parse_errors": problems or None, "discarded_chars": discarded,
            "error": error}


@dataclass(frozen=True)
class RowInput:
    """What one record gives the parser: its output, prompt and tools (the defaults standing in for what
    it lacks), its id, and the grammar it names (None: the batch's)."""

    text: str
    prefix: str
    tools: Any
    id: Any = None
    grammar: str | None = None


class RowError(ArgumentError):
    """A record that cannot be parsed at all (no output, a prompt that is not text, ...); ``row_id`` is its id."""

    code = "usage.batch"

    def __init__(self, message: str, *, code: str = "usage.batch", hint: str | None = None, row_id: Any = None) -> None:
        self.row_id = row_id
        super().__init__(message, code=code, hint=hint)


def read_row(record: Any, getters: tuple[Callable[[Mapping[str, Any]], Any], ...], columns: Columns, *,
             prefix: str = "", tools: Any = None) -> RowInput:
    """A record read with ``columns``' compiled ``getters`` (:meth:`Columns.getters`): a string is an output,
    a mapping holds the columns. Raises :class:`RowError` saying what is wrong with the record."""
    if isinstance(record, str):
        return RowInput(record, prefix, tools)
    if isinstance(record, BadLine):
        raise RowError(f"line {record.line} is not {record.not_what}: {record.reason}", code="usage.json",
                       hint="Fix the line; the other rows are parsed.")
    if not isinstance(record, Mapping):
        raise RowError(f"a row is a {type(record).__name__}, not text or a record",
                       hint="Give records (JSON objects) or outputs (JSON strings).")
    get_text, get_prompt, get_tools, get_id, get_grammar = getters
    text, prompt, own_tools, row_id, name = (get_text(record), get_prompt(record), get_tools(record),
                                             get_id(record), get_grammar(record))
    if not isinstance(text, str):
        keys = f" (its keys: {', '.join(sorted(map(str, record)))})" if columns.text not in record else ""
        what = f"no output at {columns.text!r}{keys}" if text is None else \
            f"a {type(text).__name__} at {columns.text!r}, not text"
        raise RowError(f"the row has {what}", row_id=row_id,
                       hint="Say where the records keep their output: --text (Columns(text=...)), a key or JMESPath.")
    prompt = prefix if prompt is None else prompt
    if not isinstance(prompt, str):
        raise RowError(f"the row's prompt {columns.prompt!r} is a {type(prompt).__name__}, not text", row_id=row_id,
                       hint="Name the prompt's text with --prompt (Columns(prompt=...)).")
    own_tools = tools if own_tools is None else own_tools
    if isinstance(own_tools, str):  # (a log may keep the schemas as JSON text)
        try:
            own_tools = json.loads(own_tools)
        except ValueError:
            raise RowError(f"the row's tools {columns.tools!r} are text that is not JSON", code="usage.json",
                           row_id=row_id, hint="Give the tool schemas as a JSON list, or as its text.") from None
    return RowInput(text, prompt, own_tools, row_id, name if isinstance(name, str) else None)


class _Parser:
    """The per-process state: the grammar, built once, and the settings every row is parsed with."""

    def __init__(self, grammar: Any, prefix: str, tools: Any, options: ParseOptions, columns: Columns) -> None:
        self.grammar: Grammar | None = resolve_grammar(grammar) if grammar is not None else None
        self.prefix, self.tools, self.options, self.columns = prefix, tools, options, columns
        self.getters = columns.getters()
        self.named: dict[str, Grammar] = {}

    def row(self, record: Any) -> dict[str, Any]:
        try:
            given = read_row(record, self.getters, self.columns, prefix=self.prefix, tools=self.tools)
        except RowError as e:
            return result_row(None, row_id=e.row_id, error=f"{e.code}: {e.detail}")
        grammar = self.grammar
        if given.grammar is not None:
            try:
                grammar = self.named.get(given.grammar) or self.named.setdefault(given.grammar,
                                                                                 resolve_grammar(given.grammar))
            except GrammarParseError as e:
                return result_row(None, row_id=given.id, error=f"{e.code}: {e.detail}")
        if grammar is None:
            return result_row(None, row_id=given.id, error="usage.grammar: the row names no grammar, and none was given")
        discarded: int | None = None  # (a legacy schema, settled by its regex over the whole output, tracks none)
        try:
            if grammar.settle is not None:
                message = parse_response(given.text, grammar, prefix=given.prefix, tools=given.tools,
                                         options=self.options)
            elif (found := self._specialised(grammar, given)) is not None:
                message, discarded = found.message, found.discarded
            else:
                parser = ResponseParser(grammar, given.prefix, tools=given.tools, options=self.options)
                message = parser.finalize(given.text)[0]
                discarded = sum(end - start for start, end in parser.discarded_spans)
        except GrammarParseError as e:
            return result_row(None, row_id=given.id, error=f"{e.code}: {e.detail}")
        fmt = grammar.format
        return result_row(message, row_id=given.id, discarded=discarded, reasoning_fields=fmt.reasoning_fields,
                          content_fields=fmt.content_fields, calls=fmt.calls_in(message))

    def _specialised(self, grammar: Grammar, given: RowInput) -> oneshot.Parsed | None:
        """The grammar's specialised one-shot parser's message and discarded count, where it takes the row."""
        if not oneshot.SPECIALISED:
            return None
        # (a row's tools are JSON, the run's checked once: both read again where the session takes over)
        return specialised_parse(grammar, given.text, given.prefix, ToolTypes.from_tools(given.tools), self.options)

    def rows(self, records: list[Any]) -> list[dict[str, Any]]:
        return [self.row(record) for record in records]


_worker: _Parser | None = None


def _start_worker(grammar: Any, prefix: str, tools: Any, options: ParseOptions, columns: Columns,
                  lines: bool = False) -> None:
    global _worker  # (the one state a worker process keeps: its parser, built once)
    if lines:  # (the command line's warnings are one line each: so are its workers')
        warnings.showwarning = print_warning_line
    _worker = _Parser(grammar, prefix, tools, options, columns)


def _work(records: list[Any]) -> list[dict[str, Any]]:
    assert _worker is not None
    return _worker.rows(records)


def portable_grammar(grammar: Any) -> Grammar | None:
    """``grammar`` as it travels to a worker process: compiled here, once (a name, a path, a template dict
    or a Grammar), and pickled as the plain value it is, so that no worker builds it again (unpickling is
    10-20 times cheaper than building); None (each row names its own) as it is."""
    return resolve_grammar(grammar) if grammar is not None else None


def _batch_options(options: ParseOptions | None, *, strict: bool | None = None, **limits: int | None) -> ParseOptions:
    """The parse options of a batch: as :func:`~grammar_parse.options.merge_options`, lenient unless
    ``strict`` or the options say otherwise (one broken row must not stop a run)."""
    if options is None and strict is None:
        strict = False
    return merge_options(options, strict=strict, **limits)


def _chunks(records: Iterable[Any], size: int) -> Iterator[list[Any]]:
    iterator = iter(records)
    while chunk := list(islice(iterator, size)):
        yield chunk


def parse_many(records: Iterable[Any], grammar: Any, *, prefix: str = "", tools: Any = None,
               strict: bool | None = None, columns: Columns | None = None, workers: int = 1,
               chunk_rows: int = CHUNK_ROWS, progress: Callable[[int], None] | None = None,
               max_region_chars: int | None = None, max_json_depth: int | None = None,
               options: ParseOptions | None = None) -> Iterator[dict[str, Any]]:
    """One :func:`result_row` per record, in order.

    ``records`` are output strings, or mappings holding the output under ``columns.text`` (and the prompt,
    tools and id under the other ``columns``; a row without them uses ``prefix`` and ``tools``). ``grammar``
    is anything ``load_grammar`` takes, or a Grammar (None when every row names its own, ``columns.grammar``);
    with ``workers > 1`` it is compiled here once and each worker process receives the compiled
    grammar (:func:`portable_grammar`). ``progress`` is called with the number of
    rows done after each chunk. Lenient by default (``strict=False``): problems are in ``parse_errors``.
    ``options`` are every row's parse options (``strict`` as they say: ``ParseOptions()`` is strict); the
    keywords are its shorthands. Workers receive them with the grammar.
    """
    options = _batch_options(options, strict=strict, max_region_chars=max_region_chars, max_json_depth=max_json_depth)
    columns = columns or Columns()
    if tools is not None:
        check_tools(tools)  # (tools in a wrong shape are the run's mistake, not every row's)
    if workers <= 1:
        parser = _Parser(grammar, prefix, tools, options, columns)
        for chunk in _chunks(records, chunk_rows):
            yield from parser.rows(chunk)
            if progress is not None:
                progress(len(chunk))
        return
    context = multiprocessing.get_context("spawn" if os.name == "nt" else "forkserver")
    with context.Pool(workers, initializer=_start_worker,
                      initargs=(portable_grammar(grammar), prefix, tools, options, columns,
                                warnings.showwarning is print_warning_line)) as pool:
        for rows in pool.imap(_work, _chunks(records, chunk_rows)):
            yield from rows
            if progress is not None:
                progress(len(rows))


def _source_lines(source: IO[Any] | Iterable[str | bytes]) -> Iterable[str | bytes]:
    """A JSONL source's lines, ended by ``\\n`` only. A text file is read through its binary buffer: its
    universal newlines would also end a line at a CR inside a string, and its decoding would stop the
    whole read at one bad byte."""
    buffer = getattr(source, "buffer", None)
    return buffer if buffer is not None else source  # (a binary file's lines and a StringIO's end at \n only)


def jsonl_lines(source: IO[Any] | Iterable[str | bytes]) -> Iterator[tuple[int, str | bytes]]:
    """The rows of a JSONL stream with their line numbers: its lines (``source`` is a binary or text file,
    or lines), blank ones skipped (they are no rows, so row N of the input is row N of the output). Only
    ``\\n`` ends a line; a line of only JSON whitespace is blank."""
    return ((number, line) for number, line in enumerate(_source_lines(source), 1)
            if (line.strip(_JSON_SPACE_BYTES) if isinstance(line, bytes) else line.strip(_JSON_SPACE)))


def decode_line(number: int, line: str | bytes) -> Any:
    """One JSONL line's record, or a :class:`BadLine` saying why it is none. Bytes are decoded here, line by
    line, so a bad byte is this row's problem; a raw control character in a string (a careless writer's
    CR or tab) is read as the writer meant it."""
    if isinstance(line, bytes):
        if number == 1 and line.startswith(codecs.BOM_UTF8):
            line = line[len(codecs.BOM_UTF8):]
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError as e:
            return BadLine(number, f"byte 0x{line[e.start]:02x} at byte {e.start + 1} of the line",
                           not_what="UTF-8 text")
    try:
        return json.loads(line, strict=False)
    except ValueError as e:
        return BadLine(number, str(e))
    except RecursionError:
        return BadLine(number, "nested too deeply")


def read_jsonl(source: IO[Any] | Iterable[str | bytes], *, skip: int = 0,
               columns: Columns | None = None) -> Iterator[Any]:
    """The records of a JSONL stream (blank lines skipped, a line that is not JSON or not UTF-8 a
    :class:`BadLine`), after the first ``skip`` records (``--resume``), which are not decoded.

    With ``columns``, the first record is read now and checked to hold the output's key (its root, for
    a JMESPath): a wrong ``--text`` raises ArgumentError naming the keys the record has, before any row
    is parsed, instead of making every row an error."""
    lines = islice(jsonl_lines(source), skip, None)
    first = next(lines, None)
    if first is None:
        return iter(())
    record = decode_line(*first)
    root = _root(columns.text) if columns is not None else None
    if columns is not None and isinstance(record, Mapping) and root is not None and root not in record:
        raise ArgumentError(f"the first record (line {first[0]}) has no {columns.text!r}: its keys are "
                            f"{', '.join(sorted(map(str, record)))}", code="usage.batch",
                            hint="Say where the records keep their output with --text (Columns(text=...)), a key "
                                 "or JMESPath.")
    return chain([record], (decode_line(number, line) for number, line in lines))


def count_jsonl_rows(source: IO[Any] | Iterable[str | bytes]) -> int:
    """The rows of a JSONL stream, counted as :func:`jsonl_lines` counts them (for --resume and the progress
    line's total)."""
    return sum(1 for _ in jsonl_lines(source))


@dataclass
class Summary:
    """What a batch run did: rows, calls, the rows with problems by code, and the discarded text."""

    rows: int = 0
    calls: int = 0
    rows_with_errors: int = 0
    #: rows whose output had text that went into no field, and how many characters of it
    rows_discarding: int = 0
    discarded_chars: int = 0
    codes: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0

    def add(self, row: Mapping[str, Any]) -> None:
        self.rows += 1
        self.calls += len(row["tool_calls"] or [])
        if row.get("discarded_chars"):
            self.rows_discarding += 1
            self.discarded_chars += row["discarded_chars"]
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
                 f" ({self.seconds:.1f} s{rate})",
                 f"{self.rows_discarding:,} rows with discarded text ({self.discarded_chars:,} characters)"]
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


def run_rows(records: Iterable[Any], write: Callable[[dict[str, Any]], object], grammar: Any, *,
             columns: Columns | None = None, prefix: str = "", tools: Any = None, strict: bool | None = None,
             workers: int = 1, progress: Callable[[int], None] | None = None,
             options: ParseOptions | None = None) -> Summary:
    """Parse records into result rows handed to ``write`` as they come, and say what was done."""
    summary = Summary()
    started = time.monotonic()
    for row in parse_many(records, grammar, prefix=prefix, tools=tools, strict=strict, columns=columns,
                          workers=workers, progress=progress, options=options):
        write(row)
        summary.add(row)
    summary.seconds = time.monotonic() - started
    return summary


def jsonl_row(row: Mapping[str, Any]) -> str:
    """A result row as its JSONL line: UTF-8-encodable JSON text, a lone surrogate written as its ``\\uXXXX``
    escape (the same JSON value: it reads back as it was, and no row can stop the writer), and so are
    U+0085, U+2028 and U+2029 (line ends to str.splitlines)."""
    text = json.dumps(row, ensure_ascii=False, default=_json_default).translate(_LINE_BREAKS)
    return text.encode("utf-8", "backslashreplace").decode("utf-8") + "\n"


#: Characters JSON allows raw in a string that str.splitlines (and JavaScript before ES2019) ends a line
#: at: escaped, so that any reader finds one row per line.
_LINE_BREAKS = {ord(c): f"\\u{ord(c):04x}" for c in "\x85\u2028\u2029"}


def _json_default(value: Any) -> Any:
    """A value JSON has no type for (a Parquet id: a date, a decimal, bytes) as its text."""
    isoformat = getattr(value, "isoformat", None)
    return isoformat() if callable(isoformat) else str(value)


def run_jsonl(source: IO[Any] | Iterable[str | bytes], sink: TextIO, grammar: Any, *, columns: Columns | None = None,
              prefix: str = "", tools: Any = None, strict: bool | None = None, workers: int = 1, skip: int = 0,
              progress: Callable[[int], None] | None = None, options: ParseOptions | None = None) -> Summary:
    """Parse a JSONL stream of records (or of JSON strings) into a JSONL stream of result rows, one line
    per input line, written as they come (so an interrupted run resumes with ``skip``). ``source`` is
    read as bytes where it can be (:func:`jsonl_lines`); a first record without ``columns.text`` raises
    ArgumentError (:func:`read_jsonl`). ``options`` as in :func:`parse_many`."""
    columns = columns or Columns()
    summary = run_rows(read_jsonl(source, skip=skip, columns=columns), lambda row: sink.write(jsonl_row(row)),
                       grammar, columns=columns, prefix=prefix, tools=tools, strict=strict, workers=workers,
                       progress=progress, options=options)
    sink.flush()
    return summary


def default_workers() -> int:
    """All the cores this process may use."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # (not on Linux)
        return os.cpu_count() or 1


# ---------------------------------------------------------------------------- Arrow and pandas
def _pyarrow() -> Any:
    try:
        import pyarrow
    except ImportError:
        raise ArgumentError("tables (Arrow, pandas, Parquet) need pyarrow", code="usage.batch",
                            hint="pip install 'grammar-parse[tables]'") from None
    return pyarrow


def result_schema(id_type: pa.DataType | None = None) -> pa.Schema:
    """The Arrow schema of result rows: ``id`` (of ``id_type``, null without one), ``reasoning``,
    ``content`` and ``error`` strings, ``parse_errors`` a list of codes, ``discarded_chars`` an int64, and
    ``tool_calls`` a list of ``{name, arguments, errors}`` structs. ``arguments`` is JSON text when the
    call's arguments parsed, and the text as the model wrote it when they did not (then ``errors`` holds
    their codes): the arguments of different tools have different shapes, which one Arrow column cannot
    type."""
    pa = _pyarrow()
    call = pa.struct([("name", pa.string()), ("arguments", pa.string()), ("errors", pa.list_(pa.string()))])
    return pa.schema([("id", id_type or pa.null()), ("reasoning", pa.string()), ("content", pa.string()),
                      ("tool_calls", pa.list_(call)), ("parse_errors", pa.list_(pa.string())),
                      ("discarded_chars", pa.int64()), ("error", pa.string())])


#: Codes an Arrow row's ``parse_errors`` gain where a value has no Arrow form.
SURROGATE_CODE = "batch.surrogate"  # a lone surrogate replaced by U+FFFD (Arrow strings are UTF-8)
ID_TYPE_CODE = "batch.id_type"  # an id not of the id column's type (the type of the first id), written as null
_INT64 = (-(2 ** 63), 2 ** 63)


def id_type_of(value: Any) -> pa.DataType:
    """The id column's Arrow type when ``value`` is the first id (JSONL ids are any JSON value): a whole
    number int64 (string beyond its range), a float double, a bool bool, a list or object string (its JSON
    text), anything else Arrow's own type for it."""
    pa = _pyarrow()
    if isinstance(value, bool):
        return pa.bool_()
    if isinstance(value, int):
        return pa.int64() if _INT64[0] <= value < _INT64[1] else pa.string()
    if isinstance(value, float):
        return pa.float64()
    if isinstance(value, (str, list, dict)):
        return pa.string()
    try:
        return pa.scalar(value).type
    except (pa.ArrowException, OverflowError, TypeError, ValueError):
        return pa.string()


def _fit_id(value: Any, id_type: Any) -> tuple[Any, bool]:
    """``value`` as the id column of ``id_type`` holds it, and whether it fits: any id fits a string column
    (a non-text id as its JSON text); a value of another type is no id of a typed column."""
    pa = _pyarrow()
    if value is None:
        return None, True
    if pa.types.is_string(id_type) or pa.types.is_large_string(id_type):
        return (value, True) if isinstance(value, str) else (jsonl_row(value)[:-1], True)
    if pa.types.is_int64(id_type):
        fits = isinstance(value, int) and not isinstance(value, bool) and _INT64[0] <= value < _INT64[1]
    elif pa.types.is_float64(id_type):
        fits = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif pa.types.is_boolean(id_type):
        fits = isinstance(value, bool)
    elif pa.types.is_null(id_type):
        fits = False
    else:  # (a Parquet input's own type: its ids fit; anything else is checked by Arrow)
        try:
            pa.scalar(value, id_type)
            fits = True
        except (pa.ArrowException, OverflowError, TypeError, ValueError):
            fits = False
    return (value, True) if fits else (None, False)


def _text(value: Any, problems: list[str]) -> Any:
    """A string as an Arrow string holds it: a lone surrogate as U+FFFD (said once in ``problems``)."""
    if isinstance(value, str) and LONE_SURROGATE.search(value):
        if SURROGATE_CODE not in problems:
            problems.append(SURROGATE_CODE)
        return LONE_SURROGATE.sub("\ufffd", value)
    return value


def arrow_row(row: Mapping[str, Any], id_type: Any) -> tuple[dict[str, Any], list[str]]:
    """A result row as an Arrow row of :func:`result_schema` with ``id_type`` holds it, and the codes of
    what had to change (added to its ``parse_errors``): a lone surrogate in a string is U+FFFD
    (``batch.surrogate``), an id that does not fit ``id_type`` is null (``batch.id_type``). A call's parsed
    arguments are JSON text, a lone surrogate in them its escape: kept, so nothing to say."""
    problems: list[str] = []
    calls = None
    if row["tool_calls"] is not None:
        calls = [{"name": _text(c["name"], problems), "errors": c.get("errors"),
                  "arguments": _text(c["arguments"], problems) if isinstance(c["arguments"], str) or
                  c["arguments"] is None else jsonl_row(c["arguments"])[:-1]} for c in row["tool_calls"]]
    row_id = _text(row["id"], problems)
    row_id, fits = _fit_id(row_id, id_type) if id_type is not None else (row_id, True)
    if not fits:
        problems.append(ID_TYPE_CODE)
    fitted = {"id": row_id, "reasoning": _text(row["reasoning"], problems), "content": _text(row["content"], problems),
              "tool_calls": calls, "parse_errors": row["parse_errors"], "discarded_chars": row.get("discarded_chars"),
              "error": _text(row["error"], problems)}
    if problems:
        fitted["parse_errors"] = [*(row["parse_errors"] or []), *problems]
    return fitted, problems


def _arrow_table(rows: list[dict[str, Any]], id_type: Any) -> pa.Table:
    """Rows already made Arrow rows (:func:`arrow_row`) as a table of :func:`result_schema`."""
    pa = _pyarrow()
    schema = result_schema(id_type)
    arrays = [pa.array([row[name] for row in rows], schema.field(name).type) for name in schema.names]
    return pa.Table.from_arrays(arrays, schema=schema)


def rows_to_arrow(rows: list[dict[str, Any]], id_type: pa.DataType | None = None) -> pa.Table:
    """Result rows as an Arrow table of :func:`result_schema`: ``id_type`` taken from the first id
    (:func:`id_type_of`) without one, every row made an Arrow row (:func:`arrow_row`), so no value stops
    the table."""
    if id_type is None:
        first = next((row["id"] for row in rows if row["id"] is not None), None)
        id_type = id_type_of(first) if first is not None else None
    return _arrow_table([arrow_row(row, id_type)[0] for row in rows], id_type)


def _check_columns(names: Iterable[Any], columns: Columns) -> None:
    """Every column the specs read is among ``names``: checked before any row is parsed."""
    names = set(map(str, names))
    missing = [spec for spec in columns.specs() if _root(spec) not in names]
    if missing:
        raise ArgumentError(f"the table has no column {missing[0]!r} (its columns: {', '.join(sorted(names))})",
                            code="usage.batch", hint="Name the output column (--text, or Columns(text=...)) and any "
                                                     "prompt, tools and id columns.")


def _id_type(schema: pa.Schema, columns: Columns) -> Any:
    """The id column's Arrow type in ``schema`` (None without a plain id column), once every column the
    specs read is checked to be there: before any row is parsed."""
    _check_columns(schema.names, columns)
    return schema.field(columns.id).type if columns.id is not None and columns.id in schema.names else None


def _table_records(table: Any, columns: Columns, batch_rows: int) -> Iterator[dict[str, Any]]:
    """The records of an Arrow table, a batch at a time, of only the columns the specs read."""
    for batch in table.select(columns.roots()).to_batches(max_chunksize=batch_rows):
        yield from batch.to_pylist()


class TableParser:
    """:func:`parse_table` with its grammar and tool schemas built once: called on table after table, it
    builds nothing more. This is the per-worker state of a distributed engine (a Ray Data actor, a Spark
    or Dask task's partitions, a Daft class instance): see ``grammar_parse.integrations``. ``strict`` and
    ``options`` as in :func:`parse_table` (lenient unless asked)."""

    def __init__(self, grammar: Any, *, columns: Columns | None = None, prefix: str = "", tools: Any = None,
                 strict: bool | None = None, options: ParseOptions | None = None) -> None:
        self.columns = columns or Columns()
        self.parser = _Parser(grammar, prefix, tools, _batch_options(options, strict=strict), self.columns)

    def __call__(self, table: Any) -> Any:
        return _in_kind(table, self.columns, CHUNK_ROWS, lambda records: self.parser.rows(list(records)))


def _in_kind(table: Any, columns: Columns, batch_rows: int,
             parse: Callable[[Iterator[dict[str, Any]]], list[dict[str, Any]]]) -> Any:
    """``parse`` (result rows of a table's records) applied to a Table, RecordBatch or DataFrame, answered in
    kind."""
    pa = _pyarrow()
    if isinstance(table, pa.RecordBatch):
        return rows_to_arrow_batch(_in_kind(pa.Table.from_batches([table]), columns, batch_rows, parse))
    frame = None
    if not isinstance(table, pa.Table):
        if type(table).__name__ != "DataFrame" or not hasattr(table, "index"):
            raise ArgumentError(f"parse_table takes a pyarrow Table or RecordBatch or a pandas DataFrame, not "
                                f"{type(table).__name__}", code="usage.batch", hint="Use parse_many for other iterables.")
        frame = table
        try:
            table = pa.Table.from_pandas(frame, preserve_index=False)
        except (UnicodeError, pa.ArrowException):  # (text Arrow cannot hold, a lone surrogate: rows as pandas has them)
            _check_columns(frame.columns, columns)
            records = frame[columns.roots()].astype(object).where(frame[columns.roots()].notna(), None)
            table = None
    if table is not None:
        id_type = _id_type(table.schema, columns)
        result = rows_to_arrow(parse(_table_records(table, columns, batch_rows)), id_type)
    else:  # (the id typed by its first value, as a JSONL id)
        result = rows_to_arrow(parse(iter(records.to_dict("records"))))
    if frame is None:
        return result
    out = result.to_pandas()
    out.index = frame.index
    return out


def parse_table(table: Any, grammar: Any, *, columns: Columns | None = None, prefix: str = "", tools: Any = None,
                strict: bool | None = None, workers: int = 1, chunk_rows: int = CHUNK_ROWS,
                progress: Callable[[int], None] | None = None, max_region_chars: int | None = None,
                max_json_depth: int | None = None, options: ParseOptions | None = None) -> Any:
    """:func:`parse_many` over the rows of a pyarrow Table or RecordBatch, or a pandas DataFrame: one
    result row per input row, in order, as the same kind of table (:func:`result_schema`; a DataFrame
    keeps the input's index, so the result joins back on it). ``columns`` names the output's column (and
    the prompt, tools, id and grammar columns: a column name, or JMESPath into a struct column).
    ``options`` and the keywords as in :func:`parse_many`.
    """
    columns = columns or Columns()
    options = _batch_options(options, strict=strict, max_region_chars=max_region_chars, max_json_depth=max_json_depth)
    return _in_kind(table, columns, chunk_rows, lambda records: list(parse_many(
        records, grammar, prefix=prefix, tools=tools, columns=columns, workers=workers,
        chunk_rows=chunk_rows, progress=progress, options=options)))


def rows_to_arrow_batch(table: pa.Table) -> pa.RecordBatch:
    """A one-batch table as its RecordBatch (the shape a RecordBatch caller gets back)."""
    pa = _pyarrow()
    batches = table.combine_chunks().to_batches()
    return batches[0] if batches else pa.RecordBatch.from_pylist([], schema=table.schema)


def parquet_rows(path: str) -> int:
    """The number of rows of a Parquet file (read from its footer)."""
    _pyarrow()
    import pyarrow.parquet as pq

    return int(pq.ParquetFile(path).metadata.num_rows)


def read_parquet(path: Any, *, columns: Columns | None = None, skip: int = 0, batch_rows: int = 4096
                 ) -> tuple[Iterator[dict[str, Any]], int, Any]:
    """The records of a Parquet file (a path or a binary file), a batch at a time (only the columns the
    specs read), after the first ``skip``; with the file's row count and the id column's type."""
    _pyarrow()
    import pyarrow.parquet as pq

    columns = columns or Columns()
    file = pq.ParquetFile(path)
    id_type = _id_type(file.schema_arrow, columns)

    def records() -> Iterator[dict[str, Any]]:
        left = skip
        for batch in file.iter_batches(batch_size=batch_rows, columns=columns.roots()):
            if left >= batch.num_rows:
                left -= batch.num_rows
                continue
            yield from batch.slice(left).to_pylist()
            left = 0

    return records(), file.metadata.num_rows, id_type


class ParquetSink:
    """Result rows written to a Parquet file as they come, a row group every ``group_rows`` rows. With
    ``resume``, the rows an earlier run wrote to ``path`` are copied first (Parquet files cannot be
    appended to), and :attr:`kept` says how many; the file is replaced when the sink closes, so an
    interrupted run leaves the previous file, or a whole new one.

    The id column has ``id_type`` (the input's), or without one (JSONL ids, any JSON value) the type of the
    first id (:func:`id_type_of`), held back until it comes: string when a whole row group passes without
    one (any id fits as text), null when no row has one. Each row is made an Arrow row as it is written
    (:func:`arrow_row`), and what that changed is added to the caller's row too, so a summary counts it."""

    def __init__(self, path: str, *, id_type: Any = None, resume: bool = False, group_rows: int = 8192) -> None:
        pa = _pyarrow()
        import pyarrow.parquet as pq

        self.path, self.group_rows, self.kept = path, group_rows, 0
        self.earlier = pq.read_table(path) if resume and os.path.exists(path) else None
        self.id_type = id_type
        if self.earlier is not None:
            self.kept = self.earlier.num_rows
            written = self.earlier.schema.field("id").type
            if not pa.types.is_null(written):  # (a null column, no id so far, casts to the type this run finds)
                self.id_type = written
        self.temporary = f"{path}.partial"
        self.writer: Any = None
        self.pending: list[dict[str, Any]] = []

    def write(self, row: dict[str, Any]) -> None:
        if self.id_type is None and row["id"] is not None:
            self.id_type = id_type_of(row["id"])
        fitted, problems = arrow_row(row, self.id_type)
        if problems:
            row["parse_errors"] = fitted["parse_errors"]
        self.pending.append(fitted)
        if len(self.pending) >= self.group_rows * (1 if self.id_type is not None else 2):
            self.flush()

    def _open(self) -> None:
        import pyarrow.parquet as pq

        if self.id_type is None:
            self.id_type = _pyarrow().string() if self.pending else _pyarrow().null()
        self.writer = pq.ParquetWriter(self.temporary, result_schema(self.id_type))
        if self.earlier is not None:
            self.writer.write_table(self.earlier.cast(result_schema(self.id_type)))
            self.earlier = None

    def flush(self) -> None:
        if self.pending:
            if self.writer is None:
                self._open()
            self.writer.write_table(_arrow_table(self.pending, self.id_type))
            self.pending = []

    def close(self) -> None:
        """Write what is pending, end the file and put it in place (also after an interruption: the rows
        parsed so far are kept, and a resumed run goes on after them)."""
        if self.writer is None and self.id_type is None:
            self.id_type = _pyarrow().null()  # (no row had an id)
        self.flush()
        if self.writer is None:
            self._open()
        self.writer.close()
        os.replace(self.temporary, self.path)


__all__ = ["CHUNK_ROWS", "ID_TYPE_CODE", "SURROGATE_CODE", "BadLine", "Columns", "ParquetSink", "Progress", "RowError",
           "RowInput", "Summary", "TableParser", "arrow_row", "count_jsonl_rows", "decode_line", "default_workers",
           "id_type_of", "jsonl_lines", "jsonl_row", "parquet_rows", "parse_many", "parse_table", "portable_grammar",
           "read_jsonl", "read_parquet", "read_row", "result_row", "result_schema", "rows_to_arrow", "run_jsonl",
           "run_rows"]
