"""Every example in docs/*.md runs as written.

Python blocks run in order in one namespace, and a value shown in a comment after an expression must be
what it returns (the README's checker). JSON blocks parse. Lark blocks either are complete grammars and
build, or are fragments whose region directives carry valid JSON. A block announced by
``<!-- file: NAME -->`` is saved as NAME in the scratch folder the examples run in, as a reader would.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from grammar_parse.grammar import DIRECTIVE, build_grammar
from test_readme import run_checked

DOCS = Path(__file__).resolve().parents[1] / "docs"
BLOCK = re.compile(r"(?:<!-- file: (?P<file>[\w.-]+) -->\n)?```(?P<lang>\w*)\n(?P<code>.*?)```", re.S)

# How many shown values each guide's Python examples check (0: the guide has no Python example).
CHECKED_VALUES = {"chat-templates.md": 5, "constraints.md": 3, "divergences.md": 0, "grammar-authoring.md": 4, "legacy.md": 4}


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
