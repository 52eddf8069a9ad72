"""The LALR automaton the streaming session walks: Lark's table, and what each parser state means for text.

Internal. :func:`grammar_parse._engine.grammar.build_grammar` builds one :class:`Tables` per grammar
(``Grammar.tables``); every session of that grammar reads it, and only ``shared`` (what sessions build
once and share) changes. For each parser state it records where text goes, which delimiters are live
(one shared :class:`Scanner` per distinct set) and the rule reduced there without lookahead.
:func:`feed` is the LALR step of one terminal and :func:`reduce` the reduction step, on a stack of
states alone, for the session and for the table building here.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lark.parsers.lalr_analysis import Shift

from ..errors import GrammarError
from .delimiters import LiteralMatcher, RegexMatcher, Repeat
from .scanner import Scanner
from .symbols import Region, Terminal

if TYPE_CHECKING:
    from lark.grammar import Rule
    from lark.parsers.lalr_analysis import ParseTableBase

#: Whitespace a repeated opener may follow (bounded: the run is held back while it may still grow).
REPEAT_SPACE = 16


class Action(enum.Enum):
    """A parse table's action. Lark's own are objects of one process (the table compares them by
    identity); an enum's members stay themselves through pickling, so a grammar travels as a value."""

    SHIFT = "shift"
    REDUCE = "reduce"


SHIFT, REDUCE = Action.SHIFT, Action.REDUCE


class RuleHandle:
    """A grammar rule as the session's parse table refers to it, hashed by identity (pickling keeps
    the identities within one grammar).

    Lark's Rule hashes its origin and whole expansion on every dictionary lookup, and the parser looks
    up a callback for every reduction; with these handles a reduction costs a pointer hash. A handle
    keeps plain data only, so the table holds nothing of Lark's.
    """

    __slots__ = ("text", "size", "goto")

    def __init__(self, rule: Rule) -> None:
        self.text = str(rule)  # (for reading a table: "origin: expansion")
        self.size = len(rule.expansion)  # what a reduction pops
        self.goto = str(rule.origin.name)  # the symbol whose goto a reduction follows (a plain str: Lark may
        # name it with a Token, whose Python-level __eq__ every table lookup would call)

    def __repr__(self) -> str:
        return f"<RuleHandle {self.text}>"


#: What the parser calls, by rule (a reduction) or terminal name (a shift): functions of the session's
#: region builder (``context``). Regions are all the parser builds, so it keeps no value stack and the
#: callbacks get no values. One dict per grammar, shared by its sessions; a rule or terminal without an
#: entry does nothing.
Callbacks = Mapping[RuleHandle | str, Callable[[Any], None]]


@dataclass(frozen=True)
class ParseTable:
    """Lark's LALR table as plain data: each state's actions by symbol, ``(SHIFT, next state)`` or
    ``(REDUCE, RuleHandle)``, and the start and end states by start symbol."""

    states: dict[int, dict[str, tuple[Any, ...]]]
    start_states: dict[str, int]
    end_states: dict[str, int]


@dataclass(frozen=True, slots=True)
class StateInfo:
    """What the session needs in one parser state: where text goes and which delimiters are live."""

    text: Terminal | None
    watch: tuple[Terminal, ...]
    default_rule: RuleHandle | None  # a rule reduced without lookahead
    scanner: Scanner
    text_candidates: tuple[Terminal, ...] = ()  # several text terminals end rules here: ask the parser
    text_sensitive: bool = False  # see _text_sensitive


@dataclass(frozen=True)
class Tables:
    """Everything the streaming session walks, built once per grammar and shared by its sessions."""

    states: Mapping[int, StateInfo]
    parse_table: ParseTable
    rule_regions: Mapping[RuleHandle, Region]  # the rules whose reduction closes a region
    context: int  # characters of history the delimiters may look back at
    #: What the sessions of this grammar build once and share (the region builder's callbacks).
    shared: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        """The tables without what the sessions built from them: that is per process (closures among it),
        and a process that receives the grammar builds it again on first use."""
        return {**self.__dict__, "shared": {}}


def reduce(table: Mapping[int, Mapping[str, tuple[Any, ...]]], stack: list[int], rule: RuleHandle,
           callback: Callable[[Any], None] | None, context: Any = None) -> None:
    """Reduce ``rule`` on a parser's state stack: pop its children's states, call ``callback`` (if any) and
    push the state its goto leads to (for the reductions a token decides, :func:`feed`, and for those
    that need no token)."""
    if rule.size:
        del stack[-rule.size:]
    if callback is not None:
        callback(context)
    stack.append(table[stack[-1]][rule.goto][1])


def feed(table: Mapping[int, Mapping[str, tuple[Any, ...]]], stack: list[int], symbol: str, callbacks: Callbacks,
         context: Any = None, end_state: int = -1) -> bool:
    """Feed one terminal to the parser: the reductions it decides, then its shift, each with its callback
    (given ``context``). False when the state has no action for it (what the reductions did stays, as
    in Lark). With ``end_state``, ``symbol`` is the end of input and this stops there.

    The LALR step of Lark's ParserState.feed_token on the session's own state stack: no Token objects,
    no value stack and no parser-state object per session (a short message shifts only a few tokens, so
    all three showed)."""
    while True:
        action = table[stack[-1]].get(symbol)
        if action is None:
            return False
        if action[0] is SHIFT:
            stack.append(action[1])
            if (callback := callbacks.get(symbol)) is not None:
                callback(context)
            return True
        reduce(table, stack, action[1], callbacks.get(action[1]), context)
        if stack[-1] == end_state:
            return True


