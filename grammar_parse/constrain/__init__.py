"""A grammar as a decoding constraint: free reasoning and text, then tool calls that must be valid.

The parser reads what a model wrote; the same grammar can also tell the server what the model may write.
:func:`to_llguidance` gives a grammar in llguidance's Lark dialect, :func:`to_structural_tag` the same
constraint as an xgrammar structural tag (what vLLM and SGLang accept by default). In both, reasoning and
content are free text, a tool call starts where the model writes the call's trigger (the grammar's call
opener, or the section opener that holds the calls), and from there the call must be one of ``tools``
with arguments that follow the tool's JSON Schema. ``tool_choice`` says whether a call is allowed
(``"auto"``), needed (``"required"``, or a named tool: only that one), or forbidden (``"none"``: the
free text may not contain a trigger).

What the constraint is built from, all read off the compiled grammar: the reasoning region's open and
close literals, the call region's open and close delimiters (a regex opener is instantiated per tool by
putting the tool's name in its ``name`` group), the delimiter rule that wraps the calls (a section such
as ``<｜tool▁calls▁begin｜>...<｜tool▁calls▁end｜>``, or a tag like ``<|python_tag|>``), and the shape of
the payload, from the region's value spec (:func:`grammar_parse._engine.format.call_shape`): a JSON body of
arguments, a ``{"name", "arguments"}`` object, or a JSON array of such objects.

Two choices hold for every grammar:

* **The end of turn is not part of the constraint.** The constraint ends where the message may end; the
  server ends the turn with the model's stop token (``<|im_end|>``, ``</s>``), which both engines allow
  once the constraint is complete.
* **Every call form the parser reads is checked, or cannot be written** (grammar_parse.constrain._forms):
  the forms that stand in the documented call's place, other call regions and bare calls at the answer's
  start are offered and checked; the free text may not spell the others. A call inside the reasoning is
  free text there, not a checked call.

llguidance's lexer does not backtrack across lexemes, so "text up to a delimiter, then the delimiter" is
one lazy lexeme (``head[lazy]: TEXT "<tool_call>"``): it ends at the first trigger, and a greedy text
lexeme beside it could never give the trigger back. llguidance matches a tokenizer's added token only by a
token reference, so with ``tokens=`` (:func:`added_tokens`) a delimiter that is one is written as
``<[id]>``, after a greedy text that spells no trigger; xgrammar reads tokens by their text. Grammars this module cannot express yet raise
:class:`~grammar_parse.errors.ArgumentError` with code ``constrain.unsupported`` and the reason.

The grammar is named as everywhere (a built-in name, a path, a template dict or a Grammar). A tool's schema
may use references (pydantic's ``$defs``): they are resolved per tool before any part of it is placed
(:mod:`grammar_parse.constrain._schemas`). Exports are kept per (grammar, tools, options)
(:mod:`grammar_parse.constrain._cache`), so the serving path builds each constraint once.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .._engine.arguments import grammar_problem, text_problem
from .._engine.delimiters import LiteralMatcher, RegexMatcher
from .._engine.format import CallLayout
from .._engine.grammar import Grammar
from .._engine.shapes import CallShape
from .._engine.symbols import Region
from .._engine.tools import check_tools
from .._engine.toolstream import call_regions
from ..errors import ArgumentError
from . import _cache as cache
from . import _forms as forms
from . import _pythonic as pythonic
from . import _schemas as schemas
from . import _tagged as tagged
from ._cache import CACHE_BYTES, CACHE_ENTRIES
from ._lark import LarkWriter, lark_regex
from ._regexes import Delim, Unsupported, delim_of, escape, expansions, text_with_tokens, without_start

__all__ = ["to_llguidance", "to_structural_tag", "end_of_turn", "added_tokens", "clear_cache", "cache_info"]

#: What names a grammar here, as everywhere in the package: a built-in name or alias, a path to a grammar
#: or model file, a response-template dict, or a compiled Grammar.
GrammarLike = Grammar | str | os.PathLike[str] | Mapping[str, Any]

#: Payload shapes this module can constrain (grammar_parse._engine.format.CallShape modes).
SUPPORTED_PAYLOADS = ("json_body", "json_key", "json_array", "components", "xml", "pythonic", "at_close")
#: The whitespace the constraint lets a model write around payloads and between calls: JSON's own (Unicode
#: spaces such as \x0b pass a regex's \s but not json.loads, so a payload read as JSON would not parse).
WS = r"[ \t\n\r]*"
#: Payloads whose calls name their tool in the opener (one call form per tool).
NAMED_PAYLOADS = ("json_body", "components", "xml")
#: The most calls one block without an end delimiter holds in a structural tag (see _xgr_blocks).
MAX_CALLS = 64


def _unsupported(grammar: Grammar, why: str) -> ArgumentError:
    return ArgumentError(f"grammar {grammar.name or '(anonymous)'} cannot be exported as a constraint yet: {why}",
                         code="constrain.unsupported",
                         hint="See docs/constraints.md for the grammars that are supported.")


# ---------------------------------------------------------------------------- the grammar's call format
@dataclass(frozen=True)
class _Format:
    """What a constraint needs to know of a grammar, read off its regions, terminals and rules."""

    reasoning: _Reasoning | None
    calls_in_reasoning: bool
    wrapper: tuple[Delim, Delim | None] | None  # a section (or tag) around the calls: begin, end
    separator: Delim | None  # between calls in a wrapper (a regex; None: whitespace)
    opener: Delim
    closer: Delim
    plan: CallShape
    grammar: Grammar
    region: Region
    # Every opener the region reads in the documented opener's place (gpt-oss's recipient in the role header
    # beside the one in the channel): each is offered, and checked, as the documented one is.
    openers: tuple[Delim, ...] = ()
    # Call openers of the grammar the constraint does not offer (a repaired <function=NAME> without its
    # <tool_call>, xLAM's [TOOL_CALLS]): the free text of the answer may not spell their literal head, so
    # that no call the parser reads gets through unchecked.
    forbidden: tuple[str, ...] = ()
    # The same for openers with no literal head (a zero-width lookahead such as Llama 4's bare
    # ``[f(x=1)]`` at a line start), as regexes the answer's text may not hold.
    forbidden_rx: tuple[str, ...] = ()
    # Calls written at the start of the answer with no trigger (Llama 3's bare {"name": ...}, xLAM-2's bare
    # array), offered there: the regex the parser's zero-width opener looks ahead for.
    bare: str | None = None
    bare_plan: CallShape | None = None
    bare_texts: tuple[str, ...] = ()  # the bare call's shortest text, which xgrammar's free text excludes
    # Other call regions offered beside this one, and at the answer's start only (constrain._forms).
    extras: tuple[_Format, ...] = ()
    starts: tuple[_Format, ...] = ()

    @property
    def start_heads(self) -> tuple[str, ...]:
        """Regexes of what the calls offered only at the answer's start begin with."""
        return tuple([*([self.bare] if self.bare is not None else []),
                      *(escape(t) for start in self.starts for t in start.trigger)])

    @property
    def start_texts(self) -> tuple[str, ...]:
        """Their shortest texts (xgrammar, which cannot exclude a regex, keeps these out of free text)."""
        return (*self.bare_texts, *(t for start in self.starts for t in start.trigger))

    @property
    def forms(self) -> tuple[Delim, ...]:
        """Each opener's forms (a regex that is a choice of forms gives one per alternative)."""
        return tuple(form for opener in (self.openers or (self.opener,)) for form in opener.alternatives())

    @property
    def trigger(self) -> tuple[str, ...]:
        """The literals the free text ends at when a call starts."""
        if self.wrapper is not None:
            begin = self.wrapper[0]
            return begin.literals or (begin.lead(),)
        return tuple(dict.fromkeys([*(form.lead() for form in self.forms),
                                    *(t for extra in self.extras for t in extra.trigger)]))


