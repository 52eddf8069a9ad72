"""The package's layout (docs/layout.md): sub-packages for the wings, the engine's internals private, and
imports that follow the pipeline, lowest layer first. Read from the source (ast), so a deferred import inside a
function counts too; the only imports against the pipeline are the engine's on-demand loads of the compat
plug-in."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

import grammar_parse

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "grammar_parse"

#: Lowest layer first, each module named below ``grammar_parse`` (``grammar_parse`` itself is the facade).
PIPELINE = [
    "errors", "_engine.events", "_engine.arguments",                       # what every stage reports; checks
    "_engine.regex_safety", "_engine.linear_regex", "_engine.regex_shape",  # regexes: refusal, linear matching,
    "_engine.delimiters",                                                   # shape, run-time matchers
    "_engine.reading",                                                      # JSON and Python text within limits
    "_engine.content.base", "_engine.content.text", "_engine.content.json",  # the content parsers, one module
    "_engine.content.xml", "_engine.content.kv_lines", "_engine.content.pythonic",  # each, and their registry
    "_engine.content.json_name_keys", "_engine.content",
    "_engine.values", "_engine.json_input", "_engine.tools", "_engine.wire",  # region values (parser, transform),
                                                                            # users' JSON, argument typing, wire JSON
    "_engine.template", "_engine.shapes", "_engine.symbols", "_engine.format",  # a region, its role and call
    "_engine.scanner", "_engine.tables", "_engine.grammar",                 # shape; the format; the compiled
    "_engine.compiler", "_engine.library",                                  # grammar; templates; built-ins
    "_engine.toolstream", "_engine.salvage", "_engine.regions", "_engine.drafts",  # the parser; its one-shot
    "_engine.oneshot", "_engine.callreader", "_engine.generated",          # automaton, worked out ahead;
                                                                            # its walk as generated code
    "options", "_engine.session", "_engine",                                # its options; the session
    "constrain._schemas", "constrain._cache", "constrain._regexes",         # a grammar as a decoding constraint
    "constrain._tagged", "constrain._pythonic", "constrain._lark", "constrain._forms", "constrain",
    "templates._chat_template", "templates._probes", "templates._derive",   # a model's chat template, probed
    "templates._detect", "templates",
    "adapters._stream", "adapters.chat_completions", "adapters.lmsp", "adapters",  # the wire adapters
    "serving._backends", "serving.store", "serving._server", "serving",     # the gateway
    "batch", "view",                                                        # many outputs; a picture of one
    "_moved", "grammar_parse",                                              # old import paths; the facade
    "compat.legacy", "compat.translate", "compat", "compat.tokenizer",      # the compat plug-in
    "integrations", "integrations.vllm", "integrations.sglang",             # the engine plug-ins
    "integrations.batch_ray", "integrations.batch_spark", "integrations.batch_dask",  # the distributed recipes
    "integrations.batch_daft",
    "workbench._files", "workbench._source", "workbench._samples",          # the grammar workbench: writes,
    "workbench._result", "workbench._api", "workbench._app", "workbench",   # grammar, samples, result, API, app
    "_cli", "__main__",
]

#: Deferred imports against the pipeline, each a plug-in entry point: the engine loads the compat plug-in
#: only for the grammars and documents that use it (a legacy schema's directives, a legacy JSON document).
PLUG_IN_LOADS = {("_engine.grammar", "compat.legacy"), ("_engine.library", "compat"),
                 ("_engine.library", "compat.legacy")}

#: The public import paths (no underscore): the ones the README and the docs pages it links teach.
PUBLIC = {"grammar_parse", "errors", "options", "batch", "view", "adapters", "adapters.chat_completions",
          "adapters.lmsp", "serving", "serving.store", "templates", "constrain", "integrations",
          "integrations.vllm", "integrations.sglang", "integrations.batch_ray", "integrations.batch_spark",
          "integrations.batch_dask", "integrations.batch_daft", "compat", "compat.legacy", "compat.translate",
          "compat.tokenizer", "grammars", "__main__", "workbench"}


def _module(path: Path) -> str:
    """A source file's module name below grammar_parse (compat/ is installed as grammar_parse.compat)."""
    if path.is_relative_to(ROOT / "compat"):
        parts = ["compat", *path.relative_to(ROOT / "compat").with_suffix("").parts]
    else:
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts) or "grammar_parse"


