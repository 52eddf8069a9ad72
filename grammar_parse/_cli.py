"""The ``grammar-parse`` command line: parse, stream, compile, check and list grammars; detect a model's
grammar from its chat template and render prompts with it.

Every error a user can cause ends as one line on stderr, ``grammar-parse: error [CODE]: what, and what to
do``, and an exit status that tells a script which kind it was (see ``EXIT_STATUS``); no traceback. A
warning is one line too, ``grammar-parse: warning [CODE]: what``.
"""

from __future__ import annotations

import argparse
import codecs
import io
import json
import os
import re
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import IO, Any, BinaryIO, TextIO

from . import __version__
from ._engine.arguments import print_warning_line
from ._engine.grammar import Grammar
from ._engine.json_input import JSONLimitError, load_user_json
from ._engine.library import TOKENIZER_CONFIG_KEYS, list_grammars, load_grammar
from ._engine.session import ResponseParser
from .errors import ArgumentError, GrammarError, GrammarParseError, ParseError
from .templates._chat_template import load_chat_template, render_prompt
from .templates._detect import detect

EXIT_OK = 0
EXIT_PARSE = 1  # the model output did not parse (strict mode); `check`: the grammar or template is invalid
EXIT_USAGE = 2  # as argparse: bad arguments, unreadable files, unknown grammars, grammars that do not load
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it

EXIT_STATUS = f"""\
exit status:
  {EXIT_OK}    success
  {EXIT_PARSE}    the model output did not parse (strict mode); for `check`, the grammar or template is invalid
  {EXIT_USAGE}    usage error: a bad argument, a missing, unreadable or non-UTF-8 file, an unknown grammar
       name, or a grammar or template that does not load
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C)
errors are one line on stderr: grammar-parse: error [CODE]: MESSAGE HINT
warnings too: grammar-parse: warning [CODE]: MESSAGE
"""

GRAMMAR_HELP = ("a built-in grammar name or alias (see `list`; case and -, _, . are ignored, and vLLM/SGLang "
                "parser names work), or a file: an argument with a / or ending in .lark or .json is a path "
                "(.json: a response_template, legacy response_schema or tokenizer_config.json)")

#: Errors from loading a grammar that mean "cannot read it", not "it is invalid" (`check` exits 2 on these).
_UNREADABLE = frozenset({"grammar.not_found", "grammar.encoding"})
_MAX_DETAIL = 600  # characters of an error's message shown (a failing region's text can be megabytes)


class CommandLineError(GrammarParseError):
    """Something named on the command line cannot be used: a missing, unreadable or non-UTF-8 file, an
    unknown grammar, a grammar or template that does not load. The command exits with status 2."""

    code = "usage.file"


class NotUTF8Warning(UserWarning):
    """``stream`` read bytes that are not UTF-8 (code ``usage.not_utf8``): each sequence became U+FFFD, since
    the events before it were already written (``parse`` refuses such a file instead)."""

    code = "usage.not_utf8"


class NoTokenWarning(UserWarning):
    """``serve`` listens beyond this machine without a bearer token (code ``serve.no_token``)."""

    code = "serve.no_token"


@contextmanager
def _loading() -> Iterator[None]:
    """Errors raised while loading what the command line names are usage errors (status 2), not parse
    failures (status 1); the error keeps its code and hint."""
    try:
        yield
    except CommandLineError:
        raise
    except GrammarParseError as e:
        raise CommandLineError(e.detail, code=e.code, hint=e.hint) from e


def _read_text(path: str, what: str) -> str:
    if path == "-":
        stdin: BinaryIO | None = getattr(sys.stdin, "buffer", None)  # bytes: the locale cannot change the decoding
        try:
            return stdin.read().decode("utf-8") if stdin is not None else sys.stdin.read()
        except UnicodeDecodeError:
            raise CommandLineError("standard input is not UTF-8 text.", code="usage.file",
                                   hint="Pipe in text saved as UTF-8.") from None
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise CommandLineError(f"cannot read the {what} {path}: {e.strerror}.", code="usage.file",
                               hint="Check the path.") from None
    except UnicodeDecodeError:
        raise CommandLineError(f"the {what} {path} is not UTF-8 text.", code="usage.file",
                               hint="Give a text file saved as UTF-8.") from None


def _read_json(path: str, what: str) -> Any:
    try:
        return load_user_json(_read_text(path, what))
    except json.JSONDecodeError as e:
        raise CommandLineError(f"the {what} {path} is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}.",
                               code="usage.json", hint="Fix the JSON.") from None
    except JSONLimitError as e:
        raise CommandLineError(f"the {what} {path} cannot be read: {e}.", code="usage.json",
                               hint="Flatten the JSON.") from None


@contextmanager
def _open_raw(path: str | None, what: str) -> Iterator[io.FileIO]:
    """The input as an unbuffered binary file: one read returns as soon as anything arrives."""
    try:
        f = io.FileIO(sys.stdin.fileno(), "rb", closefd=False) if path in (None, "-") else io.FileIO(str(path), "rb")
    except OSError as e:
        raise CommandLineError(f"cannot read the {what} {path}: {e.strerror}.", code="usage.file",
                               hint="Check the path.") from None
    with f:
        yield f


def _grammar(spec: str) -> Grammar:
    with _loading():
        return load_grammar(spec)


def _tools(args: argparse.Namespace) -> list[Any] | None:
    tools = _read_json(args.tools_file, "tools file") if args.tools_file else None
    if tools is not None and not isinstance(tools, list):
        raise CommandLineError(f"the tools file {args.tools_file} holds a JSON {type(tools).__name__}, not a list.",
                               code="usage.json", hint="Give a JSON list of tool schemas, as the OpenAI API takes.")
    return tools


