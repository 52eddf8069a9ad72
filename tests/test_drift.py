"""Format drift: what real model outputs do to a grammar's documented format, applied to every built-in
grammar through its golden samples.

Each transformation in TRANSFORMS rewrites a golden sample the way models drift from their format (a
reasoning block left open before a tool call, whitespace before the reasoning opener) and says what the
message must still be. For every grammar the transformation applies to, every golden sample it can rewrite
must keep its tool calls (names and arguments), its text (up to whitespace at the edges), show none of the
grammar's markup in content or reasoning, and stream to the same message under any chunking.

A grammar is excused from a transformation only by a header line ``// Drift: no <transformation> because
<reason>``; a grammar the transformation applies to that has no golden sample it can rewrite fails, so a
missing sample cannot pass for robustness.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import grammar_parse
from conformance import strict_equal
from goldens import GOLDEN, goldens, parsed
from grammar_parse._engine.delimiters import Hit, LiteralMatcher, RegexMatcher, ValueEnd
from grammar_parse._engine.grammar import Grammar, Terminal
from grammar_parse._engine.shapes import REASONING_FIELDS
from strategies import chunkings, examples
from test_xml_values import indent, raw_value_regions, value_spans, with_argument

TEXT_FIELDS = ("content",) + REASONING_FIELDS
OPT_OUT = re.compile(r"^// Drift: no (\S+) because (.+)$", re.MULTILINE)


@dataclass(frozen=True)
class Sample:
    """A golden sample (or a rewrite of one): the output, its prompt, its tools and the expected message."""

    name: str
    text: str
    prefix: str
    tools: Any
    expected: dict[str, Any]
    nested_calls: bool = False  # the rewrite nests the calls in reasoning: later text may stay reasoning
    words_only: bool = False  # the rewrite adds text: compare the text fields without their whitespace


@cache
def golden(grammar: str) -> tuple[Sample, ...]:
    """The grammar's golden samples that expect a message (error expectations are not drift material)."""
    return tuple(Sample(g.name, g.text, g.prefix, g.tools, g.expected) for g in goldens(grammar)
                 if "error" not in g.expected)


def terminals(grammar: Grammar, role: str, fields: tuple[str, ...]) -> list[Terminal]:
    """Open or close delimiters of the top-level regions for ``fields``."""
    return [t for t in grammar.terminals.values() if t.role == role and t.matcher is not None
            and t.region is not None and t.region.parent is None and t.region.field in fields]


def delimiters(grammar: Grammar) -> list[Terminal]:
    return [t for t in grammar.terminals.values() if t.matcher is not None and t.role not in ("text", "unclaimed")]


def first_hit(terms: list[Terminal], text: str, pos: int) -> tuple[Hit, Terminal] | None:
    hits = [(hit, t) for t in terms if t.matcher is not None and not t.matcher.zero_width
            for hit in [t.matcher.search(text, pos)] if hit is not None]
    return min(hits, key=lambda h: (h[0][0], -h[0][1])) if hits else None


def fields(grammar: Grammar) -> set[str]:
    return {r.field for r in grammar.regions.values() if r.parent is None}


def has_reasoning(grammar: Grammar) -> bool:
    return bool(fields(grammar) & set(REASONING_FIELDS))


# --- the transformations -------------------------------------------------------------------------------

def unclosed_reasoning(grammar: Grammar, sample: Sample) -> list[Sample]:
    """The model starts a tool call without closing its reasoning (GLM, Hunyuan, DeepSeek R1, MiniMax,
    Seed-OSS, ...; vLLM #39056): delete the reasoning close that is followed, across only whitespace and
    markup, by a tool-call opener. The calls and the text must survive."""
    if not sample.expected.get("tool_calls"):
        return []
    opens = [t for t in terminals(grammar, "open", REASONING_FIELDS) if t.matcher and not t.matcher.zero_width]
    opened = first_hit(opens, sample.text, 0)
    if opened is not None:
        begin = opened[0][1]
    elif not opens or first_hit(opens, sample.prefix, 0) is not None:
        begin = 0  # reasoning opens implicitly, or the prompt wrote the opener
    else:
        return []
    closes = terminals(grammar, "close", REASONING_FIELDS)
    found = first_hit(closes, sample.text, begin)
    if found is None:
        return []
    (start, end, _), _ = found
    calls_open = terminals(grammar, "open", ("tool_calls",))
    others = [t for t in delimiters(grammar) if t not in closes]
    pos = end
    for _ in range(4):  # at most a few wrapper delimiters between the close and the call
        nxt = first_hit(others, sample.text, pos)
        if nxt is None or sample.text[pos:nxt[0][0]].strip():
            return []
        # a call region without an opener of its own opens at the wrapper's end (MiniMax M1's <tool_calls>)
        if nxt[1] in calls_open or not calls_open or nxt[1].region is not None and nxt[1].region.field == "tool_calls":
            text = sample.text[:start] + sample.text[end:]
            return [replace(sample, name=sample.name + "/unclosed", text=text, nested_calls=True)]
        pos = nxt[0][1]
    return []


