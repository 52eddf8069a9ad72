"""Compiled grammars: Lark text plus region metadata, built into the LALR tables the session walks.

A grammar is a valid Lark grammar whose comments carry ``//@`` directives::

    //@ defaults {"role": "assistant"}
    //@ start_anchor "<|im_start|>assistant\\n"
    //@ region reasoning_content {"content": "text"}

    start: _item* _last?
    reasoning_content: _reasoning_content_body REASONING_CONTENT_CLOSE
    ...
    REASONING_CONTENT_OPEN.1: "<think>"
    REASONING_CONTENT_CLOSE: "</think>"
    %declare REASONING_CONTENT_TEXT

A ``region`` directive names a rule; its JSON holds the same value keys as a template field (content,
content_args, repeats, join, optional, transform, transform_each) plus ``field``, the message key when it
differs from the rule name, ``role`` (what the region is in the message where its field name does not say:
grammar_parse._engine.format), and ``extend`` (a repeated region's list value joins the field's list instead
of being appended as one element). The rule's terminals are found by name: ``<RULE>_OPEN`` opens the region,
``<RULE>_CLOSE`` closes it, and the declared ``<RULE>_TEXT`` carries its text. Alternatives aliased
``-> rule`` belong to the region too. A declared ``UNCLAIMED`` terminal carries text outside every region
(dropped from the message). Other terminals with a pattern are delimiters that belong to no region.

Lark owns the structure: in every parser state, the terminals with an action are exactly the delimiters
the scanner must watch, so a delimiter is only recognised where the grammar allows it.

:func:`build_grammar` reads the directives, has Lark analyse the text, builds the regions and then the
terminals (a refused or invalid regex fails here, at load), and hands the parse table to
:func:`grammar_parse._engine.tables.build_tables` for what the session walks.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from dataclasses import field as dataclass_field
from typing import Any

import lark
import regex
from lark.lexer import Lexer

from ..errors import ERROR_CODES, GrammarError, TemplateError
from .arguments import expect_text
from .delimiters import LiteralMatcher, Matcher, RegexMatcher, ValueEnd
from .format import Format, build_format
from .reading import PLACEHOLDER
from .regex_safety import RegexSafetyError, refusal
from .shapes import COMPONENT, ROLES
from .symbols import Region, Terminal
from .tables import StateInfo, Tables, build_tables
from .template import REGEX_HINT, Delimiter, check_depth, check_named_groups, load_delimiter, load_value_spec
from .values import RegionValue, ValueSpec

DIRECTIVE = "//@"
UNCLAIMED = "UNCLAIMED"

_LARK_FLAGS = {"i": regex.IGNORECASE, "m": regex.MULTILINE, "s": regex.DOTALL, "u": 0, "x": regex.VERBOSE, "l": 0}


class _ScannerLexer(Lexer):
    """Placeholder: the streaming scanner does the lexing, Lark only builds the table."""

    def __init__(self, lexer_conf: Any) -> None:  # noqa: D107 - required signature
        pass

    def lex(self, lexer_state: Any, parser_state: Any) -> Any:  # pragma: no cover - never called
        raise NotImplementedError("grammar_parse feeds tokens to the parser itself")


#: The readings of a call written inside reasoning (the ``calls_in_reasoning`` directive and parser option;
#: see grammar_parse._engine.drafts).
CALLS_IN_REASONING = ("never", "fallback", "always")


@dataclass(frozen=True, eq=False)
class Grammar:
    """A compiled grammar: Lark source, regions and terminals, and the tables the streaming session walks.

    Build one with :func:`grammar_parse.compile_template` or :func:`grammar_parse.load_grammar`; it is a
    frozen, picklable value, shared by every parser using it (Lark is used only while building it; a
    process that receives one compiles its patterns on first use). ``tables`` is internal
    (grammar_parse._engine.tables). Grammars compare by identity, as their caches are kept by it.
    """

    source: str
    name: str | None
    defaults: Mapping[str, Any]
    start_anchor: Delimiter | None
    regions: dict[str, Region]
    terminals: dict[str, Terminal]
    #: The grammar's rules as plain data: each rule's name to its expansions (the symbol names, in Lark's
    #: order, Lark's helper rules for ``*``, ``+`` and ``?`` included), for what reads the grammar's structure
    #: after it is built (the constraint export); Lark itself is used only while building.
    rules: Mapping[str, tuple[tuple[str, ...], ...]]
    tables: Tables = dataclass_field(repr=False)
    #: What the grammar's message is: its regions' roles, reasoning and end-of-turn delimiters, each call
    #: region's shape and place (grammar_parse._engine.format), worked out once here for every consumer.
    format: Format = dataclass_field(repr=False)
    legacy_schema: dict[str, Any] | None = None  # a legacy response_schema settles the message at finalize
    # with a legacy_schema: seconds each of its regexes may run (None: no limit); see grammar_parse.compat
    legacy_timeout: float | None = None
    #: What settles the message at finalize, for a grammar whose plug-in needs it (a legacy schema's
    #: whole run): an object with ``settle(output text) -> message`` and ``prompt_error``/``prompt_hint``
    #: (it takes no prompt); None for every other grammar.
    settle: Any = dataclass_field(default=None, repr=False)

    @property
    def calls_in_reasoning(self) -> str:
        """How a call written inside reasoning is read by default (the ``calls_in_reasoning`` directive:
        "never", "fallback" or "always"; see grammar_parse._engine.drafts)."""
        return self.format.calls_in_reasoning

    @property
    def lark_source(self) -> str:
        """The grammar's Lark text, directives included (the single source of truth)."""
        return self.source

    @property
    def fields(self) -> list[str]:
        """The message key of each region, in the grammar's order (a key repeats where several regions fill it)."""
        return [r.field for r in self.regions.values()]

    def __repr__(self) -> str:
        return f"<Grammar {self.name or 'anonymous'}: {', '.join(self.fields)}>"


