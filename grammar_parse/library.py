"""The built-in grammar library (``grammars/*.lark``, shipped as ``grammar_parse.grammars``) and loading
grammars by name or path."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from .compiler import compile_template
from .errors import GrammarError
from .grammar import DIRECTIVE, Grammar, build_grammar


def _header(text: str) -> dict[str, Any]:
    """The name and aliases directives of a grammar file, read without building it."""
    out: dict[str, Any] = {}
    for line in text.splitlines():
        line = line.strip()
        if line.startswith(DIRECTIVE):
            key, _, rest = line[len(DIRECTIVE):].strip().partition(" ")
            if key in ("name", "aliases"):
                out[key] = json.loads(rest)
    return out


@lru_cache(maxsize=1)
def _catalogue() -> dict[str, tuple[str, str]]:
    """Every built-in grammar: name or alias -> (canonical name, file name)."""
    names: dict[str, tuple[str, str]] = {}
    for entry in sorted(resources.files("grammar_parse.grammars").iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".lark"):
            continue
        header = _header(entry.read_text(encoding="utf-8"))
        canonical = header.get("name", entry.name[: -len(".lark")])
        for alias in [canonical, *header.get("aliases", [])]:
            names.setdefault(alias.lower(), (canonical, entry.name))
    return names


def list_grammars() -> dict[str, list[str]]:
    """Built-in grammar names, each with its aliases."""
    out: dict[str, list[str]] = {}
    for alias, (canonical, _) in _catalogue().items():
        out.setdefault(canonical, [])
        if alias != canonical.lower():
            out[canonical].append(alias)
    return dict(sorted(out.items()))


@lru_cache(maxsize=64)
def _builtin(file_name: str, canonical: str) -> Grammar:
    text = resources.files("grammar_parse.grammars").joinpath(file_name).read_text(encoding="utf-8")
    return build_grammar(text, source_name=file_name, name=canonical)


def grammar_from_json(data: Any, *, name: str | None = None) -> Grammar:
    """The grammar a JSON document describes: a response_template, a legacy response_schema, or a
    tokenizer_config.json carrying either."""
    from grammar_parse.compat import from_tokenizer_config

    if isinstance(data, dict) and ("response_template" in data or "response_schema" in data) and "fields" not in data:
        return from_tokenizer_config(data)
    return grammar_from_dict(data, name=name)


def grammar_from_dict(data: Any, *, name: str | None = None) -> Grammar:
    """The grammar of a response_template, or of a legacy response_schema (told apart by their keys)."""
    from grammar_parse.compat.legacy import is_legacy_schema

    if is_legacy_schema(data):
        from grammar_parse.compat import legacy_grammar

        return legacy_grammar(data)
    return compile_template(data, name=name)


def load_grammar(name_or_path: str | Path) -> Grammar:
    """A built-in grammar by name or alias (``"qwen3"``), or a grammar file: ``.lark`` (an authored
    grammar) or ``.json`` (a response_template, or a tokenizer_config.json that carries one)."""
    path = Path(name_or_path)
    key = str(name_or_path).lower()
    catalogue = _catalogue()
    if key in catalogue and not path.exists():
        canonical, file_name = catalogue[key]
        return _builtin(file_name, canonical)
    if path.suffix == ".lark" or path.suffix == ".json" or path.exists():
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            raise GrammarError(f"cannot read grammar file: {e.strerror}", code="grammar.not_found",
                               source=str(path)) from None
        if path.suffix == ".json":
            try:
                data = json.loads(text)
            except json.JSONDecodeError as e:
                raise GrammarError(f"not valid JSON: {e.msg}", code="grammar.syntax", source=str(path),
                                   line=e.lineno, column=e.colno) from None
            return grammar_from_json(data, name=path.stem)
        return build_grammar(text, source_name=str(path), name=path.stem)
    raise GrammarError(
        f"no built-in grammar named {name_or_path!r} and no such file",
        code="grammar.not_found",
        source=str(name_or_path),
        hint=f"Built-in grammars: {', '.join(list_grammars())}.",
    )


__all__ = ["grammar_from_json", "list_grammars", "load_grammar"]