def _model(args: argparse.Namespace) -> str | None:
    """The model's chat template source named on the command line: --chat-template, else --model-dir."""
    source: str | None = getattr(args, "chat_template", None) or getattr(args, "model_dir", None)
    return source


def _model_grammar(args: argparse.Namespace) -> Grammar:
    """--grammar when given, else the grammar the model's chat template reads back (or one derived from it)."""
    if args.grammar:
        return _grammar(args.grammar)
    source = _model(args)
    if source is None:
        raise CommandLineError("no grammar: give --grammar NAME, or the model (--model-dir or --chat-template) to "
                               "detect it from.", code="usage.grammar", hint="See `grammar-parse list` for the names.")
    with _loading():
        return load_grammar(Path(source))


def _template_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    if not getattr(args, "template_kwargs", None):
        return {}
    return _json_object(args.template_kwargs, "--template-kwargs", '{"enable_thinking": false}')


def _json_object(text: str, option: str, example: str = '{"skip_special_tokens": false}') -> dict[str, Any]:
    """An option's JSON object, or a usage error naming the option."""
    try:
        value = load_user_json(text)
    except json.JSONDecodeError as e:
        raise CommandLineError(f"{option} is not valid JSON: {e.msg}.", code="usage.json",
                               hint=f"Give a JSON object, e.g. '{example}'.") from None
    except JSONLimitError as e:
        raise CommandLineError(f"{option} cannot be read: {e}.", code="usage.json",
                               hint=f"Give a JSON object, e.g. '{example}'.") from None
    if not isinstance(value, dict):
        raise CommandLineError(f"{option} is not a JSON object.", code="usage.json",
                               hint=f"Give a JSON object, e.g. '{example}'.")
    return value


def _rendered(args: argparse.Namespace, messages_file: str, tools: list[Any] | None, *,
              add_generation_prompt: bool = True) -> str:
    """The prompt the model's chat template renders for the messages in ``messages_file``."""
    source = _model(args)
    if source is None:
        raise CommandLineError("--messages-file needs the model's chat template to render them with.",
                               code="usage.grammar", hint="Add --model-dir DIR or --chat-template FILE.")
    messages = _read_json(messages_file, "messages file")
    if not isinstance(messages, list):
        raise CommandLineError(f"the messages file {messages_file} holds a JSON {type(messages).__name__}, not a list.",
                               code="usage.json", hint='Give a JSON list of messages: [{"role": "user", "content": "..."}].')
    with _loading():
        return render_prompt(messages, load_chat_template(Path(source)), tools=tools,
                             add_generation_prompt=add_generation_prompt, **_template_kwargs(args))


def _parser(args: argparse.Namespace) -> ResponseParser:
    tools = _tools(args)
    if args.prefix_file:
        prefix = _read_text(args.prefix_file, "prefix file")
    elif args.messages_file:
        prefix = _rendered(args, args.messages_file, tools)
    else:
        prefix = ""
    grammar = _model_grammar(args)
    with _loading():
        return ResponseParser(grammar, prefix, tools=tools, strict=not args.lenient,
                              calls_in_reasoning=args.calls_in_reasoning)


def _dump(obj: Any, out: TextIO, compact: bool = False) -> None:
    text = json.dumps(obj, ensure_ascii=False, indent=None if compact else 2)
    out.write(text.encode("utf-8", "backslashreplace").decode("utf-8") + "\n")  # lone surrogates escaped
    out.flush()


def _cmd_parse(args: argparse.Namespace, out: TextIO) -> int:
    parser = _parser(args)  # (first: a bad grammar is said before stdin is read)
    text = _read_text(args.input or "-", "model output file")
    parser.feed(text)
    message, _ = parser.finalize()
    _dump(message, out, args.compact)
    return EXIT_OK


def _cmd_stream(args: argparse.Namespace, out: TextIO) -> int:
    with _open_raw(args.input, "model output file") as source:
        parser = _parser(args)
        for event in parser.initial_events:
            _dump(event, out, compact=True)
        # A stream cannot be refused once its events are out: each sequence that is not UTF-8 is read as
        # U+FFFD, counted, and said in one warning at the end.
        replaced: list[int] = []

        def replace(error: UnicodeError) -> tuple[str, int]:
            assert isinstance(error, UnicodeDecodeError)
            replaced.append(error.end - error.start)
            return "\ufffd", error.end

        codecs.register_error("grammar_parse.stream", replace)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="grammar_parse.stream")
        while True:
            data = source.read(65536) or b""
            text = decoder.decode(data, final=not data)
            if text:
                for event in parser.feed(text):
                    _dump(event, out, compact=True)
            if not data:
                break
    if replaced:
        warnings.warn(NotUTF8Warning(f"the model output held {len(replaced):,} byte sequence(s) that are not UTF-8, "
                                     "read as U+FFFD"), stacklevel=1)
    message, events = parser.finalize()
    for event in events:
        _dump(event, out, compact=True)
    _dump({"type": "message", "message": message}, out, compact=True)
    return EXIT_OK


def _cmd_compile(args: argparse.Namespace, out: TextIO) -> int:
    out.write(_grammar(args.template).lark_source)
    return EXIT_OK


def _not_legacy_hint(document: Any) -> str:
    keys = set(document) if isinstance(document, dict) else set()
    if "fields" in keys or "response_template" in keys:
        return "It is a response_template: `grammar-parse compile` prints its grammar."
    if TOKENIZER_CONFIG_KEYS & keys:
        return "It is a tokenizer config that carries no response_schema."
    return "A legacy response_schema is a JSON Schema object with x-regex / x-parser keys (transformers <= 5.14)."


