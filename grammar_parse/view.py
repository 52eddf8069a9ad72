"""A picture of a parse: one self-contained HTML page with the raw output, each region highlighted by the
field it went to, delimiters marked, discarded text and parse errors shown where they are, and the parsed
message beside it. No external assets: the page opens from a file, offline.

The page is built from the parser's own trace (``ResponseParser(trace=True).spans``), so what is
highlighted is exactly what the parser consumed: every character of the output is in one span.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Mapping
from typing import Any

from .session import ResponseParser

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
.error { outline: 2px solid #d33; } .code { color: #fff; background: #d33; border-radius: 3px; font-size: 11px;
         padding: 0 .3em; margin-left: .2em; vertical-align: super; }
"""


def _field_style(field: str, call: int | None) -> str:
    if call is not None:
        return f"background:{CALL_COLOURS[call % len(CALL_COLOURS)]}"
    return f"background:{FIELD_COLOURS.get(field, FIELD_COLOURS[''])}"


def _calls_of(spans: Iterable[Mapping[str, Any]], call_fields: set[str]) -> list[int | None]:
    """Each span's call number (None outside calls): a call's text runs until a closing delimiter, and the
    delimiters right before it open it."""
    spans_list = list(spans)
    out: list[int | None] = []
    index, open_call = -1, False
    for span in spans_list:
        if span["kind"] == "text" and span.get("field") in call_fields:
            if not open_call:
                index, open_call = index + 1, True
            out.append(index)
        elif span["kind"] == "delimiter" and open_call:
            out.append(index)
            if "CLOSE" in str(span.get("terminal", "")):
                open_call = False
        else:
            open_call = open_call and span["kind"] == "delimiter"
            out.append(None)
    for i in range(len(out) - 2, -1, -1):  # a call's opening delimiters are the call's too
        if out[i] is None and spans_list[i]["kind"] == "delimiter" and out[i + 1] is not None:
            out[i] = out[i + 1]
    return out


def _span_html(text: str, span: Mapping[str, Any], call: int | None, failed: bool) -> str:
    piece = html.escape(text[span["start"]:span["end"]])
    error = " error" if failed else ""
    if span["kind"] == "delimiter":
        style = f' style="{_field_style("", call)}" data-call="{call}"' if call is not None else ""
        return (f'<span class="delim{error}" title="{html.escape(str(span.get("terminal")))}"{style} '
                f'data-kind="delimiter">{piece}</span>')
    if span["kind"] == "discarded":
        return f'<span class="discarded" title="discarded: in no field" data-kind="discarded">{piece}</span>'
    field = html.escape(str(span.get("field")))
    call_attr = f' data-call="{call}"' if call is not None else ""
    return (f'<span class="field{error}" style="{_field_style(str(span.get("field")), call)}" data-kind="text" '
            f'data-field="{field}"{call_attr} title="{field}">{piece}</span>')


def to_html(text: str, grammar: Any, *, prefix: str = "", tools: Any = None, title: str | None = None) -> str:
    """The page for ``text`` parsed with ``grammar`` (lenient: a broken output is shown, not refused)."""
    parser = ResponseParser(grammar, prefix, tools=tools, strict=False, trace=True)
    parser.feed(text)
    message, _ = parser.finalize()
    # (the prompt's replay may commit a span that reaches back before the output: negative offsets, cut off)
    spans = [{**span, "start": max(span["start"], 0)} for span in parser.spans if span["end"] > 0]
    call_fields = {r.field for r in parser.grammar.regions.values() if r.field == "tool_calls" or r.parent}
    calls = _calls_of(spans, call_fields)
    errors = [e for e in message.get("parse_errors") or [] if isinstance(e, Mapping) and e.get("span")]
    pending = sorted(errors, key=lambda e: e["span"][1])
    parts = []
    for span, call in zip(spans, calls):
        parts.append(_span_html(text, span, call, any(e["span"][0] <= span["start"] and span["end"] <= e["span"][1]
                                                        for e in errors)))
        while pending and pending[0]["span"][1] <= span["end"]:  # an error's code right after its text
            error = pending.pop(0)
            parts.append(f'<span class="code" data-kind="error" title="{html.escape(str(error.get("message", "")))}">'
                         f'{html.escape(str(error.get("code")))}</span>')
    legend = "".join(f'<span style="{_field_style(f, None)}">{html.escape(f)}</span>'
                     for f in dict.fromkeys(r.field for r in parser.grammar.regions.values()) if f != "tool_calls")
    legend += "".join(f'<span style="{_field_style("", i)}">tool call {i + 1}</span>'
                      for i in range(max((c for c in calls if c is not None), default=-1) + 1))
    heading = html.escape(title or f"{parser.grammar.name or 'grammar'}: a parse")
    parsed = html.escape(json.dumps(message, ensure_ascii=False, indent=2))
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{heading}</title>'
            f"<style>{_STYLE}</style></head><body><h1>{heading}</h1>"
            f'<p class="legend">{legend}<span class="delim">delimiter</span>'
            f'<span class="discarded">discarded</span></p><div class="page">'
            f'<div><h2>Output</h2><pre id="output">{"".join(parts)}</pre></div>'
            f'<div><h2>Message</h2><pre id="message">{parsed}</pre></div></div></body></html>\n')


__all__ = ["to_html"]