def _delimiter_roles(terminal: str) -> list[tuple[str, str]]:
    """Every (UPPER, role) such that ``terminal`` is ``UPPER_OPEN`` / ``UPPER_CLOSE``, optionally
    ``_SUFFIX``ed, longest UPPER first: read off the name itself, so matching terminals to regions costs no
    pass over the regions (400 fields: 320,000 name tests)."""
    out = []
    for m in regex.finditer(r"_(OPEN|CLOSE)(?=_|$)", terminal):
        if m.start() > 0:
            out.append((terminal[:m.start()], m.group(1).lower()))
    return out[::-1]


def _directive_error(source_name: str, line: int, message: str) -> GrammarError:
    return GrammarError(message, code="grammar.directive", source=source_name, line=line, column=1)


def _read_directives(text: str, source_name: str) -> tuple[dict[str, Any], dict[str, tuple[int, dict[str, Any]]]]:
    settings: dict[str, Any] = {}
    regions: dict[str, tuple[int, dict[str, Any]]] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped.startswith(DIRECTIVE):
            continue
        body = stripped[len(DIRECTIVE):].strip()
        key, _, rest = body.partition(" ")
        rest = rest.strip()
        if key == "region":
            rule, _, spec_text = rest.partition(" ")
            try:
                spec = json.loads(spec_text) if spec_text.strip() else {}
            except (json.JSONDecodeError, RecursionError) as e:
                raise _directive_error(source_name, lineno, f"region {rule}: options are not valid JSON ({e})") from None
            if not isinstance(spec, dict):
                raise _directive_error(source_name, lineno, f"region {rule}: options must be a JSON object")
            if rule in regions:
                raise _directive_error(source_name, lineno, f"region {rule} is declared twice")
            regions[rule] = (lineno, spec)
        elif key in ("defaults", "start_anchor", "start_anchor_pattern", "name", "aliases", "legacy_schema",
                     "legacy_timeout", "calls_in_reasoning"):
            try:
                settings[key] = json.loads(rest)
                check_depth(settings[key], key)
            except TemplateError as e:
                raise _directive_error(source_name, lineno, str(e)) from None
            except (json.JSONDecodeError, RecursionError) as e:
                raise _directive_error(source_name, lineno, f"{key}: value is not valid JSON ({e})") from None
        elif key == "repair":
            terminal, _, code_text = rest.partition(" ")
            try:
                code = json.loads(code_text)
            except (json.JSONDecodeError, RecursionError) as e:
                raise _directive_error(source_name, lineno, f"repair {terminal}: the code is not valid JSON ({e})") from None
            if not isinstance(code, str) or not code.startswith("repair.") or code not in ERROR_CODES:
                raise _directive_error(source_name, lineno, f"repair {terminal}: {code!r} is not a repair.* code of "
                                       "grammar_parse.errors.ERROR_CODES")
            settings.setdefault("repair", {})[terminal] = (lineno, code)
        elif key == "grammar_parse":
            if rest != "1":
                raise _directive_error(source_name, lineno, f"unsupported grammar format version {rest!r}")
        else:
            raise _directive_error(
                source_name, lineno,
                f"unknown directive {key!r}; expected region, defaults, start_anchor, start_anchor_pattern, name, aliases, legacy_schema, legacy_timeout, calls_in_reasoning, repair",
            )
    return settings, regions