SPACES = ("\n", " ", "\n\n", " \n ")


def space_before_reasoning(grammar: Grammar, sample: Sample) -> list[Sample]:
    """Whitespace before the reasoning opener at the start of the output (models start with a newline):
    the opener is still the opener, and the whitespace is not content."""
    opens = terminals(grammar, "open", REASONING_FIELDS)
    found = first_hit(opens, sample.text, 0)
    if found is None or sample.text[:found[0][0]].strip():
        return []
    body = sample.text[found[0][0]:]
    return [replace(sample, name=f"{sample.name}/space{i}", text=ws + body) for i, ws in enumerate(SPACES)]


def opener_written(grammar: Grammar, sample: Sample) -> list[Sample]:
    """The template pre-fills the reasoning opener, but the model writes it again itself (or a serving
    stack drops it from the prompt; vLLM #22507 is the converse): the opener moves from the prompt into the
    output, and the message stays the same."""
    opens = terminals(grammar, "open", REASONING_FIELDS)
    hits = [(hit, t) for t in opens if t.matcher is not None and not t.matcher.zero_width
            for hit in [t.matcher.search(sample.prefix, 0)] if hit is not None]
    while hits:  # the last opener in the prompt
        last = max(hits, key=lambda h: h[0][0])
        nxt = last[1].matcher.search(sample.prefix, last[0][1]) if last[1].matcher is not None else None
        if nxt is None:
            break
        hits = [(nxt, last[1])]
    if not hits or sample.prefix[hits[0][0][1]:].strip():
        return []
    cut = hits[0][0][0]
    moved = replace(sample, name=sample.name + "/written", prefix=sample.prefix[:cut],
                    text=sample.prefix[cut:] + sample.text)
    return [moved]


FOLLOW_UP = "I'll get that for you."


def value_ended(grammar: Grammar) -> list[Any]:
    """The message fields that a JSON value's end closes (a component closed that way, DSML's JSON
    arguments, sits inside a call that has its own closer)."""
    return [t.region for t in grammar.terminals.values()
            if isinstance(t.matcher, ValueEnd) and t.region is not None and t.region.parent is None]


def literals_of(term: Terminal) -> tuple[str, ...]:
    m = term.matcher
    if isinstance(m, LiteralMatcher):
        return m.literals
    return m.lowered[1] if isinstance(m, RegexMatcher) and m.lowered is not None else ()


def text_after_call(grammar: Grammar, sample: Sample) -> list[Sample]:
    """A call in a format without a closing tag, then more text (granite, mistral, llama3_json, ...: "Extra
    data" in today's parsers): the call ends where its JSON value ends, and the text is content. The text goes
    where the output ends with a call, before the end-of-turn marker."""
    if not sample.expected.get("tool_calls"):
        return []
    ends = [lit for t in delimiters(grammar) if t.region is None and isinstance(t.matcher, LiteralMatcher)
            for lit in t.matcher.literals]
    # a closing tag that the value's end makes optional (apriel's </tool_calls>) is left out, as models do
    closers = [lit for t in delimiters(grammar) if t.role == "close" and t.region in value_ended(grammar)
               for lit in literals_of(t)]
    body, dropped = sample.text.rstrip(), False
    while (end := next((lit for lit in ends + closers if body.endswith(lit)), None)) is not None:
        body = body[:-len(end)].rstrip()
        dropped |= end in closers
    if not body.endswith(("}", "]")):
        return []
    cut = len(body)
    rest = sample.text[cut:]
    if dropped:
        rest = "".join(rest.split(next(c for c in closers if c in rest), 1))
    content = words(sample.expected.get("content"), FOLLOW_UP)
    return [replace(sample, name=f"{sample.name}/then_text{i}", text=sample.text[:cut] + ws + FOLLOW_UP + rest,
                    expected={**sample.expected, "content": content}, words_only=True)
            for i, ws in enumerate(("\n", " ", ""))]


