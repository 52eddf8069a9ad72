"""A picture of a parse: one self-contained HTML page with the raw output, each region highlighted by the
field it went to, delimiters marked, discarded text and parse errors shown where they are, and the parsed
message beside it. No external assets and no script: the page opens from a file, offline.

The page is built from the parser's own trace (``ResponseParser(trace=True).spans``), so what is
highlighted is exactly what the parser consumed: every character of the output is in one span, and each
span carries its offsets (``data-start``, ``data-end``), kind and field, for a script to read it back.
A long output stays readable: a summary at the top links each parse error, discarded span and failed
call to its place, and a region longer than ``fold`` characters shows its head and tail with the rest
folded in a ``<details>`` (still on the page, one click away). The prompt's pre-filled part (the tail of
``prefix`` the parser replays: a ``<think>`` the template opened) is shown apart, labelled, since the
model did not write it but it sets what the output means. A lone surrogate (a JSON ``\\ud800`` escape has
no UTF-8) shows as a marked U+FFFD.
:func:`row_html` shows one record of a batch input, read as :mod:`grammar_parse.batch` reads it: the row a
batch run reported a problem in, seen.
"""

from __future__ import annotations

import html
import json
import re
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

from ._engine.grammar import Grammar
from ._engine.reading import LONE_SURROGATE
from ._engine.session import ResponseParser, resolve_grammar
from ._engine.shapes import CONTENT, REASONING
from ._engine.symbols import Region
from .batch import BadLine, Columns, decode_line, jsonl_lines, read_row
from .errors import ArgumentError