def _call_format(grammar: Grammar) -> _Format:
    calls = call_regions(grammar)
    if not calls:
        raise _unsupported(grammar, "it has no tool-call region")
    # Several call regions are several ways to write a call (lfm2's Python list or JSON, xLAM's fenced or
    # bare array): the constraint offers the grammar's own tool_calls region, the documented one.
    region = next((r for r in calls if r.rule == "tool_calls"), calls[0])
    plan = region.shape
    if plan.mode not in SUPPORTED_PAYLOADS:
        raise _unsupported(grammar, f"its calls' payload ({plan.mode}) has no constraint")
    # The region's own OPEN and CLOSE are the documented form, offered with the openers that stand in its
    # place (gpt-oss's recipient before the channel); the other call openers are made impossible or offered
    # at the answer's start (grammar_parse.constrain._forms).
    upper = region.rule.upper()
    layout = grammar.format.calls[region.rule]
    openers = [grammar.terminals[name] for name in layout.openers]
    closers = [grammar.terminals[name] for name in layout.closers]
    openers = [t for t in openers if t.name == f"{upper}_OPEN"] if len(openers) > 1 else openers
    closers = [t for t in closers if t.name == f"{upper}_CLOSE"] if len(closers) > 1 else closers
    if len(openers) != 1 or len(closers) > 1:
        raise _unsupported(grammar, "its call region has several open or close delimiters")
    rules = grammar.rules
    offered = forms.offered_openers(rules, region, openers[0], grammar)
    try:
        opener, closer = delim_of(openers[0]), delim_of(closers[0] if closers else None)
        alike = tuple(delim_of(t) for t in offered)
    except Unsupported as e:
        raise _unsupported(grammar, str(e)) from None
    try:
        wrapper, separator = _wrapper(grammar, layout)
    except Unsupported as e:
        raise _unsupported(grammar, str(e)) from None
    reasoning, in_reasoning = _reasoning(grammar, region)
    fmt = _Format(reasoning, in_reasoning, wrapper, separator, opener, closer, plan, grammar, region, alike)
    other = forms.others(grammar, region, offered, fmt.trigger, wrapper is not None, SUPPORTED_PAYLOADS)
    extras: list[_Format] = []
    starts: list[_Format] = []
    forbidden = list(other.forbidden)
    for found, kept in ((other.extras, extras), (other.starts, starts)):
        for r, o, c in found:
            try:
                one = _Format(None, False, None, None, delim_of(o), delim_of(c), r.shape, grammar, r)
                _own_tags(one, [("f", {"type": "object"})], True)
                kept.append(one)
            except Unsupported:
                # (a form no constraint writes: made impossible)
                forbidden.extend(o.matcher.literals if isinstance(o.matcher, LiteralMatcher) else ())
    fmt = replace(fmt, forbidden=tuple(forbidden), forbidden_rx=other.forbidden_rx, bare=other.bare,
                  bare_plan=other.bare_plan, bare_texts=other.bare_texts, extras=tuple(extras), starts=tuple(starts))
    if not all(fmt.trigger):
        raise _unsupported(grammar, "its calls start with no literal text to trigger them (a zero-width opener, "
                           "or a message header whose recipient names the tool, as in Beam's and Muse's channels, "
                           "with no tag or section around the calls)")
    if plan.mode in NAMED_PAYLOADS and not opener.has_name():
        raise _unsupported(grammar, "its call opener holds no (?P<name>...) group for the tool's name")
    return fmt


def _wrapper(grammar: Grammar, layout: CallLayout) -> tuple[tuple[Delim, Delim | None] | None, Delim | None]:
    """The delimiters around the calls and between them, from the format's layout of the call region: the
    section's first and last delimiter, and the last delimiter before a call that is not the section's."""
    delims = {name: delim_of(grammar.terminals[name]) for name in (*(layout.wrapper or ()), *layout.separators)
              if name is not None}
    wrapper = None if layout.wrapper is None else (
        delims[layout.wrapper[0]], delims[layout.wrapper[1]] if layout.wrapper[1] is not None else None)
    separators = [delims[name] for name in layout.separators if wrapper is None or delims[name] != wrapper[0]]
    return wrapper, separators[-1] if separators else None



@dataclass(frozen=True)
class _Reasoning:
    """The reasoning's delimiters: canonical texts (a structural tag's begin and end, and what a prompt is
    searched for) and regexes (llguidance reads every form the grammar does)."""

    opens: tuple[str, ...]
    closes: tuple[str, ...]
    open_rx: str
    close_rx: str
    implicit: bool  # it opens at the start of the output with no opener written (ERNIE's ``(?:^|<think>)``)
    # A close with a part no literal holds (Hy3's </think:opensource>): a structural tag ends the reasoning
    # at its literal head, then this regex.
    close_head: str = ""
    close_rest: str = ""


def _reasoning(grammar: Grammar, calls: Region) -> tuple[_Reasoning | None, bool]:
    reasoning = [r for r in grammar.regions.values() if r.is_reasoning and r.spec is not None and getattr(r.spec, "content", None) == "text"]
    if not reasoning:
        return None, False
    upper = reasoning[0].rule.upper()
    open_t, close_t = grammar.terminals.get(f"{upper}_OPEN"), grammar.terminals.get(f"{upper}_CLOSE")
    if open_t is None or close_t is None:
        raise _unsupported(grammar, "its reasoning has no open and close delimiters of its own")
    try:
        opener, closer = delim_of(open_t), delim_of(close_t)
    except Unsupported as e:
        raise _unsupported(grammar, f"its reasoning delimiters: {e}") from None
    implicit = False
    if opener.regex is not None and (explicit := without_start(opener.regex)) is not None:
        opener, implicit = Delim(regex=explicit), True
    try:
        opens, closes = tuple(t for t in opener.canonical() if t), tuple(t for t in closer.canonical() if t)
    except Unsupported as e:
        raise _unsupported(grammar, f"its reasoning delimiters: {e}") from None
    if not opens or not closes:
        raise _unsupported(grammar, "its reasoning delimiters have no text to write")
    inside = grammar.format.calls[calls.rule].inside_reasoning
    head = rest = ""
    if closer.regex is not None and not expansions(closer.regex, closer.regex.items) and closer.lead():
        head, rest = closer.lead(), closer.rest_after_lead(None)
    return _Reasoning(opens, closes, opener.regex_text(), closer.regex_text(), implicit, head, rest), inside


