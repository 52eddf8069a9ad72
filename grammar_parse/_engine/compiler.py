"""Compiling a response template into Lark grammar text, and the grammar cache.

The generated grammar says what transformers' flat state machine does: explicit regions run from their
open to their close delimiter (or to the end of the stream); the one field without an opener collects
the text between them, ends at its own close delimiter or where an explicit region opens; with no such
field, that text is ``UNCLAIMED`` and dropped. For a template with an implicit ``content`` field::

    start: _item* _last?
    _item: closed__ | content | CONTENT_CLOSE | content_run__ closed__
    _last: unclosed__ | content_run__ | content_run__ unclosed__
    closed__: REASONING_OPEN REASONING_TEXT* REASONING_CLOSE -> reasoning | ...

Regions left open at the end of the stream are separate alternatives that only an ``$END`` may follow,
so inside a region the only live delimiter is its own close. Output is deterministic for a given dict.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import regex

from ..errors import TemplateError
from .grammar import UNCLAIMED, Grammar, build_grammar
from .template import Delimiter, FieldTemplate, Template, check_depth, load_template
from .values import RegionValue

_RESERVED_RULES = frozenset({"start"})
_CACHE_SIZE = 256
_cache: OrderedDict[str, Grammar] = OrderedDict()


def lark_string(s: str) -> str:
    """``s`` as a Lark string literal that Lark reads back unchanged."""
    out = []
    for ch in s:
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif not ch.isprintable():
            out.append(f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _char_escape(ch: str) -> str:
    """One character as regex text that survives Lark's escape evaluation and matches only ``ch``."""
    if ch == "\n":
        return "\\n"
    if ch == "/":
        return "\\/"
    if ch == '"':
        return _QUOTE
    if not ch.isprintable() or ch.isspace():
        return f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}"
    if ch.isalnum() or ch == "_":
        return ch
    return "\\" + ch


# A quote is written as \x22 (Lark reads it back as a bare quote): Lark unescapes \" in regex literals with a
# plain text replace, which also eats the escaped backslash of \\" and turns "backslash, quote" into "quote".
_QUOTE = "\\x22"


def lark_regex(pattern: str) -> str:
    """``pattern`` as a Lark regex literal (``/.../s``) that Lark reads back as an equivalent regex.

    Lark evaluates ``\\xNN`` / ``\\uNNNN`` escapes into the character itself, which would turn an escaped
    ``\\x2a`` into a bare ``*``; such escapes are rewritten to the escaped character up front.
    """
    out = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            digits = {"x": 2, "u": 4, "U": 8}.get(nxt)
            if digits is not None:
                code = pattern[i + 2 : i + 2 + digits]
                if len(code) == digits and all(c in "0123456789abcdefABCDEF" for c in code):
                    out.append(_char_escape(chr(int(code, 16))))
                    i += 2 + digits
                    continue
            if nxt == "\n":
                out.append("\\n")
            elif nxt == '"':
                out.append(_QUOTE)
            elif nxt == "/":
                out.append("\\/")
            elif not nxt.isprintable():
                out.append(_char_escape(nxt))
            else:
                out.append(ch + nxt)
            i += 2
            continue
        if ch == "/":
            out.append("\\/")
        elif ch == '"':
            out.append(_QUOTE)
        elif ch == "\n":
            out.append("\\n")
        elif not ch.isprintable():
            out.append(_char_escape(ch))
        else:
            out.append(ch)
        i += 1
    return "/" + "".join(out) + "/s"


def _terminal_body(d: Delimiter) -> str:
    if d.literals is not None:
        return " | ".join(lark_string(s) for s in sorted(d.literals, key=len, reverse=True))
    assert d.pattern is not None
    return lark_regex(d.pattern)


def _rule_names(fields: tuple[FieldTemplate, ...]) -> dict[str, str]:
    """A Lark rule name per field: lowercase, ``[a-z][a-z0-9_]*``, no ``__`` (reserved for helpers)."""
    names: dict[str, str] = {}
    taken: set[str] = set(_RESERVED_RULES)
    for f in fields:
        base = regex.sub(r"[^a-z0-9]+", "_", f.name.lower()).strip("_") or "field"
        if not base[0].isalpha():
            base = f"f_{base}"
        name, n = base, 2
        while name in taken:
            name, n = f"{base}_{n}", n + 1
        taken.add(name)
        names[f.name] = name
    return names


def _spec_json(spec: RegionValue, field_name: str, rule: str) -> str:
    out: dict[str, Any] = {"field": field_name} if field_name != rule else {}
    out.update(spec.directive())
    return json.dumps(out, ensure_ascii=False)