def build_tables(lark_table: ParseTableBase[int], rules: list[Rule], terminals: Mapping[str, Terminal],
                 regions: Mapping[str, Region], *, repeats: bool, source_name: str) -> Tables:
    """The session's automaton over Lark's LALR table; GrammarError where a state cannot route text.

    ``repeats`` adds the watch for repeated openers (:func:`_repeat_watches`)."""
    handles = {r: RuleHandle(r) for r in rules}
    table = ParseTable(
        states={st: {sym: (SHIFT, arg) if action is Shift else (REDUCE, handles[arg])
                     for sym, (action, arg) in acts.items()}
                for st, acts in lark_table.states.items()},
        start_states=dict(lark_table.start_states),
        end_states=dict(lark_table.end_states),
    )
    rule_regions = {}
    for r, handle in handles.items():
        named = regions.get(r.alias) if r.alias else regions.get(r.origin.name)
        if named is not None:
            rule_regions[handle] = named
    scanners: dict[tuple[str, ...], Scanner] = {}  # one per watch list
    states = {state: _state_info(actions, terminals, scanners, source_name) for state, actions in table.states.items()}
    sensitive = {state for state, info in states.items() if _text_sensitive(table, states, state, info)}
    # (after: a repeat, matched only where the region's text starts, changes no rescan)
    added = _repeat_watches(table, terminals) if repeats else {}
    final = {}
    for state, info in states.items():
        watch, scanner = info.watch, info.scanner
        if state in added:
            watch = tuple(sorted((*watch, added[state]), key=lambda t: t.sort_key))
            scanner = _scanner(scanners, watch)
        if state in added or state in sensitive:  # (a new StateInfo only where it differs: load time)
            info = StateInfo(info.text, watch, info.default_rule, scanner, info.text_candidates, state in sensitive)
        final[state] = info
    return Tables(
        states=final,
        parse_table=table,
        rule_regions=rule_regions,
        context=max((t.matcher.context for t in terminals.values() if t.matcher is not None), default=0),
    )


def _scanner(scanners: dict[tuple[str, ...], Scanner], watch: tuple[Terminal, ...]) -> Scanner:
    """The scanner for a watch list, shared by every state that watches the same delimiters."""
    watched = tuple(t.name for t in watch)
    scanner = scanners.get(watched)
    if scanner is None:
        scanner = scanners[watched] = Scanner(watch)
    return scanner


def _state_info(actions: Mapping[str, tuple[Any, ...]], terminals: Mapping[str, Terminal],
                scanners: dict[tuple[str, ...], Scanner], source_name: str) -> StateInfo:
    """One parser state read off its actions: the text terminal (where one is shifted), the live
    delimiters (those with an action, so a delimiter is only recognised where the grammar allows it), and
    the default reduction."""
    texts = [(terminals[s], a is SHIFT) for s, (a, _) in actions.items()
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
    return StateInfo(text=text_term, watch=watch, default_rule=_default_rule(actions),
                     scanner=_scanner(scanners, watch), text_candidates=candidates if text_term is None else ())


def _default_rule(actions: Mapping[str, tuple[Any, ...]]) -> RuleHandle | None:
    """The rule a state reduces whatever comes next (its only action is that reduction), so the session
    reduces it at once and a region closes the moment its close delimiter completes."""
    if not actions or any(action is SHIFT for action, _ in actions.values()):
        return None
    reduces = {arg for _, arg in actions.values()}
    rule: RuleHandle | None = next(iter(reduces)) if len(reduces) == 1 else None
    if rule is not None and rule.goto == "start":
        return None  # the start rule is reduced by $END in finalize()
    return rule


def _text_sensitive(table: ParseTable, states: Mapping[int, StateInfo], state: int, info: StateInfo) -> bool:
    """Whether the first character of text moves the parser to a state that watches other delimiters
    ("<think> only at the start"); the session then rescans after it."""
    term = info.text or (info.text_candidates[0] if info.text_candidates else None)
    if term is None:
        return False
    return _after_text(table, states, state, term.name) is not info.scanner


def _after_text(table: ParseTable, states: Mapping[int, StateInfo], state: int, text: str) -> Scanner | None:
    """The scanner live after the first text token in ``state`` (None when the stack below decides)."""
    action, target = table.states[state][text]
    if action is not SHIFT:
        return None
    stack = [state, target]
    while (rule := states[stack[-1]].default_rule) is not None:
        if rule.size >= len(stack):
            return None
        reduce(table.states, stack, rule, None)
    return states[stack[-1]].scanner


def _repeat_watches(table: ParseTable, terminals: Mapping[str, Terminal]) -> dict[int, Terminal]:
    """The states that also watch for a repeated opener, each with its repeat terminal.

    Right after a message field's opener (a literal, or a regex without captures or lookarounds), the same
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
    added: dict[int, Terminal] = {}
    for actions in table.states.values():
        for sym, (action, target) in actions.items():
            repeat = repeats.get(sym)
            if repeat is not None and action is SHIFT:
                added.setdefault(target, repeat)  # (the first opener shifted into a state is its repeat)
    return added


__all__ = ["REDUCE", "SHIFT", "Action", "Callbacks", "ParseTable", "RuleHandle", "StateInfo", "Tables", "build_tables",
           "feed", "reduce"]