def _cmd_convert(args: argparse.Namespace, out: TextIO) -> int:
    from grammar_parse.compat import legacy_grammar, to_template, translate
    from grammar_parse.compat.legacy import is_legacy_schema

    document = _read_json(args.schema, "schema")
    schema = document
    if isinstance(document, dict) and document.get("response_schema") is not None:
        schema = document["response_schema"]
    if not is_legacy_schema(schema):
        raise CommandLineError(f"{args.schema} is not a legacy response_schema.", code="usage.not_legacy",
                               hint=_not_legacy_hint(document))
    with _loading():
        translation = translate(schema)
        lark_source = legacy_grammar(schema).lark_source
        template, notes = to_template(schema, translation)
    out.write(lark_source)
    out.write("\n// ---- equivalent response_template (v1) ----\n")
    if template is None:
        out.write("// none: " + "; ".join(notes) + "\n")
    else:
        out.write(json.dumps(template, indent=2, ensure_ascii=False) + "\n")
        for note in notes:
            out.write(f"// note: {note}\n")
    return EXIT_OK


def _cmd_check(args: argparse.Namespace, out: TextIO) -> int:
    try:
        grammar = load_grammar(args.template)
    except GrammarParseError as e:
        if e.code in _UNREADABLE:  # nothing to check: a usage error
            raise CommandLineError(e.detail, code=e.code, hint=e.hint) from e
        raise  # the check's verdict: invalid (status 1)
    out.write(f"ok: {args.template}: fields {', '.join(grammar.fields)}\n")
    return EXIT_OK


def _cmd_detect(args: argparse.Namespace, out: TextIO) -> int:
    with _loading():
        detection = detect(Path(args.model), template_kwargs=_template_kwargs(args))
    if detection.grammar is not None and not args.derive:
        out.write(detection.explain() + "\n")
        return EXIT_OK
    from .templates._derive import derive_grammar

    try:
        derived = derive_grammar(detection.template, renderings=list(detection.renderings))
    except GrammarParseError as e:  # the verdict (status 1): nothing fits and nothing could be derived
        raise GrammarError(f"{detection.explain()}\nno grammar could be derived from it either: {e.detail}",
                           code="detect.no_match", source=args.model,
                           hint="Name a grammar with --grammar, or author one (docs/grammar-authoring.md).") from e
    if args.output:
        out.write(detection.explain() + "\n")
        Path(args.output).write_text(derived.lark, encoding="utf-8")
        out.write(f"derived grammar written to {args.output}\n")
    else:
        out.write("".join(f"// {line}\n" for line in detection.explain().splitlines()))
        out.write(derived.lark)
    return EXIT_OK


def _cmd_render(args: argparse.Namespace, out: TextIO) -> int:
    out.write(_rendered(args, args.messages_file, _tools(args), add_generation_prompt=not args.no_generation_prompt))
    out.flush()
    return EXIT_OK


def _is_parquet(path: str | None, given: str | None) -> bool:
    if given is not None:
        return given == "parquet"
    return path is not None and path.lower().endswith((".parquet", ".pq"))


def _cmd_batch(args: argparse.Namespace, out: TextIO) -> int:
    from .batch import Columns, Progress, count_jsonl_rows, default_workers, read_jsonl, run_rows

    grammar = _model_grammar(args) if args.grammar or _model(args) or not args.grammar_column else None
    prefix = _read_text(args.prefix_file, "prefix file") if args.prefix_file else ""
    columns = Columns(text=args.text, prompt=args.prompt, tools=args.tools, id=args.id, grammar=args.grammar_column)
    workers = args.jobs or default_workers()
    parquet_in = _is_parquet(args.input, args.input_format)
    parquet_out = _is_parquet(args.output, args.output_format)
    if args.resume and args.output in (None, "-"):
        raise CommandLineError("--resume needs an output file (-o FILE) to resume.", code="usage.file",
                               hint="Write the rows to a file with -o.")
    if parquet_out and args.output in (None, "-"):
        raise CommandLineError("Parquet output needs a file (-o rows.parquet): a Parquet file ends with its index.",
                               code="usage.file", hint="Give -o FILE.parquet, or write JSONL to stdout.")
    with ExitStack() as stack:
        skip = _written_rows(args.output, parquet_out) if args.resume else 0
        total: int | None = None
        id_type = None
        if parquet_in:
            records, total, id_type = _parquet_records(args, columns, skip)
            total -= skip
        else:  # (bytes, split at \n only and decoded line by line: a bad line is its row's error)
            inputs: IO[Any] = (getattr(sys.stdin, "buffer", None) or sys.stdin) if args.input in (None, "-") else \
                stack.enter_context(_open_binary(args.input, "input file"))
            if args.input not in (None, "-") and not args.quiet and sys.stderr.isatty():
                total = count_jsonl_rows(inputs) - skip
                inputs.seek(0)
            with _loading():  # (a first record without --text's key: exit 2 before any row is parsed)
                records = read_jsonl(inputs, skip=skip, columns=columns)
        progress = Progress(sys.stderr, total) if not args.quiet and sys.stderr.isatty() else None
        if progress is not None:
            stack.callback(progress.close)
        write = _batch_sink(stack, args, out, parquet_out, id_type)
        with _loading():
            summary = run_rows(records, write, grammar, columns=columns, prefix=prefix, tools=_tools(args),
                               workers=workers, progress=progress)
    if not args.quiet:
        sys.stderr.write(summary.text() + "\n")
    return EXIT_PARSE if args.fail_on_error and summary.rows_with_errors else EXIT_OK


