"""The README is the front door: its Python examples run and every value they show in a comment is what the
code returns, its shell commands name real subcommands, options and files, each use links its page in docs/,
and every link resolves."""

from __future__ import annotations

import ast
import os
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The README's front-door budget: about 250 lines; everything else lives in docs/ (it was 1,099 lines).
README_MAX_LINES = 300
# The uses the README shows one example of, and the docs page each links to.
USES = {"Broken output: lenient mode": "docs/lenient.md",
        "Serving: Chat Completions deltas, LMSP, a gateway": "docs/serving.md",
        "Inside vLLM and SGLang": "docs/engines.md",
        "Grammars as decoding constraints": "docs/constraints.md",
        "Parsing logs at scale": "docs/batch.md",
        "The model's chat template": "docs/chat-templates.md",
        "Seeing a parse": "docs/view.md"}


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.S)


def shown_value(lines: list[str], stmt: ast.stmt) -> str | None:
    """The literal in a comment at the end of the statement's last line, or alone on the next line."""
    last = lines[stmt.end_lineno - 1]
    inline = re.search(r"#\s*(.+)$", last[stmt.end_col_offset:])
    if inline:
        return inline.group(1)
    following = lines[stmt.end_lineno].strip() if stmt.end_lineno < len(lines) else ""
    return following[1:].strip() if following.startswith("#") else None


def run_checked(code: str, namespace: dict) -> int:
    """Run ``code`` statement by statement; an expression followed by a literal comment must equal it.
    Returns how many values were checked."""
    lines = code.splitlines()
    checked = 0
    for stmt in ast.parse(code).body:
        shown = shown_value(lines, stmt) if isinstance(stmt, ast.Expr) else None
        try:
            expected = ast.literal_eval(shown) if shown else None
        except (ValueError, SyntaxError):
            shown = None
        if shown is None:
            exec(compile(ast.Module([stmt], []), "example", "exec"), namespace)
            continue
        value = eval(compile(ast.Expression(stmt.value), "example", "eval"), namespace)  # type: ignore[attr-defined]
        assert value == expected, (ast.unparse(stmt), value)
        checked += 1
    return checked


def test_readme_examples_run_and_show_true_values(monkeypatch):
    monkeypatch.chdir(ROOT)
    blocks = python_blocks()
    assert blocks, "the README has Python examples"
    assert sum(run_checked(code, {}) for code in blocks) >= 2
    assert os.path.exists(ROOT / "examples" / "qwen3_tool_call.txt")


def test_readme_server_loop_streams_what_one_shot_parses(monkeypatch):
    monkeypatch.chdir(ROOT)
    namespace: dict = {}
    code = next(block for block in python_blocks() if "def serve(" in block)
    exec(compile(code, "README.md", "exec"), namespace)
    pieces = ["<think>Need the tool.</th", 'ink>Checking. <tool_call>{"name": "get_weather", "argu',
              'ments": {"city": "Paris"}}</tool_call><|im_end|>']
    chunks = list(namespace["serve"](lambda prompt: iter(pieces), "", None))
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas[0] == {"role": "assistant"}
    assert "".join(d.get("content", "") for d in deltas) == "Checking."
    assert "".join(d.get("reasoning_content", "") for d in deltas) == "Need the tool."
    calls = [c for d in deltas for c in d.get("tool_calls", [])]
    assert calls[0]["function"]["name"] == "get_weather"
    assert "".join(c["function"]["arguments"] for c in calls) == '{"city": "Paris"}'
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def shell_blocks(text: str) -> list[str]:
    return re.findall(r"```(?:bash|sh)\n(.*?)```", text, re.S)


def check_shell(code: str) -> int:
    """Each ``grammar-parse`` (or ``python -m grammar_parse``) command in a shell block parses with the CLI's
    own argument parser (``[...]`` marks an optional part), and every path into the project it names
    (benchmarks/, tests/, examples/, grammars/) exists. Returns how many commands were checked."""
    from grammar_parse._cli import build_argparser

    checked = 0
    for command in shell_commands(code):
        for word in command:
            if re.match(r"(benchmarks|tests|examples|grammars)/", word):
                assert (ROOT / word).exists(), f"{shlex.join(command)!r} names {word}, which does not exist"
        if command[:1] == ["grammar-parse"] or command[:3] == ["python", "-m", "grammar_parse"]:
            args = [w.strip("[]") for w in command[1 if command[0] == "grammar-parse" else 3:]]
            try:
                build_argparser().parse_args([w for w in args if w])
            except SystemExit as stop:  # (--version and --help stop with 0; a bad command line with 2)
                assert stop.code in (0, None), f"{shlex.join(command)!r} is not a valid command line"
            checked += 1
    return checked


def shell_commands(code: str) -> list[list[str]]:
    """The simple commands of a shell block: its lines (joined where a quote or a backslash runs on), cut
    at ``&&``, ``|`` and ``;``."""
    commands: list[list[str]] = []
    pending = ""
    for line in code.splitlines(keepends=True):
        pending += line
        if line.rstrip("\n").endswith("\\"):  # (a trailing backslash: the command goes on)
            continue
        lexer = shlex.shlex(pending.replace("\\\n", " "), posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        try:
            words = list(lexer)
        except ValueError:  # (an open quote: the command goes on)
            continue
        pending = ""
        command: list[str] = []
        for word in words + [";"]:
            if word in ("&&", "|", ";", "||"):
                commands += [command] if command else []
                command = []
            else:
                command.append(word)
    return commands


def relative_links(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    return [link for link in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"[a-z]+:", link)]


def test_readme_shell_commands_are_real(monkeypatch):
    monkeypatch.chdir(ROOT)
    blocks = shell_blocks((ROOT / "README.md").read_text(encoding="utf-8"))
    assert sum(check_shell(code) for code in blocks) >= 3


def test_readme_quick_start_is_two_commands_one_running_pytest():
    """CI runs the quick start's pytest command as written: it stays exactly two commands."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"^## Quick start\n\n```bash\n(.*?)```", text, re.M | re.S)
    assert block is not None
    assert block.group(1).splitlines() == [
        "pip install . && python -m grammar_parse parse --grammar qwen3 examples/qwen3_tool_call.txt",
        "pip install '.[test]' && python -m pytest"]


def test_readme_is_a_front_door():
    """About 250 lines: what it is, quick start, a tour, one example per use, links; the rest is in docs/."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES
    for heading in ("## Quick start", "## A 60-second tour", "## One example per use", "## Testing", "## Links"):
        assert f"\n{heading}\n" in text, heading


@pytest.mark.parametrize("use", sorted(USES))
def test_readme_shows_one_example_per_use_and_links_its_page(use):
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    part = re.search(rf"^### {re.escape(use)}\n(.*?)(?=^##)", text, re.M | re.S)
    assert part is not None, f"the README has no section {use!r}"
    assert re.search(r"```(python|bash)\n", part.group(1)), f"{use!r} shows no example"
    assert f"]({USES[use]})" in part.group(1) and (ROOT / USES[use]).is_file()


@pytest.mark.parametrize("path", ["README.md"] + sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md")))
def test_every_relative_link_resolves(path):
    source = ROOT / path
    missing = [link for link in relative_links(source) if not (source.parent / link.split("#")[0]).exists()]
    assert missing == [], f"{path} links to files that do not exist"
