"""Compatibility with transformers' older formats and host libraries.

- Legacy ``response_schema`` dicts (transformers <= 5.14, TRL): :func:`legacy_grammar` translates one
  into a streaming grammar whose final message is exactly transformers 5.13's ``recursive_parse``;
  ``grammar_parse.parse_response`` and ``ResponseParser`` accept such a schema directly.
- Tokenizer configs: :func:`from_tokenizer_config` picks the ``response_template`` (or the legacy
  ``response_schema``) a ``tokenizer_config.json`` carries.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from grammar_parse import Grammar, GrammarError, compile_template
from grammar_parse._engine.grammar import build_grammar
from grammar_parse._engine.template import check_depth

from .legacy import DEFAULT_TIMEOUT, LegacyValue, check_schema, is_legacy_schema, recursive_parse
from .translate import Translation, to_template, translate


@lru_cache(maxsize=128)
def _legacy_grammar(key: str, timeout: float | None) -> Grammar:
    schema = json.loads(key)
    check_schema(schema)  # once per schema: the cache keeps only schemas that passed
    return build_grammar(translate(schema).lark_text(schema, timeout), source_name="<response_schema>")


def legacy_grammar(schema: dict[str, Any], *, timeout: float | None = DEFAULT_TIMEOUT) -> Grammar:
    """The streaming grammar for a legacy response_schema (cached). Its regions stream as text arrives;
    at finalize() the whole schema runs once (each regex limited to ``timeout`` seconds) and gives the
    message, with a ``correction`` event where the streamed regions disagree. A schema whose keys have the
    wrong JSON type fails here, with a ``TemplateError`` naming the node and key."""
    check_depth(schema)  # (before the cache key's json.dumps and the schema walk recurse into it)
    return _legacy_grammar(json.dumps(schema, ensure_ascii=False), timeout)


def from_tokenizer_config(config: str | Path | dict[str, Any]) -> Grammar:
    """The grammar of a tokenizer_config.json (a path or the loaded dict): its ``response_template``
    if it has one, else its legacy ``response_schema``."""
    source = "<tokenizer_config>"
    if not isinstance(config, dict):
        source = str(config)
        try:
            config = json.loads(Path(config).read_text(encoding="utf-8"))
        except OSError as e:
            raise GrammarError(f"cannot read the tokenizer config: {e.strerror}", code="grammar.not_found",
                               source=source) from None
        except json.JSONDecodeError as e:
            raise GrammarError(f"the tokenizer config is not valid JSON: {e.msg}", code="grammar.syntax",
                               source=source, line=e.lineno, column=e.colno) from None
        except RecursionError:
            raise GrammarError("the tokenizer config nests too deeply to read", code="grammar.syntax",
                               source=source) from None
    if not isinstance(config, dict):
        raise GrammarError("a tokenizer config must be a JSON object", code="grammar.syntax", source=source)
    if config.get("response_template") is not None:
        return compile_template(config["response_template"])
    if config.get("response_schema") is not None:
        return legacy_grammar(config["response_schema"])
    raise GrammarError(
        "the tokenizer config carries neither a response_template nor a response_schema",
        code="grammar.not_found",
        source=source,
        hint="Pass a response template or a built-in grammar name (grammar-parse list) instead.",
    )


__all__ = [
    "DEFAULT_TIMEOUT",
    "LegacyValue",
    "Translation",
    "from_tokenizer_config",
    "is_legacy_schema",
    "legacy_grammar",
    "recursive_parse",
    "to_template",
    "translate",
]