def spans(grammar: Grammar, sample: Sample) -> list[dict[str, Any]]:
    """The sample's spans in the output (the prompt's replay left out), from a traced one-shot parse."""
    parser = grammar_parse.ResponseParser(grammar, sample.prefix, tools=sample.tools, trace=True)
    parser.finalize(sample.text)
    return [s for s in parser.spans if s["start"] >= 0]


def space_around_delimiters(grammar: Grammar, sample: Sample) -> list[Sample]:
    """Whitespace on both sides of every delimiter that borders content or reasoning (a newline after
    </think>, a space before <tool_call>, blank lines between calls and text): the message is the same up to
    the whitespace of its text. (Whitespace inside a call is the call's own: an argument's value keeps it.)"""
    found = spans(grammar, sample)
    points: set[int] = set()
    for before, delim, after in zip([None, *found], found, [*found[1:], None]):
        if delim["kind"] != "delimiter":
            continue
        if before is not None and before["kind"] == "text" and before.get("field") in TEXT_FIELDS:
            points.add(delim["start"])
        if after is not None and after["kind"] == "text" and after.get("field") in TEXT_FIELDS:
            points.add(delim["end"])
    if not points:
        return []
    out = []
    for i, ws in enumerate(("\n", " ", "\n\n")):
        text = sample.text
        for at in sorted(points, reverse=True):
            text = text[:at] + ws + text[at:]
        out.append(replace(sample, name=f"{sample.name}/spaced{i}", text=text, words_only=True))
    return out


def opener_repeated(grammar: Grammar, sample: Sample) -> list[Sample]:
    """The template pre-fills the reasoning opener and the model writes it again (Qwen3, DeepSeek-R1 and
    GLM outputs start with <think> although the prompt ends with it): the second opener is markup, not
    reasoning text."""
    moved = opener_written(grammar, sample)
    if not moved:
        return []
    opener = moved[0].text[:len(moved[0].text) - len(sample.text)]
    return [replace(sample, name=f"{sample.name}/repeated{i}", text=opener.strip() + ws + sample.text)
            for i, ws in enumerate(("", "\n"))]


#: The spellings each family is known to write besides its documented one, as its grammar's header says it
#: accepts them (documented spelling in the golden samples, the other one), with where they are reported.
SPELLINGS: dict[str, list[tuple[str, str]]] = {
    "granite": [("<|tool_call|>", "<tool_call>"),  # Granite 3.1+ writes the opener as text
                ("Here is my thought process:", "Here's my thought process:"),  # as vLLM accepts
                ("Here is my response:", "Here's my response:")],
    "mistral": [("[TOOL_CALLS] [", "[TOOL_CALLS]["), ("[TOOL_CALLS][", "[TOOL_CALLS] [")],  # 7B v0.3 / Nemo
    # a missing <arg_value> (vLLM #49248; whitespace before a value is then formatting, so not an indented one)
    "glm47": [("</arg_key><arg_value>P", "</arg_key>P"),
              ("</arg_key>", "</arg_key></arg_key>")],  # a repeated </arg_key> (vLLM PR #54971)
    "deepseek_v4": [("<｜DSML｜tool_calls>", "<｜DSML｜toolcalls>"), ("</｜DSML｜tool_calls>", "</｜DSML｜toolcalls>")],
    "step3": [("function<｜tool_sep｜>", "")],  # calls written without the type prefix
    "kimi_k2": [("functions.get_time:0", "functions.get_time.0")],  # dotted call ids
}


def alternative_spelling(grammar: Grammar, sample: Sample) -> list[Sample]:
    """The family's other spellings of its own markup (SPELLINGS): the message is the same."""
    out = []
    for i, (usual, other) in enumerate(SPELLINGS.get(grammar.name or "", [])):
        if usual in sample.text:
            out.append(replace(sample, name=f"{sample.name}/spelling{i}", text=sample.text.replace(usual, other),
                               words_only=True))
    return out


DRAFT_BEFORE, DRAFT_AFTER = " I could write ", " but first let me check the unit."
QUOTE_BEFORE, QUOTE_AFTER = " The format starts with ", " and then the arguments."


def reasoning_close(grammar: Grammar, sample: Sample) -> tuple[int, int] | None:
    """Where the sample's reasoning block's close delimiter is, if it is written."""
    found = first_hit(terminals(grammar, "close", REASONING_FIELDS), sample.text, 0)
    return None if found is None else (found[0][0], found[0][1])


