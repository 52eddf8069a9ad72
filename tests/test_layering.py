"""The modules' imports follow the pipeline: each module imports only modules before it in PIPELINE,
no module imports another module's private (underscore) name, and every module is placed, and named in
the layout page (docs/layout.md). Read from the source (ast), so a deferred import inside a function counts
too; the only imports against the pipeline are the engine's on-demand loads of the compat plug-in."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Lowest layer first. ``grammar_parse`` is the package's facade (``__init__``); compat is a plug-in above
#: the engine that imports only the engine's lower layers or its facade.
PIPELINE = [
    "errors", "events", "arguments",                               # what every stage reports; argument checks
    "regex_safety", "linear_regex", "regex_shape", "delimiters",   # regexes: refusal, linear matching, shape, matchers
    "values", "json_input", "tools", "wire",                       # content parsers, users' JSON, argument typing,
                                                                   # wire JSON
    "template", "shapes", "symbols", "format", "scanner", "tables",  # loading; a region's role and call shape,
    "grammar",                                                     # what a message is; the compiled grammar
    "compiler", "library",                                         # templates to grammars; the built-ins
    "toolstream", "salvage", "regions", "drafts", "options", "session",  # the parser, and its options
    "constrain.schemas", "constrain.cache",                        # a tool's schema made self-contained; kept exports
    "constrain.regexes", "constrain.tagged", "constrain.pythonic",  # a grammar as a decoding constraint: pieces,
    "constrain.lark", "constrain.forms", "constrain",              # payloads, llguidance's dialect, call forms, the exports
    "chat_template", "probes", "derive", "detect",                 # a model's chat template, probed
    "wire_stream", "chat_completions", "lmsp", "backends", "store",  # adapters, the gateway's upstream and store,
    "server",                                                      # and the reference server
    "batch", "view",                                               # many outputs at once; a picture of one
    "grammar_parse",                                               # the facade
    "compat.legacy", "compat.translate", "compat", "compat.tokenizer",
    "integrations", "integrations.vllm", "integrations.sglang",     # the engine plugins, above the adapters
    "integrations.batch_ray", "integrations.batch_spark", "integrations.batch_dask",  # the distributed recipes,
    "integrations.batch_daft",                                                          # one per engine
    "cli", "__main__",
]

#: Deferred imports against the pipeline, each a plug-in entry point: the engine loads the compat plug-in
#: only for the grammars and documents that use it (a legacy schema's directives, a legacy JSON document).
PLUG_IN_LOADS = {("grammar", "compat.legacy"), ("library", "compat"), ("library", "compat.legacy"),
                 # a model directory or chat template is read by probing it through the whole parser
                 ("library", "detect")}


def _module(path: Path) -> str:
    if path.parent.name == "integrations":
        return "integrations" if path.stem == "__init__" else f"integrations.{path.stem}"
    if path.parent.name == "constrain":
        return "constrain" if path.stem == "__init__" else f"constrain.{path.stem}"
    if path.parent.name == "compat":
        return "compat" if path.stem == "__init__" else f"compat.{path.stem}"
    return "grammar_parse" if path.stem == "__init__" else path.stem


def _imports(path: Path) -> list[tuple[str, list[str], int]]:
    """(imported project module, names imported from it, line) for every import in the file."""
    package = {"compat": "grammar_parse.compat", "integrations": "grammar_parse.integrations",
               "constrain": "grammar_parse.constrain"}.get(
        path.parent.name, "grammar_parse")
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            names = [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            target, names = node.names[0].name, []
        else:
            continue
        if target == "grammar_parse" or target.startswith("grammar_parse."):
            module = target.removeprefix("grammar_parse.") if target != "grammar_parse" else "grammar_parse"
            if module == "grammar_parse" and names == ["compat"]:
                module, names = "compat", []
            if isinstance(node, ast.ImportFrom) and node.level and not node.module:
                # ``from . import a, b``: the submodules a and b of the package
                found.extend((f"{module}.{n}".removeprefix("grammar_parse."), [], node.lineno) for n in names)
                continue
            found.append((module, names, node.lineno))
    return found


FILES = sorted([*(ROOT / "grammar_parse").glob("*.py"), *(ROOT / "compat").glob("*.py"),
                *(ROOT / "grammar_parse" / "integrations").glob("*.py"),
                *(ROOT / "grammar_parse" / "constrain").glob("*.py")])


def test_every_module_has_its_place_in_the_pipeline():
    assert sorted(_module(f) for f in FILES) == sorted(PIPELINE)


@pytest.mark.parametrize("path", FILES, ids=[_module(f) for f in FILES])
def test_imports_follow_the_pipeline(path):
    me = _module(path)
    rank = PIPELINE.index(me)
    against = [(module, line) for module, _, line in _imports(path)
               if module in PIPELINE and PIPELINE.index(module) >= rank and (me, module) not in PLUG_IN_LOADS]
    assert not against, f"{me} imports modules at or above its layer: {against}"


@pytest.mark.parametrize("path", FILES, ids=[_module(f) for f in FILES])
def test_no_module_imports_another_modules_private_names(path):
    private = [(module, name, line) for module, names, line in _imports(path) for name in names
               if name.startswith("_") and not (name.startswith("__") and name.endswith("__"))]
    assert not private, f"{_module(path)} imports private names: {private}"


def test_the_layout_page_names_every_module():
    layout = (ROOT / "docs" / "layout.md").read_text(encoding="utf-8")  # (the README links it)
    named = set(re.findall(r"`([\w.]+)/?`", layout))
    missing = [m for m in PIPELINE if m not in ("grammar_parse", "__main__") and m not in named
               and m.removeprefix("compat.").removeprefix("integrations.").removeprefix("constrain.") not in named]
    assert not missing, f"docs/layout.md does not name {missing}"