def end_of_turn(grammar: GrammarLike) -> tuple[str, ...]:
    """The literals that end a turn (the ``END_OF_TURN`` delimiter), which the constraint leaves to the
    server's stop tokens; () when the grammar has none."""
    return _grammar(grammar).format.end_of_turn


def _start_state(grammar: Grammar, fmt: _Format, prefix: str | None) -> str:
    """Where the output starts: ``start``, ``reasoning`` (the prompt opened the reasoning, as a pre-filled
    ``<think>\\n``) or ``content`` (the prompt closed it, as ``<think></think>`` with thinking off)."""
    if fmt.reasoning is None:
        return "start"
    if not prefix:
        return "reasoning" if fmt.reasoning.implicit else "start"
    tail = prefix
    if grammar.start_anchor is not None:
        end = grammar.start_anchor.last_end(prefix, None)
        tail = prefix if end is None else prefix[end:]
    # (by the delimiters' regexes too: Hy3's template writes <think:opensource>, not the canonical <think>)
    last_open = max((tail.rfind(o) for o in fmt.reasoning.opens), default=-1)
    last_close = max((tail.rfind(c) for c in fmt.reasoning.closes), default=-1)
    for rx, last in ((fmt.reasoning.open_rx, "open"), (fmt.reasoning.close_rx, "close")):
        try:
            found = [m.start() for m in re.finditer(rx, tail)]
        except re.error:
            continue
        if found and last == "open":
            last_open = max(last_open, found[-1])
        elif found:
            last_close = max(last_close, found[-1])
    if last_close > last_open:
        return "content"
    return "reasoning" if last_open >= 0 or fmt.reasoning.implicit else "start"


# ---------------------------------------------------------------------------- tools and payload schemas
def _tools(grammar: Grammar, tools: Any, tool_choice: Any) -> tuple[list[tuple[str, dict[str, Any]]], str]:
    """(name, parameters schema) of each tool the constraint allows, and the mode: auto, required or none."""
    if not isinstance(tools, Sequence) or isinstance(tools, (str, bytes)):
        raise ArgumentError(f"tools must be a list of tool definitions, not {type(tools).__name__}",
                            code="constrain.tools", hint='Pass [{"type": "function", "function": {"name": ..., '
                                                         '"parameters": {...}}}, ...].')
    out = []
    named: dict[str, int] = {}
    # (every shape the parser reads tools in: OpenAI's, Anthropic's input_schema, MCP's, Python functions)
    for spec in check_tools(tools):
        name, params = spec["name"], spec.get("parameters") or {"type": "object", "properties": {}}
        # (references resolved, so the schema may be placed anywhere; recursive definitions named per tool)
        seen = named[name] = named.get(name, 0) + 1
        out.append((name, dict(schemas.self_contained(name, params, f"{seen}." if seen > 1 else ""))))
    if isinstance(tool_choice, Mapping):
        chosen = tool_choice.get("function", tool_choice)
        wanted = chosen.get("name") if isinstance(chosen, Mapping) else None
        out = [t for t in out if t[0] == wanted]
        if not out:
            raise ArgumentError(f"tool_choice names {wanted!r}, which is not one of the tools",
                                code="constrain.tool_choice")
        return out, "required"
    if not isinstance(tool_choice, str) or tool_choice not in ("auto", "required", "none"):
        raise ArgumentError(f"tool_choice must be 'auto', 'required', 'none' or {{'name': ...}}, not {tool_choice!r}",
                            code="constrain.tool_choice")
    if not out and tool_choice == "required":
        raise ArgumentError("tool_choice 'required' needs at least one tool", code="constrain.tool_choice")
    return out, "none" if not out else tool_choice


def _call_object(plan: CallShape, name: str, params: dict[str, Any], *, with_id: bool) -> dict[str, Any]:
    """The schema of a ``{"name": ..., "arguments": {...}}`` object for one tool."""
    assert plan.name_key is not None and plan.args_key is not None
    variants = []
    for key in (plan.args_key, *plan.args_alternatives):
        props: dict[str, Any] = {plan.name_key: {"const": name}, key: params}
        if with_id and plan.id_key:
            props[plan.id_key] = {"type": "string"}
        variants.append({"type": "object", "properties": props, "required": [plan.name_key, key],
                         "additionalProperties": False})
    return variants[0] if len(variants) == 1 else {"anyOf": variants}


def _payloads(fmt: _Format, tools: list[tuple[str, dict[str, Any]]],
              parallel: bool) -> list[tuple[str | None, dict[str, Any]]]:
    """(tool name in the opener, or None; the structural-tag format of what follows the opener up to the
    closer) for each call form. Raises Unsupported for a payload that cannot be constrained."""
    plan = fmt.plan
    if plan.mode in ("components", "xml"):
        return [(name, tagged.call_body(fmt.grammar, fmt.region, name, params)) for name, params in tools]
    if plan.mode == "at_close" and getattr(fmt.region.spec, "content", None) == "json-name-keys":
        # Apertus: a JSON array of {"NAME": {arguments}} objects.
        return [(None, _json(_array([{"type": "object", "properties": {n: p}, "required": [n],
                                       "additionalProperties": False} for n, p in tools], parallel), fmt))]
    if plan.mode in ("pythonic", "at_close"):
        # A payload read by a value parser when the call closes: Python-style calls, or XML naming the tool.
        reasons = []
        for module in (pythonic, tagged):
            try:
                if fmt.opener.has_name():  # the opener names the tool (Gemma's call:NAME{...})
                    return [(name, module.call_body(fmt.grammar, fmt.region, name, params)) for name, params in tools]
                return [(None, module.payload(fmt.grammar, fmt.region, tools, parallel))]
            except Unsupported as e:
                reasons.append(str(e))
        raise Unsupported("; ".join(reasons))
    if plan.mode == "json_body":
        return [(name, _json(params, fmt)) for name, params in tools]
    if plan.mode == "json_key":
        objects = [_call_object(plan, n, p, with_id=False) for n, p in tools]
        return [(None, _json(objects[0] if len(objects) == 1 else {"anyOf": objects}, fmt))]
    return [(None, _keyed_array(fmt, tools, parallel))]


#: A JSON string, as a regex both engines read.
JSON_STRING = r'"(?:[^"\\\n\r\t]|\\["\\bfnrt]|\\u[0-9a-fA-F]{4})*"'  # (not "\/": a "/" would end a lark regex)