def template_to_lark(template: Template, *, header: str | None = None) -> str:
    """The Lark grammar text (with ``//@`` directives) equivalent to a validated template."""
    names = _rule_names(template.fields)
    lines = [f"// {line}" if line else "//" for line in (header or "Compiled from a response_template.").splitlines()]
    lines.append("//@ grammar_parse 1")
    lines.append(f"//@ defaults {json.dumps(dict(template.defaults), ensure_ascii=False)}")
    anchor = template.start_anchor
    if anchor is not None and anchor.literals is not None:
        value: Any = anchor.literals[0] if len(anchor.literals) == 1 else list(anchor.literals)
        lines.append(f"//@ start_anchor {json.dumps(value, ensure_ascii=False)}")
    elif anchor is not None:
        lines.append(f"//@ start_anchor_pattern {json.dumps(anchor.pattern, ensure_ascii=False)}")
    for f in template.fields:
        lines.append(f"//@ region {names[f.name]} {_spec_json(f.spec, f.name, names[f.name])}")
    lines.append("")

    explicit = [f for f in template.fields if f.open is not None]
    closed = [names[f.name] for f in explicit if f.close is not None]
    implicit = template.implicit
    items: list[str] = []
    last: list[str] = []
    rules: list[str] = []
    # Each region is an aliased alternative of one shared rule, its body written out, so the parser states
    # between regions offer a constant number of nonterminals: with one rule per region, Lark's LALR
    # construction took time quadratic in the number of fields (400 fields: 13.9 s).
    def body(f: FieldTemplate) -> str:
        return f"{names[f.name].upper()}_OPEN {names[f.name].upper()}_TEXT*"

    if closed:
        items.append("closed__")
        alternatives = "\n        | ".join(f"{body(f)} {names[f.name].upper()}_CLOSE -> {names[f.name]}"
                                          for f in explicit if f.close is not None)
        rules.append(f"closed__: {alternatives}")
    if explicit:
        alternatives = "\n         | ".join(f"{body(f)} -> {names[f.name]}" for f in explicit)
        rules.append(f"unclosed__: {alternatives}")
        last.append("unclosed__")
    if implicit is not None:
        c = names[implicit.name]
        upper = c.upper()
        if implicit.close is not None:
            items += [c, f"{upper}_CLOSE"]
            rules.append(f"{c}: _{c}_text {upper}_CLOSE")
        if closed:
            items.append(f"{c}_run__ closed__")
        last.append(f"{c}_run__")
        if explicit:
            last.append(f"{c}_run__ unclosed__")
        rules.append(f"{c}_run__: _{c}_text -> {c}")
        rules.append(f"_{c}_text: {upper}_TEXT+")
    else:
        items.append(UNCLAIMED)

    start = " ".join(part for part, present in (("_item*", items), ("_last?", last)) if present)
    lines.append(f"start: {start}")
    if items:
        lines.append(f"_item: {' | '.join(items)}")
    if last:
        lines.append(f"_last: {' | '.join(last)}")
    lines += rules
    lines.append("")
    declared = []
    for f in template.fields:
        upper = names[f.name].upper()
        # Opens outrank closes when both match the same text, as in transformers.
        if f.open is not None:
            lines.append(f"{upper}_OPEN.1: {_terminal_body(f.open)}")
        if f.close is not None:
            lines.append(f"{upper}_CLOSE: {_terminal_body(f.close)}")
        declared.append(f"{upper}_TEXT")
    if implicit is None:
        declared.append(UNCLAIMED)
    lines.append(f"%declare {' '.join(declared)}")
    return "\n".join(lines) + "\n"


def compile_template(template: Mapping[str, Any] | Template, *, name: str | None = None) -> Grammar:
    """Compile a transformers ``response_template`` dict into a Grammar (cached per template).

    Raises TemplateError (a ValueError) naming the field and key if the template is malformed.
    """
    if isinstance(template, Template):
        return build_grammar(template_to_lark(template), name=name, repeats=False)
    check_depth(template)  # (before the cache key's json.dumps walks it)
    try:
        key = json.dumps(template, ensure_ascii=False) + f"\x00{name}"
    except (TypeError, ValueError):
        key = None
    if key is not None and key in _cache:
        _cache.move_to_end(key)
        return _cache[key]
    validated = load_template(template)
    grammar = build_grammar(template_to_lark(validated), source_name="<response_template>", name=name, repeats=False)
    if grammar.regions.keys() != {n for n in _rule_names(validated.fields).values()}:
        raise TemplateError("template compiled to inconsistent regions", path="fields", code="template.fields")
    if key is not None:
        _cache[key] = grammar
        if len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return grammar


__all__ = ["compile_template", "lark_regex", "lark_string", "template_to_lark"]
