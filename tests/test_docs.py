"""Every example in docs/*.md runs as written.

Python blocks run in order in one namespace, and a value shown in a comment after an expression must be
what it returns (the README's checker). JSON blocks parse. Lark blocks either are complete grammars and
build, or are fragments whose region directives carry valid JSON. Shell blocks name real subcommands, options
and files (the README's checker); ``py`` blocks, which need an optional engine (Ray, Spark, ...), compile. A
block announced by ``<!-- file: NAME -->`` is saved as NAME in the scratch folder the examples run in, as a
reader would.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from grammar_parse._engine.grammar import DIRECTIVE, build_grammar
from test_readme import check_shell, run_checked

DOCS = Path(__file__).resolve().parents[1] / "docs"
BLOCK = re.compile(r"(?:<!-- file: (?P<file>[\w.-]+) -->\n)?```(?P<lang>\w*)\n(?P<code>.*?)```", re.S)

# How many shown values each guide's Python examples check (0: the guide has no Python example).
CHECKED_VALUES = {"batch.md": 2, "chat-templates.md": 5, "cli.md": 0, "constraints.md": 3, "divergences.md": 0,
                  "engines.md": 0, "errors.md": 0, "grammar-authoring.md": 8, "grammars.md": 0, "layout.md": 0,
                  "legacy.md": 4, "lenient.md": 9, "limits.md": 2, "performance.md": 0, "serving.md": 0, "testing.md": 0,
                  "view.md": 0, "workbench.md": 2}


def test_every_guide_is_listed():
    assert sorted(p.name for p in DOCS.glob("*.md")) == sorted(CHECKED_VALUES)


@pytest.mark.parametrize("name", sorted(CHECKED_VALUES))
def test_guide_examples_run_as_written(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    checked = 0
    for block in BLOCK.finditer((DOCS / name).read_text(encoding="utf-8")):
        lang, code = block["lang"], block["code"]
        if block["file"]:
            (tmp_path / block["file"]).write_text(code, encoding="utf-8")
        elif lang == "python":
            checked += run_checked(code, namespace)
        elif lang in ("bash", "sh"):
            check_shell(code)
        elif lang == "py":
            compile(code, name, "exec")
        elif lang == "json":
            json.loads(code)
        elif lang == "lark" and re.search(r"^start\s*:", code, re.M):
            build_grammar(code, source_name=name)
        elif lang == "lark":
            for line in code.splitlines():
                if line.startswith(DIRECTIVE + " region "):
                    json.loads(line.split(None, 3)[3])
        elif lang:  # (a bare block is a fragment shown, like a client call with the reader's variables)
            pytest.fail(f"{name}: a ```{lang} block the test does not know how to check")
    assert checked == CHECKED_VALUES[name]


def test_grammars_page_lists_every_built_in_grammar_with_its_aliases():
    import grammar_parse as gp

    page = (DOCS / "grammars.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `([a-z0-9_]+)` \| ([^|]*) \|", page, re.M)
    listed = {name: [a.strip() for a in aliases.split(",") if a.strip()] for name, aliases in rows}
    assert listed == {name: list(aliases) for name, aliases in gp.list_grammars().items()}
    assert f"{len(listed)} formats" in page