def _keyed_array(fmt: _Format, tools: list[tuple[str, dict[str, Any]]], parallel: bool) -> dict[str, Any]:
    """A JSON array of calls written key by key: each object may open with one key the grammar does not
    read (Command R7B writes every call as ``{"tool_call_id": "0", "tool_name": ..., "parameters": ...}``),
    then the name and the arguments, then the call id the grammar reads, if any. Both engines keep a JSON
    Schema's property order, so a leading key cannot be allowed by a schema without naming it; a duplicate
    of the name key there is harmless (the parser, as JSON, keeps the last)."""
    plan = fmt.plan
    assert plan.name_key is not None and plan.args_key is not None
    keys = "|".join(escape(json.dumps(k)) for k in (plan.args_key, *plan.args_alternatives))
    tail = f"(?:{WS},{WS}{escape(json.dumps(plan.id_key))}{WS}:{WS}{JSON_STRING})?" if plan.id_key else ""
    objects = _choice([{"type": "sequence", "elements": [
        {"type": "regex", "pattern": f"\\{{{WS}(?:{JSON_STRING}{WS}:{WS}{JSON_STRING}{WS},{WS})?"
                                     f"{escape(json.dumps(plan.name_key))}{WS}:{WS}{escape(json.dumps(name))}"
                                     f"{WS},{WS}(?:{keys}){WS}:{WS}"},
        {"type": "json_schema", "json_schema": params},
        {"type": "regex", "pattern": f"{tail}{WS}\\}}"}]} for name, params in tools])
    # (bounded: xgrammar refuses an unbounded repeat in a tag with no end text, as Mistral's [TOOL_CALLS])
    more = [{"type": "repeat", "min": 0, "max": MAX_CALLS - 1, "content": {"type": "sequence", "elements": [
        {"type": "regex", "pattern": f"{WS},{WS}"}, objects]}}] if parallel else []
    lead = [] if fmt.opener.regex is not None and fmt.opener.regex.lookahead else [{"type": "regex", "pattern": WS}]
    return {"type": "sequence", "elements": [*lead, {"type": "regex", "pattern": "\\["}, {"type": "regex", "pattern": WS},
                                             objects, *more, {"type": "regex", "pattern": WS + "\\]"}]}


def _array(objects: list[dict[str, Any]], parallel: bool) -> dict[str, Any]:
    """The schema of a JSON array of calls, each one of ``objects``: one call at most unless ``parallel``."""
    array: dict[str, Any] = {"type": "array", "items": objects[0] if len(objects) == 1 else {"anyOf": objects},
                             "minItems": 1}
    if not parallel:
        array["maxItems"] = 1
    return array


def _json(schema: dict[str, Any], fmt: _Format) -> dict[str, Any]:
    """A JSON payload: whitespace (unless the opener ends in a lookahead at the value, as phi4's
    ``functools(?=\\[)``), then a value the schema accepts."""
    # (each export moves the tools' definitions up to the root of the document at its output)
    value = {"type": "json_schema", "json_schema": schema}
    if fmt.opener.regex is not None and fmt.opener.regex.lookahead:
        return value
    return {"type": "sequence", "elements": [{"type": "regex", "pattern": WS}, value]}


# ---------------------------------------------------------------------------- llguidance
def to_llguidance(grammar: GrammarLike, *, tools: Any, tool_choice: Any = "auto", parallel_tool_calls: bool = True,
                  prefix: str | None = None, reasoning: bool = True, tokens: Mapping[str, int] | None = None) -> str:
    """The constraint as a grammar in llguidance's Lark dialect (``%llguidance {}``, lazy lexemes, ``%json``).

    ``tools`` are OpenAI tool definitions (``{"type": "function", "function": {"name", "parameters"}}``);
    ``prefix`` is the prompt, so a reasoning the template opened is closed first and never re-opened;
    ``reasoning=False`` leaves the reasoning out, for an engine whose reasoning parser holds the constraint
    back until the reasoning has ended (vLLM and SGLang with a reasoning parser).
    ``tokens`` are the tokenizer's added tokens, text to id (:func:`added_tokens`): llguidance matches an
    added token only by reference, so a delimiter spelled by one (``<tool_call>``, ``<|python_tag|>``) is
    written as ``<[id]>``; without them the constraint fits a tokenizer that spells delimiters in bytes.
    ``grammar`` is a built-in name, a path, a response-template dict or a Grammar (as everywhere). Exports
    are kept per (grammar, tools, options) (grammar_parse.constrain._cache).
    Raises ArgumentError ``constrain.unsupported`` for a grammar whose calls cannot be expressed yet.
    """
    found, fmt, state = _prepared(grammar, prefix, reasoning, parallel_tool_calls)
    checked = _checked_tokens(tokens)
    key = cache.canonical({"export": "llguidance", "tools": tools, "tool_choice": tool_choice, "state": state,
                           "parallel": parallel_tool_calls, "tokens": checked})
    return cache.cached(found, key, lambda: _llguidance(found, fmt, tools, tool_choice, parallel_tool_calls,
                                                        state, checked))


def _llguidance(grammar: Grammar, fmt: _Format, tools: Any, tool_choice: Any, parallel_tool_calls: bool,
                state: str, tokens: dict[str, int]) -> str:
    allowed, mode = _tools(grammar, tools, tool_choice)
    writer = LarkWriter(tokens=tokens)
    out = ["%llguidance {}", ""]
    trigger = "(?:" + "|".join(escape(t) for t in fmt.trigger) + ")"
    out.append("TEXT: /(?s:.*)/")
    # The answer's text: any, but no call form the constraint does not offer (grammar_parse.constrain._forms).
    shut = [f"(?s:.*)(?:{escape(t)})" for t in fmt.forbidden] + [f"(?:(?s:.*)\n)?(?:{rx})" for rx in fmt.forbidden_rx]
    answer = "TEXT"
    if shut:
        # (a line-start form at the text's start or after a newline)
        answer = "ANSWER"
        out.append(f"ANSWER: /(?s:.*)/ & ~/(?:{'|'.join(shut)})(?s:.*)/")
    out.append(f"NOTRIG: {answer} & ~/(?s:.*){trigger}(?s:.*)/")
    bare = _bare_block(fmt, allowed, parallel_tool_calls) if mode != "none" else []
    if fmt.start_heads:
        # The answer's first text may not start as a bare call: that is the bare call's lexeme.
        out.append(f"OPENTEXT: {answer} & ~/{WS}(?:{'|'.join(fmt.start_heads)})(?s:.*)/")
        out.append("OPENNOTRIG: OPENTEXT & NOTRIG")
    opentext = "OPENTEXT" if fmt.start_heads else answer
    starts = _lark_reasoning(out, writer, grammar, fmt, state, mode, tokens, opentext)
    out.append("start: " + " | ".join(starts))
    heads: list[str] = []
    if mode != "none":
        try:
            heads = _lark_calls(out, writer, fmt, allowed, parallel_tool_calls)
        except Unsupported as e:
            raise _unsupported(grammar, str(e)) from None
    free, free0 = _passing(out, grammar, fmt, tokens, "body0" in starts)
    first_free = free
    if fmt.start_heads:
        first_free = "OPENNOTRIG" if free == "NOTRIG" else "freeb"
        if first_free == "freeb":
            out.append("freeb: OPENNOTRIG passing*")
    try:
        for k, (head, rest) in enumerate(bare):
            out.append(f"bare_head_{k}[lazy]: " + lark_regex(f"{WS}(?:{head})"))
        if bare:
            out.append("bare_call: " + " | ".join(f"bare_head_{k} {writer.expression(rest)}"
                                                   for k, (_head, rest) in enumerate(bare)))
    except Unsupported as e:
        raise _unsupported(grammar, str(e)) from None
    calls = _Calls(heads, "bare_call" if bare else None, answer)
    _lark_body(out, "body", opentext, first_free, mode, parallel_tool_calls, calls, free)
    if "body0" in starts:
        _lark_body(out, "body0", "FIRST", free0, mode, parallel_tool_calls, calls, free)
    out.extend(writer.rules)
    return "\n".join(out) + "\n"


