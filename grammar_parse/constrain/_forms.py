"""Every way a grammar reads a call, sorted into what a constraint offers and what it makes impossible.

A constraint that offers only the documented call form lets the other forms the parser reads through as
free text, unchecked (Llama 3's ``{"name": ...}`` without ``<|python_tag|>``, a repaired
``<function=NAME>`` without its ``<tool_call>``): an unknown tool or broken JSON then reaches the client as
a call. So each call opener of the grammar is one of:

* **offered**: an opener the grammar reads in the documented opener's place (the same rule with the same
  rest: gpt-oss's recipient in the role header beside the one in the channel), written and checked as the
  documented one is;
* **bare**: a zero-width opener that looks ahead at the start of the answer (Llama 3's bare object,
  xLAM-2's bare array), offered there with the same payload, the text before it may not be one;
* **forbidden**: any other, which the free text of the answer may not spell: its literal head, or for a
  zero-width opener at a line start (Llama 4's bare ``[f(x=1)]``) its lookahead as a regex.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .._engine.delimiters import LiteralMatcher, RegexMatcher
from .._engine.grammar import Grammar
from .._engine.regex_shape import spellings
from .._engine.shapes import CallShape
from .._engine.symbols import Region, Terminal
from .._engine.toolstream import call_regions
from ._regexes import Regex, Unsupported, delim_of, parse_regex, sre_c, sre_p


@dataclass(frozen=True)
class Others:
    """The call forms beside the documented one (see the module's docstring)."""

    forbidden: tuple[str, ...] = ()
    forbidden_rx: tuple[str, ...] = ()
    bare: str | None = None  # the regex a bare call at the answer's start begins with
    bare_plan: CallShape | None = None
    bare_texts: tuple[str, ...] = ()  # its shortest text
    # Other call regions with a payload the constraint writes, as (region, opener, closer): offered where
    # the documented calls are (xLAM's [TOOL_CALLS] array beside its <tool_call> one, K2 Horizon's JSON
    # call beside its tagged one) ...
    extras: tuple[tuple[Region, Terminal, Terminal | None], ...] = ()
    # ... or only at the answer's start, where the grammar reads them (xLAM's ```json fence).
    starts: tuple[tuple[Region, Terminal, Terminal | None], ...] = ()


def offered_openers(rules: Mapping[str, Sequence[Sequence[str]]], region: Region,
                    main: Terminal, grammar: Grammar) -> list[Terminal]:
    """The region's openers that stand where the documented one stands, with the same rest in every rule."""
    def rests(name: str) -> set[tuple[str, ...]]:
        return {(origin, *exp[1:]) for origin, exps in rules.items() for exp in exps if exp and exp[0] == name}

    mine = rests(main.name)
    return [main, *(t for t in grammar.terminals.values() if t.region is region and t.role == "open"
                    and t is not main and mine and rests(t.name) == mine)]


def _lookahead(terminal: Terminal) -> tuple[str, str] | None:
    """(start, ahead) of a zero-width opener: ``start`` "" (anywhere) or "line" (after a newline or at the
    start, a ``(?<![^\\n])`` lookbehind, with a run of spaces it allows before), and the regex it looks ahead
    for; None for an opener that writes text."""
    if not isinstance(terminal.matcher, RegexMatcher):
        return None
    try:
        items = list(sre_p.parse(terminal.matcher.pattern, terminal.matcher.flags & ~0x100).data)
    except Exception:
        return None
    c, start, lead = sre_c, "", []
    if items and items[0][0] is c.ASSERT_NOT and items[0][1][0] == -1:
        behind = list(items[0][1][1])
        if not (len(behind) == 1 and behind[0][0] is c.NOT_LITERAL and chr(behind[0][1]) == "\n"):
            raise Unsupported("a call opener's lookbehind is not a line start")
        start, items = "line", items[1:]
    while items and items[0][0] in (c.MAX_REPEAT, c.MIN_REPEAT):
        lead.append(items.pop(0))
    if len(items) != 1 or items[0][0] is not c.ASSERT or items[0][1][0] != 1:
        return None
    rx = Regex([*lead, *items[0][1][1]], frozenset(), bool(terminal.matcher.flags & 16))
    return start, rx.emit(rx.items, None)


def _homes(rules: Mapping[str, Sequence[Sequence[str]]], rule: str) -> set[str]:
    """The rules that hold ``rule`` in an expansion, through lark's helper rules (``__content_plus_1``)."""
    out: set[str] = set()
    todo, seen = [rule], set()
    while todo:
        current = todo.pop()
        for origin, exps in rules.items():
            if origin in seen or not any(current in exp for exp in exps):
                continue
            if origin.startswith("__"):
                seen.add(origin)
                todo.append(origin)
            else:
                out.add(origin)
    return out


def _closer(grammar: Grammar, region: Region) -> Terminal | None:
    """A region's closer (the one named after it among several; none that is zero-width)."""
    closers = [t for t in grammar.terminals.values() if t.region is region and t.role == "close"
               and not (isinstance(t.matcher, RegexMatcher) and t.matcher.pattern.startswith("(?="))]
    named = [t for t in closers if t.name == f"{region.rule.upper()}_CLOSE"]
    found = named or closers
    return found[0] if found else None


def others(grammar: Grammar, region: Region, offered: Sequence[Terminal], triggers: Sequence[str],
           wrapped: bool, payloads: Sequence[str] = ()) -> Others:
    """The call openers of ``grammar`` that are not ``offered``, sorted (see the module's docstring).

    ``triggers`` are the offered forms' literal heads: an opener whose head starts with one (a call the
    trigger already starts) needs nothing more. ``wrapped``: the documented calls sit in a section or tag,
    so the region's own zero-width opener, read bare at the answer's start, is a form of its own."""
    forbidden: list[str] = []
    forbidden_rx: list[str] = []
    bare: str | None = None
    bare_plan: CallShape | None = None
    extras: list[tuple[Region, Terminal, Terminal | None]] = []
    starts: list[tuple[Region, Terminal, Terminal | None]] = []
    rules = grammar.rules
    home = _homes(rules, region.rule)
    at_start = {sym for exp in rules.get("start", []) for sym in exp}
    for other in call_regions(grammar):
        for t in grammar.terminals.values():
            if t.region is not other or t.role != "open" or any(t is o for o in offered) and not wrapped:
                continue
            try:
                ahead = _lookahead(t)
            except Unsupported:
                continue
            if ahead is not None:
                start, pattern = ahead
                plan = other.shape
                if not start and bare is None and plan.mode in ("json_key", "json_array"):
                    bare, bare_plan = pattern, plan
                elif start:
                    forbidden_rx.append(pattern)
                continue
            if any(t is o for o in offered) or other is region and wrapped and region.rule in _homes(rules, t.name):
                # (an opener of the region's own rule, which the section gates: inside it the call is
                # constrained anyway; Kimi's call without its section is a rule of its own, read in content)
                continue
            try:
                delim = delim_of(t)
            except Unsupported:
                continue
            if other is not region and other.shape.mode in payloads and delim.lead():
                # Another region whose payload the constraint writes: offered where the grammar reads it.
                homes = _homes(rules, other.rule)
                if homes & home:
                    extras.append((other, t, _closer(grammar, other)))
                    continue
                if homes & at_start and isinstance(t.matcher, LiteralMatcher):
                    starts.append((other, t, _closer(grammar, other)))
                    continue
            heads = list(delim.literals) if isinstance(t.matcher, LiteralMatcher) else \
                [form.lead() for form in delim.alternatives()]
            for head in heads:
                if head and not any(head.startswith(tr) or tr.startswith(head) for tr in triggers):
                    forbidden.append(head)
    texts: tuple[str, ...] = ()
    if bare is not None:
        texts = tuple(spellings(parse_regex(bare, 0).items))
    return Others(tuple(dict.fromkeys(forbidden)), tuple(dict.fromkeys(forbidden_rx)), bare, bare_plan, texts,
                  tuple(extras), tuple(starts))
