"""Compiled grammars: Lark text plus region metadata, built into an LALR table the session walks.

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
differs from the rule name, and ``extend`` (a repeated region's list value joins the field's list instead
of being appended as one element). The rule's terminals are found by name: ``<RULE>_OPEN`` opens the region,
``<RULE>_CLOSE`` closes it, and the declared ``<RULE>_TEXT`` carries its text. Alternatives aliased
``-> rule`` belong to the region too. A declared ``UNCLAIMED`` terminal carries text outside every region
(dropped from the message). Other terminals with a pattern are delimiters that belong to no region.

Lark owns the structure: in every parser state, the terminals with an action are exactly the delimiters
the scanner must watch, so a delimiter is only recognised where the grammar allows it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from functools import cached_property
from typing import Any

import lark
import regex
from lark.grammar import Rule
from lark.lexer import Lexer
from lark.parsers.lalr_analysis import ParseTableBase

from .delimiters import LiteralMatcher, Matcher, RegexMatcher, Repeat, ValueEnd
from .errors import GrammarError, TemplateError
from .regex_safety import RegexSafetyError, refusal
from .scanner import Scanner
from .template import REGEX_HINT, Delimiter, check_depth, check_named_groups, load_delimiter, load_value_spec
from .values import PLACEHOLDER, RegionValue, ValueSpec

DIRECTIVE = "//@"
UNCLAIMED = "UNCLAIMED"

_LARK_FLAGS = {"i": regex.IGNORECASE, "m": regex.MULTILINE, "s": regex.DOTALL, "u": 0, "x": regex.VERBOSE, "l": 0}


class _ScannerLexer(Lexer):
    """Placeholder: the streaming scanner does the lexing, Lark only builds the table."""

    def __init__(self, lexer_conf: Any) -> None:  # noqa: D107 - required signature
        pass

    def lex(self, lexer_state: Any, parser_state: Any) -> Any:  # pragma: no cover - never called
        raise NotImplementedError("grammar_parse feeds tokens to the parser itself")


#: Seconds a legacy response_schema regex may run (grammar_parse.compat.legacy.DEFAULT_TIMEOUT).
LEGACY_TIMEOUT = 2.0


@dataclass(frozen=True)
class Region:
    """A message field produced by one grammar rule."""

    rule: str
    field: str
    spec: RegionValue
    implicit: bool
    parent: str | None = None  # a component: its value goes into this region's value, not the message
    key: str = ""  # a component's name in its parent's scope
    entry_key: str | None = None  # a component stored as parent[key][<entry_key filled in>] = value
    scope: Mapping[str, Any] = dataclass_field(default_factory=dict)  # component values before any arrives
    extend: bool = False  # a repeated field whose regions each give a list: the lists join into one

    @cached_property
    def dirty(self) -> bool:
        """Whether this region's chunks are raw bytes of a structured value (read for every chunk, so
        worked out once)."""
        return self.spec.dirty


@dataclass(frozen=True)
class Terminal:
    """A grammar terminal as the session sees it."""

    name: str
    role: str  # "open" | "close" | "text" | "unclaimed" | "delimiter" | "repeat" (see _watch_repeats)
    region: Region | None
    matcher: Matcher | None
    priority: int = 0

    @property
    def sort_key(self) -> tuple[int, str, str]:
        """Tie-break between matches at the same place with the same length (transformers' order)."""
        return (-self.priority, self.region.field if self.region else "", self.name)


@dataclass
class StateInfo:
    """What the session needs in one parser state: where text goes and which delimiters are live."""

    text: Terminal | None
    watch: tuple[Terminal, ...]
    default_rule: RuleHandle | None  # a rule reduced without lookahead
    scanner: Scanner
    text_candidates: tuple[Terminal, ...] = ()  # several text terminals end rules here: ask the parser
    text_sensitive: bool = False  # see build_grammar


class RuleHandle:
    """A Lark rule as the session's parse table refers to it, hashed by identity.

    Lark's Rule hashes its origin and whole expansion on every dictionary lookup, and the parser looks
    up a callback for every reduction; with these handles a reduction costs a pointer hash.
    """

    __slots__ = ("rule", "origin", "expansion", "alias")

    def __init__(self, rule: Rule) -> None:
        self.rule = rule
        self.origin = rule.origin
        self.expansion = rule.expansion
        self.alias = rule.alias

    def __repr__(self) -> str:
        return f"<RuleHandle {self.rule}>"


#: What Lark's parser calls: by rule (a reduction, with the children) or terminal name (a shift, with the token).
Callbacks = dict[RuleHandle | str, Callable[[Any], Any]]


class ParseTable(ParseTableBase[int]):
    """Lark's LALR table with rules replaced by RuleHandles (what Lark's ParseConf reads): each state's
    actions by symbol, ``(Shift, next state)`` or ``(Reduce, RuleHandle)``."""

    def __init__(self, states: dict[int, dict[str, tuple[Any, ...]]], start_states: dict[str, int],
                 end_states: dict[str, int]) -> None:
        # Lark's own __init__ sets just these three, untyped.
        self.states = states
        self.start_states = start_states
        self.end_states = end_states


@dataclass
class Grammar:
    """A compiled grammar: Lark source, regions, and the LALR table the streaming session walks.

    Build one with :func:`grammar_parse.compile_template` or :func:`grammar_parse.load_grammar`; it is
    immutable and shared by every parser using it.
    """

    source: str
    name: str | None
    defaults: Mapping[str, Any]
    start_anchor: Delimiter | None
    regions: dict[str, Region]
    terminals: dict[str, Terminal]
    lark: lark.Lark
    states: dict[int, StateInfo] = dataclass_field(repr=False)
    rule_regions: dict[RuleHandle, Region] = dataclass_field(repr=False)
    parse_table: ParseTable = dataclass_field(repr=False)
    base_callbacks: Callbacks = dataclass_field(repr=False)
    context: int = 0  # characters of history the delimiters may look back at
    legacy_schema: dict[str, Any] | None = None  # a legacy response_schema settles the message at finalize
    legacy_timeout: float | None = LEGACY_TIMEOUT

    @property
    def lark_source(self) -> str:
        """The grammar's Lark text, directives included (the single source of truth)."""
        return self.source


    @property
    def fields(self) -> list[str]:
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
                     "legacy_timeout"):
            try:
                settings[key] = json.loads(rest)
                check_depth(settings[key], key)
            except TemplateError as e:
                raise _directive_error(source_name, lineno, str(e)) from None
            except (json.JSONDecodeError, RecursionError) as e:
                raise _directive_error(source_name, lineno, f"{key}: value is not valid JSON ({e})") from None
        elif key == "grammar_parse":
            if rest != "1":
                raise _directive_error(source_name, lineno, f"unsupported grammar format version {rest!r}")
        else:
            raise _directive_error(
                source_name, lineno,
                f"unknown directive {key!r}; expected region, defaults, start_anchor, start_anchor_pattern, name, aliases, legacy_schema, legacy_timeout",
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
    """Why a terminal's regex is refused (grammar_parse.regex_safety), or None."""
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

    ``repeats=False`` leaves out the watch for repeated openers (:func:`_watch_repeats`): a compiled
    transformers template keeps transformers' events exactly."""
    settings, region_specs = _read_directives(text, source_name)
    try:
        parser = lark.Lark(text, parser="lalr", lexer=_ScannerLexer, strict=True, regex=True, start="start")
    except lark.exceptions.GrammarError as e:
        raise _lark_error(e, source_name) from None
    except lark.exceptions.UnexpectedInput as e:
        raise _lark_error(e, source_name) from None
    except lark.exceptions.LarkError as e:
        raise _lark_error(e, source_name) from None

    defaults = settings.get("defaults", {})
    if not isinstance(defaults, dict):
        raise GrammarError("defaults must be a JSON object", code="grammar.directive", source=source_name)
    try:
        anchor = load_delimiter(settings, "", "start_anchor", "start_anchor_pattern")
    except TemplateError as e:
        raise GrammarError(str(e), code="grammar.directive", source=source_name) from None

    rule_names = {r.origin.name for r in parser.rules} | {r.alias for r in parser.rules if r.alias}
    roles = {t.name: _delimiter_roles(t.name) for t in parser.terminals}
    openers = {upper for found in roles.values() for upper, role in found if role == "open"}
    regions: dict[str, Region] = {}
    by_upper: dict[str, Region] = {}
    for rule, (lineno, spec) in region_specs.items():
        if rule not in rule_names:
            raise _directive_error(source_name, lineno, f"region {rule} names no rule of the grammar")
        options = dict(spec)
        field_name = options.pop("field", rule)
        parent = options.pop("parent", None)
        key = options.pop("key", rule)
        entry_key = options.pop("entry_key", None)
        scope = options.pop("scope", {})
        extend = options.pop("extend", False)
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

                value_spec: RegionValue = LegacyValue.from_directive(options, settings.get("legacy_timeout", LEGACY_TIMEOUT))
            else:
                value_spec = load_value_spec(f"region {rule}", options, authored=True)
            if unknown := sorted(set(options) - {"content", "content_args", "repeats", "join", "optional",
                                                  "transform", "transform_each", "legacy"}):
                raise _directive_error(source_name, lineno, f"region {rule}: unknown option(s) {unknown}")
        except (TemplateError, ValueError) as e:
            if isinstance(e, GrammarError):
                raise
            raise GrammarError(str(e), code="grammar.directive", source=source_name, line=lineno, column=1) from None
        upper = rule.upper()
        has_open = upper in openers
        region = Region(rule=rule, field=field_name, spec=value_spec, implicit=not has_open, parent=parent,
                        key=key, entry_key=entry_key, scope=scope, extend=extend)
        regions[rule] = region
        by_upper[upper] = region

    terminals: dict[str, Terminal] = {}
    defined = {t.name: t for t in parser.terminals}

    def owner_of(name: str) -> tuple[Region | None, str | None]:
        """The region a delimiter opens or closes, and which; the longest region name wins:
        TOOL_CALLS_OPEN_FENCE belongs to tool_calls, not to tool."""
        for upper, role in roles[name] if name in roles else _delimiter_roles(name):
            if upper in by_upper:
                return by_upper[upper], role
        return None, None

    for t in parser.terminals:
        owned_by, role = owner_of(t.name)
        role = role or "delimiter"
        refused = _refusal(t)  # (before compiling: a{1000000} takes a second)
        if refused is not None and refused.kind == "size":
            raise GrammarError(f"terminal {t.name}: regex {t.pattern.value!r} has {refused.reason}",
                               code="grammar.regex_size", source=source_name, hint=REGEX_HINT)
        try:
            matcher = _matcher(t)
        except regex.error as e:
            raise GrammarError(f"terminal {t.name}: invalid regex: {e}", code="grammar.syntax", source=source_name) from None
        if refused is not None:
            raise GrammarError(f"terminal {t.name}: regex {t.pattern.value!r} has {refused.reason}",
                               code=f"grammar.regex_{refused.kind}", source=source_name, hint=REGEX_HINT)
        terminals[t.name] = Terminal(name=t.name, role=role, region=owned_by, matcher=matcher, priority=t.priority)
    lark_table = parser.parser.parser.parser.parse_table
    used = {sym for actions in lark_table.states.values() for sym in actions if sym.isupper()} - {"$END"}
    for sym in sorted(used - set(defined)):
        stem, _, suffix = sym.rpartition("_")
        if sym == UNCLAIMED:
            terminals[sym] = Terminal(name=sym, role="unclaimed", region=None, matcher=None)
        elif suffix == "TEXT" and stem in by_upper:
            terminals[sym] = Terminal(name=sym, role="text", region=by_upper[stem], matcher=None)
        elif (owned := owner_of(sym))[1] == "close" and (closed := owned[0]) is not None:
            # A declared close: the region's JSON payload has no closer of its own and ends with the value.
            if not (isinstance(closed.spec, ValueSpec) and closed.spec.content in ("json", "json-name-keys")):
                raise GrammarError(f"declared terminal {sym} closes {closed.rule} where its JSON value ends, but "
                                   f"{closed.rule}'s content is not JSON", code="grammar.region", source=source_name,
                                   hint='Give the region "content": "json", or define the close delimiter.')
            terminals[sym] = Terminal(name=sym, role="close", region=closed, matcher=ValueEnd())
        else:
            raise GrammarError(
                f"declared terminal {sym} carries text but belongs to no region",
                code="grammar.region",
                source=source_name,
                hint=f"Name it <RULE>_TEXT for a region rule, or {UNCLAIMED} for text that is dropped.",
            )
    for region in regions.values():
        delims = [terminals[n].matcher for n in (f"{region.rule.upper()}_OPEN", f"{region.rule.upper()}_CLOSE") if n in terminals]
        patterns = [Delimiter(pattern=m.pattern) if isinstance(m, RegexMatcher) else None for m in delims]
        try:
            if isinstance(region.spec, ValueSpec) and region.entry_key is None:
                check_named_groups(f"region {region.rule}", region.spec, patterns)
        except TemplateError as e:
            raise GrammarError(str(e), code="grammar.region", source=source_name) from None

    handles = {r: RuleHandle(r) for r in parser.rules}
    reduce_ = lark.parsers.lalr_analysis.Reduce
    table = ParseTable(
        states={st: {sym: (action, handles[arg] if action is reduce_ else arg) for sym, (action, arg) in acts.items()}
                for st, acts in lark_table.states.items()},
        start_states=dict(lark_table.start_states),
        end_states=dict(lark_table.end_states),
    )
    rule_regions = {}
    for r, handle in handles.items():
        named = regions.get(r.alias) if r.alias else regions.get(r.origin.name)
        if named is not None:
            rule_regions[handle] = named

    states = {}
    scanners: dict[tuple[str, ...], Scanner] = {}
    for state, actions in table.states.items():
        shift = lark.parsers.lalr_analysis.Shift
        texts = [(terminals[s], a is shift) for s, (a, _) in actions.items()
                 if s in terminals and terminals[s].role in ("text", "unclaimed")]
        shifted = [t for t, is_shift in texts if is_shift]
        if len(shifted) > 1:
            raise GrammarError(
                f"text terminals {sorted(t.name for t in shifted)} are live in the same parser state, so the "
                "parser cannot tell which region a character belongs to",
                code="grammar.region",
                source=source_name,
                hint="Separate the regions with a delimiter.",
            )
        # Where text only ends a rule (a reduction), LALR's merged lookaheads may offer several text
        # terminals; the session then asks the parser which one it accepts.
        candidates = tuple(sorted({t.name: t for t, _ in texts}.values(), key=lambda t: t.name))
        text_term = shifted[0] if shifted else (candidates[0] if len(candidates) == 1 else None)
        watch = tuple(sorted((terminals[s] for s in actions if s in terminals and terminals[s].matcher is not None),
                             key=lambda t: t.sort_key))
        reduces = {arg for action, arg in actions.values() if action is not lark.parsers.lalr_analysis.Shift}
        only_reduce = actions and all(action is not lark.parsers.lalr_analysis.Shift for action, _ in actions.values())
        default_rule = next(iter(reduces)) if only_reduce and len(reduces) == 1 else None
        if default_rule is not None and default_rule.origin.name == "start":
            default_rule = None  # the start rule is reduced by $END in finalize()
        watched = tuple(t.name for t in watch)
        scanner = scanners.get(watched) or scanners.setdefault(watched, Scanner(watch))  # one per watch list
        states[state] = StateInfo(text=text_term, watch=watch, default_rule=default_rule, scanner=scanner,
                                  text_candidates=candidates if text_term is None else ())

    # A state is text-sensitive when the first character of text moves the parser to a state that
    # watches other delimiters ("<think> only at the start"); the session then rescans after it.
    for state, info in states.items():
        term = info.text or (info.text_candidates[0] if info.text_candidates else None)
        if term is None:
            continue
        info.text_sensitive = _after_text(table, states, state, term.name) is not info.scanner
    if repeats:  # (after: a repeat, matched only where the region's text starts, changes no rescan)
        _watch_repeats(table, terminals, states, scanners)
    context = max((t.matcher.context for t in terminals.values() if t.matcher is not None), default=0)
    return Grammar(
        source=text,
        name=name if name is not None else settings.get("name"),
        defaults=defaults,
        start_anchor=anchor,
        regions=regions,
        terminals=terminals,
        lark=parser,
        states=states,
        rule_regions=rule_regions,
        parse_table=table,
        base_callbacks=Callbacks.fromkeys(handles.values(), _ignore),
        legacy_schema=settings.get("legacy_schema"),
        legacy_timeout=settings.get("legacy_timeout", LEGACY_TIMEOUT),
        context=context,
    )


#: Whitespace a repeated opener may follow (bounded: the run is held back while it may still grow).
REPEAT_SPACE = 16


def _watch_repeats(table: ParseTable, terminals: dict[str, Terminal], states: dict[int, StateInfo],
                   scanners: dict[tuple[str, ...], Scanner]) -> None:
    """Right after a message field's opener (a literal, or a regex without captures or lookarounds), the same
    opener again (after a little whitespace) is a repeat: a template pre-fills ``<think>`` and the model
    writes it once more, or a model stutters ``<tool_call><tool_call>``. The states entered by shifting such
    an opener also watch for the repeat (one matcher per opener), which the session consumes as markup; it
    is live only until the region's first text."""
    repeats: dict[str, Terminal] = {}
    for term in terminals.values():
        m = term.matcher
        if term.role != "open" or term.region is None or term.region.parent is not None:
            continue
        # (captures would be lost, and a lookahead may not repeat)
        if isinstance(m, LiteralMatcher) or isinstance(m, RegexMatcher) and not m.compiled.groupindex \
                and not m.zero_width and not m.lookaround:
            repeats[term.name] = Terminal(name=f"{term.name}__REPEAT", role="repeat", region=term.region,
                                          priority=term.priority, matcher=Repeat(m, REPEAT_SPACE))
    shift = lark.parsers.lalr_analysis.Shift
    for actions in table.states.values():
        for sym, (action, target) in actions.items():
            repeat = repeats.get(sym)
            if repeat is None or action is not shift or any(t.role == "repeat" for t in states[target].watch):
                continue
            info = states[target]
            info.watch = tuple(sorted((*info.watch, repeat), key=lambda t: t.sort_key))
            watched = tuple(t.name for t in info.watch)
            info.scanner = scanners.get(watched) or scanners.setdefault(watched, Scanner(info.watch))


def _after_text(table: ParseTable, states: dict[int, StateInfo], state: int, text: str) -> Scanner | None:
    """The scanner live after the first text token in ``state`` (None when the stack below decides)."""
    action, target = table.states[state][text]
    if action is not lark.parsers.lalr_analysis.Shift:
        return None
    stack = [state, target]
    while (rule := states[stack[-1]].default_rule) is not None:
        size = len(rule.expansion)
        if size >= len(stack):
            return None
        del stack[len(stack) - size:]
        stack.append(table.states[stack[-1]][rule.origin.name][1])
    return states[stack[-1]].scanner


def _ignore(children: Any) -> None:
    """Reductions that are not regions produce nothing."""
    return None


__all__ = ["Grammar", "Region", "StateInfo", "Terminal", "build_grammar"]