def _lark_reasoning(out: list[str], writer: LarkWriter, grammar: Grammar, fmt: _Format, state: str, mode: str,
                    tokens: Mapping[str, int], opentext: str) -> list[str]:
    """The reasoning's rules (free text between its delimiters, as tokens where they are ones) and the start
    rule's alternatives: the reasoning then the body, or the body alone."""
    starts: list[str] = []
    if fmt.reasoning is not None and state != "content":
        text = "NOTRIG" if mode == "none" and fmt.calls_in_reasoning else "TEXT"
        opener = fmt.reasoning.open_rx
        if _spelled_by(tokens, *fmt.reasoning.opens, *fmt.reasoning.closes):
            # Delimiters that are tokens: free text ends at a close that is a token (greedy: it spells no
            # close) when the canonical close is one, else at the first close written as text (lazy).
            closes = [c for c in fmt.reasoning.closes if _spelled_by(tokens, c)] \
                if _spelled_by(tokens, fmt.reasoning.closes[0]) else []
            spelled = [c for c in fmt.reasoning.closes if c not in closes] if closes else []
            elements = [{"type": "any_text", "excludes": [*spelled, *(fmt.trigger if text == "NOTRIG" else ())]},
                        _choice([{"type": "const_string", "value": c} for c in closes]) if closes else
                        {"type": "regex", "pattern": fmt.reasoning.close_rx}]
            if state == "start":
                elements[:0] = [{"type": "regex", "pattern": r"\s*"},
                                _choice([{"type": "const_string", "value": o} for o in fmt.reasoning.opens])]
            try:
                out.append("reasoning: " + writer.expression({"type": "sequence", "elements": elements}))
            except Unsupported as e:
                raise _unsupported(grammar, str(e)) from None
        elif state == "reasoning":
            out.append(f"reasoning[lazy]: {text} {lark_regex(fmt.reasoning.close_rx)}")
        else:
            open_re = lark_regex(r"\s*(?:" + opener + ")")
            out.append(f"reasoning[lazy]: {open_re} {text} {lark_regex(fmt.reasoning.close_rx)}")
        if state == "reasoning":
            starts.append("reasoning body")
        else:
            # The first text may not start with the reasoning opener: that is the reasoning's lexeme.
            out.append(f"FIRST: {opentext} & ~/\\s*(?:{opener})(?s:.*)/")
            out.append("FIRSTNOTRIG: FIRST & NOTRIG")
            starts += ["reasoning body", "body0"]
    else:
        starts.append("body")
    return starts


def _passing(out: list[str], grammar: Grammar, fmt: _Format, tokens: Mapping[str, int],
             first: bool) -> tuple[str, str]:
    """The free text between calls, where a tokenizer's tokens are given: text that spells no trigger, with
    the grammar's other delimiter tokens between (gpt-oss's ``<|end|><|start|>assistant`` header, Cohere's
    ``<|START_RESPONSE|>``), which a text lexeme cannot hold. A token a trigger starts with may pass, but
    the text after it may not go on as that trigger (gpt-oss's ``<|channel|>`` before ``final`` or
    ``commentary to=functions.``). Not the end of turn, the whole triggers or the reasoning's openers.
    ``first``: the output may start with the reasoning, so there is a first text. Returns the rules for the
    text and for the first text (``NOTRIG``, ``FIRSTNOTRIG`` when none pass)."""
    delimiters = [lit for t in grammar.terminals.values() if isinstance(t.matcher, LiteralMatcher)
                  for lit in t.matcher.literals]
    delimiters += [t.matcher.pattern.replace("\\", "") for t in grammar.terminals.values()
                   if isinstance(t.matcher, RegexMatcher)]
    kept = {*fmt.trigger, *fmt.forbidden, *end_of_turn(grammar), *(fmt.reasoning.opens if fmt.reasoning else ())}
    passing = sorted(t for t in tokens if t not in kept and any(t in d for d in delimiters))
    if not passing:
        return "NOTRIG", "FIRSTNOTRIG"
    branches = []
    for k, token in enumerate(passing):
        # The text after the token may not be the trigger's rest: its text, or its text up to the next token
        # exactly (then that token passes too), or nothing when a token follows at once.
        shut, nonempty = [], False
        for trigger in fmt.trigger:
            if trigger.startswith(token):
                rest = text_with_tokens(trigger[len(token):], tokens)
                if rest[0]["type"] == "token":
                    nonempty = True
                else:
                    shut.append(escape(rest[0]["value"]) + ("(?s:.*)" if len(rest) == 1 else ""))
        after = "NOTRIG"
        if shut or nonempty:
            after = f"AFTER_{k}"
            out.append(f"{after}: NOTRIG" + (f" & ~/(?:{'|'.join(shut)})/" if shut else "")
                       + (" & /(?s:.+)/" if nonempty else ""))
        branches.append(f"<[{tokens[token]}]> {after}")
    out.append("passing: " + " | ".join(branches))
    out.append("passtok: " + " | ".join(f"<[{tokens[token]}]>" for token in passing))
    # (the token right before a text trigger: not one a token-led trigger starts with, whose own head reads it)
    last = [t for t in passing if not any(trigger.startswith(t) for trigger in fmt.trigger)]
    if last:
        out.append("lasttok: " + " | ".join(f"<[{tokens[token]}]>" for token in last))
    out.append("free: NOTRIG passing*")
    if first:
        out.append("free0: FIRSTNOTRIG passing*")
    return "free", "free0"


