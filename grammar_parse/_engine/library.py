"""The built-in grammar library (``grammars/*.lark``, shipped as ``grammar_parse.grammars``) and loading
grammars by name or path.

Names: a built-in is found by its name or any alias, ignoring case and the separators ``-``, ``_`` and
``.`` (``Qwen3.5``, ``qwen3_5`` and ``qwen35`` are one name). Paths: a string is a file path when it holds a
path separator or ends in ``.lark`` or ``.json``; anything else is a built-in name, so a file or directory
in the working directory never shadows one (write ``./qwen3`` to mean the file).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import pickle
import sys
import tempfile
from collections.abc import Callable, Mapping
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple

from ..errors import GrammarError, TemplateError
from .arguments import grammar_problem
from .compiler import compile_template
from .grammar import DIRECTIVE, Grammar, build_grammar
from .json_input import JSONLimitError, load_user_json

#: Keys that mark a JSON document as a tokenizer config (or chat_template.json) rather than a template.
TOKENIZER_CONFIG_KEYS = frozenset({
    "tokenizer_class", "chat_template", "added_tokens_decoder", "model_max_length", "eos_token", "bos_token",
    "pad_token", "clean_up_tokenization_spaces",
})
_GRAMMAR_SUFFIXES = (".lark", ".json", ".jinja")


class _Library(NamedTuple):
    names: dict[str, tuple[str, str]]  # normalised name or alias -> (canonical name, file name)
    aliases: dict[str, list[str]]  # canonical name -> its aliases as the grammar file spells them
    spelled: dict[str, str]  # normalised name or alias -> as the grammar file spells it


def normalise_name(name: str) -> str:
    """The form built-in names are compared in: lower case, without ``-``, ``_`` and ``.``."""
    return name.lower().replace("-", "").replace("_", "").replace(".", "")


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
def _library() -> _Library:
    """Every built-in grammar, read from the headers of the shipped files."""
    names: dict[str, tuple[str, str]] = {}
    aliases: dict[str, list[str]] = {}
    spelled: dict[str, str] = {}
    for entry in sorted(resources.files("grammar_parse.grammars").iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".lark"):
            continue
        header = _header(entry.read_text(encoding="utf-8"))
        canonical = header.get("name", entry.name[: -len(".lark")])
        aliases[canonical] = list(header.get("aliases", []))
        for alias in [canonical, *aliases[canonical]]:
            names.setdefault(normalise_name(alias), (canonical, entry.name))
            spelled.setdefault(normalise_name(alias), alias)
    return _Library(names, dict(sorted(aliases.items())), spelled)


def list_grammars() -> dict[str, list[str]]:
    """Built-in grammar names, each with its aliases."""
    return {name: list(aliases) for name, aliases in _library().aliases.items()}


@lru_cache(maxsize=64)
def _builtin(file_name: str, canonical: str) -> Grammar:
    text = resources.files("grammar_parse.grammars").joinpath(file_name).read_text(encoding="utf-8")
    return _built(text, file_name, canonical)


#: The environment variable naming a directory where compiled grammars are kept between processes (a batch
#: worker, a CLI run, an engine process): a grammar built once is unpickled after, about 20 times cheaper.
#: Entries are pickles, so the directory must be one only its users write.
CACHE_DIR_ENV = "GRAMMAR_PARSE_CACHE_DIR"


@lru_cache(maxsize=1)
def _engine_fingerprint() -> str:
    """What a cached grammar was built by: the package's source (the compat plug-in's too: a legacy grammar
    pickles its classes) and the Python version; an entry made by other code is not read."""
    from grammar_parse import compat

    digest = hashlib.sha256(repr(sys.version_info[:2]).encode())
    roots = {Path(__file__).parents[1], Path(compat.__file__).parent}
    for path in sorted({p for root in roots for p in root.rglob("*.py")}):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _built(text: str, source_name: str, name: str | None) -> Grammar:
    """``build_grammar`` of a grammar's Lark text, through the on-disk cache when ``CACHE_DIR_ENV`` names one."""
    folder = os.environ.get(CACHE_DIR_ENV)
    if not folder:
        return build_grammar(text, source_name=source_name, name=name)
    key = hashlib.sha256(json.dumps([_engine_fingerprint(), source_name, name, text]).encode()).hexdigest()
    path = Path(folder) / f"{key}.grammar"
    try:
        with path.open("rb") as f:
            cached = pickle.load(f)
        if isinstance(cached, Grammar) and cached.source == text:
            return cached
    except Exception:  # noqa: BLE001 - a missing, partial or stale entry: built again below
        pass
    grammar = build_grammar(text, source_name=source_name, name=name)
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("wb", dir=folder, suffix=".partial", delete=False) as out:
            pickle.dump(grammar, out, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(out.name, path)  # (whole or not at all: another process may be reading)
    except OSError:
        pass  # a cache that cannot be written is no cache; the grammar stands
    return grammar


def grammar_from_json(data: Any, *, name: str | None = None, source: str = "the document") -> Grammar:
    """The grammar a JSON document describes: a response_template, a legacy response_schema, or a
    tokenizer_config.json carrying either. ``source`` names the document in errors (a file name)."""
    from grammar_parse.compat import from_tokenizer_config
    from grammar_parse.compat.legacy import is_legacy_schema

    if isinstance(data, dict) and "fields" not in data:
        if "response_template" in data or "response_schema" in data:
            grammar: Grammar = from_tokenizer_config(data)
            return grammar
        if data.get("chat_template") and not is_legacy_schema(data):
            return _from_chat_template(data)
        if TOKENIZER_CONFIG_KEYS & set(data) and not is_legacy_schema(data):
            # Without this, the config's own keys would be reported as unknown template keys.
            raise TemplateError(
                f"{source} carries no response_template or response_schema.", path="",
                code="template.tokenizer_config",
                hint="It is a tokenizer config, not a template: add a response_template to it, or use a built-in "
                     "grammar (list_grammars(), `grammar-parse list`).")
    return grammar_from_dict(data, name=name)


def grammar_from_dict(data: Any, *, name: str | None = None) -> Grammar:
    """The grammar of a response_template, or of a legacy response_schema (told apart by their keys); a value
    that is not a dict at all is an ArgumentError (what is reached with a grammar of no known type)."""
    from grammar_parse.compat.legacy import is_legacy_schema

    if not isinstance(data, Mapping):
        raise grammar_problem(data)
    if is_legacy_schema(data):
        from grammar_parse.compat import legacy_grammar

        legacy: Grammar = legacy_grammar(dict(data))
        return legacy
    return compile_template(data, name=name)


#: Reads a model's chat template (a path, a model directory or a template text) into the grammar it reads
#: back. The chat-templates wing (grammar_parse.templates) registers it when the package is imported: it
#: renders probe conversations through the whole parser, a stage above this one, so this stage does not
#: import it.
_chat_template_reader: Callable[[Any], Grammar] | None = None


def register_chat_template_reader(reader: Callable[[Any], Grammar]) -> None:
    """Set the reader :func:`load_grammar` uses for a model's chat template (see ``_chat_template_reader``)."""
    global _chat_template_reader
    _chat_template_reader = reader


def _from_chat_template(source: Any) -> Grammar:
    """The grammar a model's chat template reads back (the registered reader's)."""
    if _chat_template_reader is None:  # (only while the package itself is still being imported)
        raise GrammarError("no reader of chat templates is registered", code="grammar.not_found",
                           hint="Import grammar_parse (the package) before loading a model's chat template.")
    return _chat_template_reader(source)


def authored_template(path: Path) -> dict[str, Any] | None:
    """A model directory's tokenizer_config.json when it carries a response_template or response_schema
    (the model's authors wrote the format down), else None."""
    config = path / "tokenizer_config.json"
    if not config.is_file():
        return None
    try:
        data = load_user_json(config.read_text(encoding="utf-8"))
    except JSONLimitError as e:
        raise GrammarError(f"cannot be read: {e}.", code="grammar.syntax", source=str(config),
                           hint="A tokenizer config nests only a few levels.") from None
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and ("response_template" in data or "response_schema" in data) else None


def _model_dir(path: Path) -> Grammar:
    """A model directory's grammar: its tokenizer_config.json's response_template or response_schema when
    it has one (authored_template), else the one its chat template reads back."""
    data = authored_template(path)
    if data is not None:
        return grammar_from_json(data, name=path.name, source=str(path / "tokenizer_config.json"))
    return _from_chat_template(path)


def looks_like_path(argument: str) -> bool:
    """Whether a grammar argument names a file: it holds a path separator or ends in .lark, .json or .jinja."""
    separators = [s for s in ("/", os.sep, os.altsep) if s]
    return any(s in argument for s in separators) or argument.lower().endswith(_GRAMMAR_SUFFIXES)


def _suggestions(name: str) -> list[str]:
    """Up to three built-ins close to a misspelled ``name``, best first, as their files spell them
    (an alias shown with its grammar: ``hermes (qwen3)``)."""
    library = _library()
    spelled = library.spelled
    wanted = normalise_name(name)
    canonical_keys = [normalise_name(n) for n in library.aliases]
    out: list[str] = []
    seen: set[str] = set()
    # Grammar names first: "qwen4" should suggest qwen3 before the alias "qwen".
    close = [*difflib.get_close_matches(wanted, canonical_keys, n=3, cutoff=0.6),
             *difflib.get_close_matches(wanted, list(library.names), n=8, cutoff=0.6)]
    for key in close:
        canonical = library.names[key][0]
        if canonical not in seen:
            seen.add(canonical)
            out.append(canonical if spelled[key] == canonical else f"{spelled[key]} ({canonical})")
    return out[:3]


def _is_file(name: str) -> bool:
    try:
        return bool(name) and Path(name).is_file()
    except (OSError, ValueError):  # a name no file system accepts (NUL bytes, too long)
        return False


def _not_found(name: str) -> GrammarError:
    close = _suggestions(name)
    hint = f"Did you mean {' or '.join(repr(s) for s in close)}? " if close else ""
    hint += "See list_grammars() or `grammar-parse list` for the built-in names."
    if _is_file(name):
        hint += f" To load the file {name!r}, write it as a path (./{name})."
    return GrammarError("no built-in grammar has that name.", code="grammar.not_found", source=name, hint=hint)


def _read_file(path: Path) -> Grammar:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise GrammarError(f"cannot read grammar file: {e.strerror}.", code="grammar.not_found",
                           source=str(path), hint="Check the path, or give a built-in name (list_grammars()).") from None
    except UnicodeDecodeError as e:
        raise GrammarError(f"not UTF-8 text (byte {e.start}).", code="grammar.encoding", source=str(path),
                           hint="Give a .lark grammar or a .json template, saved as UTF-8.") from None
    is_json = path.suffix.lower() == ".json" or (path.suffix.lower() != ".lark" and text.lstrip().startswith("{"))
    if not is_json:
        return _built(text, str(path), path.stem)
    return grammar_from_json_text(text, name=path.stem, source=str(path))


def grammar_from_json_text(text: str, *, name: str | None = None, source: str = "the document") -> Grammar:
    """The grammar a JSON document's text says (:func:`grammar_from_json`), its syntax errors as
    ``grammar.syntax`` with their line and column."""
    try:
        data = load_user_json(text)
    except json.JSONDecodeError as e:
        raise GrammarError(f"not valid JSON: {e.msg}", code="grammar.syntax", source=source,
                           line=e.lineno, column=e.colno) from None
    except JSONLimitError as e:
        raise GrammarError(f"cannot be read: {e}.", code="grammar.syntax", source=source,
                           hint="Templates need only a few levels of nesting.") from None
    return grammar_from_json(data, name=name, source=source)


def load_grammar(name_or_path: str | os.PathLike[str] | Mapping[str, Any] | Grammar) -> Grammar:
    """A built-in grammar by name or alias (``"qwen3"``, ``"Qwen3.5"``, a vLLM/SGLang parser name such as
    ``"hermes"``), a grammar file: ``.lark`` (an authored grammar) or ``.json`` (a response_template, a
    legacy response_schema, or a tokenizer_config.json that carries one), or a model: a model directory, a
    ``chat_template.jinja``, or a tokenizer_config.json with only a chat template. A model's grammar is its
    response_template when it has one, else the built-in its chat template reads back, else one derived
    from that template (grammar_parse.templates._detect; GrammarError ``detect.no_match`` when neither works).

    A ``Path`` is always a file; a string is a file when it holds a path separator or ends in ``.lark`` or
    ``.json``, and a built-in name otherwise. An unknown name raises GrammarError ``grammar.not_found``
    whose hint suggests the closest names. So that one argument names a grammar everywhere, a template or
    tokenizer-config dict and a :class:`Grammar` are taken too; anything else is an ArgumentError.
    """
    if isinstance(name_or_path, Grammar):
        return name_or_path
    if isinstance(name_or_path, Mapping):
        return grammar_from_json(dict(name_or_path))
    if isinstance(name_or_path, os.PathLike):
        name_or_path = Path(name_or_path)
    if not isinstance(name_or_path, (str, Path)):
        raise grammar_problem(name_or_path, "name_or_path")
    if isinstance(name_or_path, Path) or looks_like_path(name_or_path):
        path = Path(name_or_path)
        if path.is_dir() and path.suffix.lower() not in (".lark", ".json"):
            return _model_dir(path)
        if path.suffix.lower() == ".jinja":
            return _from_chat_template(path)
        return _read_file(path)
    found = _library().names.get(normalise_name(name_or_path))
    if found is None:
        raise _not_found(name_or_path)
    canonical, file_name = found
    return _builtin(file_name, canonical)


__all__ = ["CACHE_DIR_ENV", "authored_template", "grammar_from_json", "grammar_from_json_text", "list_grammars",
           "load_grammar"]
