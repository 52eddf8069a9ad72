"""Translating a legacy ``response_schema`` into grammar rules, so that it streams.

The schema's regexes are read with Python's regex parser. Around every captured field, the literals
that bound it become delimiters: the literal run before a lazy group opens a region, the run after it
closes it; a group made of repeated ``<tag>...</tag>`` blocks becomes a repeated region; a group with
no literal before it collects the text between the other regions (the implicit field). Each region's
value is the field's own schema node run on the region's text, so an x-parser, a jmespath transform or
a nested x-regex gives the value transformers would give for that text.

What a grammar cannot say (text rewritten by x-regex-substitutions, backtracking that reinterprets an
earlier region, a root that is not an object) is left to the final run of the whole schema at
finalize(), and listed in the translation's notes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import regex

from grammar_parse._engine.compiler import template_to_lark
from grammar_parse._engine.regex_safety import sre as _sre
from grammar_parse._engine.regex_safety import sre_parse as _parser
from grammar_parse._engine.regex_shape import REPEAT_OPS
from grammar_parse._engine.template import Delimiter, FieldTemplate, Template

from .legacy import DEFAULT_TIMEOUT, LegacyValue, compiled_jmespath

_DELIMITER_OPS = {_sre.LITERAL, _sre.IN, _sre.AT, _sre.NOT_LITERAL}


@dataclass
class Translation:
    """The streaming grammar for a legacy schema, and what could not be carried over."""

    fields: list[FieldTemplate]
    defaults: dict[str, Any]
    notes: list[str] = field(default_factory=list)

    def lark_text(self, schema: dict[str, Any], timeout: float | None) -> str:
        header = "Compiled from a legacy response_schema (transformers <= 5.14).\n" + "\n".join(
            f"Note: {n}" for n in self.notes)
        text = template_to_lark(Template(defaults=self.defaults, fields=tuple(self.fields), start_anchor=None),
                                header=header)
        extra = f"//@ legacy_schema {json.dumps(schema, ensure_ascii=False)}\n"
        if timeout != DEFAULT_TIMEOUT:
            extra += f"//@ legacy_timeout {json.dumps(timeout)}\n"
        return text.replace("//@ grammar_parse 1\n", "//@ grammar_parse 1\n" + extra, 1)


# ---------------------------------------------------------------------------- regex AST helpers
def _unparse(items: list[tuple[Any, Any]]) -> str:
    """Regex source for parsed items (capturing groups come back as non-capturing)."""
    return "".join(_unparse_item(op, av) for op, av in items)


def _unparse_class(av: Any) -> str:
    parts = []
    for op, a in av:
        if op is _sre.NEGATE:
            parts.append("^")
        elif op is _sre.LITERAL:
            parts.append(regex.escape(chr(a)))
        elif op is _sre.RANGE:
            parts.append(f"{regex.escape(chr(a[0]))}-{regex.escape(chr(a[1]))}")
        elif op is _sre.CATEGORY:
            parts.append(_CATEGORIES[a])
        else:
            raise ValueError(f"unsupported class item {op}")
    return "[" + "".join(parts) + "]"


_CATEGORIES = {
    _sre.CATEGORY_DIGIT: r"\d", _sre.CATEGORY_NOT_DIGIT: r"\D", _sre.CATEGORY_SPACE: r"\s",
    _sre.CATEGORY_NOT_SPACE: r"\S", _sre.CATEGORY_WORD: r"\w", _sre.CATEGORY_NOT_WORD: r"\W",
}
_ATS = {
    _sre.AT_BEGINNING: "^", _sre.AT_BEGINNING_STRING: r"\A", _sre.AT_END: "$", _sre.AT_END_STRING: r"\Z",
    _sre.AT_BOUNDARY: r"\b", _sre.AT_NON_BOUNDARY: r"\B",
}


def _unparse_item(op: Any, av: Any) -> str:
    if op is _sre.LITERAL:
        return regex.escape(chr(av))
    if op is _sre.NOT_LITERAL:
        return f"[^{regex.escape(chr(av))}]"
    if op is _sre.ANY:
        return "."
    if op is _sre.IN:
        if len(av) == 1 and av[0][0] is _sre.CATEGORY:
            return _CATEGORIES[av[0][1]]
        return _unparse_class(av)
    if op is _sre.AT:
        return _ATS[av]
    if op in REPEAT_OPS:
        lo, hi, sub = av
        inner = _unparse(list(sub))
        if len(sub) != 1 or sub[0][0] in (_sre.SUBPATTERN, _sre.BRANCH) or len(inner) > 2 and not inner.startswith("["):
            inner = f"(?:{inner})"
        hi_s = "" if hi == _sre.MAXREPEAT else str(hi)
        quant = {(0, ""): "*", (1, ""): "+", (0, "1"): "?"}.get((lo, hi_s), f"{{{lo},{hi_s}}}")
        return inner + quant + ("?" if op is _sre.MIN_REPEAT else "")
    if op is _sre.SUBPATTERN:
        return f"(?:{_unparse(list(av[3]))})"
    if op is _sre.BRANCH:
        return "(?:" + "|".join(_unparse(list(alt)) for alt in av[1]) + ")"
    if op is _sre.ASSERT:
        return ("(?=" if av[0] > 0 else "(?<=") + _unparse(list(av[1])) + ")"
    if op is _sre.ASSERT_NOT:
        return ("(?!" if av[0] > 0 else "(?<!") + _unparse(list(av[1])) + ")"
    raise ValueError(f"unsupported regex construct {op}")


def _is_delimiterish(item: tuple[Any, Any]) -> bool:
    """Literals, and the optional whitespace or anchors that decorate them (``\\n?``, ``\\s*``, ``^``)."""
    op, av = item
    if op in _DELIMITER_OPS:
        return True
    if op in REPEAT_OPS:
        return all(_is_delimiterish(i) for i in av[2]) and (av[1] == 1 or all(i[0] is not _sre.LITERAL or chr(i[1]).isspace() for i in av[2]))
    if op is _sre.BRANCH:
        return all(all(_is_delimiterish(i) for i in alt) for alt in av[1])
    return False


def _has_literal(items: list[tuple[Any, Any]]) -> bool:
    """Whether the items must match some literal text (an optional literal does not count)."""
    for op, av in items:
        if op is _sre.LITERAL:
            return True
        if op is _sre.BRANCH and any(_has_literal(list(alt)) for alt in av[1]):
            return True
    return False


def _strip_end(items: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """A close context without its end-of-text alternative (a region closes at the end anyway)."""
    out = []
    for op, av in items:
        if op is _sre.BRANCH:
            alts = [alt for alt in av[1] if list(alt) != [(_sre.AT, _sre.AT_END)]
                    and list(alt) != [(_sre.AT, _sre.AT_END_STRING)]]
            if not alts:
                continue
            out.append((op, (av[0], alts)))
        elif (op, av) in ((_sre.AT, _sre.AT_END), (_sre.AT, _sre.AT_END_STRING)):
            continue
        else:
            out.append((op, av))
    return out


def _paths(seq: list[Any], trail: list[tuple[list[Any], int]], found: dict[int, list[tuple[list[Any], int]]]) -> None:
    """Record, for every capturing group, the chain of (sequence, index) leading to it."""
    for i, (op, av) in enumerate(seq):
        here = [*trail, (seq, i)]
        if op is _sre.SUBPATTERN:
            if av[0] is not None:
                found.setdefault(av[0], here)
            _paths(list(av[3]), here, found)
        elif op is _sre.BRANCH:
            for alt in av[1]:
                _paths(list(alt), here, found)
        elif op in REPEAT_OPS and av[1] == 1:
            _paths(list(av[2]), here, found)  # an optional part keeps its context; repeats do not


def _context(path: list[tuple[list[Any], int]], step: int) -> list[tuple[Any, Any]]:
    """Delimiter-like items right before (step -1) or after (+1) a group, climbing out of containers."""
    collected: list[tuple[Any, Any]] = []
    for depth in range(len(path) - 1, -1, -1):
        seq, index = path[depth]
        i = index + step
        while 0 <= i < len(seq):
            item = seq[i]
            if not _is_delimiterish(item):
                return collected
            if step < 0:
                collected.insert(0, item)
            else:
                collected.append(item)
            i += step
        if depth == 0:
            break
        op, av = path[depth - 1][0][path[depth - 1][1]]
        if op in REPEAT_OPS and av[1] != 1:
            return collected
    return collected


def _literal_run(items: list[Any], from_end: bool) -> list[Any]:
    """The run of delimiter-like items at the start (or end) of a sequence that holds a literal."""
    seq = list(reversed(items)) if from_end else list(items)
    run = []
    for item in seq:
        if not _is_delimiterish(item):
            break
        run.append(item)
    run = list(reversed(run)) if from_end else run
    return run if _has_literal(run) else []


def _opener_text(pattern: str) -> str | None:
    """The literal text an opener pattern starts with (after any optional decoration)."""
    items = [i for i in _parse_regex(pattern) if i[0] is not _sre.AT]
    while items and items[0][0] is _sre.MAX_REPEAT:
        items = items[1:]
    run = []
    for item in items:
        if item[0] is not _sre.LITERAL:
            break
        run.append(item)
    return _literal_text(run)


def _literal_text(items: list[Any]) -> str | None:
    """The text of a run of plain literals, else None."""
    if not items or any(op is not _sre.LITERAL for op, _ in items):
        return None
    return "".join(chr(av) for _, av in items)


def _following(path: list[tuple[list[Any], int]]) -> list[tuple[Any, Any]]:
    """Everything after a group, climbing out of its containers (stops at a repetition)."""
    rest: list[tuple[Any, Any]] = []
    for depth in range(len(path) - 1, -1, -1):
        seq, index = path[depth]
        rest.extend(seq[index + 1:])
        if depth and path[depth - 1][0][path[depth - 1][1]][0] in REPEAT_OPS \
                and path[depth - 1][0][path[depth - 1][1]][1][1] != 1:
            break
    return rest


def _terminators(items: list[tuple[Any, Any]], out: list[str]) -> None:
    """Literal texts that may end an implicit field: runs, lookahead bodies, literal alternatives.
    Whitespace alone does not end a field; other capturing groups are skipped (their literals open
    their own regions)."""
    run: list[Any] = []
    ended: list[tuple[Any, Any]] = [*items, (None, None)]  # the end flushes the last run
    for op, av in ended:
        if op is _sre.LITERAL:
            run.append((op, av))
            continue
        prefix = _literal_text(run) or ""
        run = []
        if op is _sre.BRANCH:  # the regex parser moves a shared prefix out of the alternatives
            for alt in av[1]:
                found: list[str] = []
                _terminators(list(alt), found)
                out.extend(prefix + t for t in found if prefix + t not in out)
            continue
        if prefix.strip() and prefix not in out:
            out.append(prefix)
        elif op is _sre.ASSERT and av[0] > 0:
            _terminators(list(av[1]), out)
        elif op in REPEAT_OPS:
            _terminators(list(av[2]), out)
        elif op is _sre.SUBPATTERN and av[0] is None:
            _terminators(list(av[3]), out)


@dataclass
class _Region:
    name: str
    open: str | None
    close: str | None
    mode: str  # group | wrap | item
    repeats: bool = False
    terminators: list[str] = field(default_factory=list)  # implicit fields: literals that may end them
    lead_ins: dict[str, str] = field(default_factory=dict)  # opener literal -> optional text before it


def _group_region(name: str, path: list[tuple[list[Any], int]]) -> _Region | None:
    seq, index = path[-1]
    body = list(seq[index][1][3])
    # A group of repeated <tag>...</tag> blocks: one region per block.
    if len(body) == 1 and body[0][0] in REPEAT_OPS and body[0][1][1] != 1:
        block = list(body[0][1][2])
        head, tail = _literal_run(block, from_end=False), _literal_run(block, from_end=True)
        if head and tail and len(head) + len(tail) < len(block):
            return _Region(name, _unparse(head), _unparse(tail), "item", repeats=True)
    head, tail = _literal_run(body, from_end=False), _literal_run(body, from_end=True)
    if head and tail and len(head) + len(tail) < len(body):
        return _Region(name, _unparse(head), _unparse(tail), "wrap")
    before, after = _context(path, -1), _strip_end(_context(path, +1))
    opener = _unparse(before) if _has_literal(before) else None
    closer = _unparse(after) if _has_literal(after) else None
    region = _Region(name, opener, closer, "group")
    if opener is None and closer is None:
        following = _following(path)
        _terminators(following, region.terminators)
        region.lead_ins = _lead_ins(following)
    return region


def _lead_ins(items: list[tuple[Any, Any]]) -> dict[str, str]:
    """``(?:\\n(?=<tool_call>))?`` after a field: text that belongs to neither side of the next region's
    opener; the opener takes it (optionally) so the field does not. Opener literal -> lead-in text."""
    out = {}
    for op, av in items:
        if op is _sre.MAX_REPEAT and av[0] == 0 and av[1] == 1:
            body = list(av[2])
            if len(body) >= 2 and body[-1][0] is _sre.ASSERT and body[-1][1][0] > 0:
                lead, ahead = _literal_text(body[:-1]), _literal_text(list(body[-1][1][1]))
                if lead and ahead:
                    out[ahead] = lead
    return out


def _parse_regex(pattern: str) -> Any:
    return _parser.parse(pattern, regex.DOTALL)


def _field_regions(properties: Mapping[str, Any], notes: list[str]) -> tuple[list[_Region], dict[str, Any]]:
    """The regions of a root without a regex of its own: one per field whose own regex a literal opens."""
    regions: list[_Region] = []
    nodes: dict[str, Any] = {}
    for name, node in properties.items():
        if not isinstance(node, dict) or "const" in node:
            continue
        pattern = node.get("x-regex") or node.get("x-regex-iterator")
        if pattern is None or "x-regex-substitutions" in node:
            notes.append(f"field {name!r} has no regex of its own to bound a region; settled at finalize()")
            continue
        try:
            parsed = _parse_regex(pattern)
            found: dict[int, list[tuple[list[Any], int]]] = {}
            _paths(list(parsed), [], found)
            first = min(found) if found else None
            region = None
            if first is not None:
                before, after = _context(found[first], -1), _strip_end(_context(found[first], +1))
                if _has_literal(before):
                    region = _Region(name, _unparse(before), _unparse(after) if _has_literal(after) else None,
                                     "item" if "x-regex-iterator" in node else "wrap",
                                     repeats="x-regex-iterator" in node)
        except Exception as e:  # noqa: BLE001
            notes.append(f"field {name!r}: its regex cannot be analysed ({e}); settled at finalize()")
            continue
        if region is None:
            notes.append(f"field {name!r}: no literal opens its region; settled at finalize()")
        else:
            regions.append(region)
            nodes[name] = node
    return regions, nodes


def translate(schema: dict[str, Any]) -> Translation:
    """The streaming fields of a legacy schema (best effort: the final run of the schema is exact)."""
    notes: list[str] = []
    if schema.get("type") != "object" or "x-regex-iterator" in schema or "x-regex-key-value" in schema:
        return Translation([], {}, [f"the root is {schema.get('type')!r} with its own iterator or key-value "
                                    "regex; the whole message is settled at finalize()"])
    properties = schema.get("properties", {})
    defaults = {k: v["const"] for k, v in properties.items() if isinstance(v, dict) and "const" in v}
    if "x-regex-substitutions" in schema or "x-parser" in schema:
        return Translation([], defaults, ["the root rewrites or re-parses the whole text (x-regex-substitutions "
                                          "or x-parser); fields are settled at finalize()"])
    regions: list[_Region] = []
    if "x-regex" in schema:
        try:
            parsed = _parse_regex(schema["x-regex"])
        except Exception as e:  # noqa: BLE001 - regex-module-only syntax
            return Translation([], defaults, [f"the root regex cannot be analysed ({e}); settled at finalize()"])
        found: dict[int, list[tuple[list[Any], int]]] = {}
        _paths(list(parsed), [], found)
        for name, gid in parsed.state.groupdict.items():
            if gid not in found:
                notes.append(f"field {name!r} is captured inside a repetition; settled at finalize()")
                continue
            try:
                region = _group_region(name, found[gid])
            except ValueError as e:
                region, reason = None, str(e)
            else:
                reason = "its group is not bounded by literals"
            if region is None:
                notes.append(f"field {name!r}: {reason}; settled at finalize()")
            else:
                regions.append(region)
        nodes = {r.name: properties.get(r.name, {}) for r in regions}
    else:
        regions, nodes = _field_regions(properties, notes)
    # The implicit field ends at what the regex lets follow it, except where another region opens.
    opener_texts = {t for r in regions if r.open is not None and (t := _opener_text(r.open))}
    for r in regions:
        ends = [t for t in r.terminators if not any(o.startswith(t) or t.startswith(o) for o in opener_texts)]
        if r.open is None and r.close is None and ends:
            r.close = r"\s*(?:" + "|".join(regex.escape(t) for t in ends) + ")"
        for ahead, lead in r.lead_ins.items():
            for other in regions:
                if other.open is not None and _opener_text(other.open) == ahead:
                    other.open = f"(?:{regex.escape(lead)})?" + other.open
    # One field may collect the text between regions; prefer the one called content.
    implicit = sorted((r for r in regions if r.open is None), key=lambda r: r.name != "content")
    for extra in implicit[1:]:
        notes.append(f"field {extra.name!r} has no literal opener, like {implicit[0].name!r}; settled at finalize()")
        regions.remove(extra)
    fields = []
    for r in regions:
        node = nodes.get(r.name, {})
        spec = LegacyValue(node=node if isinstance(node, dict) else {}, mode=r.mode, repeats=r.repeats)
        fields.append(FieldTemplate(
            name=r.name,
            open=Delimiter(pattern=r.open) if r.open is not None else None,
            close=Delimiter(pattern=r.close) if r.close is not None else None,
            spec=spec,
        ))
    return Translation(fields, defaults, notes)


# ---------------------------------------------------------------------------- v1 response_template export
class _NotExpressible(Exception):
    pass


def _jmespath_to_transform(node: Mapping[str, Any], each: bool) -> Any:
    """A jmespath AST as a v1 transform template ({placeholder} strings, literals, dicts, lists)."""
    kind = node["type"]
    if kind == "literal":
        value = node["value"]
        if isinstance(value, str) and "{" in value:
            raise _NotExpressible(f"literal {value!r} would read as a placeholder")
        return value
    if kind == "current" and not each:
        return "{content}"
    if kind in ("field", "subexpression"):
        parts = []
        for part in [node] if kind == "field" else node["children"]:
            if part["type"] != "field":
                raise _NotExpressible("only plain field paths translate")
            parts.append(part["value"])
        return "{" + ".".join(parts if each else ["content", *parts]) + "}"
    if kind == "multi_select_dict":
        return {pair["value"]: _jmespath_to_transform(pair["children"][0], each) for pair in node["children"]}
    if kind == "multi_select_list":
        return [_jmespath_to_transform(child, each) for child in node["children"]]
    raise _NotExpressible(f"jmespath {kind} has no v1 transform")


def _content_spec(node: dict[str, Any]) -> dict[str, Any]:
    """v1 content keys for a legacy node that parses a region's body."""
    if set(node) - {"type", "x-parser", "x-parser-args", "properties", "additionalProperties", "items",
                    "x-regex-key-value"}:
        raise _NotExpressible(f"node keys {sorted(set(node))} have no v1 equivalent")
    if "x-regex-key-value" in node:
        spec: dict[str, Any] = {"content": "xml-inline", "content_args": {"tag_pattern": node["x-regex-key-value"]}}
        extra = node.get("additionalProperties")
        if isinstance(extra, dict) and extra.get("x-parser") == "json":
            spec["content_args"]["value_parser"] = {"name": "json", "args": {
                k: v for k, v in extra.get("x-parser-args", {}).items() if k == "allow_non_json"}}
        return spec
    parser = node.get("x-parser")
    if parser is None:
        if node.get("type") not in ("string", None):
            raise _NotExpressible(f"a {node.get('type')} node without a parser")
        return {"content": "text", "content_args": {"strip": False}}
    args = node.get("x-parser-args", {})
    spec = {"content": "json"}
    if parser == "gemma4-tool-call":
        spec["content_args"] = {"unquoted_keys": True, "string_delims": [['<|"|>', '<|"|>']]}
    elif parser != "json":
        raise _NotExpressible(f"parser {parser}")
    if args.get("allow_non_json"):
        spec.setdefault("content_args", {})["allow_non_json"] = True
    if (transform := args.get("transform")) is not None:
        parsed = compiled_jmespath(transform).parsed
        if parsed["type"] == "projection" and parsed["children"][0]["type"] == "identity":
            spec["transform"] = _jmespath_to_transform(parsed["children"][1], each=True)
            spec["transform_each"] = True
        else:
            spec["transform"] = _jmespath_to_transform(parsed, each=False)
    return spec


