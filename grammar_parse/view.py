"""A picture of a parse: one self-contained HTML page with the raw output, each region highlighted by the
field it went to, delimiters marked, discarded text and parse errors shown where they are, and the parsed
message beside it. No external assets: the page opens from a file, offline.

The page is built from the parser's own trace (``ResponseParser(trace=True).spans``), so what is
highlighted is exactly what the parser consumed: every character of the output is in one span, and each
span carries its offsets (``data-start``, ``data-end``), kind and field, for a script to read it back.
:func:`row_html` shows one record of a batch input, read as :mod:`grammar_parse.batch` reads it: the row a
batch run reported a problem in, seen.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from .batch import BadLine, Columns, decode_line, jsonl_lines, read_row
from .errors import ArgumentError
from .grammar import Grammar
from .salvage import is_call_region
from .session import ResponseParser, resolve_grammar
from .symbols import Region

#: Colours of the fields (others take the last), and of the calls, told apart in turn.
FIELD_COLOURS = {"reasoning_content": "#e8e0f8", "thinking": "#e8e0f8", "reasoning": "#e8e0f8",
                 "content": "#e2f2e2", "": "#f0f0f0"}
CALL_COLOURS = ("#fde7c8", "#cfe8fc", "#fbd3e0", "#d8f3ee", "#f3efc4")

_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.2em; } .legend span { margin-right: 1em; padding: 0 .4em; border-radius: 3px; }
.page { display: flex; gap: 1.5em; align-items: flex-start; } .page > div { flex: 1; min-width: 0; }
pre { white-space: pre-wrap; word-break: break-word; font: 13px/1.5 ui-monospace, monospace;
      background: #fafafa; border: 1px solid #ddd; padding: .8em; border-radius: 4px; }
.delim { color: #555; background: #e4e4e4; border-radius: 2px; font-weight: 600; }
.discarded { text-decoration: line-through; color: #999; background: repeating-linear-gradient(45deg,
             #fff, #fff 4px, #eee 4px, #eee 8px); }
.error { text-decoration: underline wavy #d33; text-decoration-skip-ink: none; text-underline-offset: 3px; }
.code { color: #fff; background: #d33; border-radius: 3px; font-size: 11px; padding: 0 .3em;
        margin-left: .2em; vertical-align: super; }
.blank::before { content: attr(data-blank); color: #888; font-weight: normal; }
"""
#: How whitespace that is a whole span is marked (drawn by CSS, so it is not part of the page's text).
_BLANKS = {"\n": "↵", "\t": "⇥", "\r": "␍"}
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape(text: str) -> str:
    """``text`` as HTML that keeps every character: a browser reads a raw carriage return as a newline
    (``\\r\\n`` as one), but keeps one written as a reference."""
    return html.escape(text).replace("\r", "&#13;")


def _field_style(field: str, call: int | None) -> str:
    if call is not None:
        return f"background:{CALL_COLOURS[call % len(CALL_COLOURS)]}"
    return f"background:{FIELD_COLOURS.get(field, FIELD_COLOURS[''])}"


def _of_a_call(region: Region, grammar: Grammar) -> bool:
    """Whether a region is a tool call's or one of its components' (an argument)."""
    return is_call_region(region) or region.parent is not None and is_call_region(grammar.regions[region.parent])


def _calls_of(spans: Iterable[Mapping[str, Any]], grammar: Grammar) -> list[int | None]:
    """Each span's tool-call region, numbered in order (None outside calls). A call region starts at its
    open delimiter, or at its first text in formats whose calls have none (bare JSON); its components'
    delimiters (an argument's ``<parameter=...>``) are inside it; it ends at its close delimiter, or at
    anything that is no call's: markup between calls (``; ``, a section's end), another field's text."""
    call_fields = {r.field for r in grammar.regions.values() if _of_a_call(r, grammar)}
    out: list[int | None] = []
    index, open_call = -1, False
    for span in spans:
        role, region = None, None
        if span["kind"] == "delimiter":  # (a stuttered opener, NAME__REPEAT, is markup of the region it repeats)
            name = str(span.get("terminal"))
            term = grammar.terminals.get(name) or grammar.terminals.get(name.removesuffix("__REPEAT"))
            if term is not None and term.region is not None and _of_a_call(term.region, grammar):
                role, region = ("markup" if name.endswith("__REPEAT") else term.role), term.region
        elif span["kind"] == "text" and span.get("field") in call_fields:
            role = "text"
        if role is None:
            open_call = False
            out.append(None)
            continue
        top = region is not None and is_call_region(region)
        if not open_call or (top and role == "open"):
            index, open_call = index + 1, True
        out.append(index)
        if top and role == "close":
            open_call = False
    return out


def _span_html(text: str, span: Mapping[str, Any], call: int | None, failed: bool) -> str:
    raw = text[span["start"]:span["end"]]
    piece = _escape(raw)
    blank = raw.isspace()  # (marked: else a newline delimiter, or content that is one space, would not show)
    classes = (" error" if failed else "") + (" blank" if blank else "")
    # (data-start/data-end: the span's offsets in the output, so a test or a script can map the page back)
    where = f'data-start="{span["start"]}" data-end="{span["end"]}"'
    if blank:
        where += f' data-blank="{"".join(_BLANKS.get(c, "·") for c in raw)}"'
    if span["kind"] == "delimiter":
        style = f' style="{_field_style("", call)}" data-call="{call}"' if call is not None else ""
        return (f'<span class="delim{classes}" title="{html.escape(str(span.get("terminal")))}"{style} '
                f'data-kind="delimiter" {where}>{piece}</span>')
    if span["kind"] == "discarded":
        return (f'<span class="discarded{" blank" if blank else ""}" title="discarded: in no field" '
                f'data-kind="discarded" {where}>{piece}</span>')
    field = html.escape(str(span.get("field")))
    call_attr = f' data-call="{call}"' if call is not None else ""
    return (f'<span class="field{classes}" style="{_field_style(str(span.get("field")), call)}" data-kind="text" '
            f'data-field="{field}"{call_attr} title="{field}" {where}>{piece}</span>')