def added_tokens(tokenizer: Any) -> dict[str, int]:
    """The added tokens of a Hugging Face tokenizer (a transformers tokenizer, or a ``tokenizers.Tokenizer``)
    as text to id, for :func:`to_llguidance`'s ``tokens``."""
    if hasattr(tokenizer, "get_added_vocab"):
        return {str(t): int(i) for t, i in tokenizer.get_added_vocab().items()}
    if hasattr(tokenizer, "get_added_tokens_decoder"):
        return {str(t.content): int(i) for i, t in tokenizer.get_added_tokens_decoder().items()}
    raise ArgumentError(f"cannot read the added tokens of {type(tokenizer).__name__}: pass a Hugging Face tokenizer, "
                        "or a mapping of token text to id as tokens=", code="constrain.tokens")


def _checked_tokens(tokens: Mapping[str, int] | None) -> dict[str, int]:
    if tokens is None:
        return {}
    if not isinstance(tokens, Mapping) or not all(isinstance(t, str) and isinstance(i, int) and not isinstance(i, bool)
                                                  and i >= 0 for t, i in tokens.items()):
        raise ArgumentError("tokens must map each added token's text to its id (a non-negative int)",
                            code="constrain.tokens", hint="constrain.added_tokens(tokenizer) reads them off a tokenizer.")
    return {t: i for t, i in tokens.items() if t}


def _spelled_by(tokens: Mapping[str, int], *texts: str) -> bool:
    """Whether one of ``tokens`` occurs in one of ``texts``."""
    return any(t in text for t in tokens for text in texts)


def _choice(formats: list[dict[str, Any]]) -> dict[str, Any]:
    return formats[0] if len(formats) == 1 else {"type": "or", "elements": formats}


@dataclass(frozen=True)
class _Calls:
    """What the free text of an answer holds calls by: the triggers' heads, the bare call at its start (a
    rule, or None) and the lexeme of its text."""

    heads: list[str]
    bare: str | None
    text: str


def _lark_body(out: list[str], rule: str, first: str, first_notrig: str, mode: str, parallel: bool,
               calls_by: _Calls, notrig: str) -> None:
    """``rule``: free text with calls at their triggers; its first text is ``first``. A call is the free
    text up to trigger k (one lazy lexeme; or, for a trigger that starts with a token, a greedy text that
    spells no trigger, then the token), then ``block_k``, what may follow that trigger; or, first, the
    bare call the answer may start with."""
    if mode == "none":
        out.append(f"{rule}: {first_notrig}")
        return
    heads, answer = calls_by.heads, calls_by.text
    # The first call's head is the later calls' head when the first text is any text (no reasoning before).
    first_call = "call" if (first, first_notrig) == (answer, notrig) else f"{rule}_call"
    tokened = any(line.startswith("lasttok: ") for line in out)
    for k, head in enumerate(heads):
        forms = [(f"head_{k}", answer, notrig)]
        if first_call != "call":
            forms.insert(0, (f"{rule}_head_{k}", first, first_notrig))
        for name, text, before in forms:
            line = f"{name}[lazy]: {text} {head}" if head.startswith("TRIGGER_") else f"{name}: {before} {head}"
            if head.startswith("TRIGGER_") and tokened:
                # A trigger of text after the tokens that may pass (gpt-oss's to=functions.NAME after
                # <|end|><|start|>assistant): the lazy lexeme cannot hold a token, so text and tokens go
                # before it.
                lexeme = {"free": "NOTRIG", "free0": "FIRSTNOTRIG", "freeb": "OPENNOTRIG"}.get(before, before)
                after = f"head_{k}_after[lazy]: {answer} {head}"
                if after not in out:
                    out.append(after)
                line = (f"{name}_lex[lazy]: {text} {head}\n"
                        f"{name}: {name}_lex | {lexeme} (passtok NOTRIG)* lasttok head_{k}_after")
            if line not in out:
                out.append(line)
    calls = ["call: " + " | ".join(f"head_{k} block_{k}" for k in range(len(heads)))]
    if first_call != "call":
        calls.append(f"{first_call}: " + " | ".join(f"{rule}_head_{k} block_{k}" for k in range(len(heads))))
    out.extend(line for line in calls if line not in out)
    more = " call*" if parallel else ""
    # Text a lazy head would end at a trigger; a token-led head ends at no text, so no free text spells one.
    spelled = parallel and all(head.startswith("TRIGGER_") for head in heads)
    tail = answer if spelled else notrig
    bare = f" | {calls_by.bare}{more} {tail}" if calls_by.bare is not None else ""
    out.append(f"{rule}: {first_call}{more} {tail}{bare}" + ("" if mode == "required" else
                                                             f" | {first if spelled else first_notrig}"))


def _lark_calls(out: list[str], writer: LarkWriter, fmt: _Format, tools: list[tuple[str, dict[str, Any]]],
                parallel: bool) -> list[str]:
    """``block_k``, what follows trigger k: the structural tag's blocks translated (grammar_parse.constrain._lark)
    with the trigger, which the free text before it has already taken, cut from each block's begin. Returns
    what ends the free text before each: ``TRIGGER_k``, a lexeme with the trigger's text, or the trigger's
    expression when it starts with a token."""
    forms: dict[str, list[str]] = {}
    for block in _xgr_blocks(fmt, tools, parallel):
        begin = block.get("begin", "")
        taken = next((t for t in sorted(fmt.trigger, key=len, reverse=True) if begin.startswith(t)), None)
        if taken is None:
            raise Unsupported(f"a call form does not start with its trigger ({begin!r})")
        forms.setdefault(taken, []).append(writer.expression({**block, "begin": begin[len(taken):]}))
    heads = []
    for k, (trigger, expressions) in enumerate(forms.items()):
        pieces = text_with_tokens(trigger, writer.tokens)
        if pieces[0]["type"] == "token":
            heads.append(writer.expression({"type": "sequence", "elements": pieces}))
        else:
            # (text, then any tokens the trigger holds after it: the lazy lexeme ends at the text)
            out.append(f"TRIGGER_{k}: {lark_regex(escape(pieces[0]['value']))}")
            heads.append(f"TRIGGER_{k}" + "".join(" " + writer.expression(p) for p in pieces[1:]))
        out.append(f"block_{k}: " + " | ".join(expressions))
    return heads


def _checked_format(grammar: Grammar) -> _Format:
    def build() -> _Format:
        try:
            return _call_format(grammar)
        except Unsupported as e:
            raise _unsupported(grammar, str(e)) from None
    fmt: _Format = cache.memo(grammar, build)
    return fmt


# ---------------------------------------------------------------------------- the public functions' arguments
def _grammar(grammar: Any) -> Grammar:
    """The grammar named as every other API names one (grammar_parse.load_grammar: a built-in name, a path,
    a template dict or a Grammar; anything else is an ArgumentError ``usage.argument`` saying so)."""
    if isinstance(grammar, Grammar):
        return grammar
    if not isinstance(grammar, (str, os.PathLike, Mapping)):
        raise grammar_problem(grammar, "grammar")  # (named as this function's argument, not load_grammar's)
    from .._engine.library import load_grammar  # (the library compiles grammars; the exports need it only here)

    return load_grammar(grammar)