def _split_escaped_alternation(value: str) -> tuple[str, ...] | None:
    """The literals of ``(?:lit1|lit2)`` as Lark builds it from ``"lit1" | "lit2"``, else None."""
    if not (value.startswith("(?:") and value.endswith(")")):
        value = f"(?:{value})"
    parts, current, i, body = [], [], 0, value[3:-1]
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            current.append(body[i : i + 2])
            i += 2
            continue
        if ch == "|":
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
        i += 1
    parts.append("".join(current))
    literals = tuple(regex.sub(r"\\(.)", r"\1", p, flags=regex.DOTALL) for p in parts)
    if all(lit and re.escape(lit) == p for lit, p in zip(literals, parts)):
        return literals
    return None


def _terminal_regex(term: Any) -> tuple[str, int] | tuple[tuple[str, ...], None]:
    """A Lark terminal as (regex, flags), or (literals, None) where it is fixed strings."""
    pattern = term.pattern
    flags = 0
    for f in pattern.flags:
        flags |= _LARK_FLAGS.get(f, 0)
    if isinstance(pattern, lark.lexer.PatternStr) and not flags:
        return (pattern.value,), None
    if pattern.raw is None and not flags:
        # Lark joins an alternation of strings ("<a>" | "<b>") into one escaped regex; keep them literal.
        literals = _split_escaped_alternation(pattern.value)
        if literals is not None:
            return literals, None
    return pattern.value, flags


def _matcher(term: Any) -> Matcher:
    """The scanner's matcher for a Lark terminal definition."""
    source, flags = _terminal_regex(term)
    if flags is None:
        assert isinstance(source, tuple)
        return LiteralMatcher(source)
    assert isinstance(source, str)
    return RegexMatcher(source, flags)


def _refusal(term: Any) -> RegexSafetyError | None:
    """Why a terminal's regex is refused (grammar_parse._engine.regex_safety), or None."""
    source, flags = _terminal_regex(term)
    return None if flags is None or not isinstance(source, str) else refusal(source, flags)


def _lark_error(e: Exception, source_name: str) -> GrammarError:
    line = getattr(e, "line", None)
    column = getattr(e, "column", None)
    message = str(e).strip()
    if line is None and (where := regex.search(r"line (\d+) col(?:umn)? (\d+)", message)):
        line, column = int(where.group(1)), int(where.group(2))
    code = "grammar.conflict" if "collision" in message.lower() or "conflict" in message.lower() else "grammar.syntax"
    hint = None
    if code == "grammar.conflict":
        hint = ("An LALR(1) parser must decide each step from one token of lookahead; factor the rules that "
                "share a prefix into one rule.")
    return GrammarError(message, code=code, source=source_name, line=line, column=column, hint=hint)