def _open_binary(path: str, what: str) -> BinaryIO:
    try:
        return open(path, "rb")  # noqa: SIM115 - the caller's stack closes it
    except OSError as e:
        raise CommandLineError(f"cannot read the {what} {path}: {e.strerror}.", code="usage.file",
                               hint="Check the path.") from None


def _written_rows(path: str, parquet: bool) -> int:
    """The rows an earlier run wrote to ``path`` (--resume): lines of JSONL, or a Parquet file's rows."""
    if not os.path.exists(path):
        return 0
    if parquet:
        from .batch import parquet_rows

        try:
            return parquet_rows(path)
        except GrammarParseError as e:  # (pyarrow missing)
            raise CommandLineError(e.detail, code="usage.file", hint=e.hint) from None
        except Exception as e:  # noqa: BLE001 - pyarrow's errors for a file that is not Parquet vary
            raise CommandLineError(f"cannot resume {path}: it is not a whole Parquet file ({type(e).__name__}).",
                                   code="usage.file", hint="Remove it and run again without --resume.") from None
    from .batch import count_jsonl_rows

    with open(path, "rb") as written:  # (counted as the input's rows are: lines ended by \n)
        return count_jsonl_rows(written)


def _parquet_records(args: argparse.Namespace, columns: Any, skip: int) -> tuple[Any, int, Any]:
    from .batch import read_parquet

    source: Any = args.input
    if args.input in (None, "-"):
        source = io.BytesIO(sys.stdin.buffer.read())  # (Parquet is read from its end: stdin is buffered whole)
    try:
        return read_parquet(source, columns=columns, skip=skip)
    except GrammarParseError as e:  # (pyarrow missing, a column the file does not have)
        raise CommandLineError(e.detail, code="usage.file", hint=e.hint) from None
    except OSError as e:
        raise CommandLineError(f"cannot read the input file {args.input}: {e}.", code="usage.file",
                               hint="Check the path.") from None
    except Exception as e:  # noqa: BLE001 - pyarrow's errors for a file that is not Parquet vary
        raise CommandLineError(f"the input file {args.input} is not Parquet ({type(e).__name__}).", code="usage.file",
                               hint="Give --input-format jsonl for JSONL.") from None


def _batch_sink(stack: ExitStack, args: argparse.Namespace, out: TextIO, parquet: bool,
                id_type: Any) -> Callable[[dict[str, Any]], object]:
    """Where result rows go: JSONL lines (flushed, so --resume finds them), or a Parquet file."""
    if parquet:
        from .batch import ParquetSink

        if id_type is None and args.id is None:  # (no id: the null type; with --id on JSONL, the first id's type)
            from .batch import result_schema

            id_type = result_schema().field("id").type
        sink = ParquetSink(args.output, id_type=id_type, resume=args.resume)
        stack.callback(sink.close)
        return sink.write
    stream = out if args.output in (None, "-") else stack.enter_context(
        open(args.output, "a" if args.resume else "w", encoding="utf-8"))
    stack.callback(stream.flush)
    from .batch import jsonl_row

    return lambda row: stream.write(jsonl_row(row))


def _cmd_view(args: argparse.Namespace, out: TextIO) -> int:
    from .batch import Columns
    from .view import FOLD_CHARS, jsonl_record, row_html, to_html

    record_options = [f"--{o.replace('_', '-')}" for o in ("text", "prompt", "tools", "id_column", "grammar_column",
                                                            "input_format") if getattr(args, o) is not None]
    if args.row is not None and args.id is not None:
        raise CommandLineError("give --row N or --id VALUE, not both.", code="usage.batch",
                               hint="--row N is the record's place (0 for the first); --id VALUE its id column's "
                                    "value. The id column itself is --id-column (before this release, --id).")
    if args.row is None and args.id is None and record_options:
        raise CommandLineError(f"{record_options[0]} reads a record of a batch input: it needs --row N or --id VALUE.",
                               code="usage.batch", hint="Add --row N (0 for the first record), or --id VALUE.")
    if args.row is not None and args.row < 0:
        raise CommandLineError(f"there is no row {args.row}: rows are counted from 0.", code="usage.batch",
                               hint="Give --row 0 for the first record (before this release rows were counted from 1).")
    prefix = _read_text(args.prefix_file, "prefix file") if args.prefix_file else ""
    fold = FOLD_CHARS if args.fold is None else args.fold
    grammar: Grammar | None
    if args.row is None and args.id is None:
        grammar = _model_grammar(args)
        text = _read_output_bytes(args.input or "-")
        with _loading():
            page = to_html(text, grammar, prefix=prefix, tools=_tools(args), title=args.title, fold=fold)
    else:  # one record of a batch input, read as `batch` reads it
        columns = Columns(text=args.text or "completion", prompt=args.prompt, tools=args.tools,
                          id=args.id_column or ("id" if args.id is not None else None), grammar=args.grammar_column)
        grammar = _model_grammar(args) if args.grammar or _model(args) or not args.grammar_column else None
        if _is_parquet(args.input, args.input_format):
            records, total, _ = _parquet_records(args, columns, args.row or 0)
            if args.id is not None:
                row, record = _record_by_id(enumerate(records), columns, args.id, total)
            else:
                row, record = args.row, next(records, None)
                if record is None:
                    raise CommandLineError(f"there is no row {args.row}: the input has {total} row{'s' * (total != 1)}"
                                           f"{f' (0 to {total - 1})' if total else ''}.", code="usage.batch",
                                           hint="Rows are counted from 0, as pandas counts them.")
        else:  # (bytes, decoded line by line as batch reads them: a bad byte elsewhere is no matter)
            with ExitStack() as stack:
                inputs: IO[Any] = (getattr(sys.stdin, "buffer", None) or sys.stdin) if args.input in (None, "-") \
                    else stack.enter_context(_open_binary(args.input, "input file"))
                with _loading():
                    if args.id is not None:
                        from .batch import read_jsonl

                        row, record = _record_by_id(enumerate(read_jsonl(inputs)), columns, args.id)
                    else:
                        row, record = args.row, jsonl_record(inputs, args.row)
        with _loading():
            page = row_html(record, grammar, columns=columns, prefix=prefix, tools=_tools(args), title=args.title,
                            row=row, fold=fold)
    if args.output:
        Path(args.output).write_text(page, encoding="utf-8")
    else:  # (UTF-8, as the page's <meta charset> says, whatever the terminal's encoding)
        buffer: BinaryIO | None = getattr(out, "buffer", None)
        if buffer is None:
            out.write(page)
        else:
            out.flush()
            buffer.write(page.encode("utf-8"))
            buffer.flush()
    return EXIT_OK