def to_template(schema: dict[str, Any], translation: Translation) -> tuple[dict[str, Any] | None, list[str]]:
    """The v1 response_template saying the same as a legacy schema, where there is one, and notes on what
    differs; (None, reasons) where v1 cannot say it."""
    notes = list(translation.notes)
    if notes:
        return None, notes
    fields: dict[str, Any] = {}
    try:
        for f in translation.fields:
            spec = f.spec
            if not isinstance(spec, LegacyValue):  # translate() makes only these
                raise _NotExpressible(f"field {f.name!r} has no legacy schema node")
            node = spec.node
            if spec.mode == "item":
                node = node.get("items", {})
            elif spec.mode == "wrap":
                # the node's own regex only takes the delimiters off again; the rest of it parses the body
                node = {k: v for k, v in node.items() if k not in ("x-regex", "x-regex-iterator")}
            field_spec: dict[str, Any] = {}
            if f.open is not None:
                field_spec["open_pattern"] = f.open.pattern
            if f.close is not None:
                field_spec["close_pattern"] = f.close.pattern
            field_spec.update(_content_spec(node))
            if spec.repeats:
                field_spec["repeats"] = True
            fields[f.name] = field_spec
    except _NotExpressible as e:
        return None, [str(e)]
    if not fields:
        return None, ["no field streams"]
    notes.append("legacy parsing keeps empty strings and does not strip text; v1 drops empty fields at the end")
    notes.append("legacy takes the first match of a field; a v1 field that is not repeating keeps the last")
    return {"version": 1, "defaults": translation.defaults, "start_anchor_pattern": r"\A", "fields": fields}, notes


__all__ = ["Translation", "to_template", "translate"]