def build_grammar(text: str, *, source_name: str = "<grammar>", name: str | None = None,
                  repeats: bool = True) -> Grammar:
    """Build a Grammar from Lark text with ``//@`` directives; GrammarError points at the line.

    ``repeats=False`` leaves out the watch for repeated openers (grammar_parse._engine.tables): a compiled
    transformers template keeps transformers' events exactly."""
    expect_text(text, "text")
    settings, region_specs = _read_directives(text, source_name)
    parser = _lark(text, source_name)
    defaults, anchor = _message_settings(settings, source_name)
    roles = {t.name: _delimiter_roles(t.name) for t in parser.terminals}
    regions = _regions(parser, roles, region_specs, settings, source_name)
    lark_table = parser.parser.parser.parser.parse_table
    terminals = _terminals(parser, lark_table.states, roles, regions, source_name)
    _mark_repairs(terminals, settings.get("repair", {}), source_name)
    _check_named_groups(regions, terminals, source_name)
    legacy = settings.get("legacy_schema")
    timeout = _legacy_timeout(settings) if legacy is not None else None
    calls_in_reasoning = settings.get("calls_in_reasoning", "never")
    if calls_in_reasoning not in CALLS_IN_REASONING:
        raise GrammarError(f"calls_in_reasoning must be one of {', '.join(map(json.dumps, CALLS_IN_REASONING))}",
                           code="grammar.directive", source=source_name)
    rules = _plain_rules(parser)
    return Grammar(
        source=text,
        name=name if name is not None else settings.get("name"),
        defaults=defaults,
        start_anchor=anchor,
        regions=regions,
        terminals=terminals,
        rules=rules,
        tables=build_tables(lark_table, parser.rules, terminals, regions, repeats=repeats, source_name=source_name),
        legacy_schema=legacy,
        legacy_timeout=timeout,
        settle=_legacy_settle(legacy, timeout) if legacy is not None else None,
        format=build_format(regions, terminals, rules, text, calls_in_reasoning),
    )


def _plain_rules(parser: lark.Lark) -> dict[str, tuple[tuple[str, ...], ...]]:
    """Lark's rules as plain, picklable data: each rule's name to its expansions' symbol names."""
    rules: dict[str, list[tuple[str, ...]]] = {}
    for rule in parser.rules:
        # (plain str: Lark names rules with its Token, a str subclass that would carry Lark along)
        rules.setdefault(str(rule.origin.name), []).append(tuple(str(symbol.name) for symbol in rule.expansion))
    return {name: tuple(expansions) for name, expansions in rules.items()}


def _legacy_settle(schema: dict[str, Any], timeout: float | None) -> Any:
    """The compat plug-in's finalize hook for a legacy schema (imported only by grammars that use it)."""
    from grammar_parse.compat.legacy import LegacySettle

    return LegacySettle(schema, timeout)


def _lark(text: str, source_name: str) -> lark.Lark:
    """Lark's LALR analysis of the text, without a lexer (the session scans); its errors as GrammarError."""
    try:
        return lark.Lark(text, parser="lalr", lexer=_ScannerLexer, strict=True, regex=True, start="start")
    except lark.exceptions.LarkError as e:  # (its GrammarError and UnexpectedInput included)
        raise _lark_error(e, source_name) from None


def _message_settings(settings: Mapping[str, Any], source_name: str) -> tuple[dict[str, Any], Delimiter | None]:
    """The message's defaults and the start anchor, from their directives."""
    defaults = settings.get("defaults", {})
    if not isinstance(defaults, dict):
        raise GrammarError("defaults must be a JSON object", code="grammar.directive", source=source_name)
    try:
        anchor = load_delimiter(settings, "", "start_anchor", "start_anchor_pattern")
    except TemplateError as e:
        raise GrammarError(str(e), code="grammar.directive", source=source_name) from None
    return defaults, anchor


def _legacy_timeout(settings: Mapping[str, Any]) -> float | None:
    """A legacy schema's time limit: its ``legacy_timeout`` directive, else the compat plug-in's default
    (the plug-in owns it; only grammars that use the plug-in ask)."""
    if "legacy_timeout" in settings:
        timeout: float | None = settings["legacy_timeout"]
        return timeout
    from grammar_parse.compat.legacy import DEFAULT_TIMEOUT

    return DEFAULT_TIMEOUT


def _regions(parser: lark.Lark, roles: Mapping[str, list[tuple[str, str]]],
             region_specs: Mapping[str, tuple[int, dict[str, Any]]], settings: Mapping[str, Any],
             source_name: str) -> dict[str, Region]:
    """The regions the ``region`` directives declare, each checked against the grammar's rules; a
    region without an ``<RULE>_OPEN`` terminal is implicit (it opens at its first text)."""
    rule_names = {r.origin.name for r in parser.rules} | {r.alias for r in parser.rules if r.alias}
    openers = {upper for found in roles.values() for upper, role in found if role == "open"}
    regions: dict[str, Region] = {}
    for rule, (lineno, spec) in region_specs.items():
        if rule not in rule_names:
            raise _directive_error(source_name, lineno, f"region {rule} names no rule of the grammar")
        regions[rule] = _region(rule, lineno, spec, region_specs, settings, rule.upper() in openers, source_name)
    return regions


