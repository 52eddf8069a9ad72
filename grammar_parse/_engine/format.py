"""What a compiled grammar's message is: the roles of its regions, its delimiters, and its calls' shapes.

Worked out once, when the grammar is built (:func:`build_format`), and kept on it (``Grammar.format``; each
region's own role and call shape are in :mod:`grammar_parse._engine.shapes`), so every consumer reads one answer
instead of re-deriving its own: the session and salvage (which regions hold calls), tool-call streaming (each
call region's :class:`CallShape`), constraint export (the shapes plus each call region's :class:`CallLayout`:
openers, closers, the section around the calls and the separator between them), the engine plug-ins (the
reasoning delimiters), the wire adapters, batch and the view (which field is reasoning).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .delimiters import LiteralMatcher, RegexMatcher
from .regex_safety import sre_parse
from .regex_shape import spellings
from .shapes import CONTENT, REASONING, TOOL_CALLS, CallShape
from .symbols import Region, Terminal


# ---------------------------------------------------------------------------- the whole format
@dataclass(frozen=True)
class CallLayout:
    """Where a call region stands in the grammar, by terminal name: what opens and closes it, the delimiter
    rule around the calls (``_tool_section: BEGIN (tool_calls | UNCLAIMED)* END?``, ``_tagged: PYTHON_TAG
    _calls``: its first and, where it has one, last delimiter), and the delimiters written right before a
    call (a separator such as ``CALL_SEP``), in the grammar's order; whether the grammar lets the region
    stand inside a reasoning region; and what closes its component regions (the arguments of a call made of
    them), leaving out a close that matches empty text anywhere."""

    rule: str
    shape: CallShape
    openers: tuple[str, ...]
    closers: tuple[str, ...]
    wrapper: tuple[str, str | None] | None
    separators: tuple[str, ...]
    inside_reasoning: bool
    argument_closers: tuple[str, ...] = ()


@dataclass(frozen=True)
class Format:
    """What a grammar's message is (see the module doc). Region lists hold rule names, in the grammar's order."""

    reasoning: tuple[str, ...]
    content: tuple[str, ...]
    calls: Mapping[str, CallLayout]
    #: The message key of each message-level region, to its role.
    field_roles: Mapping[str, str]
    #: The text that opens and closes the reasoning, "" where there is none or it has no fixed text: a
    #: literal delimiter's spelling its author wrote first, a regex's shortest usual spelling
    #: (``<\\/think>\\s*`` as ``</think>``). What the engines search for (SGLang's ``think_end_token``).
    reasoning_delimiters: tuple[str, str]
    #: The literals that end a turn (the ``END_OF_TURN`` delimiter), () when the grammar has none.
    end_of_turn: tuple[str, ...]
    #: How a call written inside reasoning is read by default (the ``calls_in_reasoning`` directive).
    calls_in_reasoning: str

    @property
    def calls_inside_reasoning(self) -> bool:
        """Whether the grammar lets a call region stand inside a reasoning region."""
        return any(layout.inside_reasoning for layout in self.calls.values())

    @property
    def reasoning_fields(self) -> tuple[str, ...]:
        """The message keys that hold reasoning (one, in every built-in grammar)."""
        return tuple(f for f, role in self.field_roles.items() if role == REASONING)

    @property
    def content_fields(self) -> tuple[str, ...]:
        """The message keys that hold content (``content`` in every built-in grammar; an authored one may name it
        otherwise: the role, not the name, makes it the content)."""
        return tuple(f for f, role in self.field_roles.items() if role == CONTENT)

    @property
    def call_fields(self) -> tuple[str, ...]:
        """The message keys that hold tool calls (``tool_calls`` in every built-in grammar)."""
        return tuple(f for f, role in self.field_roles.items() if role == TOOL_CALLS)

    def calls_in(self, message: Mapping[str, Any]) -> list[Any]:
        """The calls ``message`` holds, under the fields that hold calls, in order (a call region that does not
        repeat gives one call, not a list)."""
        found: list[Any] = []
        for key in self.call_fields:
            value = message.get(key)
            found += value if isinstance(value, list) else [] if value is None else [value]
        return found

    def reasoning_field(self) -> str | None:
        """The message key of the reasoning, if the grammar has one."""
        return next(iter(self.reasoning_fields), None)


def build_format(regions: Mapping[str, Region], terminals: Mapping[str, Terminal],
                 rules: Mapping[str, Sequence[Sequence[str]]], source: str, calls_in_reasoning: str) -> Format:
    """The grammar's Format, from its regions (each with its role and call shape), terminals and rules."""
    top = [r for r in regions.values() if r.parent is None]
    reasoning = tuple(r.rule for r in top if r.role == REASONING)
    calls = {r.rule: _layout(r, regions, terminals, rules, reasoning) for r in top if r.role == TOOL_CALLS}
    eot = terminals.get("END_OF_TURN")
    return Format(
        reasoning=reasoning,
        content=tuple(r.rule for r in top if r.role == CONTENT),
        calls=calls,
        field_roles={r.field: r.role for r in top},
        reasoning_delimiters=_reasoning_delimiters(terminals, source),
        end_of_turn=tuple(eot.matcher.literals) if eot is not None and isinstance(eot.matcher, LiteralMatcher) else (),
        calls_in_reasoning=calls_in_reasoning,
    )