def call_blocks(grammar: Grammar, sample: Sample, after: int = 0) -> list[tuple[int, int]]:
    """The spans of the sample's call markup after ``after`` (an opener through its close, a section's
    wrapper included): runs of delimiters and call text, ended by content or reasoning text or an end of
    turn."""
    blocks: list[tuple[int, int]] = []
    start = end = None
    for span in [s for s in spans(grammar, sample) if s["start"] >= after]:
        term = grammar.terminals.get(span.get("terminal", ""))
        ends_turn = term is not None and term.region is None and term.name.startswith("END")
        outside = span["kind"] == "text" and span.get("field") in TEXT_FIELDS
        if span["kind"] == "discarded" or outside or ends_turn or (
                term is not None and term.region is not None and term.region.field in REASONING_FIELDS):
            if start is not None and not (outside and not sample.text[span["start"]:span["end"]].strip()):
                blocks.append((start, end))
                start = None
            continue
        if start is None:
            start = span["start"]
        end = span["end"]
    if start is not None:
        blocks.append((start, end))
    return [b for b in blocks if sample.text[b[0]:b[1]].strip()]


def drafted_call(grammar: Grammar, sample: Sample) -> list[Sample]:
    """The model drafts the call inside its reasoning, closes the reasoning, then makes the call (issue 31:
    Seed-OSS "The format is <seed:tool_call>...", Qwen3 drafts): the draft is reasoning text, whole, and
    the call is made once. The same with only the opener quoted."""
    found = reasoning_close(grammar, sample)
    if found is None or not sample.expected.get("tool_calls"):
        return []
    close = found[0]
    blocks = call_blocks(grammar, sample, found[1])
    if not blocks:
        return []
    block = sample.text[blocks[0][0]:blocks[0][1]]
    opener = next((sample.text[s["start"]:s["end"]] for s in spans(grammar, sample)
                   if s["kind"] == "delimiter" and s["start"] == blocks[0][0]), "")
    rfield = next((f for f in REASONING_FIELDS if f in sample.expected), "reasoning_content")
    out = []
    for i, inserted in enumerate((DRAFT_BEFORE + block + DRAFT_AFTER, QUOTE_BEFORE + opener + QUOTE_AFTER)):
        if i and not opener.strip():
            continue
        expected = {**sample.expected, rfield: (sample.expected.get(rfield) or "") + inserted}
        out.append(replace(sample, name=f"{sample.name}/drafted{i}", text=sample.text[:close] + inserted +
                           sample.text[close:], expected=expected, words_only=True))
    return out


def drafted_only(grammar: Grammar, sample: Sample) -> list[Sample]:
    """A call drafted inside a closed reasoning block with no call after it: reasoning text (the default
    reading, the peers'), or the call when the family is known to call from inside its reasoning (the
    grammar's ``calls_in_reasoning "fallback"``)."""
    found = reasoning_close(grammar, sample)
    if found is None or sample.expected.get("tool_calls") or not any(f in sample.expected for f in REASONING_FIELDS):
        return []
    close = found[0]
    donor = next((g for g in golden(grammar.name or "") if g.expected.get("tool_calls")
                  and call_blocks(grammar, g, (reasoning_close(grammar, g) or (0, 0))[1])), None)
    if donor is None:
        return []
    first = call_blocks(grammar, donor, (reasoning_close(grammar, donor) or (0, 0))[1])[0]
    block = donor.text[first[0]:first[1]]
    rfield = next((f for f in REASONING_FIELDS if f in sample.expected), "reasoning_content")
    if grammar.calls_in_reasoning == "fallback":  # (the calls the block makes, read as a whole output)
        expected = {**sample.expected, rfield: (sample.expected.get(rfield) or "") + DRAFT_BEFORE + DRAFT_AFTER,
                    "tool_calls": parsed(grammar, block, "", donor.tools, None).get("tool_calls")}
    else:
        expected = {**sample.expected, rfield: (sample.expected.get(rfield) or "") + DRAFT_BEFORE + block + DRAFT_AFTER}
    return [replace(sample, name=f"{sample.name}/drafted_only", tools=donor.tools, expected=expected,
                    text=sample.text[:close] + DRAFT_BEFORE + block + DRAFT_AFTER + sample.text[close:],
                    words_only=True)]


def drafts_apply(grammar: Grammar) -> bool:
    """A grammar that reads calls drafted in reasoning as drafts (not one whose reasoning holds calls)."""
    return has_reasoning(grammar) and "tool_calls" in fields(grammar) and grammar.calls_in_reasoning != "always" \
        and bool(terminals(grammar, "close", REASONING_FIELDS))


EXTRA_KEY = "extra_key"