def _region(rule: str, lineno: int, spec: Mapping[str, Any], region_specs: Mapping[str, Any],
            settings: Mapping[str, Any], has_open: bool, source_name: str) -> Region:
    """One region from its directive's options: where its value goes (field, or a parent's scope) and
    the value spec (a template field's, or a legacy schema node's)."""
    options = dict(spec)
    field_name = options.pop("field", rule)
    parent = options.pop("parent", None)
    key = options.pop("key", rule)
    entry_key = options.pop("entry_key", None)
    scope = options.pop("scope", {})
    extend = options.pop("extend", False)
    role = options.pop("role", "")
    if role and (role not in ROLES or (role == COMPONENT) != (parent is not None)):
        raise _directive_error(source_name, lineno, f"region {rule}: role must be one of "
                               f"{', '.join(r for r in ROLES if r != COMPONENT)} (a region with a parent is a component)")
    if not isinstance(extend, bool) or (extend and not options.get("repeats")):
        raise _directive_error(source_name, lineno, f"region {rule}: extend must be true or false, "
                               "and only a repeated region (\"repeats\": true) can extend its list")
    if not isinstance(scope, dict):
        raise _directive_error(source_name, lineno, f"region {rule}: scope must be a JSON object")
    if not isinstance(field_name, str) or not isinstance(key, str):
        raise _directive_error(source_name, lineno, f"region {rule}: field and key must be strings")
    if parent is not None and (not isinstance(parent, str) or parent not in region_specs or parent == rule):
        raise _directive_error(source_name, lineno, f"region {rule}: parent {parent!r} is not another region")
    if entry_key is not None and (parent is None or not isinstance(entry_key, str)
                                  or PLACEHOLDER.fullmatch(entry_key) is None):
        raise _directive_error(source_name, lineno, f"region {rule}: entry_key must be a whole "
                               "{placeholder} and needs a parent")
    try:
        if "legacy" in options:
            # A region whose value is a legacy response_schema node (grammar_parse.compat).
            from grammar_parse.compat.legacy import LegacyValue

            value_spec: RegionValue = LegacyValue.from_directive(options, _legacy_timeout(settings))
        else:
            value_spec = load_value_spec(f"region {rule}", options, authored=True)
        if unknown := sorted(set(options) - {"content", "content_args", "repeats", "join", "optional",
                                              "transform", "transform_each", "legacy"}):
            raise _directive_error(source_name, lineno, f"region {rule}: unknown option(s) {unknown}")
    except (TemplateError, ValueError) as e:
        if isinstance(e, GrammarError):
            raise
        raise GrammarError(str(e), code="grammar.directive", source=source_name, line=lineno, column=1) from None
    return Region(rule=rule, field=field_name, spec=value_spec, implicit=not has_open, parent=parent,
                  key=key, entry_key=entry_key, scope=scope, extend=extend, role=role)


def _terminals(parser: lark.Lark, lark_states: Mapping[int, Mapping[str, Any]],
               roles: Mapping[str, list[tuple[str, str]]], regions: Mapping[str, Region],
               source_name: str) -> dict[str, Terminal]:
    """Every terminal the session meets: the defined ones (delimiters, with their matchers) in the
    grammar's order, then the declared ones the parse table uses (text, or a JSON value's end)."""
    by_upper = {rule.upper(): region for rule, region in regions.items()}
    terminals: dict[str, Terminal] = {}
    for t in parser.terminals:
        owned_by, role = _owner(t.name, roles, by_upper)
        terminals[t.name] = Terminal(name=t.name, role=role or "delimiter", region=owned_by,
                                     matcher=_checked_matcher(t, source_name), priority=t.priority)
    defined = {t.name for t in parser.terminals}
    used = {sym for actions in lark_states.values() for sym in actions if sym.isupper()} - {"$END"}
    for sym in sorted(used - defined):
        terminals[sym] = _declared_terminal(sym, roles, by_upper, source_name)
    return terminals