def reaches(rules: Mapping[str, Sequence[Sequence[str]]], sym: str, target: str, stop: Iterable[str]) -> bool:
    """Whether rule ``sym`` derives ``target`` without passing through a ``stop`` rule."""
    seen, todo, stops = set(), [sym], set(stop)
    while todo:
        s = todo.pop()
        if s == target:
            return True
        if s in seen or s in stops or s not in rules:
            continue
        seen.add(s)
        todo.extend(x for exp in rules[s] for x in exp)
    return False


def _layout(region: Region, regions: Mapping[str, Region], terminals: Mapping[str, Terminal],
            rules: Mapping[str, Sequence[Sequence[str]]], reasoning: Sequence[str]) -> CallLayout:
    assert region.call is not None
    own = [t for t in terminals.values() if t.region is region]
    return CallLayout(region.rule, region.call, tuple(t.name for t in own if t.role == "open"),
                      tuple(t.name for t in own if t.role == "close"),
                      *_surroundings(region, regions, terminals, rules),
                      inside_reasoning=any(reaches(rules, r, region.rule, ()) for r in reasoning),
                      argument_closers=tuple(t.name for t in terminals.values() if t.role == "close"
                                             and t.region is not None and t.region.parent == region.rule
                                             and t.matcher is not None and not t.matcher.zero_width))


def _is_delimiter(terminals: Mapping[str, Terminal], name: str, space: bool = False) -> bool:
    """Whether ``name`` is a delimiter of no region (``LEADING_SPACE`` counted only with ``space``)."""
    t = terminals.get(name)
    return t is not None and t.role == "delimiter" and t.matcher is not None and (space or name != "LEADING_SPACE")


def _surroundings(region: Region, regions: Mapping[str, Region], terminals: Mapping[str, Terminal],
                  rules: Mapping[str, Sequence[Sequence[str]]]) -> tuple[tuple[str, str | None] | None, tuple[str, ...]]:
    """The delimiter rule around a call region's calls, and the delimiters right before a call."""
    wrapper: tuple[str, str | None] | None = None
    # A section holds calls only: a delimiter before other messages too (gpt-oss's <|start|>assistant header)
    # is no section.
    others = [r.rule for r in regions.values() if r.parent is None and r is not region]
    others += [t.name for t in terminals.values()  # (a region reached through an alias rule)
               if t.role == "open" and t.region is not None and t.region.parent is None and t.region is not region]
    region_rules = set(regions)
    for origin, expansions in rules.items():
        if origin in region_rules or origin.startswith("__"):
            continue
        for exp in expansions:
            if len(exp) >= 2 and _is_delimiter(terminals, exp[0]) \
                    and any(reaches(rules, s, region.rule, region_rules - {region.rule}) for s in exp[1:]) \
                    and not any(reaches(rules, s, other, ()) for s in exp[1:] for other in others):
                end = exp[-1] if exp[-1] != exp[0] and _is_delimiter(terminals, exp[-1], space=True) else None
                if wrapper is None or (end is not None and wrapper[1] is None):
                    wrapper = (exp[0], end)
    separators = tuple(a for expansions in rules.values() for exp in expansions for a, b in zip(exp, exp[1:])
                       if b == region.rule and _is_delimiter(terminals, a))
    return wrapper, separators


def _reasoning_delimiters(terminals: Mapping[str, Terminal], source: str) -> tuple[str, str]:
    found = {"open": "", "close": ""}
    for terminal in terminals.values():
        region, matcher = terminal.region, terminal.matcher
        if region is None or region.role != REASONING or region.parent is not None or terminal.role not in found \
                or found[terminal.role]:
            continue
        if isinstance(matcher, LiteralMatcher):
            found[terminal.role] = _first_written(source, terminal.name, matcher.literals)
        elif isinstance(matcher, RegexMatcher):
            written = [text for text in spellings(sre_parse.parse(matcher.pattern, matcher.flags & ~0x100)) if text]
            found[terminal.role] = written[0] if written else ""
    return found["open"], found["close"]


def _first_written(source: str, name: str, literals: Sequence[str]) -> str:
    """The literal the grammar's author wrote first in the terminal's definition (its documented form:
    gpt-oss's analysis ends with ``<|end|>`` before ``<|call|>``); the matcher keeps them longest first."""
    definition = re.search(rf"^{re.escape(name)}\s*(?:\.\s*-?\d+\s*)?:(.*)$", source, re.MULTILINE)
    line = definition.group(1) if definition else ""
    return min(literals, key=lambda text: (line.find(json.dumps(text)) % (len(line) + 1), literals.index(text)))


__all__ = ["CallLayout", "Format", "build_format", "reaches"]