def keyed_arguments(grammar: Grammar) -> bool:
    """Whether the grammar's calls hold key/value arguments (components stored under a key they capture)."""
    return any(r.parent is not None and r.entry_key is not None for r in grammar.regions.values())


def key_without_value(grammar: Grammar, sample: Sample, at_close: bool = True) -> list[Sample]:
    """The model writes one more argument key with no value right before a call's close (GLM-4.7 drops
    <arg_value> and its value: vLLM PRs #47190, #51364), then another call (issue 31): the value ends at the
    call's close instead of swallowing the rest, so the key's value is "" (the call's errors say so) and the
    call's other arguments and the later call are kept. The key is the call's first argument opener as
    written, up to the ">" after its key, with another key; the later call is the call written again. With
    ``at_close=False`` the key comes first in the call instead, so the next key ends it."""
    expected = sample.expected.get("tool_calls") or []
    terms, text = grammar.terminals, sample.text
    index, call_start, key_open = -1, 0, None
    for s in spans(grammar, sample):
        term = terms[s["terminal"]] if s["kind"] == "delimiter" else None
        region = term.region if term is not None else None
        if term is None or region is None:
            continue
        if term.role == "open" and region.parent is None and region.field == "tool_calls":
            index, call_start, key_open = index + 1, s["start"], None
        elif term.role == "open" and region.entry_key is not None and key_open is None:
            key_open = (term, s)
        elif term.role == "close" and region.parent is None and region.field == "tool_calls" \
                and key_open is not None and s["end"] > s["start"] and 0 <= index < len(expected):
            opener, at = key_open
            hit = opener.matcher.search(text, at["start"]) if opener.matcher is not None else None
            match = hit[2] if hit is not None else None
            if match is None or match.groupdict().get("key") is None:
                return []
            gt = text.find(">", match.end("key"), at["end"])
            key_only = text[at["start"]:match.start("key")] + EXTRA_KEY + \
                text[match.end("key"):gt + 1 if gt >= 0 else at["end"]]
            at_key = s["start"] if at_close else at["start"]
            rewritten = text[:at_key] + key_only + text[at_key:s["end"]] + text[call_start:s["end"]] + text[s["end"]:]
            call = expected[index]
            arguments = call["function"]["arguments"]
            arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
            keyed = {**call, "function": {**call["function"], "arguments": {EXTRA_KEY: "", **arguments}}}
            calls = [*expected[:index], keyed, call, *expected[index + 1:]]
            where = "" if at_close else "_before_key"
            return [replace(sample, name=f"{sample.name}/key_without_value{where}", text=rewritten,
                            expected={**sample.expected, "tool_calls": calls})]
    return []


def value_separators(text: str, lines: bool) -> list[int]:
    """Where the separators between the calls of one call region's text are: the commas of the list it
    starts with, or (``lines``: one call a line) the newlines between calls. Strings and brackets are
    skipped."""
    listed = text.lstrip().startswith("[")
    depth, quote, escaped, out = 0, "", False, []
    for i, ch in enumerate(text):
        if quote:
            escaped, quote = (False, quote) if escaped else (ch == "\\", "" if ch == quote else quote)
        elif ch in "\"'":
            quote = ch
        elif ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
            if listed and depth == 0:
                break
        elif depth == 1 and listed and ch == ",":
            out.append(i)
        elif depth == 0 and lines and not listed and ch == "\n" and text[:i].strip() and text[i:].strip():
            out.append(i)
    return out