def _imports(path: Path) -> list[tuple[str, list[str], int]]:
    """(imported project module, names imported from it, line) for every import in the file, deferred ones
    included; ``from . import a`` imports the submodule a."""
    me = _module(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    package = "" if package == "grammar_parse" else package
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".") if package else []
                base = ".".join(parts[:len(parts) - (node.level - 1)])
                target = ".".join(p for p in (base, node.module or "") if p)
                full = f"grammar_parse.{target}" if target else "grammar_parse"
            else:
                full = node.module or ""
            names = [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            full, names = node.names[0].name, []
        else:
            continue
        if full != "grammar_parse" and not full.startswith("grammar_parse."):
            continue
        module = full.removeprefix("grammar_parse.") if full != "grammar_parse" else "grammar_parse"
        subs = [f"{module}.{n}".removeprefix("grammar_parse.") for n in names]
        if isinstance(node, ast.ImportFrom) and any(s in PIPELINE for s in subs):
            found.extend((s, [], node.lineno) for s in subs if s in PIPELINE)
        else:
            found.append((module, names, node.lineno))
    return found


FILES = sorted(p for folder in (PACKAGE, ROOT / "compat") for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_module_has_its_place_in_the_pipeline() -> None:
    assert sorted(_module(f) for f in FILES) == sorted(PIPELINE)


@pytest.mark.parametrize("path", FILES, ids=[_module(f) for f in FILES])
def test_imports_follow_the_pipeline(path: Path) -> None:
    me = _module(path)
    rank = PIPELINE.index(me)
    against = [(module, line) for module, _, line in _imports(path)
               if module in PIPELINE and PIPELINE.index(module) >= rank and module != me
               and (me, module) not in PLUG_IN_LOADS]
    assert not against, f"{me} imports modules at or above its layer: {against}"


@pytest.mark.parametrize("path", FILES, ids=[_module(f) for f in FILES])
def test_no_module_imports_another_modules_private_names(path: Path) -> None:
    private = [(module, name, line) for module, names, line in _imports(path) for name in names
               if name.startswith("_") and not (name.startswith("__") and name.endswith("__"))]
    assert not private, f"{_module(path)} imports private names: {private}"


def test_public_import_paths_are_the_taught_ones() -> None:
    """Every module without an underscore in its path is taught (named in the README or a docs page), and is
    on the list above; every other module is private."""
    installed = {_module(f) for f in FILES} | {"grammars"}
    public = {m for m in installed if not any(part.startswith("_") and part != "__main__" for part in m.split("."))}
    assert public == PUBLIC
    taught = "\n".join(p.read_text(encoding="utf-8") for p in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
    untaught = [m for m in PUBLIC - {"grammar_parse", "__main__", "grammars"}
                if not re.search(rf"grammar_parse\.{re.escape(m)}\b", taught)]
    assert not untaught, f"public but taught nowhere: {untaught}"


def test_the_facade_and_the_wings_import_what_they_export() -> None:
    for name in ("grammar_parse", "grammar_parse.adapters", "grammar_parse.serving", "grammar_parse.templates",
                 "grammar_parse.constrain"):
        module = importlib.import_module(name)
        assert all(hasattr(module, n) for n in module.__all__), name


def test_the_layout_page_names_every_module() -> None:
    layout = (ROOT / "docs" / "layout.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`([\w.]+)/?`", layout))
    missing = [m for m in PIPELINE if m not in ("grammar_parse", "__main__")
               and m not in named and m.rpartition(".")[2] not in named]
    assert not missing, f"docs/layout.md does not name {missing}"


def test_no_function_over_80_lines_and_no_class_over_350() -> None:
    """Small pieces: a function past 80 lines or a class past 350 is doing several things."""
    long = []
    for path in FILES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if lines > (350 if isinstance(node, ast.ClassDef) else 80):
                    long.append(f"{_module(path)}.{node.name}: {lines} lines")
    assert not long, long
