"""The grammar being written: its text compiled to a :class:`Grammar`, or to load errors with their code,
line, column and hint (the error hierarchy's own); where a new grammar starts (a built-in, the model's chat
template, a skeleton); and the lines that register it with vLLM and SGLang."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._engine.grammar import Grammar, build_grammar
from .._engine.library import authored_template, grammar_from_json_text, list_grammars, load_grammar
from ..errors import ChatTemplateError, GrammarError, GrammarParseError, TemplateError
from ..integrations import PREFIX, parser_name, parser_names
from ..templates import derive_grammar, detect

#: The two kinds of grammar source: an authored ``.lark`` grammar, or a response_template as JSON.
KINDS = {"lark": ".lark", "json": ".json"}

SKELETON = """\
// MODEL: what writes this format, where it is documented, and its quirks (docs/grammar-authoring.md).
//@ grammar_parse 1
//@ name "mine"
//@ defaults {"role": "assistant"}
//@ start_anchor "<|im_start|>assistant\\n"
//@ region reasoning_content {"content": "text"}
//@ region content {"content": "text"}
//@ region tool_calls {"content": "json", "repeats": true, "transform": {"type": "function", "function": {"name": "{content.name}", "arguments": "{content.arguments}"}}}

start: reasoning_content? content? END_OF_TURN?
reasoning_content: REASONING_CONTENT_OPEN REASONING_CONTENT_TEXT* REASONING_CONTENT_CLOSE
content: (CONTENT_TEXT | tool_calls)+
tool_calls: TOOL_CALLS_OPEN TOOL_CALLS_TEXT* TOOL_CALLS_CLOSE

REASONING_CONTENT_OPEN.1: "<think>"
REASONING_CONTENT_CLOSE: "</think>"
TOOL_CALLS_OPEN.1: "<tool_call>"
TOOL_CALLS_CLOSE: "</tool_call>"
END_OF_TURN: "<|im_end|>"
%declare REASONING_CONTENT_TEXT CONTENT_TEXT TOOL_CALLS_TEXT
"""


@dataclass
class Source:
    """The grammar on the page: its text and kind, the file it saves to (None: not chosen yet), whether it is a
    built-in (read-only: saved only under a new path), and what compiling it gave."""

    text: str
    kind: str = "lark"
    path: Path | None = None
    builtin: str | None = None
    name: str = "mine"
    grammar: Grammar | None = None
    errors: list[dict[str, Any]] = field(default_factory=list)
    note: str = ""  # where it came from (a detection's explanation), shown once

    @property
    def read_only(self) -> bool:
        return self.builtin is not None

    def compile(self) -> None:
        """Compile the text: ``grammar`` when it loads, else ``errors`` (and ``grammar`` None)."""
        self.grammar, self.errors = None, []
        try:
            self.grammar = compile_text(self.text, self.kind, self.name)
        except GrammarParseError as error:
            self.errors = [located(load_error(error), self.text)]
        except RecursionError:
            self.errors = [{"code": "grammar.syntax", "message": "the grammar nests too deeply to read",
                            "hint": "Split the deep rule or pattern.", "line": None, "column": None}]


def compile_text(text: str, kind: str, name: str) -> Grammar:
    """The grammar ``text`` says: a ``.lark`` grammar, or a response_template (``kind`` ``json``)."""
    source_name = f"{name}{KINDS[kind]}"
    if kind == "lark":
        return build_grammar(text, source_name=source_name, name=name)
    return grammar_from_json_text(text, name=name, source=source_name)


def load_error(error: GrammarParseError) -> dict[str, Any]:
    """A load error as the page shows it: code, message, hint, and where (line and column, or a template's
    path such as ``fields.tool_calls.open_pattern``)."""
    found: dict[str, Any] = {"code": error.code, "message": _cut(error.detail), "hint": error.hint,
                             "line": None, "column": None}
    if isinstance(error, GrammarError):
        found.update(line=error.line, column=error.column)
    elif isinstance(error, ChatTemplateError):
        found["line"] = error.line
    elif isinstance(error, TemplateError):
        found["path"] = error.path
    return found


def located(found: dict[str, Any], text: str) -> dict[str, Any]:
    """An error without a line (Lark names an undefined rule or terminal, not where it is used) placed at the
    first line outside comments that names what its message quotes; ``guessed`` says the place is inferred."""
    if found["line"] is not None:
        return found
    for quoted in re.findall(r"'([A-Za-z_][A-Za-z0-9_]{0,99})'", found["message"]):
        for number, line in enumerate(text.splitlines(), 1):
            match = re.search(rf"(?<![A-Za-z0-9_]){re.escape(quoted)}(?![A-Za-z0-9_])", line)
            if match and not line.lstrip().startswith("//"):
                return {**found, "line": number, "column": match.start() + 1, "guessed": True}
    return found


def _cut(text: str, limit: int = 2000) -> str:
    return text if len(text) <= limit else text[:limit] + f"... ({len(text) - limit} more characters)"


def builtin_source(name: str) -> Source:
    """A built-in grammar's file, read-only (the page saves it under a new path only)."""
    grammar = load_grammar(name)
    canonical = grammar.name or name
    return Source(grammar.source, "lark", None, canonical, canonical, grammar)


