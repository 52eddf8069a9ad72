"""docs/grammar-authoring.md runs: its example grammar loads and its Python example gives the values its
comments show."""

from __future__ import annotations

import re
from pathlib import Path

from test_readme import run_checked  # the same checker as the README's examples

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "grammar-authoring.md"


def test_worked_example_runs(tmp_path, monkeypatch):
    text = GUIDE.read_text(encoding="utf-8")
    grammar = re.findall(r"```lark\n(.*?)```", text, re.S)[0]
    (tmp_path / "acme.lark").write_text(grammar, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    code = re.findall(r"```python\n(.*?)```", text, re.S)[0]
    assert run_checked(code, {}) == 4