def _read_output_bytes(path: str) -> str:
    """A model output to view: a byte that is not UTF-8 is kept as a lone surrogate (surrogateescape), which
    the page shows marked with the byte, instead of refusing the whole file over one byte."""
    try:
        if path == "-":
            stdin: BinaryIO | None = getattr(sys.stdin, "buffer", None)
            data = stdin.read() if stdin is not None else sys.stdin.read().encode("utf-8", "surrogateescape")
        else:
            with open(path, "rb") as f:
                data = f.read()
    except OSError as e:
        raise CommandLineError(f"cannot read the model output file {path}: {e.strerror}.", code="usage.file",
                               hint="Check the path.") from None
    return data.decode("utf-8", "surrogateescape")


def _record_by_id(records: Iterable[tuple[int, Any]], columns: Any, wanted: str, total: int | None = None
                  ) -> tuple[int, Any]:
    """The first record whose id column holds ``wanted`` (as written on the command line: text as it is,
    anything else as JSON writes it, so --id 7 finds the number 7), with its row number."""
    from .view import id_matches

    getter = columns.getters()[3]
    seen = -1
    for seen, record in records:
        if isinstance(record, Mapping) and id_matches(getter(record), wanted):
            return seen, record
    count = seen + 1 if total is None else total
    raise CommandLineError(f"no row has the id {wanted} at {columns.id!r} ({count} row{'s' * (count != 1)}).",
                           code="usage.batch", hint="Check the value, or say where the id is with --id-column.")


def _cmd_list(args: argparse.Namespace, out: TextIO) -> int:
    for name, aliases in list_grammars().items():
        grammar = load_grammar(name)
        also = f" (also: {', '.join(aliases)})" if aliases else ""
        out.write(f"{name}{also}\n    fields: {', '.join(dict.fromkeys(grammar.fields))}\n")
    return EXIT_OK


#: The environment variable a bearer token can come from (`--token` shows in `ps`; a file or this do not).
TOKEN_ENV = "GRAMMAR_PARSE_TOKEN"
_LOOPBACK = ("127.0.0.1", "::1", "localhost")


def _serve_token(args: argparse.Namespace) -> str | None:
    """The bearer token: --token, else --token-file (its first line), else $GRAMMAR_PARSE_TOKEN."""
    if args.token:
        return str(args.token)
    if args.token_file:
        token = _read_text(args.token_file, "token file").strip()
        if not token:
            raise CommandLineError(f"the token file {args.token_file} is empty.", code="usage.file",
                                   hint="Write the token on its first line.")
        return token
    return os.environ.get(TOKEN_ENV) or None


def _serve_backend(args: argparse.Namespace) -> Any:
    """The replay backend, or an upstream completions server with --upstream."""
    from .serving._backends import ReplayBackend

    if not args.upstream:
        return ReplayBackend()
    key = None
    if args.upstream_key_env:
        key = os.environ.get(args.upstream_key_env)
        if not key:
            raise CommandLineError(f"--upstream-key-env names {args.upstream_key_env}, which is not set.",
                                   code="usage.file", hint="Export the upstream's API key under that name.")
    from .serving._backends import UpstreamBackend

    extra = _json_object(args.upstream_body, "--upstream-body") if args.upstream_body else None
    return UpstreamBackend(args.upstream, model=args.upstream_model, api_key=key, extra_body=extra)


def _cmd_serve(args: argparse.Namespace, out: TextIO) -> int:  # pragma: no cover - runs a server (tests/test_server.py runs it)
    import logging

    from .serving._server import Limits, LMSPApp, serve
    from .serving.store import open_store

    source = _model(args)
    if args.grammar == "auto" and source is None:
        raise CommandLineError("--grammar auto detects the grammar from the model's chat template.",
                               code="usage.grammar", hint="Add --model-dir DIR or --chat-template FILE.")
    with _loading():
        template = load_chat_template(Path(source)) if source else None
    if args.grammar and args.grammar != "auto":
        grammar = _grammar(args.grammar)
    elif source:
        with _loading():
            grammar = load_grammar(Path(source))
    else:
        grammar = _grammar("qwen3")
    token = _serve_token(args)
    model = args.model or args.upstream_model or "qwen3"
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = LMSPApp(grammar=grammar, model=model, token=token, chat_template=template, backend=_serve_backend(args),
                  limits=Limits(max_body=args.max_body, body_timeout=args.body_timeout, send_timeout=args.send_timeout),
                  store=open_store(args.store, max_entries=args.store_size, ttl=args.store_ttl,
                                   max_bytes=args.store_bytes),
                  template_kwargs=_template_kwargs(args))
    if args.host not in _LOOPBACK and token is None:
        warnings.warn(NoTokenWarning(f"serving {args.host} without a bearer token: anyone who can reach the port can "
                                     f"use the model (set {TOKEN_ENV} or --token-file)."), stacklevel=1)

    def ready(url: str) -> None:  # (called once the port is bound, so the address is one that answers)
        out.write(f"serving model {model!r} at {url}: LMSP at {url}/lmsp/v1/responses, OpenAI-compatible at {url}/v1\n")
        out.flush()

    serve(app, args.host, args.port, log_level=args.log_level, on_ready=ready, header_timeout=args.header_timeout)
    return EXIT_OK


