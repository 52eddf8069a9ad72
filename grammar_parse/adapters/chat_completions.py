"""OpenAI Chat Completions from parsed output: streaming deltas and the final message.

Pure functions over events, no server: :class:`ChatCompletionsStream` wraps a ResponseParser and turns
each piece of model output into ``choices[0].delta`` dicts, exactly as an OpenAI-compatible server
streams them:

* the first delta is ``{"role": "assistant"}``;
* answer text arrives as ``{"content": ...}``, reasoning as ``{"reasoning_content": ...}`` (or any
  field name, e.g. ``reasoning``);
* a tool call arrives as ``{"tool_calls": [{"index", "id", "type": "function", "function": {"name",
  "arguments": ""}}]}`` and then ``{"tool_calls": [{"index", "function": {"arguments": fragment}}]}``.

Concatenated the way the OpenAI client does, the deltas give :meth:`ChatCompletionsStream.message`
exactly, in every mode (the message is built from what was streamed): text fields are stripped as the
parser strips them (leading whitespace is never sent, trailing whitespace only once more text follows),
and each ``arguments`` string is the concatenation of its fragments, a JSON object text that a strict
parser accepts (``grammar_parse._engine.wire``: ``NaN`` goes out as ``null``, arguments that are not an object
as ``{}``; each change is an ``errors`` entry on the call). ``finish_reason`` is ``tool_calls`` when calls
were made, ``stop`` otherwise, and ``length`` whenever the generator says it stopped at its token limit (a
truncated call is reported, not hidden).

The parse options (``options=ParseOptions(...)``, or the shorthand keywords ``strict``,
``max_region_chars``, ``max_json_depth``, ``calls_in_reasoning``) are the parser's, limits included.

With ``strict=False`` broken output never raises: the message gets the parser's ``parse_errors``, and
a tool call whose text could not be parsed is still streamed and kept as a call, with the name, as much
of its arguments text as is valid JSON (closed when the call ends) and an ``errors`` list (``{"path",
"message", "code"}``) saying why. Text that names no function is not a call: it arrives as content (or
reasoning, where it was written); a value of the tool-call field that has no name the wire can carry is
not sent, and a ``parse.tool_call`` entry of ``parse_errors`` says so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .._engine.events import Event, RegionChunk
from .._engine.session import TemplateLike
from .._engine.shapes import REASONING_FIELDS
from .._engine.tools import CallValidator, call_function
from ..errors import UsageError
from ..options import ParseOptions, merge_options
from ._stream import StrippedText, TextKinds, default_ids, open_stream


class ChatCompletionsStream:
    """Chat Completions deltas for one response (see the module doc).

    >>> s = ChatCompletionsStream("qwen3", prefix="", ids=lambda kind: f"{kind}_1")
    >>> s.feed('<tool_call>\\n{"name": "f", "arguments": {"a": 1}}\\n</tool_call>')[-1]
    {'tool_calls': [{'index': 0, 'function': {'arguments': '{"a": 1}'}}]}
    """

    def __init__(
        self,
        template: TemplateLike,
        prefix: str | None = None,
        *,
        tools: Iterable[Any] | None = None,
        reasoning_field: str = "reasoning_content",
        ids: Callable[[str], str] | None = None,
        strict: bool | None = None,
        calls_in_reasoning: str | bool | None = None,
        max_region_chars: int | None = None,
        max_json_depth: int | None = None,
        options: ParseOptions | None = None,
    ) -> None:
        options = merge_options(options, strict=strict, calls_in_reasoning=calls_in_reasoning,
                                max_region_chars=max_region_chars, max_json_depth=max_json_depth)
        self.tools, self.parser, self.calls = open_stream(template, prefix, tools=tools, options=options)
        self.reasoning_field = reasoning_field
        self.ids = ids or default_ids()
        self.texts: dict[str, StrippedText] = {}
        self.sinks: dict[str, tuple[str, StrippedText] | None] = {}  # field -> where its text goes (see _sink)
        self.kinds = TextKinds(self.parser.grammar.format.field_roles)
        # Fields whose regions the parser joins with a separator (functionary's content, "\n"): the deltas
        # carry it between regions, so that they add up to the message.
        self.joins = {r.field: (r.spec.join, bool(getattr(r.spec, "content_args", {}).get("strip", True)))
                      for r in self.parser.grammar.regions.values() if r.parent is None and r.spec.join is not None}
        self.call_ids: dict[int, str] = {}
        self.wire_index: dict[int, int] = {}  # streamer call index -> index on the wire (calls with a name)
        self.finish_reason: str | None = None
        self._message: dict[str, Any] | None = None
        self.pending = [{"role": "assistant"}, *self._deltas(self.parser.initial_events)]

    def feed(self, text: str) -> list[dict[str, Any]]:
        """The deltas this piece of output completes."""
        events = self.parser.feed(text)
        deltas = self._deltas(events) if events else []
        if not self.pending:
            return deltas
        out, self.pending = self.pending + deltas, []
        return out

    def finish(self, text: str = "", *, truncated: bool = False, length: bool = False) -> list[dict[str, Any]]:
        """End of generation (``truncated=True`` if it stopped at the token limit: ``finish_reason`` is then
        ``length``): the last deltas. ``length=True`` says the same, under the name kept for compatibility.
        ``text``, if given, is a last piece of output, read one-shot (as ``ResponseParser.finalize(text)``)."""
        parsed, events = self.parser.finalize(text)
        out = self.pending + self._deltas(events)
        self.pending = []
        self._message = self._build_message(parsed)
        truncated = truncated or length
        self.finish_reason = "length" if truncated else "tool_calls" if self._message.get("tool_calls") else "stop"
        return out

    @property
    def message(self) -> dict[str, Any]:
        """The final Chat Completions message (after :meth:`finish`)."""
        if self._message is None:
            raise UsageError("the message exists once the stream is finished", code="usage.not_finished",
                             hint="Call finish() first.")
        return self._message

    # internals
    def _deltas(self, events: list[Event]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for event in events:
            if event["type"] == "region_chunk":
                if "path" in event:
                    continue  # (a component's text: its call's deltas say it)
                try:
                    sink = self.sinks[event["field"]]
                except KeyError:
                    sink = self._sink(event)
                if sink is not None:
                    target, stripped = sink
                    text = stripped.add(event["text"])
                    if text:
                        out.append({target: text})
            elif event["type"] == "call_open" or event["type"] == "call_arguments":
                out.append({"tool_calls": [self._tool_delta(event)]})
            elif event["type"] == "region_open" and self.joins and (role := self.kinds(event)) is not None \
                    and (join := self.joins.get(event["field"])) is not None:
                target = "content" if role == "content" else self.reasoning_field
                if target in self.texts:
                    self.texts[target].restart(*join)
        return out

    def _sink(self, event: RegionChunk) -> tuple[str, StrippedText] | None:
        """Where a field's text goes (None: nowhere, a call's or another field's), worked out at the field's
        first chunk: the message's field and its stripped text, shared by the fields of one role."""
        role = self.kinds(event)
        sink: tuple[str, StrippedText] | None = None
        if role is not None:
            target = "content" if role == "content" else self.reasoning_field
            stripped = self.texts.get(target)
            if stripped is None:
                stripped = self.texts[target] = StrippedText()
            sink = (target, stripped)
        self.sinks[event["field"]] = sink
        return sink

    def _tool_delta(self, delta: Mapping[str, Any]) -> dict[str, Any]:
        index = delta["index"]
        if "name" in delta:
            call_id = delta.get("id") or self.ids("call")
            self.call_ids[index] = call_id
            # a lenient parse can leave a call without a name (never sent): the wire indexes stay dense
            wire = self.wire_index.setdefault(index, len(self.wire_index))
            return {"index": wire, "id": call_id, "type": "function",
                    "function": {"name": delta["name"], "arguments": delta.get("arguments", "")}}
        return {"index": self.wire_index[index], "function": {"arguments": delta["arguments"]}}

    def _build_message(self, parsed: dict[str, Any]) -> dict[str, Any]:
        # Text is what was streamed, as for the calls below: the message is what the deltas add up to (a
        # later region of the same field that the parser keeps instead cannot take back what was sent).
        content = parsed.get("content")
        message: dict[str, Any] = {"role": "assistant", "content": content or None}
        if (content is None or isinstance(content, str)) and "content" in self.texts:
            message["content"] = self.texts["content"].value or None
        reasoning = self.texts[self.reasoning_field].value if self.reasoning_field in self.texts else None
        if reasoning:
            message[self.reasoning_field] = reasoning
        # The calls are the ones streamed, as streamed: the message is what the deltas add up to.
        calls = []
        validator: CallValidator | None = None  # (built for the first call to check)
        for sent in self.calls.sent_calls():
            call = sent.value if isinstance(sent.value, dict) else {}
            raw = (call_function(call) or {}).get("arguments", {})
            entry: dict[str, Any] = {"id": self.call_ids[sent.index], "type": "function",
                                     "function": {"name": sent.name, "arguments": sent.arguments}}
            errors = list(call.get("errors") or [])  # a broken call's (lenient mode)
            broken = bool(errors) and isinstance(raw, str)
            # arguments kept as raw text are not checked against the schema: they are not arguments yet
            if self.tools is not None and call and not broken:
                if validator is None:
                    validator = CallValidator(self.tools)
                errors += [p for p in validator.problems(call) if p not in errors]  # (the parser names an unknown tool too)
            errors += sent.wire.problems  # what the wire changed or left out of the model's arguments
            if errors:
                entry["errors"] = errors
            calls.append(entry)
        if calls:
            message["tool_calls"] = calls
        if self.parser.errors or self.calls.problems:
            message["parse_errors"] = [*self.parser.errors, *self.calls.problems]
        return message


