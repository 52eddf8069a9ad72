"""What every wire adapter streams with: a parser and a tool-call streamer per response, which wire field a
region's text goes to, text stripped as the parser strips it, and call ids.

The Chat Completions adapter (``grammar_parse.adapters.chat_completions``) and the LMSP one (``grammar_parse.adapters.lmsp``)
differ only in how they frame what these give: deltas, or items and events. The JSON rules of what either
sends are ``grammar_parse._engine.wire``'s.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

from .._engine import oneshot
from .._engine.events import Event
from .._engine.session import ResponseParser, TemplateLike
from .._engine.shapes import CONTENT, REASONING
from .._engine.tools import tool_list
from .._engine.toolstream import ToolCallStreamer
from ..options import ParseOptions

#: ``ids(kind)`` makes one id of a kind (``call``, ``resp``, ``msg``, ...): injectable, so tests are deterministic.
IdFactory = Callable[[str], str]



class OpenStream(NamedTuple):
    """One response's stream: the tools as a list, a parser with extended events (captures on open, paths
    on components) and a tool-call streamer over the same tools and grammar."""

    tools: list[Any] | None
    parser: ResponseParser
    calls: ToolCallStreamer


#: Whether the adapters' parsers coalesce a call's parts (a switch for comparing: the deltas are the same either way).
#: ``GRAMMAR_PARSE_SPECIALISED=0``, which turns the specialised parsers off, turns this off too.
COALESCE_CALLS = True


def open_stream(template: TemplateLike, prefix: str | None, *, tools: Iterable[Any] | None = None,
                options: ParseOptions | None = None) -> OpenStream:
    """What every adapter streams from: a parser whose events carry the tool calls (``call_events``: the
    calls come out of the parser in the same pass, and the adapters only frame them; ``coalesce_calls``: the
    text of a call's parts, which they frame nothing of, is read a few pieces at a time), and the streamer
    behind them (its calls as sent, for the final message). ``options`` are the parse options (the keywords its
    shorthands), so every adapter passes on every limit."""
    tools = tool_list(tools)
    parser = ResponseParser(template, prefix, tools=tools, extended_events=True, options=options, call_events=True,
                            coalesce_calls=COALESCE_CALLS and oneshot.SPECIALISED)
    assert parser.calls is not None  # (call_events=True)
    return OpenStream(tools, parser, parser.calls)


def text_kind(event: Event, field_roles: Mapping[str, str]) -> str | None:
    """Which stream a region event's text goes to, by its field's role in the grammar's format
    (``field_roles``): ``content``, ``reasoning``, or None (tool calls, components and other fields)."""
    if "path" in event:
        return None
    field = event.get("field")
    role = field_roles.get(field) if isinstance(field, str) else None
    return role if role in (CONTENT, REASONING) else None


class TextKinds:
    """:func:`text_kind` of each event, cached by what decides it (a path, the field): the adapters ask
    for every event, which is most of their work on a stream of text."""

    def __init__(self, field_roles: Mapping[str, str]) -> None:
        self.field_roles = field_roles
        self._known: dict[tuple[bool, Any], str | None] = {}

    def __call__(self, event: Event) -> str | None:
        key = "path" in event, event.get("field")
        try:
            return self._known[key]
        except KeyError:
            kind = self._known[key] = text_kind(event, self.field_roles)
            return kind


def default_ids() -> IdFactory:
    """Random ids (``call_`` and 24 hex digits, 96 random bits); inject your own factory for deterministic ids."""
    return lambda kind: f"{kind}_{os.urandom(12).hex()}"  # (uuid4's object costs four times as much)


class StrippedText:
    """Streams a text field the way the parser will strip it: no leading whitespace, and trailing
    whitespace held back until more text shows it is inside the value."""

    def __init__(self) -> None:
        self.started = False
        self.held = ""
        self.sent: list[str] = []

    def add(self, text: str) -> str:
        """The part of ``text`` (the field's next piece) that can be sent now."""
        if not self.started:
            text = text.lstrip()
            if not text:
                return ""
            self.started = True
        body = text.rstrip()
        out = self.held + body if body else ""
        self.held = (self.held + text) if not body else text[len(body):]
        if out:
            self.sent.append(out)
        return out

    def restart(self, join: str, strip: bool = True) -> None:
        """A further region of a field whose regions the parser joins with ``join``: the join goes before
        the next text sent. Regions stripped one by one (``strip``) drop the trailing whitespace held
        and the next one's leading whitespace; unstripped ones keep both. A field's first region needs
        no call."""
        if not self.started:
            return
        if strip:
            self.started = False
            self.held = join
        else:
            self.held += join

    @property
    def value(self) -> str:
        """All the text sent so far: the field's value as a client has it."""
        return "".join(self.sent)


__all__ = ["IdFactory", "OpenStream", "StrippedText", "TextKinds", "default_ids", "open_stream",
           "text_kind"]
