"""The ``grammar-parse`` command line: parse, stream, compile, check and list grammars."""

from __future__ import annotations

import argparse
import codecs
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from .errors import GrammarParseError
from .grammar import Grammar
from .library import grammar_from_json, list_grammars, load_grammar
from .session import ResponseParser


def _read_json(path: str, what: str) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise SystemExit(f"grammar-parse: cannot read {what} {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise SystemExit(f"grammar-parse: {what} {path} is not valid JSON: {e}") from None


def _grammar(spec: str) -> Grammar:
    return load_grammar(spec)


def _parser(args: argparse.Namespace) -> ResponseParser:
    prefix = Path(args.prefix_file).read_text(encoding="utf-8") if args.prefix_file else ""
    tools = _read_json(args.tools_file, "tools file") if args.tools_file else None
    if tools is not None and not isinstance(tools, list):
        raise SystemExit("grammar-parse: the tools file must hold a JSON list of tool schemas")
    return ResponseParser(_grammar(args.grammar), prefix, tools=tools, strict=not args.lenient)


def _dump(obj: Any, out: TextIO, compact: bool = False) -> None:
    text = json.dumps(obj, ensure_ascii=False, indent=None if compact else 2)
    out.write(text.encode("utf-8", "backslashreplace").decode("utf-8") + "\n")  # lone surrogates escaped
    out.flush()


def _cmd_parse(args: argparse.Namespace, out: TextIO) -> int:
    parser = _parser(args)
    text = Path(args.input).read_text(encoding="utf-8") if args.input not in (None, "-") else sys.stdin.read()
    parser.feed(text)
    message, _ = parser.finalize()
    _dump(message, out, args.compact)
    return 0


def _cmd_stream(args: argparse.Namespace, out: TextIO) -> int:
    parser = _parser(args)
    for event in parser.initial_events:
        _dump(event, out, compact=True)
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    fd = sys.stdin.fileno() if args.input in (None, "-") else os.open(args.input, os.O_RDONLY)
    while True:
        data = os.read(fd, 65536)  # returns as soon as anything arrives
        text = decoder.decode(data, final=not data)
        if text:
            for event in parser.feed(text):
                _dump(event, out, compact=True)
        if not data:
            break
    message, events = parser.finalize()
    for event in events:
        _dump(event, out, compact=True)
    _dump({"type": "message", "message": message}, out, compact=True)
    return 0


def _cmd_compile(args: argparse.Namespace, out: TextIO) -> int:
    out.write(grammar_from_json(_read_json(args.template, "template")).lark_source)
    return 0


def _cmd_convert(args: argparse.Namespace, out: TextIO) -> int:
    from grammar_parse.compat import from_tokenizer_config, legacy_grammar, to_template, translate

    schema = _read_json(args.schema, "schema")
    if isinstance(schema, dict) and "response_schema" in schema:
        schema = schema["response_schema"]
    translation = translate(schema)
    out.write(legacy_grammar(schema).lark_source)
    template, notes = to_template(schema, translation)
    out.write("\n// ---- equivalent response_template (v1) ----\n")
    if template is None:
        out.write("// none: " + "; ".join(notes) + "\n")
    else:
        out.write(json.dumps(template, indent=2, ensure_ascii=False) + "\n")
        for note in notes:
            out.write(f"// note: {note}\n")
    return 0


def _cmd_check(args: argparse.Namespace, out: TextIO) -> int:
    grammar = _grammar(args.template)
    out.write(f"ok: {args.template}: fields {', '.join(grammar.fields)}\n")
    return 0


def _cmd_list(args: argparse.Namespace, out: TextIO) -> int:
    for name, aliases in list_grammars().items():
        grammar = load_grammar(name)
        also = f" (also: {', '.join(aliases)})" if aliases else ""
        out.write(f"{name}{also}\n    fields: {', '.join(dict.fromkeys(grammar.fields))}\n")
    return 0


def _cmd_serve(args: argparse.Namespace, out: TextIO) -> int:  # pragma: no cover - runs a server
    from .server import LMSPApp, serve

    app = LMSPApp(grammar=load_grammar(args.grammar), model=args.model, token=args.token)
    out.write(f"LMSP endpoint for model {args.model!r} at http://{args.host}:{args.port}/lmsp/v1/responses\n")
    out.flush()
    serve(app, args.host, args.port)
    return 0


def build_argparser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="grammar-parse",
        description="Parse raw LLM output into structured chat messages with grammars.",
    )
    sub = ap.add_subparsers(dest="command", required=True)

    def grammar_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("input", nargs="?", help="model output file (default: stdin)")
        p.add_argument("-g", "--grammar", required=True,
                       help="built-in grammar name (see `list`), a .lark grammar, or a .json response_template, "
                            "legacy response_schema or tokenizer_config.json")
        p.add_argument("--prefix-file", help="the prompt the model continued (default: none, i.e. prefix \"\")")
        p.add_argument("--tools-file", help="JSON list of tool schemas, to type tool-call arguments")
        p.add_argument("--lenient", action="store_true",
                       help="never fail on model output: keep unparseable text and report it under parse_errors")

    p = sub.add_parser("parse", help="parse a complete output and print the message as JSON")
    grammar_options(p)
    p.add_argument("--compact", action="store_true", help="print the JSON on one line")
    p.set_defaults(run=_cmd_parse)
    p = sub.add_parser("stream", help="parse stdin as it arrives; print one event per line, then the message")
    grammar_options(p)
    p.set_defaults(run=_cmd_stream)
    p = sub.add_parser("compile", help="print the Lark grammar a response_template compiles to")
    p.add_argument("template", help="response_template or legacy response_schema JSON (or a tokenizer_config.json)")
    p.set_defaults(run=_cmd_compile)
    p = sub.add_parser("convert", help="translate a legacy response_schema: the Lark grammar, and the v1 "
                                       "response_template where one can say the same")
    p.add_argument("schema", help="legacy response_schema JSON (or a tokenizer_config.json carrying one)")
    p.set_defaults(run=_cmd_convert)
    p = sub.add_parser("check", help="validate a template or grammar (exit 0) or explain what is wrong (exit 1)")
    p.add_argument("template", help="response_template .json, .lark grammar, or built-in name")
    p.set_defaults(run=_cmd_check)
    p = sub.add_parser("serve", help="run the reference LMSP endpoint (replays recorded outputs; needs the serve extra)")
    p.add_argument("-g", "--grammar", default="qwen3", help="grammar of the model's output (default qwen3)")
    p.add_argument("--model", default="qwen3", help="model id clients ask for (default qwen3)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--token", help="require this bearer token")
    p.set_defaults(run=_cmd_serve)
    p = sub.add_parser("list", help="list the built-in grammars")
    p.set_defaults(run=_cmd_list)
    return ap


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    args = build_argparser().parse_args(argv)
    try:
        return int(args.run(args, out or sys.stdout))
    except GrammarParseError as e:
        sys.stderr.write(f"grammar-parse: error [{e.code}]: {e}\n")
        return 1
    except BrokenPipeError:  # the reader went away (| head): stop quietly
        sys.stderr.close()
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