def _cmd_workbench(args: argparse.Namespace, out: TextIO) -> int:  # pragma: no cover - runs a server (tests/test_workbench.py runs it)
    from .batch import Columns
    from .workbench import open_workbench, serve_workbench

    columns = Columns(text=args.text, prompt=args.prompt, tools=args.tools, id=args.id)
    with _loading():
        bench = open_workbench(args.grammar, samples=args.samples, model_dir=args.model_dir, columns=columns)

    def ready(url: str) -> None:  # (the page's address, with its token: the page is served only with it)
        out.write(f"grammar workbench at {url} (127.0.0.1 only; Ctrl-C stops it)\n")
        out.flush()
        if args.open:
            import webbrowser

            webbrowser.open(url)

    serve_workbench(bench, port=args.port, on_ready=ready, log_level=args.log_level)
    return EXIT_OK


def _workbench_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("grammar", nargs="?", help="the grammar to work on: a .lark or template .json file (a new one is "
                                              "made when saved), or a built-in name (read-only: save it as a file); "
                                              "default: the model's (--model-dir), else a skeleton")
    p.add_argument("--samples", metavar="DIR|FILE.jsonl", help="the outputs to try it on: a folder of .txt files "
                                                               "(with .prefix.txt, .tools.json and expected .json, as "
                                                               "tests/golden), or a JSONL log (--text, --prompt, ...)")
    p.add_argument("--model-dir", help="the model's directory or chat template: a grammar can start from it")
    _record_columns(p, "JSONL samples: ", "completion")
    p.add_argument("--id", help="JSONL samples: the record's id, shown with its row, a key or JMESPath")
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default 0: a free one, printed)")
    p.add_argument("--open", action="store_true", help="open the page in the web browser")
    p.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"],
                   help="server log level (default warning)")


def _model_arguments(p: argparse.ArgumentParser) -> None:
    """Where the model's chat template comes from, and its kwargs (parse, stream, render, serve, batch, view)."""
    p.add_argument("--model-dir", help="the model's directory (tokenizer_config.json or chat_template.jinja): "
                                       "its chat template renders prompts and, without --grammar, picks the grammar")
    p.add_argument("--chat-template", help="the model's chat template (a .jinja, chat_template.json or "
                                           "tokenizer_config.json), as --model-dir")
    p.add_argument("--template-kwargs", help='JSON object of chat-template kwargs, e.g. \'{"enable_thinking": false}\'')


def _output_arguments(p: argparse.ArgumentParser) -> None:
    """One output, its grammar, its prompt and tools, and how leniently it is read (parse and stream)."""
    p.add_argument("input", nargs="?", help="model output file (default, or -: stdin)")
    p.add_argument("-g", "--grammar", help=GRAMMAR_HELP + "; without it, the grammar the model's chat template "
                                                          "reads back (--model-dir, --chat-template)")
    _model_arguments(p)
    p.add_argument("--prefix-file", help="the prompt the model continued (default: none, i.e. prefix \"\")")
    p.add_argument("--messages-file", help="JSON list of the chat messages the model answered: the prefix is "
                                           "rendered from them with the model's chat template")
    p.add_argument("--tools-file", help="JSON list of tool schemas, to type tool-call arguments")
    p.add_argument("--lenient", action="store_true",
                   help="never fail on model output: keep unparseable text and report it under parse_errors")
    p.add_argument("--calls-in-reasoning", choices=("never", "fallback", "always"),
                   help="how a call written inside the reasoning is read: never (reasoning text), fallback (a call "
                        "when no call follows the reasoning), always (a call); default: the grammar's")


def _parse_arguments(p: argparse.ArgumentParser) -> None:
    _output_arguments(p)
    p.add_argument("--compact", action="store_true", help="print the JSON on one line")


def _grammar_argument(p: argparse.ArgumentParser) -> None:
    """The one grammar a command reads (compile, check)."""
    p.add_argument("template", metavar="grammar", help=GRAMMAR_HELP)


def _convert_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("schema", help="legacy response_schema JSON (or a tokenizer_config.json carrying one)")


def _detect_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="a model directory, chat_template.jinja, chat_template.json or tokenizer_config.json")
    p.add_argument("--derive", action="store_true", help="derive a grammar from the template even if a built-in fits")
    p.add_argument("--template-kwargs", help="JSON object of variables the template needs beyond messages and tools")
    p.add_argument("-o", "--output", help="write the derived grammar to this .lark file")


def _render_arguments(p: argparse.ArgumentParser) -> None:
    _model_arguments(p)
    p.add_argument("--messages-file", required=True, help="JSON list of chat messages")
    p.add_argument("--tools-file", help="JSON list of tool schemas")
    p.add_argument("--no-generation-prompt", action="store_true", help="do not open the assistant's turn")