def to_html(text: str, grammar: Any, *, prefix: str = "", tools: Any = None, title: str | None = None) -> str:
    """The page for ``text`` parsed with ``grammar`` (lenient: a broken output is shown, not refused)."""
    parser = ResponseParser(grammar, prefix, tools=tools, strict=False, trace=True)
    parser.feed(text)
    message, _ = parser.finalize()
    # (the prompt's replay may commit a span that reaches back before the output: negative offsets, cut off)
    spans = [{**span, "start": max(span["start"], 0)} for span in parser.spans if span["end"] > 0]
    calls = _calls_of(spans, parser.grammar)
    errors = [e for e in message.get("parse_errors") or [] if isinstance(e, Mapping) and e.get("span")]
    pending = sorted(errors, key=lambda e: e["span"][1])
    parts = []
    for span, call in zip(spans, calls):
        parts.append(_span_html(text, span, call, any(e["span"][0] <= span["start"] and span["end"] <= e["span"][1]
                                                        for e in errors)))
        while pending and pending[0]["span"][1] <= span["end"]:  # an error's code right after its text
            error = pending.pop(0)
            parts.append(f'<span class="code" data-kind="error" data-start="{error["span"][0]}" '
                         f'data-end="{error["span"][1]}" title="{html.escape(str(error.get("message", "")))}">'
                         f'{html.escape(str(error.get("code")))}</span>')
    # (the calls' fields and their components are coloured by call, not by field: no legend of their own)
    fields = dict.fromkeys(r.field for r in parser.grammar.regions.values() if not _of_a_call(r, parser.grammar))
    legend = "".join(f'<span style="{_field_style(f, None)}">{html.escape(f)}</span>' for f in fields)
    # (one region can hold several calls, a JSON list: then the regions are numbered, not the calls)
    regions = max((c for c in calls if c is not None), default=-1) + 1
    label = "tool call" if regions == len(message.get("tool_calls") or []) else "tool-call region"
    legend += "".join(f'<span style="{_field_style("", i)}">{label} {i + 1}</span>' for i in range(regions))
    heading = html.escape(title or f"{parser.grammar.name or 'grammar'}: a parse")
    parsed = html.escape(json.dumps(message, ensure_ascii=False, indent=2))
    page = (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{heading}</title>'
            f"<style>{_STYLE}</style></head><body><h1>{heading}</h1>"
            f'<p class="legend">{legend}<span class="delim">delimiter</span>'
            f'<span class="discarded">discarded</span><span class="error">in a parse error</span></p>'
            f'<div class="page">'
            f'<div><h2>Output</h2><pre id="output">{"".join(parts)}</pre></div>'
            f'<div><h2>Message</h2><pre id="message">{parsed}</pre></div></div></body></html>\n')
    # (a lone surrogate, which a JSON log can hold, has no UTF-8: the page shows U+FFFD in its place)
    return _LONE_SURROGATE.sub("\ufffd", page)


def row_html(record: Any, grammar: Any = None, *, columns: Columns | None = None, prefix: str = "", tools: Any = None,
             title: str | None = None, row: int | None = None) -> str:
    """The page for one record of a batch input (a row a batch run reported a problem in, say): its output,
    prompt, tools, id and grammar read by the batch's own ``columns`` readers, ``prefix``, ``tools`` and
    ``grammar`` standing in for what the record lacks, as in :func:`grammar_parse.batch.parse_many`.
    ``row`` (its number) goes in the default title, with the record's id."""
    columns = columns or Columns()
    given = read_row(record, columns.getters(), columns, prefix=prefix, tools=tools)
    grammar = given.grammar or grammar
    if grammar is None:
        raise ArgumentError("the row names no grammar, and none was given.", code="usage.grammar",
                            hint="Give the grammar (--grammar), or say where the record names it (--grammar-column).")
    resolved = resolve_grammar(grammar)
    if title is None and (row is not None or given.id is not None):
        title = f"{resolved.name or 'grammar'}: " + ", ".join(
            ([f"row {row}"] if row is not None else []) + ([f"id {given.id}"] if given.id is not None else []))
    return to_html(given.text, resolved, prefix=given.prefix, tools=given.tools, title=title)


def jsonl_record(lines: Iterable[str], row: int) -> Any:
    """Record ``row`` (1 for the first) of a JSONL stream, counted as the batch counts its rows (blank lines
    are none), so a batch's Nth output row answers the Nth record. Only that line is decoded."""
    if row < 1:
        raise ArgumentError(f"there is no row {row}: rows are counted from 1.", code="usage.batch",
                            hint="Give a row number of 1 or more.")
    seen = 0
    for seen, (number, line) in enumerate(jsonl_lines(lines), 1):
        if seen == row:
            record = decode_line(number, line)
            if isinstance(record, BadLine):
                raise ArgumentError(f"row {row} (line {number}) is not JSON: {record.reason}.", code="usage.json",
                                    hint="Fix the line, or view another row.")
            return record
    raise ArgumentError(f"there is no row {row}: the input has {seen} row{'s' * (seen != 1)}.", code="usage.batch",
                        hint="Rows are counted from 1; blank lines are not rows.")


__all__ = ["jsonl_record", "row_html", "to_html"]