def call_pieces(grammar: Grammar, found: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The spans of each call in a traced parse, in order: its delimiters, its components' and its text. A
    call starts at its opener, or at call text after anything else (an opener that matches no text)."""
    pieces: list[list[dict[str, Any]]] = []
    last = ""
    for s in found:
        term = grammar.terminals[s["terminal"]] if s["kind"] == "delimiter" else None
        region = term.region if term is not None else None
        top = grammar.regions[region.parent] if region is not None and region.parent is not None else region
        if not ((s["kind"] == "text" and s.get("field") == "tool_calls") or (top is not None and top.field == "tool_calls")):
            last = "other"
            continue
        if last != "call" or term is not None and term.role == "open" and region is top:
            pieces.append([])
        pieces[-1].append(s)
        last = "closed" if term is not None and term.role == "close" and region is top else "call"
    return pieces


def space_around_separator(grammar: Grammar, sample: Sample) -> list[Sample]:
    """Whitespace (a space, a newline, several) on both sides of what separates parallel calls (issue 31:
    llama3_json's '} ; {' lost the second call): the "; " between close-less calls, the next call's opener
    after a call that ends with its value, the newline that ends a call a line, and the commas or newlines
    between the calls of one list. The calls are the same. (Between calls that close with a tag of their
    own, whitespace is text: space_around_delimiters.)"""
    if len(sample.expected.get("tool_calls") or []) < 2:
        return []
    found = spans(grammar, sample)
    terms, text = grammar.terminals, sample.text
    pieces = call_pieces(grammar, found)
    points: set[int] = set()
    for piece in pieces:
        regions = [terms[s["terminal"]].region for s in piece if s["kind"] == "delimiter"]
        if any(r is not None and r.parent is not None for r in regions):
            continue  # key/value arguments: whitespace there is an argument's own
        region = next((r for r in regions if r is not None), None) or next(
            r for r in grammar.regions.values() if r.field == "tool_calls" and r.parent is None)
        content = getattr(region.spec, "content", None)
        body = [s for s in piece if s["kind"] == "text"]
        if body and content in ("json", "json-name-keys", "pythonic"):
            start = body[0]["start"]
            for at in value_separators(text[start:body[-1]["end"]], lines=content == "pythonic"):
                points.update((start + at, start + at + 1))
    for before, after in zip(pieces, pieces[1:]):
        end, next_call = before[-1], after[0]
        ends_with_value = end["kind"] == "text" or not text[end["start"]:end["end"]].strip()
        between = [s for s in found if end["end"] <= s["start"] and s["end"] <= next_call["start"]]
        separator = bool(between) and all(s["kind"] == "delimiter" and terms[s["terminal"]].region is None
                                          and not any(c.isalnum() for c in text[s["start"]:s["end"]])
                                          for s in between)
        if not (ends_with_value or separator):
            continue
        if end["kind"] == "delimiter" and not text[end["start"]:end["end"]].strip():
            points.add(end["start"])  # before the newline that ends a call a line
        points.update((end["end"], next_call["start"]))
        opener = terms[next_call["terminal"]] if next_call["kind"] == "delimiter" else None
        if opener is not None and opener.role == "open" and "(?=" not in getattr(opener.matcher, "pattern", ""):
            points.add(next_call["end"])  # before the next call's payload (not where its opener looks ahead)
    if not points:
        return []
    out = []
    for i, ws in enumerate((" ", "\n", "  \n\n\t ")):
        rewritten = text
        for at in sorted(points, reverse=True):
            rewritten = rewritten[:at] + ws + rewritten[at:]
        out.append(replace(sample, name=f"{sample.name}/separated{i}", text=rewritten, words_only=True))
    return out


def separated_calls(grammar: Grammar) -> bool:
    """Whether parallel calls can sit side by side without closing tags: a call that ends with its value
    or at a newline, or several calls in one list (JSON or Python call syntax)."""
    calls = [r for r in grammar.regions.values() if r.parent is None and r.field == "tool_calls"]
    listed = any(getattr(r.spec, "transform_each", False) or getattr(r.spec, "content", None) == "pythonic"
                 for r in calls)
    line_closed = any(t.role == "close" and t.region in calls and t.matcher is not None
                      and t.matcher.search("\n", 0) is not None for t in grammar.terminals.values())
    return bool(value_ended(grammar)) or listed or line_closed


def indented_value(grammar: Grammar, sample: Sample) -> list[Sample]:
    """Code passed to an edit tool (issue 31): a string argument the grammar writes as raw text becomes one
    with leading indentation, an inner blank line and a trailing newline, and the message's argument must be
    exactly that text (only the template's own separators around a value are markup). The values rewritten
    are those tests/test_xml_values.py finds: the whole text of their parameter, not cut off."""
    out = []
    for index, key, start, end in value_spans(grammar, sample.text, sample.prefix, sample.tools, sample.expected):
        call = sample.expected["tool_calls"][index]
        value = call.get("function", call)["arguments"][key]
        at = sample.text.index(value, start, end)
        out.append(replace(sample, name=f"{sample.name}/indented_{index}_{key}",
                           text=sample.text[:at] + indent(value) + sample.text[at + len(value):],
                           expected=with_argument(sample.expected, index, key, indent(value))))
    return out


@dataclass(frozen=True)
class Transform:
    rewrite: Callable[[Grammar, Sample], list[Sample]]
    applies: Callable[[Grammar], bool]  # the grammar's format has what the transformation drifts from


TRANSFORMS = {
    "unclosed_reasoning": Transform(unclosed_reasoning,
                                    lambda g: has_reasoning(g) and "tool_calls" in fields(g)
                                    and bool(terminals(g, "close", REASONING_FIELDS))),
    "space_before_reasoning": Transform(space_before_reasoning,
                                        lambda g: bool(terminals(g, "open", REASONING_FIELDS))),
    # the family's template pre-writes the opener: the authoring guide asks for a `prefilled` case there
    "text_after_call": Transform(text_after_call, lambda g: bool(value_ended(g))),
    "space_around_delimiters": Transform(space_around_delimiters, lambda g: True),
    "indented_value": Transform(indented_value, lambda g: bool(raw_value_regions(g))),
    "opener_repeated": Transform(opener_repeated, lambda g: bool(terminals(g, "open", REASONING_FIELDS))
                                 and g.name is not None and (GOLDEN / g.name / "prefilled.txt").exists()),
    "alternative_spelling": Transform(alternative_spelling, lambda g: g.name in SPELLINGS),
    "drafted_call": Transform(drafted_call, drafts_apply),
    "drafted_only": Transform(drafted_only, drafts_apply),
    "key_without_value": Transform(key_without_value, keyed_arguments),
    "space_around_separator": Transform(space_around_separator, separated_calls),
    "opener_written": Transform(opener_written, lambda g: bool(terminals(g, "open", REASONING_FIELDS))
                                and g.name is not None and (GOLDEN / g.name / "prefilled.txt").exists()),
}


# --- the checks ----------------------------------------------------------------------------------------

def opt_outs(grammar: Grammar) -> dict[str, str]:
    return {m.group(1): m.group(2) for m in OPT_OUT.finditer(grammar.source)}


def markup(grammar: Grammar) -> set[str]:
    """The literal text of the grammar's delimiters (a regex contributes the literal it starts with)."""
    out: set[str] = set()
    for t in delimiters(grammar):
        m = t.matcher
        if isinstance(m, LiteralMatcher):
            out.update(m.literals)
        elif isinstance(m, RegexMatcher):
            out.add(literal_head(m.pattern))
    return {s for s in out if len(s.strip()) >= 3}


def literal_head(pattern: str) -> str:
    """The fixed text a regex starts with (after an optional leading ``\\s*``)."""
    if pattern.startswith("\\s*"):
        pattern = pattern[3:]
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern) and not pattern[i + 1].isalnum():
            out.append(pattern[i + 1])
            i += 2
        elif ch in ".^$*+?{}[]()|\\":
            if ch in "*?{" and out:
                out.pop()  # the last character is optional
            break
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def run(grammar: Grammar, sample: Sample, chunks: list[str] | None) -> Any:
    return parsed(grammar, sample.text, sample.prefix, sample.tools, chunks)


def calls(message: dict[str, Any]) -> list[tuple[Any, Any]]:
    out = []
    for call in message.get("tool_calls") or []:
        fn = call.get("function", call)
        args = fn.get("arguments")
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                pass
        out.append((fn.get("name"), args))
    return out


def words(*texts: Any) -> str:
    return " ".join(" ".join(t.split()) for t in texts if isinstance(t, str) and t.strip())


def problems(grammar: Grammar, sample: Sample, got: Any) -> list[str]:
    """What the drifted sample's message lost or leaked, against the original expected message."""
    exp = sample.expected
    if "error" in got:
        return [f"error {got['error']}"]
    out = []
    if calls(got) != calls(exp):
        out.append(f"tool calls {calls(got)} != {calls(exp)}")
    rfield = next((f for f in REASONING_FIELDS if f in exp or f in got), "reasoning_content")
    got_r, exp_r = (got.get(rfield) or "").strip(), (exp.get(rfield) or "").strip()
    if sample.nested_calls:  # a family that nests the call in reasoning may keep what follows as reasoning
        if not got_r.startswith(exp_r) or words(got_r, got.get("content")) != words(exp_r, exp.get("content")):
            out.append(f"text: reasoning {got_r!r}, content {got.get('content')!r}")
    elif sample.words_only:  # (the added text may be glued to the text before the call: no whitespace)
        for f in TEXT_FIELDS:
            if "".join(words(got.get(f)).split()) != "".join(words(exp.get(f)).split()):
                out.append(f"{f} {got.get(f)!r} != {exp.get(f)!r}")
    else:
        for f in TEXT_FIELDS:
            if (got.get(f) or "").strip() != (exp.get(f) or "").strip():
                out.append(f"{f} {got.get(f)!r} != {exp.get(f)!r}")
    seen = "".join(v for f in TEXT_FIELDS for v in [exp.get(f)] if isinstance(v, str))
    for f in TEXT_FIELDS:
        value = got.get(f)
        leaked = sorted(d for d in markup(grammar) if isinstance(value, str) and d in value and d not in seen)
        if leaked:
            out.append(f"markup {leaked} in {f}")
    return out


def drift_cases() -> list[tuple[str, str]]:
    return [(name, tname) for name in sorted(grammar_parse.list_grammars()) for tname in TRANSFORMS]


@cache
def variants(name: str, tname: str) -> tuple[Sample, ...]:
    grammar = grammar_parse.load_grammar(name)
    return tuple(v for s in golden(name) for v in TRANSFORMS[tname].rewrite(grammar, s))


@pytest.mark.parametrize("name, tname", drift_cases(), ids=[f"{n}-{t}" for n, t in drift_cases()])
@settings(max_examples=examples(0.1))
@given(data=st.data())
def test_drift(name: str, tname: str, data: st.DataObject) -> None:
    grammar = grammar_parse.load_grammar(name)
    transform = TRANSFORMS[tname]
    if not transform.applies(grammar) or tname in opt_outs(grammar):
        return  # nothing to drift from, or excused in the header (test_opt_outs checks the excuse)
    cases = variants(name, tname)
    assert cases, (f"{name}: no golden sample that {tname} can rewrite; add one "
                   f"(or a header line '// Drift: no {tname} because ...')")
    for case in cases:
        checked(grammar, case)
    sample = data.draw(st.sampled_from(cases), label="sample")  # then a random chunking of one of them
    chunks = data.draw(chunkings(sample.text), label="chunks")
    assert strict_equal(run(grammar, sample, chunks), checked(grammar, sample)), \
        f"{sample.name}: chunks {chunks!r} differ from one-shot"


_checked: dict[tuple[str | None, str], Any] = {}


def checked(grammar: Grammar, sample: Sample) -> Any:
    """The one-shot message of a drifted sample, once its content and a fixed chunking are checked
    (done once per sample, not per hypothesis example)."""
    key = (grammar.name, sample.name)
    if key not in _checked:
        got = run(grammar, sample, None)
        bad = problems(grammar, sample, got)
        assert not bad, f"{sample.name}: {bad}; message {json.dumps(got, ensure_ascii=False)}"
        text = sample.text
        fixed = [text[i:i + 3] for i in range(0, len(text), 3)]
        assert strict_equal(run(grammar, sample, fixed), got), f"{sample.name}: 3-char chunks differ"
        _checked[key] = got
    return _checked[key]


@pytest.mark.parametrize("name", sorted(grammar_parse.list_grammars()))
def test_opt_outs_name_a_transformation_that_applies(name: str) -> None:
    grammar = grammar_parse.load_grammar(name)
    for tname, reason in opt_outs(grammar).items():
        assert tname in TRANSFORMS, f"{name}: opts out of unknown transformation {tname!r}"
        assert TRANSFORMS[tname].applies(grammar), f"{name}: opts out of {tname}, which does not apply"
        assert len(reason.split()) >= 4, f"{name}: the reason for opting out of {tname} says too little"


def test_transformations_rewrite_what_they_claim() -> None:
    """The rewrites themselves, on a known sample: the close goes, the whitespace comes."""
    glm = grammar_parse.load_grammar("glm47")
    sample = Sample("s", "plan</think>\n<tool_call>f</tool_call>", "<|assistant|><think>", None,
                    {"reasoning_content": "plan", "tool_calls": [{"function": {"name": "f", "arguments": {}}}]})
    assert [v.text for v in unclosed_reasoning(glm, sample)] == ["plan\n<tool_call>f</tool_call>"]
    assert unclosed_reasoning(glm, replace(sample, text="plan</think>Sure.<tool_call>f</tool_call>")) == []
    qwen = grammar_parse.load_grammar("qwen3")
    written = replace(sample, text="<think>plan</think>ok", prefix="")
    assert [v.text for v in space_before_reasoning(qwen, written)] == [ws + written.text for ws in SPACES]
    assert space_before_reasoning(qwen, replace(written, text="a<think>b</think>")) == []
    assert {"<think>", "</think>", "<tool_call>", "</tool_call>"} <= markup(qwen)


@pytest.mark.parametrize("name", sorted(SPELLINGS))
def test_every_listed_spelling_is_tried(name: str) -> None:
    """Each alternative spelling rewrites at least one golden sample, so none is listed for nothing."""
    for usual, other in SPELLINGS[name]:
        assert any(usual in s.text for s in golden(name)), f"{name}: no golden sample writes {usual!r}"