#: Colours of the fields by their role in the grammar's format (other fields take the last), and of the calls,
#: told apart in turn.
ROLE_COLOURS = {REASONING: "#e8e0f8", CONTENT: "#e2f2e2", "": "#f0f0f0"}
CALL_COLOURS = ("#fde7c8", "#cfe8fc", "#fbd3e0", "#d8f3ee", "#f3efc4")
#: A region (adjacent spans of one kind, field, call and error state) longer than this many characters, or
#: than FOLD_LINES lines, is folded: its first and last ``fold // 4`` characters (at most KEEP_LINES lines
#: each) show, the rest is in a <details>. 2,000 keeps an ordinary answer whole and a 1 MB one a screen long.
FOLD_CHARS = 2000
FOLD_LINES = 40
KEEP_LINES = 12
#: The summary lists this many problems at most (a hostile output can hold thousands), then counts the rest.
MAX_SUMMARY = 200
#: A problem's message in the summary is cut to this many characters (it may quote the output).
_MAX_MESSAGE = 240

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
.surrogate { color: #fff; background: #a33; border-radius: 2px; }
details.fold { display: inline; } details.fold > summary { display: inline; cursor: pointer; list-style: none; }
details.fold > summary::after { content: attr(data-folded); color: #fff; background: #68a; border-radius: 3px;
                                font: 11px system-ui, sans-serif; padding: 0 .4em; margin: 0 .2em; }
details.fold[open] > summary::after { content: attr(data-open); }
.summary { border: 1px solid #ddd; border-left: 4px solid #d33; padding: .3em 1em; border-radius: 4px; }
.summary.clean { border-left-color: #6a6; } .summary li { margin: .15em 0; } .summary .where { color: #666; }
.prefill h3 { font-size: .95em; margin: .2em 0; color: #555; }
.prefill pre { border: 1px dashed #99a; background: #f4f4fa; font-style: italic; }
"""
#: How whitespace that is a whole span is marked (drawn by CSS, so it is not part of the page's text).
_BLANKS = {"\n": "↵", "\t": "⇥", "\r": "␍"}


def _surrogate_html(match: re.Match[str]) -> str:
    code = ord(match.group())
    # (U+DC80-U+DCFF is also how a byte that is not UTF-8 is kept when text is decoded with surrogateescape)
    what = (f"the byte 0x{code - 0xDC00:02X}, not UTF-8 (or a lone surrogate U+{code:04X})" if 0xDC80 <= code <= 0xDCFF
            else f"a lone surrogate U+{code:04X} (a JSON escape with no UTF-8)")
    return f'<span class="surrogate" title="{what}: shown as U+FFFD">\ufffd</span>'


def _escape(text: str) -> str:
    """``text`` as HTML element content that keeps every character: a browser reads a raw carriage return
    as a newline (``\\r\\n`` as one), but keeps one written as a reference; a lone surrogate, which UTF-8
    cannot write, is a U+FFFD marked as one (a U+FFFD the model wrote is not)."""
    return LONE_SURROGATE.sub(_surrogate_html, html.escape(text).replace("\r", "&#13;"))


def _attr(text: str) -> str:
    """``text`` as an attribute's value (or a <title>'s text, which holds no markup either)."""
    return html.escape(LONE_SURROGATE.sub("\ufffd", text))


def _field_style(role: str, call: int | None) -> str:
    if call is not None:
        return f"background:{CALL_COLOURS[call % len(CALL_COLOURS)]}"
    return f"background:{ROLE_COLOURS.get(role, ROLE_COLOURS[''])}"


def _of_a_call(region: Region, grammar: Grammar) -> bool:
    """Whether a region is a tool call's or one of its components' (an argument)."""
    return region.is_call or region.parent is not None and grammar.regions[region.parent].is_call


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
        top = region is not None and region.is_call
        if not open_call or (top and role == "open"):
            index, open_call = index + 1, True
        out.append(index)
        if top and role == "close":
            open_call = False
    return out


@dataclass
class _Piece:
    """A span of the trace, or the part of one a fold cuts, as the page draws it."""

    span: Mapping[str, Any]
    start: int
    end: int
    call: int | None
    failed: bool

    @property
    def key(self) -> tuple[Any, ...]:
        """What makes adjacent pieces one region to fold: kind, field, call and error state."""
        return self.span["kind"], self.span.get("field"), self.call, self.failed


def _span_html(raw: str, piece: _Piece) -> str:
    span, call = piece.span, piece.call
    body = _escape(raw)
    blank = raw.isspace()  # (marked: else a newline delimiter, or content that is one space, would not show)
    classes = (" error" if piece.failed else "") + (" blank" if blank else "")
    # (data-start/data-end: the span's offsets in the output, so a test or a script can map the page back)
    where = f'data-start="{piece.start}" data-end="{piece.end}"'
    if blank:
        where += f' data-blank="{"".join(_BLANKS.get(c, "·") for c in raw)}"'
    if span["kind"] == "delimiter":
        style = f' style="{_field_style("", call)}" data-call="{call}"' if call is not None else ""
        return (f'<span class="delim{classes}" title="{_attr(str(span.get("terminal")))}"{style} '
                f'data-kind="delimiter" {where}>{body}</span>')
    if span["kind"] == "discarded":
        return (f'<span class="discarded{" blank" if blank else ""}" title="discarded: in no field" '
                f'data-kind="discarded" {where}>{body}</span>')
    field = _attr(str(span.get("field")))
    call_attr = f' data-call="{call}"' if call is not None else ""
    return (f'<span class="field{classes}" style="{_field_style(span.get("role", ""), call)}" data-kind="text" '
            f'data-field="{field}"{call_attr} title="{field}" {where}>{body}</span>')


def _cuts(text: str, fold: int) -> tuple[int, int] | None:
    """Where a region's shown head ends and its shown tail starts, or None when it is short enough whole."""
    if fold <= 0 or (len(text) <= fold and text.count("\n", 0, fold + 1) < FOLD_LINES):
        return None
    keep = fold // 4
    head = keep
    at = -1
    for _ in range(KEEP_LINES):  # (at most KEEP_LINES newlines in the head: a region of short lines is tall)
        at = text.find("\n", at + 1, keep)
        if at < 0:
            break
    else:
        head = at
    tail = len(text) - keep
    at = len(text)
    for _ in range(KEEP_LINES):
        at = text.rfind("\n", tail, at)
        if at < 0:
            break
    else:
        tail = at + 1
    return (head, tail) if head < tail else None


def _folded(pieces: list[_Piece], source: str, base: int, fold: int) -> Iterator[_Piece | int | None]:
    """The pieces, each region over ``fold`` characters cut into head, a folded middle and tail; a number
    says a fold of that many characters starts, None that it ends. ``base`` is the offset of ``source``'s
    first character."""
    i = 0
    while i < len(pieces):
        j = i + 1
        while j < len(pieces) and pieces[j].key == pieces[i].key and pieces[j].start == pieces[j - 1].end:
            j += 1
        start, end = pieces[i].start, pieces[j - 1].end
        cuts = _cuts(source[start - base:end - base], fold)
        if cuts is None:
            yield from pieces[i:j]
        else:
            lo, hi = start + cuts[0], start + cuts[1]
            for part, (a, b) in enumerate(((start, lo), (lo, hi), (hi, end))):
                if part == 1:
                    yield hi - lo
                for piece in pieces[i:j]:
                    s, e = max(piece.start, a), min(piece.end, b)
                    if s < e:
                        yield _Piece(piece.span, s, e, piece.call, piece.failed)
                if part == 1:
                    yield None
        i = j


@dataclass
class _Problem:
    """One line of the summary: a parse error, a discarded span or a failed call, and the anchor it links."""

    kind: str  # "error", "discarded" or "call"
    anchor: str
    start: int | None  # where its anchor goes (None: it has no place in the text)
    label: str
    where: str
    message: str


def _short(text: str) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= _MAX_MESSAGE else text[:_MAX_MESSAGE] + f"… ({len(text) - _MAX_MESSAGE} more)"


def _problems(message: Mapping[str, Any], tool_calls: Sequence[Any], spans: Sequence[Mapping[str, Any]],
              call_starts: Sequence[int] | None) -> list[_Problem]:
    """The summary's lines, in the order of the text (those with no place last). ``tool_calls``: the message's
    calls (under the fields its format names); ``call_starts[i]`` is where call ``i`` starts (None when it is not
    known)."""
    out: list[_Problem] = []
    for i, error in enumerate(e for e in message.get("parse_errors") or [] if isinstance(e, Mapping)):
        span = error.get("span")
        start = span[0] if isinstance(span, list) and span else None
        where = f"at {span[0]}–{span[1]}" if isinstance(span, list) and len(span) == 2 else "no place in the text"
        out.append(_Problem("error", f"error-{i}", start, str(error.get("code")), where,
                            _short(str(error.get("message", "")))))
    for i, span in enumerate(s for s in spans if s["kind"] == "discarded"):
        size = span["end"] - span["start"]
        out.append(_Problem("discarded", f"discarded-{i}", span["start"], "discarded",
                            f"at {span['start']}–{span['end']}",
                            f"{size:,} character{'s' * (size != 1)} in no field"))
    for i, call_message in enumerate(tool_calls):
        errors = call_message.get("errors") if isinstance(call_message, Mapping) else None
        if not errors:
            continue
        function = call_message.get("function")
        name = function.get("name") if isinstance(function, Mapping) else None
        start = call_starts[i] if call_starts is not None else None
        said = "; ".join(f"{e.get('path', '')}: {e.get('message', '')}" if isinstance(e, Mapping) else str(e)
                         for e in errors)
        out.append(_Problem("call", f"call-{i}", start, f"tool_calls[{i}]",
                            f"({name})" if isinstance(name, str) else "", _short(said)))
    return sorted(out, key=lambda p: (p.start is None, p.start or 0))


def _call_starts(events: Iterable[Mapping[str, Any]], spans: Sequence[Mapping[str, Any]], calls: Sequence[int | None],
                 grammar: Grammar, count: int) -> list[int] | None:
    """Where each of the message's ``count`` calls starts in the text, lined up from the stream's events:
    each outermost call region's close carries one call, a list of them, or none (it failed), in the order
    of the call regions' opening delimiters (or of the page's call regions, in formats whose calls have
    none). None when the two cannot be lined up (a failed call is then listed without a link)."""
    fields = {r.field for r in grammar.regions.values() if r.is_call}
    per_region: list[int] = []
    depth = 0  # (a call's arguments are regions of the same field, nested in it)
    for event in events:
        if event.get("type") == "region_open" and event.get("field") in fields:
            depth += 1
        elif event.get("type") == "region_close" and event.get("field") in fields:
            depth -= 1
            if depth == 0:
                value = event.get("value")
                per_region.append(len(value) if isinstance(value, list) else 0 if value is None else 1)
    opens = []
    for span in spans:
        term = grammar.terminals.get(str(span.get("terminal"))) if span["kind"] == "delimiter" else None
        if term is not None and term.opens_call:
            opens.append(span["start"])
    if len(opens) != len(per_region):
        opens = list({call: span["start"] for span, call in reversed(list(zip(spans, calls))) if call is not None}
                     .values())[::-1]
    if len(opens) != len(per_region) or sum(per_region) != count:
        return None
    return [start for start, n in zip(opens, per_region) for _ in range(n)]


def _summary_html(problems: list[_Problem]) -> str:
    if not problems:
        return '<nav class="summary clean" id="summary"><p>No parse errors, discarded text or failed calls.</p></nav>'
    counts = {kind: sum(1 for p in problems if p.kind == kind) for kind in ("error", "discarded", "call")}
    words = {"error": "parse error", "discarded": "discarded span", "call": "failed call"}
    said = ", ".join(f"{n:,} {words[k]}{'s' * (n != 1)}" for k, n in counts.items() if n)
    items = []
    for p in problems[:MAX_SUMMARY]:
        link = (f'<a href="#{p.anchor}" data-kind="{p.kind}" title="{_attr(p.label)}">{_escape(p.label)}</a>'
                if p.start is not None else f"<b>{_escape(p.label)}</b>")
        items.append(f'<li>{link} <span class="where">{_escape(p.where)}</span>'
                     f'{": " + _escape(p.message) if p.message else ""}</li>')
    more = (f"<p>… and {len(problems) - MAX_SUMMARY:,} more, marked in the output.</p>"
            if len(problems) > MAX_SUMMARY else "")
    return f'<nav class="summary" id="summary"><p><b>{said}</b></p><ol>{"".join(items)}</ol>{more}</nav>'


def _json_html(value: Any, fold: int, depth: int = 0) -> str:
    """``value`` written as ``json.dumps(value, ensure_ascii=False, indent=2)`` writes it, as HTML, with
    strings over ``fold`` characters folded: the message of a long output holds the same long text."""
    pad = "  " * (depth + 1)
    if isinstance(value, Mapping) and value:
        items = (f"{pad}{_json_html(str(k), fold)}: {_json_html(v, fold, depth + 1)}" for k, v in value.items())
        return "{\n" + ",\n".join(items) + "\n" + "  " * depth + "}"
    if isinstance(value, (list, tuple)) and value:
        return "[\n" + ",\n".join(pad + _json_html(v, fold, depth + 1) for v in value) + "\n" + "  " * depth + "]"
    written = json.dumps(value, ensure_ascii=False)
    cuts = _cuts(written, fold) if isinstance(value, str) else None
    if cuts is None:
        return _escape(written)
    lo, hi = cuts
    return _escape(written[:lo]) + _fold_open(hi - lo) + _escape(written[lo:hi]) + "</details>" + _escape(written[hi:])


def _fold_open(size: int) -> str:
    # (the labels are drawn by CSS from attributes, so the page's text stays the output's, character for character)
    return (f'<details class="fold"><summary data-folded="⋯ {size:,} more characters ⋯" '
            f'data-open="fold {size:,} characters"></summary>')


def _pre_html(pieces: Iterable[_Piece | int | None], source: str, base: int, anchors: deque[tuple[int, str]],
              codes: deque[Mapping[str, Any]]) -> str:
    """The spans of one <pre>: each piece's text from ``source`` (whose first character is at offset
    ``base``), the summary's anchors before the piece where each problem starts, and each parse error's
    code right after its text. ``anchors`` and ``codes`` are consumed: what is left belongs further on."""
    parts = []
    for piece in pieces:
        if not isinstance(piece, _Piece):
            parts.append("</details>" if piece is None else _fold_open(piece))
            continue
        while anchors and anchors[0][0] < piece.end:
            parts.append(f'<a class="anchor" id="{anchors.popleft()[1]}"></a>')
        parts.append(_span_html(source[piece.start - base:piece.end - base], piece))
        while codes and codes[0]["span"][1] <= piece.end:  # an error's code right after its text
            parts.append(_code_html(codes.popleft()))
    return "".join(parts)


def _code_html(error: Mapping[str, Any]) -> str:
    return (f'<span class="code" data-kind="error" data-start="{error["span"][0]}" data-end="{error["span"][1]}" '
            f'title="{_attr(str(error.get("message", "")))}">{_escape(str(error.get("code")))}</span>')


def _in_errors(spans: Sequence[Mapping[str, Any]], errors: Sequence[Mapping[str, Any]]) -> Iterator[bool]:
    """For each span (in the order of the text), whether a parse error's span holds it whole: one sweep,
    since a hostile output holds thousands of both (asking every error for every span took 14 s for 4,000
    broken calls)."""
    starts = sorted((e["span"][0], e["span"][1]) for e in errors)
    at, reach = 0, None
    for span in spans:
        while at < len(starts) and starts[at][0] <= span["start"]:
            reach = starts[at][1] if reach is None else max(reach, starts[at][1])
            at += 1
        yield reach is not None and span["end"] <= reach


def to_html(text: str, grammar: Any, *, prefix: str = "", tools: Any = None, title: str | None = None,
            fold: int = FOLD_CHARS) -> str:
    """The page for ``text`` parsed with ``grammar`` (lenient: a broken output is shown, not refused).
    ``fold``: regions longer than this many characters show their head and tail, the rest folded (0: never)."""
    parser = ResponseParser(grammar, prefix, tools=tools, strict=False, trace=True)
    events = list(parser.initial_events) + parser.feed(text)
    message, last = parser.finalize()
    events += last
    # (the prompt's replay commits spans before the output, negative offsets: the pre-filled part; a span
    # across offset 0 is cut there)
    roles = parser.grammar.format.field_roles  # (a text span is coloured by its field's role)
    spans = [{**span, "start": max(span["start"], -len(prefix)), "role": roles.get(span.get("field", ""), "")}
             for span in parser.spans]
    calls = _calls_of(spans, parser.grammar)
    errors: list[Mapping[str, Any]] = [e for e in message.get("parse_errors") or [] if isinstance(e, Mapping) and e.get("span")]
    pieces: dict[bool, list[_Piece]] = {True: [], False: []}  # (prefilled or not)
    for span, call, failed in zip(spans, calls, _in_errors(spans, errors)):
        for prefilled, (a, b) in ((True, (span["start"], min(span["end"], 0))), (False, (max(span["start"], 0),
                                                                                         span["end"]))):
            if a < b or (a == b == span["start"] and prefilled == (a < 0)):
                pieces[prefilled].append(_Piece(span, a, b, call, failed))
    # (one region can hold several calls, a JSON list: then the regions are numbered, not the calls)
    regions = max((c for c in calls if c is not None), default=-1) + 1
    tool_calls = parser.grammar.format.calls_in(message)
    problems = _problems(message, tool_calls, spans, _call_starts(events, spans, calls, parser.grammar,
                                                                  len(tool_calls)))
    anchors = deque(sorted((p.start, p.anchor) for p in problems if p.start is not None))
    codes = deque(sorted(errors, key=lambda e: e["span"][1]))
    prefill_html = _pre_html(_folded(pieces[True], prefix, -len(prefix), fold), prefix, -len(prefix), anchors, codes)
    output = _pre_html(_folded(pieces[False], text, 0, fold), text, 0, anchors, codes)
    output += "".join(f'<a class="anchor" id="{a}"></a>' for _, a in anchors) + "".join(map(_code_html, codes))
    # (the calls' fields and their components are coloured by call, not by field: no legend of their own)
    fields = dict.fromkeys(r.field for r in parser.grammar.regions.values() if not _of_a_call(r, parser.grammar))
    legend = "".join(f'<span style="{_field_style(roles.get(f, ""), None)}">{_escape(f)}</span>' for f in fields)
    label = "tool call" if regions == len(tool_calls) else "tool-call region"
    legend += "".join(f'<span style="{_field_style("", i)}">{label} {i + 1}</span>' for i in range(regions))
    heading = title or f"{parser.grammar.name or 'grammar'}: a parse"
    prefill = (f'<section class="prefill"><h3>Pre-filled by the prompt: not written by the model, but the parse '
               f'starts from it</h3><pre id="prefill">{prefill_html}</pre></section>' if pieces[True] else "")
    page = (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{_attr(heading)}</title>'
            f"<style>{_STYLE}</style></head><body><h1>{_escape(heading)}</h1>"
            f"{_summary_html(problems)}"
            f'<p class="legend">{legend}<span class="delim">delimiter</span>'
            f'<span class="discarded">discarded</span><span class="error">in a parse error</span></p>'
            f'<div class="page">'
            f'<div><h2>Output</h2>{prefill}<pre id="output">{output}</pre></div>'
            f'<div><h2>Message</h2><pre id="message">{_json_html(message, fold)}</pre></div></div></body></html>\n')
    return page


def row_html(record: Any, grammar: Any = None, *, columns: Columns | None = None, prefix: str = "", tools: Any = None,
             title: str | None = None, row: int | None = None, fold: int = FOLD_CHARS) -> str:
    """The page for one record of a batch input (a row a batch run reported a problem in, say): its output,
    prompt, tools, id and grammar read by the batch's own ``columns`` readers, ``prefix``, ``tools`` and
    ``grammar`` standing in for what the record lacks, as in :func:`grammar_parse.batch.parse_many`.
    ``row`` (its number, from 0) goes in the default title, with the record's id."""
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
    return to_html(given.text, resolved, prefix=given.prefix, tools=given.tools, title=title, fold=fold)


def jsonl_record(lines: IO[Any] | Iterable[str | bytes], row: int) -> Any:
    """Record ``row`` of a JSONL stream, counted from 0 as pandas counts (before issue 32, from 1) and as
    the batch counts its rows (blank lines are none), so a batch's output row N answers record N. Only that
    line is decoded."""
    if row < 0:
        raise ArgumentError(f"there is no row {row}: rows are counted from 0.", code="usage.batch",
                            hint="Give a row number of 0 (the first) or more.")
    seen = 0
    for seen, (number, line) in enumerate(jsonl_lines(lines), 1):
        if seen == row + 1:
            record = decode_line(number, line)
            if isinstance(record, BadLine):
                raise ArgumentError(f"row {row} (line {number}) is not JSON: {record.reason}.", code="usage.json",
                                    hint="Fix the line, or view another row.")
            return record
    raise ArgumentError(f"there is no row {row}: the input has {seen} row{'s' * (seen != 1)}"
                        f"{f' (0 to {seen - 1})' if seen else ''}.", code="usage.batch",
                        hint="Rows are counted from 0, as pandas counts them; blank lines are not rows.")


def id_matches(value: Any, wanted: str) -> bool:
    """Whether a record's id ``value`` is the ``wanted`` one, written as text: text as it is, anything else
    as JSON writes it (``7``, ``true``), so a command line's ``--id 7`` finds the number 7."""
    if value is None:
        return False
    if isinstance(value, str):
        return value == wanted
    try:
        return json.dumps(value, ensure_ascii=False) == wanted
    except (TypeError, ValueError):  # (a Parquet id of a type JSON has no spelling for: a date, bytes)
        return str(value) == wanted


__all__ = ["FOLD_CHARS", "id_matches", "jsonl_record", "row_html", "to_html"]