def chat_message(text: str, template: TemplateLike, *, prefix: str | None = None, tools: Iterable[Any] | None = None,
                 reasoning_field: str = "reasoning_content", ids: Callable[[str], str] | None = None,
                 truncated: bool = False, strict: bool | None = None, length: bool = False,
                 calls_in_reasoning: str | bool | None = None, max_region_chars: int | None = None,
                 max_json_depth: int | None = None, options: ParseOptions | None = None) -> tuple[dict[str, Any], str]:
    """One-shot: the Chat Completions message and finish_reason for a complete output (``truncated`` and
    ``length``, kept for compatibility, as in :meth:`ChatCompletionsStream.finish`; the parse options as in
    :class:`ChatCompletionsStream`)."""
    options = merge_options(options, strict=strict, calls_in_reasoning=calls_in_reasoning,
                            max_region_chars=max_region_chars, max_json_depth=max_json_depth)
    stream = ChatCompletionsStream(template, prefix, tools=tools, reasoning_field=reasoning_field, ids=ids,
                                   options=options)
    stream.finish(text, truncated=truncated or length)
    assert stream.finish_reason is not None  # finish() sets it
    return stream.message, stream.finish_reason


def chunk(delta: dict[str, Any], *, completion_id: str, model: str, created: int,
          finish_reason: str | None = None) -> dict[str, Any]:
    """A ``chat.completion.chunk`` object around one delta (the clock and ids are the caller's)."""
    return {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}


__all__ = ["ChatCompletionsStream", "REASONING_FIELDS", "chat_message", "chunk", "default_ids"]