def chat_template_source(model: Path) -> Source:
    """The model's grammar as ``load_grammar(model)`` finds it, as text to edit: the response_template its
    tokenizer_config.json carries (the model's authors wrote it), else the built-in its chat template reads
    back (a copy), else one derived from the template; ``note`` says which and why."""
    authored = authored_template(model) if model.is_dir() else None
    if authored is not None:
        kept = {k: authored[k] for k in ("response_template", "response_schema") if k in authored}
        return Source(json.dumps(kept, indent=2, ensure_ascii=False) + "\n", "json", None, None, _stem(model),
                      note="the model's tokenizer_config.json carries its response template")
    detection = detect(model)
    if detection.grammar is not None:
        found = builtin_source(detection.grammar)
        return Source(found.text, "lark", None, None, f"{found.name}_edit", None, note=detection.explain())
    derived = derive_grammar(detection.template, name=_stem(model), renderings=list(detection.renderings))
    return Source(derived.lark, "lark", None, None, _stem(model), None, note=detection.explain())


def _stem(model: Path) -> str:
    return re.sub(r"[^a-z0-9_]", "_", (model.stem if model.is_file() else model.name).lower()).strip("_") or "derived"


def skeleton_source() -> Source:
    """An empty grammar to start from: reasoning, content and JSON tool calls, to rename and reshape."""
    return Source(SKELETON, "lark", None, None, "mine", None)


def builtin_names() -> list[str]:
    """The built-in grammars' names, for the page's "start from" list."""
    return sorted(list_grammars())


def _vllm_command(model: str, plugin: str, name: str) -> str:
    """``vllm serve`` with the plug-in module or file ``plugin`` serving parser ``name`` for both parsers."""
    return (f"vllm serve {model} --enable-auto-tool-choice \\\n    --tool-parser-plugin {plugin} --tool-call-parser {name} "
            f"\\\n    --reasoning-parser-plugin {plugin} --reasoning-parser {name}")


def registration(source: Source, model: str = "MODEL") -> dict[str, Any]:
    """How to serve the grammar from vLLM and SGLang: the plug-in files and command lines of
    docs/engines/vllm.md and docs/engines/sglang.md. A built-in is served by name; any other grammar through
    ``register(name, path)`` in a plug-in of one's own (it must be saved first: the engine loads the file)."""
    name = parser_name(source.name)
    flags = f"--tool-call-parser {name} --reasoning-parser {name}"
    if source.builtin is not None and source.text == load_grammar(source.builtin).source:  # (as shipped)
        return {"parser": name, "saved": True, "note": None,
                "vllm": {"command": _vllm_command(model, "grammar_parse.integrations.vllm", name)},
            "sglang": {"command": f"python -m sglang.launch_server --model-path {model} {flags}"}}
    path = str(source.path) if source.path is not None else f"/path/to/{source.name}{KINDS[source.kind]}"
    note = (f"{name} is a built-in grammar's parser name: registering this grammar under it replaces the "
            "built-in in the engine; save it under a name of its own" if name in parser_names() else None)
    short = name.removeprefix(PREFIX)
    vllm_plugin = (f"# {short}_vllm.py\nfrom grammar_parse.integrations.vllm import register\n\n"
                   f"register({short!r}, {path!r})   # served as {name}\n")
    sglang_plugin = (f"# {short}_sglang.py: an entry point of the sglang.srt.plugins group\n"
                     "from grammar_parse.integrations import register\n"
                     "from grammar_parse.integrations.sglang import install as install_grammar_parse\n\n\n"
                     "def install() -> None:\n    install_grammar_parse()\n"
                     f"    register({short!r}, {path!r})   # served as {name}\n")
    return {"parser": name, "saved": source.path is not None, "note": note, "vllm": {
        "plugin": vllm_plugin,
        "command": _vllm_command(model, f"{short}_vllm.py", name)},
        "sglang": {"plugin": sglang_plugin,
                   "entry_point": f'[project.entry-points."sglang.srt.plugins"]\n{short} = "{short}_sglang:install"',
                   "command": f"python -m sglang.launch_server --model-path {model} {flags}"}}


__all__ = ["KINDS", "SKELETON", "Source", "builtin_names", "builtin_source", "chat_template_source", "compile_text",
           "load_error", "located", "registration", "skeleton_source"]
