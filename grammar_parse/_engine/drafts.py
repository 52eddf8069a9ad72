"""Drafts: markup written inside an open reasoning block, which only the rest of the output can explain.

Models write call markup in their reasoning without calling: they draft a call before the real one, or
quote the format (`<tool_call>`, `[TOOL_CALLS]`). They also start calling without closing the reasoning.
The two look the same until the output goes on: if the reasoning block closes later, everything inside it
was reasoning text; if the output ends with the block still open, the markup was a call after all.

So when a delimiter that would end or interrupt an open reasoning block appears (a call opener, a call
section's wrapper, another region's opener), the session takes a draft: a snapshot of its state
at the delimiter (session._Draft). It then reads on as if the delimiter were reasoning text, holding back every event.
When the block's own close comes, the held events are released (reasoning, whole). When the output ends
first, the session rewinds to the snapshot and reads the delimiter as markup. One-shot and streamed
parsing take the same decisions, because both depend only on whether the close comes before the end.

The readings (``calls_in_reasoning``, per parser, defaulted by the grammar's directive of that name):
``"never"`` (the default: what the peers' parsers do, reading calls only outside the reasoning),
``"fallback"`` (the draft stays open after its block closes, until a call outside the block shows it was a
draft, or the output ends without one and it was the call: families known to call from inside their
reasoning, Qwen3 among them), and ``"always"`` (no drafts: formats whose markup is special tokens heading
each message, which no text can quote, and formats whose reasoning holds calls by design).

The cost: while a draft is open, nothing after it streams, and the text after it is read twice when the
output ends inside it.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import ArgumentError
from .delimiters import LiteralMatcher, RegexMatcher
from .grammar import CALLS_IN_REASONING, Grammar, Region, Terminal
from .tables import feed, reduce


def reasoning_states(grammar: Grammar) -> Mapping[int, Region]:
    """The parser states that route text into an open reasoning block, with its region, where the state also
    watches for the region's own close (a block with no close can only end with the output: nothing to wait
    for). Worked out once per grammar: the session looks a state up at every delimiter it finds."""
    found: dict[int, Region] | None = grammar.tables.shared.get("reasoning_states")
    if found is None:
        found = {}
        for state, info in grammar.tables.states.items():
            text = info.text
            if text is not None and text.role == "text" and text.region is not None and text.region.is_reasoning \
                    and any(w.role == "close" and w.region is text.region for w in info.watch):
                found[state] = text.region
        grammar.tables.shared["reasoning_states"] = found
    return found


def interrupts(grammar: Grammar, stack: list[int], term: Terminal, region: Region) -> bool:
    """Whether ``term``, found in the open reasoning ``region``, would end or interrupt it with markup that
    leads somewhere (a call, a section, another region): not the block's own close or repeated opener, and
    not an end of turn (after which the parser takes nothing but trailing text)."""
    if term.region is region and term.role in ("close", "repeat"):
        return False
    if term.role == "open" and term.region is not None:
        return True
    table, states = grammar.tables.parse_table.states, grammar.tables.states
    trial = list(stack)  # (a trial on a copy, without callbacks: it changes nothing)
    if not feed(table, trial, term.name, {}):
        return False
    while (rule := states[trial[-1]].default_rule) is not None:
        reduce(table, trial, rule, None)
    after = states[trial[-1]]
    return any(w.role == "open" for w in after.watch) or (after.text is not None and after.text.role == "text")


def closes_at(close: Terminal, buf: str, pos: int) -> bool:
    """Whether the block's close delimiter matches at ``pos`` (anchored: a search would rescan the rest of
    the buffer at every delimiter of a long draft)."""
    matcher = close.matcher
    if isinstance(matcher, LiteralMatcher):
        return any(buf.startswith(literal, pos) for literal in matcher.literals)
    return isinstance(matcher, RegexMatcher) and matcher.match(buf, pos) is not None


def reading_of(grammar: Grammar, asked: str | bool | None) -> str:
    """The reading in force: the one asked for (a parse's ``calls_in_reasoning``), else the grammar's directive."""
    return reading(grammar.calls_in_reasoning if asked is None else asked)


def draft_states(grammar: Grammar, read: str) -> Mapping[int, Region]:
    """The parser states where call markup inside an open reasoning block is read as a draft under the
    reading ``read``: the reasoning states (reasoning_states), none when calls are always taken."""
    return reasoning_states(grammar) if read != "always" else {}


def reading(value: object) -> str:
    """A ``calls_in_reasoning`` value as one of CALLS_IN_REASONING (True is ``"always"``, False ``"never"``)."""
    if value is True or value is False:
        return "always" if value else "never"
    if isinstance(value, str) and value in CALLS_IN_REASONING:
        return value
    raise ArgumentError(f"calls_in_reasoning must be one of {', '.join(CALLS_IN_REASONING)} (or a bool), not {value!r}",
                        code="usage.calls_in_reasoning",
                        hint='"never": a call inside a closed reasoning block is reasoning text; "fallback": '
                             'it is a call when no call follows the block; "always": it is a call.')