def _mark_repairs(terminals: dict[str, Terminal], repairs: Mapping[str, tuple[int, str]], source_name: str) -> None:
    """Give each opener a ``repair`` directive names its code (see Terminal.repair). A repair opens a
    message field's region: lenient mode records it on the call, strict mode passes its text through."""
    for name, (lineno, code) in repairs.items():
        term = terminals.get(name)
        if term is None or term.role != "open" or term.region is None or term.region.parent is not None:
            raise _directive_error(source_name, lineno, f"repair {name}: not a defined opener of a message "
                                   "field's region")
        terminals[name] = replace(term, repair=code)


def _owner(name: str, roles: Mapping[str, list[tuple[str, str]]],
           by_upper: Mapping[str, Region]) -> tuple[Region | None, str | None]:
    """The region a delimiter opens or closes, and which; the longest region name wins:
    TOOL_CALLS_OPEN_FENCE belongs to tool_calls, not to tool."""
    for upper, role in roles[name] if name in roles else _delimiter_roles(name):
        if upper in by_upper:
            return by_upper[upper], role
    return None, None


def _checked_matcher(term: Any, source_name: str) -> Matcher:
    """A defined terminal's matcher, unless its regex is refused (grammar_parse._engine.regex_safety) or invalid."""
    refused = _refusal(term)  # (before compiling: a{1000000} takes a second)
    if refused is not None and refused.kind == "size":
        raise GrammarError(f"terminal {term.name}: regex {term.pattern.value!r} has {refused.reason}",
                           code="grammar.regex_size", source=source_name, hint=REGEX_HINT)
    try:
        matcher = _matcher(term)
    except regex.error as e:
        raise GrammarError(f"terminal {term.name}: invalid regex: {e}", code="grammar.syntax", source=source_name) from None
    if refused is not None:
        raise GrammarError(f"terminal {term.name}: regex {term.pattern.value!r} has {refused.reason}",
                           code=f"grammar.regex_{refused.kind}", source=source_name, hint=REGEX_HINT)
    return matcher


def _declared_terminal(sym: str, roles: Mapping[str, list[tuple[str, str]]], by_upper: Mapping[str, Region],
                       source_name: str) -> Terminal:
    """A ``%declare``d terminal, told by its name: ``UNCLAIMED``, a region's ``<RULE>_TEXT``, or the
    ``<RULE>_CLOSE`` of a region whose JSON value ends it."""
    stem, _, suffix = sym.rpartition("_")
    if sym == UNCLAIMED:
        return Terminal(name=sym, role="unclaimed", region=None, matcher=None)
    if suffix == "TEXT" and stem in by_upper:
        return Terminal(name=sym, role="text", region=by_upper[stem], matcher=None)
    if (owned := _owner(sym, roles, by_upper))[1] == "close" and (closed := owned[0]) is not None:
        # A declared close: the region's JSON payload has no closer of its own and ends with the value.
        if not (isinstance(closed.spec, ValueSpec) and closed.spec.content in ("json", "json-name-keys")):
            raise GrammarError(f"declared terminal {sym} closes {closed.rule} where its JSON value ends, but "
                               f"{closed.rule}'s content is not JSON", code="grammar.region", source=source_name,
                               hint='Give the region "content": "json", or define the close delimiter.')
        return Terminal(name=sym, role="close", region=closed, matcher=ValueEnd())
    raise GrammarError(
        f"declared terminal {sym} carries text but belongs to no region",
        code="grammar.region",
        source=source_name,
        hint=f"Name it <RULE>_TEXT for a region rule, or {UNCLAIMED} for text that is dropped.",
    )


def _check_named_groups(regions: Mapping[str, Region], terminals: Mapping[str, Terminal], source_name: str) -> None:
    """A region whose open or close regex has named groups needs a transform to put them in its value
    (without one they would vanish), as a template field does."""
    for region in regions.values():
        delims = [terminals[n].matcher for n in (f"{region.rule.upper()}_OPEN", f"{region.rule.upper()}_CLOSE") if n in terminals]
        patterns = [Delimiter(pattern=m.pattern) if isinstance(m, RegexMatcher) else None for m in delims]
        try:
            if isinstance(region.spec, ValueSpec) and region.entry_key is None:
                check_named_groups(f"region {region.rule}", region.spec, patterns)
        except TemplateError as e:
            raise GrammarError(str(e), code="grammar.region", source=source_name) from None


__all__ = ["Grammar", "Region", "StateInfo", "Terminal", "build_grammar"]