def _prepared(grammar: Any, prefix: Any, reasoning: Any, parallel_tool_calls: Any) -> tuple[Grammar, _Format, str]:
    """The grammar, its call format and the state the output starts in, the options' types checked."""
    for option, value in (("parallel_tool_calls", parallel_tool_calls), ("reasoning", reasoning)):
        if not isinstance(value, bool):
            raise ArgumentError(f"`{option}` should be True or False, but got {type(value).__name__}",
                                code="usage.argument")
    if prefix is not None and not isinstance(prefix, str):
        raise text_problem(prefix, "prefix")
    found = _grammar(grammar)
    fmt = _checked_format(found)
    return found, fmt, _start_state(found, fmt, prefix) if reasoning else "content"


def clear_cache() -> None:
    """Forget every export kept (grammar_parse.constrain._cache)."""
    cache.clear()


def cache_info() -> dict[str, int]:
    """How many exports are kept, and their size in bytes: ``{"entries": n, "bytes": n}``."""
    return cache.info()


# ---------------------------------------------------------------------------- xgrammar structural tags
def to_structural_tag(grammar: GrammarLike, *, tools: Any, tool_choice: Any = "auto", parallel_tool_calls: bool = True,
                      prefix: str | None = None, reasoning: bool = True) -> dict[str, Any]:
    """The constraint as an xgrammar structural tag: ``{"type": "structural_tag", "format": {...}}``.

    The same constraint as :func:`to_llguidance`, in the JSON that vLLM (``structured_outputs.structural_tag``,
    or ``response_format``) and SGLang accept; it uses xgrammar's ``sequence``, ``tag``, ``triggered_tags``,
    ``any_text``, ``regex`` and ``json_schema`` formats (xgrammar 0.1.25 and later). Each call returns a
    dict of its own (the kept export is its JSON text).
    """
    found, fmt, state = _prepared(grammar, prefix, reasoning, parallel_tool_calls)
    key = cache.canonical({"export": "structural_tag", "tools": tools, "tool_choice": tool_choice,
                           "state": state, "parallel": parallel_tool_calls})
    text = cache.cached(found, key, lambda: json.dumps(schemas.rooted_documents(
        _structural_tag(found, fmt, tools, tool_choice, parallel_tool_calls, state))))
    tag: dict[str, Any] = json.loads(text)
    return tag


def _structural_tag(grammar: Grammar, fmt: _Format, tools: Any, tool_choice: Any, parallel_tool_calls: bool,
                    state: str) -> dict[str, Any]:
    allowed, mode = _tools(grammar, tools, tool_choice)
    elements: list[dict[str, Any]] = []
    if fmt.reasoning is not None and state != "content":
        opens, closes = fmt.reasoning.opens, fmt.reasoning.closes
        text: dict[str, Any] = {"type": "any_text"}
        if mode == "none" and fmt.calls_in_reasoning:
            text["excludes"] = list(fmt.trigger)
        rest = [{"type": "regex", "pattern": fmt.reasoning.close_rest}] if fmt.reasoning.close_rest else []
        closes = (fmt.reasoning.close_head,) if rest else closes
        if state == "reasoning":
            elements += [{"type": "tag", "begin": "", "content": text, "end": list(closes)}, *rest]
        else:
            tags = [{"type": "tag", "begin": o, "content": text, "end": list(closes)} for o in opens]
            elements.append({"type": "optional", "content": {"type": "sequence", "elements": [
                {"type": "regex", "pattern": r"\s*"}, tags[0] if len(tags) == 1 else {"type": "or", "elements": tags},
                *rest]}})
    answer_at = len(elements)
    triggers = list(fmt.trigger)
    # xgrammar cannot say "text that does not start with the reasoning opener" (llguidance's FIRST): where
    # the reasoning may open, the free text after it may not hold the opener at all. Nor can it exclude a
    # regex: the call forms not offered are kept out by their literal heads, a bare call's by its shortest
    # text (grammar_parse.constrain._forms).
    shut = list(fmt.reasoning.opens) if fmt.reasoning is not None and state == "start" else []
    shut += [*fmt.forbidden, *fmt.start_texts]
    no_call = {"type": "any_text", "excludes": [*fmt.trigger, *shut]}
    if mode == "none":
        elements.append(no_call)
    else:
        try:
            tags = _xgr_blocks(fmt, allowed, parallel_tool_calls)
        except Unsupported as e:
            raise _unsupported(grammar, str(e)) from None
        calls: dict[str, Any] = {"type": "triggered_tags", "triggers": triggers, "tags": tags}
        if shut:
            calls["excludes"] = shut
        if mode == "required":
            # xgrammar's at_least_one wants the first tag at once; text before the first call is written
            # as its own part (text without a trigger, then one block), then the rest as with "auto".
            elements.append(no_call)
            elements.append(tags[0] if len(tags) == 1 else {"type": "or", "elements": tags})
        if parallel_tool_calls:
            elements.append(calls)
        elif mode == "required":
            elements.append(no_call)
        else:
            # (not triggered_tags' stop_after_first: xgrammar 0.2.9 then accepts a malformed call)
            one = tags[0] if len(tags) == 1 else {"type": "or", "elements": tags}
            elements.append(no_call)
            elements.append({"type": "optional", "content": {"type": "sequence", "elements": [one, no_call]}})
        bare = _bare_block(fmt, allowed, parallel_tool_calls)
        if bare:
            # The answer may start with a bare call, then go on as after any call.
            after = calls if parallel_tool_calls else no_call
            opened = [{"type": "sequence", "elements": [{"type": "regex", "pattern": f"{WS}(?:{head})"}, rest, after]}
                      for head, rest in bare]
            answer = elements[answer_at:]
            elements[answer_at:] = [{"type": "or", "elements": [
                *opened, answer[0] if len(answer) == 1 else {"type": "sequence", "elements": answer}]}]
    return {"type": "structural_tag", "format": elements[0] if len(elements) == 1 else
            {"type": "sequence", "elements": elements}}


def _call_tags(fmt: _Format, tools: list[tuple[str, dict[str, Any]]], parallel: bool) -> list[dict[str, Any]]:
    """One ``tag`` per call form: the canonical opener up to the tool's name as its begin; the forms of the
    other call regions offered beside it (constrain._forms) too."""
    return _merged([tag for one in (fmt, *fmt.extras) for tag in _own_tags(one, tools, parallel)])


