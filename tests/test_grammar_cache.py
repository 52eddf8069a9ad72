"""Compiled grammars kept on disk between processes (GRAMMAR_PARSE_CACHE_DIR): a grammar built once is
unpickled after, never rebuilt, and a bad entry is only a miss."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

import grammar_parse as gp
from grammar_parse._engine import library

TEXT = "<think>a</think>b <tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>"
EXPECTED = {"role": "assistant", "reasoning_content": "a", "content": "b",
            "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]}


@pytest.fixture()
def grammar_file(tmp_path: Path) -> Path:
    path = tmp_path / "mine.lark"
    path.write_text((Path(__file__).parents[1] / "grammars" / "qwen3.lark").read_text(encoding="utf-8"), encoding="utf-8")
    return path


def _load_in_a_new_process(path: Path, cache: Path, *, forbid_build: bool) -> str:
    code = ("import sys, grammar_parse as gp\n"
            "from grammar_parse._engine import library\n"
            + ("library.build_grammar = lambda *a, **k: sys.exit('built')\n" if forbid_build else "")
            + f"print(gp.parse_response({TEXT!r}, gp.load_grammar({str(path)!r}), prefix=''))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, library.CACHE_DIR_ENV: str(cache)})
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_grammar_built_once_is_read_from_the_cache_after(grammar_file: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = _load_in_a_new_process(grammar_file, cache, forbid_build=False)
    assert len(list(cache.glob("*.grammar"))) == 1 and not list(cache.glob("*.partial"))
    second = _load_in_a_new_process(grammar_file, cache, forbid_build=True)  # (building would exit "built")
    assert ast.literal_eval(first) == ast.literal_eval(second) == EXPECTED


def test_a_changed_grammar_is_another_entry(grammar_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(library.CACHE_DIR_ENV, str(tmp_path / "cache"))
    gp.load_grammar(grammar_file)
    grammar_file.write_text(grammar_file.read_text(encoding="utf-8") + "\n// changed\n", encoding="utf-8")
    assert "// changed" in gp.load_grammar(grammar_file).source
    assert len(list((tmp_path / "cache").glob("*.grammar"))) == 2


@pytest.mark.parametrize("content", [b"", b"not a pickle", b"\x80\x05K\x01."])  # (empty, garbage, the int 1)
def test_a_bad_entry_is_a_miss_and_is_replaced(grammar_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               content: bytes) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv(library.CACHE_DIR_ENV, str(cache))
    gp.load_grammar(grammar_file)
    (entry,) = cache.glob("*.grammar")
    entry.write_bytes(content)
    assert gp.parse_response(TEXT, gp.load_grammar(grammar_file), prefix="") == EXPECTED
    assert entry.read_bytes() != content


def test_an_unwritable_cache_still_gives_the_grammar(grammar_file: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a file"
    blocker.write_text("x")
    monkeypatch.setenv(library.CACHE_DIR_ENV, str(blocker / "cache"))  # (a directory inside a file)
    assert gp.parse_response(TEXT, gp.load_grammar(grammar_file), prefix="") == EXPECTED