def _serve_arguments(p: argparse.ArgumentParser) -> None:
    """The gateway's model, upstream, address and token; then its limits and store (:func:`_serve_limits`)."""
    p.add_argument("-g", "--grammar", help="grammar of the model's output, or auto (default): the model's, from "
                                           "--model-dir or --chat-template, else qwen3")
    _model_arguments(p)
    p.add_argument("--model", help="model id clients ask for (default: --upstream-model, else qwen3)")
    p.add_argument("--upstream", metavar="URL", help="an OpenAI-compatible completions API root to generate with, "
                                                     "e.g. http://127.0.0.1:8080/v1 (default: replay recorded outputs)")
    p.add_argument("--upstream-model", help="the model name the upstream is asked for (default: --model)")
    p.add_argument("--upstream-key-env", metavar="VAR", help="environment variable holding the upstream's API key")
    p.add_argument("--upstream-body", metavar="JSON", help='JSON object merged into every upstream request, e.g. '
                                                          '\'{"skip_special_tokens": false}\' for vLLM')
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1, this machine only; "
                                                       "0.0.0.0 serves the network: set a token)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    p.add_argument("--token", help=f"require this bearer token (visible to other users in `ps`: prefer "
                                   f"--token-file or ${TOKEN_ENV})")
    p.add_argument("--token-file", help=f"require the bearer token on this file's first line (else ${TOKEN_ENV})")
    _serve_limits(p)


def _serve_limits(p: argparse.ArgumentParser) -> None:
    """The gateway's log level, size and time limits, and where it keeps responses."""
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"],
                   help="server log level (default info: one line per request, never bodies)")
    p.add_argument("--max-body", type=int, default=4 * 1024 * 1024, metavar="BYTES",
                   help="largest request body accepted (default 4 MiB)")
    p.add_argument("--header-timeout", type=float, default=10.0, metavar="SECONDS",
                   help="time a request's head (request line and headers) may take to arrive (default 10)")
    p.add_argument("--body-timeout", type=float, default=10.0, metavar="SECONDS",
                   help="time a request body may take to arrive (default 10)")
    p.add_argument("--send-timeout", type=float, default=30.0, metavar="SECONDS",
                   help="time one write may wait on a client that does not read before the response is given up "
                        "and its generation stopped (default 30)")
    p.add_argument("--store", default="memory", metavar="URL",
                   help="where responses are kept for previous_response_id: 'memory' (this process) or a "
                        "redis:// URL shared by replicas (the redis extra) (default memory)")
    p.add_argument("--store-size", type=int, default=1000, metavar="N",
                   help="stored responses kept for previous_response_id, oldest evicted first (default 1000)")
    p.add_argument("--store-bytes", type=int, default=256 * 2**20, metavar="BYTES",
                   help="bytes the stored responses may take together, oldest evicted first (default 256 MiB)")
    p.add_argument("--store-ttl", type=float, default=3600.0, metavar="SECONDS",
                   help="how long a stored response is kept (default 3600)")


def _batch_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("input", nargs="?", help="JSONL input (records, or JSON strings) or Parquet (.parquet) "
                                            "(default, or -: stdin)")
    p.add_argument("-o", "--output", help="output file: JSONL, or Parquet for .parquet (default, or -: JSONL on stdout)")
    p.add_argument("--input-format", choices=["jsonl", "parquet"], help="the input's format (default: by its name)")
    p.add_argument("--output-format", choices=["jsonl", "parquet"], help="the output's format (default: by its name)")
    p.add_argument("-g", "--grammar", help=GRAMMAR_HELP)
    _model_arguments(p)
    _record_columns(p, "", "completion")
    p.add_argument("--id", help="the record's id, kept in its row, a key or JMESPath")
    p.add_argument("--grammar-column", help="the record's grammar name (a log of several models): a key or JMESPath")
    p.add_argument("--prefix-file", help="the prompt of every row without one of its own")
    p.add_argument("--tools-file", help="JSON list of tool schemas for every row without its own")
    p.add_argument("-j", "--jobs", type=int, help="worker processes (default: all cores)")
    p.add_argument("--resume", action="store_true", help="append to -o, skipping the rows it already holds")
    p.add_argument("--fail-on-error", action="store_true", help="exit 1 if any row has a parse error")
    p.add_argument("--quiet", action="store_true", help="no progress line and no summary")


def _record_columns(p: argparse.ArgumentParser, scope: str, text_default: str | None) -> None:
    """Where a batch record keeps its output, prompt and tools (a key or JMESPath each), as batch, view and
    workbench read records; ``scope`` says when the options apply."""
    p.add_argument("--text", default=text_default,
                   help=f"{scope}the record's output, a key or JMESPath (default completion)")
    p.add_argument("--prompt", help=f"{scope}the record's prompt (the prefix), a key or JMESPath")
    p.add_argument("--tools", help=f"{scope}the record's tool schemas, a key or JMESPath")


def _view_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("input", nargs="?", help="model output file, or with --row/--id a batch input (JSONL or Parquet) "
                                            "(default, or -: stdin)")
    p.add_argument("-g", "--grammar", help=GRAMMAR_HELP)
    _model_arguments(p)
    p.add_argument("--prefix-file", help="the prompt the model continued (with --row or --id: for a record "
                                         "without one)")
    p.add_argument("--tools-file", help="JSON list of tool schemas, to type tool-call arguments (with --row or "
                                        "--id: for a record without its own)")
    p.add_argument("--row", type=int, metavar="N", help="show record N of a batch input, counted from 0 as pandas "
                                                        "counts (before this release, from 1); blank lines are none: "
                                                        "the batch's output row N answers it")
    p.add_argument("--id", metavar="VALUE", help="show the first record of a batch input whose id (--id-column) is "
                                                 "VALUE (before this release --id named the id column)")
    p.add_argument("--id-column", help="with --row or --id: the record's id, shown in the title, a key or JMESPath "
                                       "(default with --id: id)")
    _record_columns(p, "with --row or --id: ", None)
    p.add_argument("--grammar-column", help="with --row or --id: the record's grammar name, a key or JMESPath")
    p.add_argument("--input-format", choices=["jsonl", "parquet"],
                   help="with --row or --id: the input's format (default: by its name)")
    p.add_argument("--title", help="the page's title")
    p.add_argument("--fold", type=int, metavar="N",
                   help="fold regions longer than N characters, showing their head and tail (default 2000; 0: never)")
    p.add_argument("-o", "--output", help="the HTML file to write (default: stdout)")


