"""What a user checks before depending on the project: the licence matches the package metadata, and no
file of the project points outside the checkout (it stands on its own, tests and corpus included)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHECKED = ["README.md", "pyproject.toml", "grammar_parse", "grammars", "compat", "docs", "tests", "benchmarks",
           "examples", ".ci"]
# A path into the development folder beside the checkout, or a citation of its design notes.
OUTSIDE = re.compile(r"\.\./shared\b|/shared[/](?:conformance|spec|FORMATS|DESIGN|STYLE)|\bFORMATS\.md\b")


def project_files() -> list[Path]:
    files = []
    for entry in CHECKED:
        path = ROOT / entry
        candidates = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
        files += [p for p in candidates if "__pycache__" not in p.parts and "venv" not in p.parts
                  and p.suffix not in (".pyc",)]
    return files


def test_licence_file_matches_the_metadata():
    licence = (ROOT / "LICENSE").read_text(encoding="utf-8")
    declared = re.search(r'^license\s*=\s*\{\s*text\s*=\s*"([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert declared and declared.group(1) == "Apache-2.0"
    assert licence.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "END OF TERMS AND CONDITIONS" in licence


def test_the_corpus_ships_with_the_tests():
    corpus = ROOT / "tests" / "data" / "conformance"
    names = {p.name for p in corpus.iterdir()}
    assert {"README.md", "transformers_response_template.json", "transformers_legacy_xregex.json",
            "transformers_model_templates.json"} <= names


def test_no_file_points_outside_the_checkout():
    files = project_files()
    assert len(files) > 500  # the grammars, golden samples and corpus are all read
    found = {str(p.relative_to(ROOT)): OUTSIDE.findall(p.read_text(encoding="utf-8", errors="replace")) for p in files}
    assert {name: hits for name, hits in found.items() if hits} == {}


def test_a_source_checkout_maps_grammars_and_compat_and_nothing_else():
    """Run from a checkout with no install, grammars/ and compat/ are grammar_parse.grammars and
    grammar_parse.compat (as pyproject's package-dir maps them); tests/ and benchmarks/ are not subpackages."""
    import subprocess
    import sys

    code = f"""
import sys
sys.meta_path = [f for f in sys.meta_path if "editable" not in type(f).__module__.lower()]  # (no install)
sys.path.insert(0, {str(ROOT)!r})
import grammar_parse, grammar_parse.compat.legacy
assert grammar_parse.compat.legacy.__file__.startswith({str(ROOT / "compat")!r})
assert "qwen3" in grammar_parse.list_grammars()
print(grammar_parse.parse_response("<think>a</think>b", "qwen3", prefix="")["content"])
for name in ("tests", "benchmarks", "docs"):
    try:
        __import__("grammar_parse." + name)
        print("importable:", name)
    except ModuleNotFoundError:
        pass
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT.parent)
    assert (done.returncode, done.stdout, done.stderr) == (0, "b\n", "")


def test_every_package_folder_is_installed() -> None:
    """pyproject.toml lists its packages: a sub-package folder left off the list is left out of the wheel
    (a non-editable install then fails to import it), while a source checkout still works."""
    found = re.search(r"^packages = \[(.*?)\]", (ROOT / "pyproject.toml").read_text(encoding="utf-8"), re.M | re.S)
    assert found is not None
    listed = set(re.findall(r'"([\w.]+)"', found.group(1)))
    folders = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "grammar_parse").rglob("__init__.py")
               if "__pycache__" not in p.parts}
    assert folders - listed == set()