def _own_tags(fmt: _Format, tools: list[tuple[str, dict[str, Any]]], parallel: bool) -> list[dict[str, Any]]:
    tags = []
    # A tagged call's closer may hold whitespace a literal end cannot ("</function>\n</tool_call>"): all but
    # its literal tail is a regex before the end.
    tail, ends = tagged.call_end(fmt.closer) if fmt.plan.mode in tagged.TAGGED_MODES \
        else ("", fmt.closer.canonical())
    for (name, body), form in ((p, f) for p in _payloads(fmt, tools, parallel) for f in fmt.forms):
        begin, rest = form.split(name)
        content: list[dict[str, Any]] = []
        if rest:
            content.append({"type": "regex", "pattern": rest})
        content.append(body)
        if ends != [""]:
            content.append({"type": "regex", "pattern": WS + tail})
        if not begin and ends == [""]:
            tags.append({"type": "sequence", "elements": content})
        else:
            end: str | list[str] = ends if len(ends) > 1 else ends[0]
            tag: dict[str, Any] = {"type": "tag", "begin": begin,
                                   "content": {"type": "sequence", "elements": content}, "end": end}
            tags.append(tag)
    return tags


def _merged(tags: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tags with the same begin and end as one tag whose content is the choice of theirs (xgrammar
    dispatches a triggered tag on its begin, so two tools may not share one)."""
    out: list[dict[str, Any]] = []
    index: dict[str, int] = {}
    for tag in tags:
        key = json.dumps([tag.get("begin"), tag.get("end")]) if tag["type"] == "tag" else None
        if key is None or key not in index:
            if key is not None:
                index[key] = len(out)
            out.append(tag)
            continue
        first = out[index[key]]
        contents = first["content"]["elements"] if first["content"]["type"] == "or" else [first["content"]]
        out[index[key]] = {**first, "content": {"type": "or", "elements": [*contents, tag["content"]]}}
    return out


def _xgr_blocks(fmt: _Format, tools: list[tuple[str, dict[str, Any]]], parallel: bool) -> list[dict[str, Any]]:
    """The triggered tags: the calls themselves, or one section tag holding them."""
    calls = _call_tags(fmt, tools, parallel)
    if fmt.wrapper is None:
        return calls
    begin, end = fmt.wrapper
    one: dict[str, Any] = calls[0] if len(calls) == 1 else {"type": "or", "elements": calls}
    inner = _wrapped(fmt, one, parallel)
    # Every spelling of the section's begin is one tag (DeepSeek V4's <｜DSML｜toolcalls> beside
    # <｜DSML｜tool_calls>), each closed by any spelling of the end, as the grammar reads them.
    ends: list[str] | str = end.canonical() if end is not None else ""
    if end is not None and end.regex is not None and not expansions(end.regex, end.regex.items):
        # A closer with a part no literal holds (Hy3's </tool_calls:opensource>): its literal tail is the end.
        rest, ends = tagged.call_end(end)
        inner = [*inner, {"type": "regex", "pattern": rest}]
    if begin.regex is not None and not expansions(begin.regex, begin.regex.items):
        # The same for the begin (<tool_calls:opensource>): its literal head, then the rest as a regex.
        return [{"type": "tag", "begin": begin.lead(), "content": {"type": "sequence", "elements": [
            {"type": "regex", "pattern": begin.rest_after_lead(None)}, *inner]}, "end": ends}]
    return [{"type": "tag", "begin": text, "content": {"type": "sequence", "elements": inner},
             "end": ends} for text in begin.canonical()]


def _wrapped(fmt: _Format, one: dict[str, Any], parallel: bool) -> list[dict[str, Any]]:
    """What a section holds: its calls (``one`` each) with their separators."""
    end = fmt.wrapper[1] if fmt.wrapper is not None else None
    space = {"type": "regex", "pattern": WS}
    sep = {"type": "regex", "pattern": WS + fmt.separator.regex_text()} if fmt.separator is not None else space
    inner: list[dict[str, Any]] = [space, one]
    if parallel:
        # xgrammar refuses an unbounded repeat in a tag with no end text: a block with no end (Llama's
        # <|python_tag|>) holds at most MAX_CALLS calls there.
        again = {"type": "sequence", "elements": [sep, one]}
        inner.append({"type": "star", "content": again} if end is not None else
                     {"type": "repeat", "min": 0, "max": MAX_CALLS - 1, "content": again})
    if end is not None:
        inner.append(space)
    return inner


def _bare_block(fmt: _Format, tools: list[tuple[str, dict[str, Any]]],
                parallel: bool) -> list[tuple[str, dict[str, Any]]]:
    """(head, rest) of each call form offered only at the answer's start (grammar_parse.constrain._forms):
    a regex the head lexeme matches and the structural-tag format of what follows it."""
    out = []
    for start in fmt.starts:
        for tag in _call_tags(start, tools, parallel):
            ends = tag["end"] if isinstance(tag["end"], list) else [tag["end"]]
            out.append((escape(tag["begin"]), {"type": "sequence", "elements": [
                tag["content"], _choice([{"type": "const_string", "value": e} for e in ends])]}))
    bare = _bare_call(fmt, tools, parallel)
    return out if bare is None else [bare, *out]


def _bare_call(fmt: _Format, tools: list[tuple[str, dict[str, Any]]],
               parallel: bool) -> tuple[str, dict[str, Any]] | None:
    """(head, rest) of the calls an answer may start with bare: the regex the parser's zero-width opener
    looks ahead for, which ends at the first call's name key, and the structural-tag format of the rest,
    whose first call is written key by key; None when there is none."""
    plan = fmt.bare_plan
    if fmt.bare is None or plan is None or plan.name_key is None or plan.args_key is None:
        return None
    if not fmt.bare.replace("[\\s]*", "").endswith(f'"{plan.name_key}":'):
        raise Unsupported("a bare call's opener does not end at its name key")
    keys = "|".join(escape(json.dumps(k)) for k in (plan.args_key, *plan.args_alternatives))
    firsts = [{"type": "sequence", "elements": [
        {"type": "regex", "pattern": f"{WS}{escape(json.dumps(name))}{WS},{WS}(?:{keys}){WS}:"},
        {"type": "regex", "pattern": WS}, {"type": "json_schema", "json_schema": params},
        {"type": "regex", "pattern": WS + r"\}"}]} for name, params in tools]
    first = _choice(firsts)
    if plan.mode == "json_key":
        # The calls after the first as the section writes them (Llama 3's "; " between objects).
        rest = _wrapped(fmt, _choice(_call_tags(fmt, tools, parallel)), parallel)[2:] \
            if fmt.wrapper is not None and fmt.wrapper[1] is None else []
        return fmt.bare, {"type": "sequence", "elements": [first, *rest]}
    objects = [_call_object(plan, n, p, with_id=True) for n, p in tools]
    more = {"type": "sequence", "elements": [{"type": "regex", "pattern": f"{WS},{WS}"}, {
        "type": "json_schema", "json_schema": objects[0] if len(objects) == 1 else {"anyOf": objects}}]}
    elements = [first, *([{"type": "star", "content": more}] if parallel else []),
                {"type": "regex", "pattern": WS + r"\]"}]
    return fmt.bare, {"type": "sequence", "elements": elements}