def _no_arguments(p: argparse.ArgumentParser) -> None:
    """A command that takes none (list)."""


#: The sub-commands in the order ``--help`` lists them: name, help (its description too), arguments, run.
_COMMANDS: tuple[tuple[str, str, Callable[[argparse.ArgumentParser], None],
                       Callable[[argparse.Namespace, TextIO], int]], ...] = (
    ("parse", "parse a complete output and print the message as JSON", _parse_arguments, _cmd_parse),
    ("stream", "parse stdin as it arrives; print one event per line, then the message", _output_arguments,
     _cmd_stream),
    ("compile", "print the Lark grammar of a built-in, a .lark file or a .json template", _grammar_argument,
     _cmd_compile),
    ("convert", "translate a legacy response_schema: the Lark grammar, and the v1 response_template where one can "
                "say the same", _convert_arguments, _cmd_convert),
    ("check", "validate a template or grammar (exit 0) or explain what is wrong (exit 1)", _grammar_argument,
     _cmd_check),
    ("detect", "name the built-in grammar that reads a model's chat template back, or explain why none does "
               "(exit 1); --derive prints a grammar derived from the template", _detect_arguments, _cmd_detect),
    ("render", "print the prompt a model's chat template renders for a list of messages", _render_arguments,
     _cmd_render),
    ("serve", "run the reference gateway: LMSP Responses and OpenAI-compatible Chat Completions over recorded "
              "outputs or an upstream completions server (needs the serve extra)", _serve_arguments, _cmd_serve),
    ("batch", "parse a JSONL file of outputs into a JSONL file of rows (reasoning, content, tool calls, parse "
              "errors, id), lenient, with worker processes and a summary", _batch_arguments, _cmd_batch),
    ("view", "write one self-contained HTML page showing how an output parses: a summary of its problems, each "
             "region by field, delimiters, discarded text and errors, and the message; --row N (from 0) or --id "
             "VALUE shows a record of a batch input", _view_arguments, _cmd_view),
    ("workbench", "write a grammar on a local web page: its load errors, every sample parsed as you type, the "
                  "result of one (view, message, events, deltas, streamed vs one-shot, constraint export), save, "
                  "golden files and the engines' registration (needs the serve extra)", _workbench_arguments,
     _cmd_workbench),
    ("list", "list the built-in grammars and their aliases", _no_arguments, _cmd_list),
)


def build_argparser() -> argparse.ArgumentParser:
    """The ``grammar-parse`` command line: one sub-command per use (``_COMMANDS``), each with its arguments."""
    ap = argparse.ArgumentParser(
        prog="grammar-parse",
        description="Parse raw LLM output into structured chat messages with grammars.",
        epilog=EXIT_STATUS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--version", action="version", version=f"grammar-parse {__version__}")
    sub = ap.add_subparsers(dest="command", required=True)
    for name, summary, arguments, run in _COMMANDS:
        p = sub.add_parser(name, help=summary, description=summary[0].upper() + summary[1:] + ".",
                           epilog=EXIT_STATUS, formatter_class=argparse.RawDescriptionHelpFormatter)
        arguments(p)
        p.set_defaults(run=run)
    return ap


def _one_line(error: GrammarParseError) -> str:
    """The error as one line: its message (newlines folded, cut to a readable length), then its hint."""
    detail = re.sub(r"\s*\n\s*", " ", error.detail).strip()
    if len(detail) > _MAX_DETAIL:
        detail = detail[:_MAX_DETAIL] + f"... ({len(detail) - _MAX_DETAIL} more characters)"
    hint = re.sub(r"\s*\n\s*", " ", error.hint or "").strip()
    return f"grammar-parse: error [{error.code}]: {detail}" + (f" {hint}" if hint else "")


@contextmanager
def _warnings_as_lines() -> Iterator[None]:
    """Warnings printed as one line each on stderr (Python's own format names a source line, here
    ``sys.exit(main())``, which tells a user of the command nothing). Which are shown stays the warning
    filters' choice (by default each once per place; -W, PYTHONWARNINGS)."""
    with warnings.catch_warnings():
        warnings.showwarning = print_warning_line
        yield


def _quiet_stdout() -> None:
    """After a broken pipe, send what is left to /dev/null so the interpreter's final flush stays quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is no real file (tests): silence stderr instead
        sys.stderr.close()


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the command line; returns the exit status (see ``EXIT_STATUS``)."""
    try:
        args = build_argparser().parse_args(argv)
    except SystemExit as e:  # --help, --version (0) and argparse's usage errors (2), already printed
        return e.code if isinstance(e.code, int) else EXIT_OK if e.code is None else EXIT_USAGE
    try:
        with _warnings_as_lines():
            return int(args.run(args, out or sys.stdout))
    except (CommandLineError, ArgumentError) as e:  # (what the command was given: a usage error, status 2)
        sys.stderr.write(_one_line(e) + "\n")
        return EXIT_USAGE
    except GrammarParseError as e:
        lenient = " Or pass --lenient to keep the text and report the problem under parse_errors."
        sys.stderr.write(_one_line(e) + (lenient if isinstance(e, ParseError) and hasattr(args, "lenient") else "")
                         + "\n")
        return EXIT_PARSE
    except BrokenPipeError:  # the reader went away (| head): stop quietly
        _quiet_stdout()
        return EXIT_OK
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
