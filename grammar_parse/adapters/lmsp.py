"""LMSP 1.0 Responses from parsed output: output items, the response object, and stream events.

Pure functions over events (no I/O, no clock: ids and timestamps come from the caller).
:class:`ResponseStream` wraps a ResponseParser and turns model output into LMSP stream events:

* ``response.created``, then for each region, in the order the regions appear:
  ``response.output_item.added``, deltas, ``response.output_item.done`` with the complete item;
* reasoning becomes a ``reasoning`` item (its text in one ``summary_text`` part), each tool call a
  ``function_call`` item (``arguments`` is a JSON-encoded string; a model-written call id is kept as
  ``call_id``), content a ``message`` item with one ``output_text`` part;
* text deltas are ``response.output_text.delta``; two extension events, which clients that do not know
  them ignore, carry the rest: ``response.reasoning_summary_text.delta`` (reasoning text) and
  ``response.function_call_arguments.delta`` (fragments of a call's arguments string);
* exactly one final event: ``response.completed`` (with usage), ``response.incomplete`` (the generator
  hit ``max_output_tokens``: open regions are closed and kept), ``response.failed`` (a problem object:
  a parse failure never drops the stream) or ``response.cancelled``;
* with ``strict=False`` a parse failure does not end the response: the broken region keeps what it
  streamed and a third extension event, ``response.parse_error`` (``code``, ``field``, ``span``,
  ``message``), reports it where it happened. A broken tool call that names a function is a
  ``function_call`` item like any other, its ``arguments`` the valid part of the text it streamed, closed;
* a call's ``arguments`` are always a JSON object text that a strict parser accepts (see
  ``grammar_parse._engine.wire``): where the wire had to change the model's arguments (``NaN`` sent as ``null``,
  arguments that are not an object sent as ``{}``), and where a value of the tool-call field is not a call
  with a name (not sent), a ``response.parse_error`` with ``span`` null says so, in either mode;
* with ``tools``, a finished call is checked against them, and each way it is wrong is a
  ``response.parse_error`` (``span`` null) before its ``response.output_item.done``: ``call.unknown_tool``,
  ``call.type``, ``call.required`` or ``call.schema``, its message ``path: why`` in words that quote nothing
  of the output (``grammar_parse._engine.wire.CallChecker``; a path's keys the tool's schema does not name show as
  ``*``, in the wire's problems too). :meth:`ResponseStream.failure_text` says why a stream failed to parse
  in the same words;
* nothing after the final event: feeding a stream that has ended (failed, cancelled, completed) gives no
  events. A failure that is not a parse error (a bug) also ends the stream with ``response.failed``
  (``internal_error``) rather than breaking it mid-way: a client always sees exactly one final event.

Every event has an integer ``id``, strictly increasing from 1. :func:`sse` writes them as server-sent
event frames whose data also carries the event's ``type`` and ``sequence_number``, as the OpenAI Responses
API's events do (so its clients read the stream unchanged). Items are only added once they have something
to say: whitespace-only text makes none.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from .._engine.events import Event
from .._engine.reading import copy_json
from .._engine.session import TemplateLike
from .._engine.wire import CallChecker, ClientText, open_call, parse_failure, wire_json
from ..errors import GrammarParseError, SchemaNameError
from ..options import ParseOptions, merge_options
from ._stream import IdFactory, StrippedText, TextKinds, open_stream

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator


def problem(code: str, detail: str, status: int = 500, title: str | None = None) -> dict[str, Any]:
    """A problem object (RFC 9457 shape) with the LMSP error ``code``."""
    return {"type": f"urn:lmsp:error:{code}", "title": title or code.replace("_", " ").capitalize(),
            "status": status, "detail": detail, "code": code}


def parse_failed(detail: str) -> dict[str, Any]:
    """The problem object of output the grammar could not parse."""
    return problem("parse_failed", detail, 500, "The model output could not be parsed")


def internal_error(error: Exception) -> dict[str, Any]:
    """The problem object of a failure that is not the model output's (a bug in the parser)."""
    return problem("internal_error", f"{type(error).__name__}: {error}", 500, "The response could not be produced")


def usage(input_tokens: int, output_tokens: int) -> dict[str, int]:
    return {"input_tokens": input_tokens, "output_tokens": output_tokens, "total_tokens": input_tokens + output_tokens}


def response_object(response_id: str, *, model: str, created_at: int, status: str, output: list[dict[str, Any]],
                    usage_: dict[str, int] | None, error: dict[str, Any] | None = None,
                    incomplete_reason: str | None = None) -> dict[str, Any]:
    """The LMSP response object (6.2)."""
    return {"id": response_id, "object": "response", "created_at": created_at, "status": status, "model": model,
            "output": output, "usage": usage_, "error": error,
            "incomplete_details": {"reason": incomplete_reason} if incomplete_reason else None}


class ResponseStream:
    """LMSP stream events for one response (see the module doc).

    ``ids(kind)`` makes ids for ``resp``, ``msg``, ``rs``, ``fc`` and ``call``. The parse options
    (``options=ParseOptions(...)`` or the shorthand keywords) are the parser's, limits included.
    """

    def __init__(self, template: TemplateLike, prefix: str | None = None, *, tools: Iterable[Any] | None = None,
                 response_id: str | None = None, ids: IdFactory, strict: bool | None = None,
                 calls_in_reasoning: str | bool | None = None, max_region_chars: int | None = None,
                 max_json_depth: int | None = None, options: ParseOptions | None = None) -> None:
        self.ids = ids
        self.response_id = response_id or ids("resp")
        options = merge_options(options, strict=strict, calls_in_reasoning=calls_in_reasoning,
                                max_region_chars=max_region_chars, max_json_depth=max_json_depth)
        tools_, self.parser, self.calls = open_stream(template, prefix, tools=tools, options=options)
        # Says what is wrong with a call in words a client may read (the request's tool names and schemas);
        # with no tools given, calls are not checked.
        self.checker = CallChecker(tools_ or [])
        self.check_calls = tools_ is not None
        #: The parse error that failed the stream (None: it did not fail so)
        self.parse_error: GrammarParseError | None = None
        self.kinds = TextKinds(self.parser.grammar.format.field_roles)
        self.next_id = 1
        self.output: list[dict[str, Any]] = []
        self.open_items: dict[str, int] = {}  # text field -> output index of its open item
        self.texts: dict[int, StrippedText] = {}
        self.call_items: dict[int, int] = {}  # tool call index -> output index
        self.reported = 0  # the streamer's problems already sent as response.parse_error
        self.final: dict[str, Any] | None = None
        self.pending = [self._event("response.created", {"status": "in_progress"})]
        self.pending += self._translate(self.parser.initial_events)

    # public
    def feed(self, text: str) -> list[dict[str, Any]]:
        """Events this piece of output completes (none once the stream has ended)."""
        if self.final is not None:
            return []
        out, self.pending = self.pending, []
        try:
            return out + self._translate(self.parser.feed(text))
        except GrammarParseError as e:
            self.parse_error = e
            return out + self.fail(parse_failed(str(e)))
        except Exception as e:  # noqa: BLE001 - a bug must still end the stream with its one final event
            return out + self.fail(internal_error(e))

    def complete(self, input_tokens: int = 0, output_tokens: int = 0, *, truncated: bool = False,
                 text: str = "") -> list[dict[str, Any]]:
        """End of generation: ``response.completed``, or ``response.incomplete`` when ``truncated`` (the
        token limit): open regions are closed and their items kept. ``text``, if given, is a last piece of
        output, read one-shot (as ``ResponseParser.finalize(text)``)."""
        if self.final is not None:
            return []
        out, self.pending = self.pending, []
        try:
            _, events = self.parser.finalize(text)
            out += self._translate(events)
        except GrammarParseError as e:
            self.parse_error = e
            return out + self.fail(parse_failed(str(e)))
        except Exception as e:  # noqa: BLE001 - see feed()
            return out + self.fail(internal_error(e))
        out += self._close_all()
        totals = usage(input_tokens, output_tokens)
        if truncated:
            self.final = self._event("response.incomplete", {"status": "incomplete", "usage": totals,
                                                             "incomplete_details": {"reason": "max_output_tokens"}})
        else:
            self.final = self._event("response.completed", {"status": "completed", "usage": totals})
        return [*out, self.final]

    def fail(self, error: dict[str, Any]) -> list[dict[str, Any]]:
        """End with ``response.failed`` carrying a problem object (after the events not yet sent: a stream
        that fails before its first piece still starts with ``response.created``)."""
        if self.final is not None:
            return []
        out, self.pending = self.pending, []
        self.final = self._event("response.failed", {"status": "failed", "error": error})
        return [*out, self.final]

    def cancel(self) -> list[dict[str, Any]]:
        """End with ``response.cancelled`` (the client went away), after the events not yet sent."""
        if self.final is not None:
            return []
        out, self.pending = self.pending, []
        self.final = self._event("response.cancelled", {"status": "cancelled"})
        return [*out, self.final]

    def failure_text(self) -> ClientText | None:
        """Why the stream failed to parse, quoting nothing of the output (:func:`grammar_parse._engine.wire.parse_failure`:
        the code, the region, the offered tool whose call was being read); None if it did not."""
        if self.parse_error is None:
            return None
        return parse_failure(self.parse_error, open_call(self.calls, self.checker.offered))

    @property
    def status(self) -> str:
        if self.final is None:
            return "in_progress"
        status: str = self.final["data"]["status"]
        return status

    def response(self, *, model: str, created_at: int) -> dict[str, Any]:
        """The response object as it stands (final once the stream has ended)."""
        data = self.final["data"] if self.final else {}
        return response_object(self.response_id, model=model, created_at=created_at, status=self.status,
                               output=self.output, usage_=data.get("usage"), error=data.get("error"),
                               incomplete_reason=(data.get("incomplete_details") or {}).get("reason"))

    # events
    def _event(self, name: str, data: dict[str, Any]) -> dict[str, Any]:
        event = {"id": self.next_id, "event": name, "data": {"response_id": self.response_id, **data}}
        self.next_id += 1
        return event

    def _translate(self, events: list[Event]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for event in events:
            if event["type"] == "parse_error":
                out.append(self._event("response.parse_error", {"code": event["code"], "field": event["field"],
                                                                "span": event["span"], "message": event["message"]}))
                continue
            if event["type"] == "call_open" or event["type"] == "call_arguments" or event["type"] == "call_close":
                out += self._tool(event)
                continue
            kind = self.kinds(event)
            if kind is None:
                continue
            if event["type"] == "region_chunk":
                out += self._text(event["field"], kind, event["text"])
            elif event["type"] == "region_close" and event["field"] in self.open_items:
                out += self._finish_text(event["field"])
        for problem_ in self.calls.problems[self.reported:]:
            out.append(self._problem(problem_))
        self.reported = len(self.calls.problems)
        return out

    def _problem(self, problem_: dict[str, Any]) -> dict[str, Any]:
        return self._event("response.parse_error", {key: problem_[key] for key in ("code", "field", "span", "message")})

    def _text(self, field: str, kind: str, text: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        index = self.open_items.get(field)
        stripped = self.texts[index] if index is not None else StrippedText()
        delta = stripped.add(text)
        if not delta:
            return out  # whitespace so far: the item waits for real text
        if index is None:
            index = len(self.output)
            self.open_items[field] = index
            self.texts[index] = stripped
            item = {"id": self.ids("msg"), "type": "message", "role": "assistant", "content": []} if kind == "content" \
                else {"id": self.ids("rs"), "type": "reasoning", "summary": []}
            self.output.append(item)
            out.append(self._event("response.output_item.added", {"output_index": index, "item": copy_json(item)}))
        item = self.output[index]
        name = "response.output_text.delta" if item["type"] == "message" else "response.reasoning_summary_text.delta"
        out.append(self._event(name, {"item_id": item["id"], "output_index": index, "delta": delta}))
        return out

    def _finish_text(self, field: str) -> list[dict[str, Any]]:
        index = self.open_items.pop(field)
        item = self.output[index]
        text = self.texts[index].value
        if item["type"] == "message":
            item["content"] = [{"type": "output_text", "text": text}]
        else:
            item["summary"] = [{"type": "summary_text", "text": text}]
        return [self._event("response.output_item.done", {"output_index": index, "item": copy_json(item)})]

    def _tool(self, delta: Mapping[str, Any]) -> list[dict[str, Any]]:
        call = delta["index"]
        if "name" in delta:
            index = len(self.output)
            self.call_items[call] = index
            item = {"id": self.ids("fc"), "type": "function_call", "call_id": delta.get("id") or self.ids("call"),
                    "name": delta["name"], "arguments": ""}
            self.output.append(item)
            return [self._event("response.output_item.added", {"output_index": index, "item": copy_json(item)})]
        index = self.call_items[call]
        item = self.output[index]
        if delta.get("done"):
            state = self.calls.calls[call]
            # what the wire changed or left out of the model's arguments, then what is wrong for the tools
            problems = [self._call_problem(item["name"], p) for p in state.wire.problems]
            problems += [self._call_problem(item["name"], p) for p in self._check(item, state)]
            return [*problems, self._event("response.output_item.done", {"output_index": index,
                                                                         "item": copy_json(item)})]
        item["arguments"] += delta["arguments"]
        return [self._event("response.function_call_arguments.delta",
                            {"item_id": item["id"], "output_index": index, "delta": delta["arguments"]})]

    def _call_problem(self, name: str, problem_: dict[str, Any]) -> dict[str, Any]:
        """A call's problem as a ``response.parse_error``: ``path: message``, the path's keys shown only
        where the tool's schema names them, so a message that quotes nothing of the output stays so."""
        path = self.checker.path(name, problem_["path"])
        said = problem_["message"]
        message = ClientText(f"{path}: {said}") if isinstance(said, ClientText) else f"{path}: {said}"
        return self._problem({"code": problem_["code"], "field": self.calls.field, "span": None, "message": message})

    def _check(self, item: dict[str, Any], state: Any) -> list[dict[str, str]]:
        """What is wrong with a finished call for the request's tools (an unknown tool, arguments against
        its schema); nothing for a call whose text did not parse (its arguments are what was valid of it)."""
        if not self.check_calls:
            return []
        broken = state.broken or any(p["code"] != "parse.json_constant" for p in state.wire.problems)
        if broken and item["name"] in self.checker.offered:
            return []  # (only its tool is checked: a call named for a tool that is not offered is flagged)
        try:
            arguments = {} if broken else json.loads(item["arguments"])
        except ValueError:  # (the wire sends strict JSON; a limit of Python's own is the only way here)
            arguments = {}
        return self.checker.client_problems(item["name"], arguments)

    def _close_all(self) -> list[dict[str, Any]]:
        out = []
        for field in list(self.open_items):
            out += self._finish_text(field)
        return out


def sse(event: dict[str, Any]) -> str:
    """One server-sent event frame: ``id:``, ``event:`` and a one-line JSON ``data:``.

    The data also says the event's ``type`` (its name) and ``sequence_number`` (its id), as each event of
    the OpenAI Responses API does: clients written for that API (the ``openai`` client's
    ``responses.create(stream=True)``) read an event's kind from its data, never from the ``event:`` line.
    LMSP lists the fields an event's data holds at least; these two repeat what the frame already says."""
    data = {"type": event["event"], "sequence_number": event["id"], **event["data"]}
    return f"id: {event['id']}\nevent: {event['event']}\ndata: {wire_json(data)}\n\n"


#: What ends a line of an event stream: CRLF, LF or CR only (str.splitlines would also split at U+2028,
#: U+0085, form feeds, ... which JSON data may hold verbatim).
_SSE_LINE_END = re.compile(r"\r\n|\r|\n")


def parse_sse(text: str) -> list[dict[str, Any]]:
    """Frames back into events (for clients and tests), read as the HTML event-stream format reads them:
    lines end at CR, LF or CRLF, a blank line ends a frame, ``field: value`` loses one space after the
    colon, several ``data`` lines join with newlines, and lines starting with ``:`` are comments. The
    ``type`` and ``sequence_number`` that :func:`sse` copies into the data are dropped where they repeat the
    frame's event name and id, so ``parse_sse(sse(event)) == [event]``."""
    events = []
    fields: dict[str, str] = {}
    data: list[str] = []
    for line in [*_SSE_LINE_END.split(text), ""]:  # (a last frame without its blank line still counts)
        if not line:
            if "event" in fields:
                event = {"id": int(fields["id"]), "event": fields["event"], "data": json.loads("\n".join(data))}
                _drop_copies(event)
                events.append(event)
            fields, data = {}, []
            continue
        if line.startswith(":"):
            continue
        key, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if key == "data":
            data.append(value)
        else:
            fields[key] = value
    return events


def _drop_copies(event: dict[str, Any]) -> None:
    """Take out of an event's data the ``type`` and ``sequence_number`` that repeat its name and id."""
    data = event["data"]
    if isinstance(data, dict):
        for key, same in (("type", event["event"]), ("sequence_number", event["id"])):
            if key in data and data[key] == same:
                del data[key]


def respond(text: str, template: TemplateLike, *, prefix: str | None, model: str, created_at: int, ids: IdFactory,
            tools: Iterable[Any] | None = None, input_tokens: int = 0,
            output_tokens: int = 0, truncated: bool = False, strict: bool | None = None,
            options: ParseOptions | None = None) -> dict[str, Any]:
    """One-shot: the response object for a complete output (the same items the stream builds; ``strict`` and
    ``options`` as in :class:`ResponseStream`: with ``strict=False`` output that does not parse still completes)."""
    stream = ResponseStream(template, prefix, tools=tools, ids=ids, strict=strict, options=options)
    stream.complete(input_tokens, output_tokens, truncated=truncated, text=text)
    return stream.response(model=model, created_at=created_at)


def schema_validator(name: str) -> Draft202012Validator:
    """A jsonschema validator for one definition of the protocol's schema (``request``, ``response``,
    ``item_message``, ``event:response.completed``, ``event`` for any event, ...)."""
    from importlib import resources

    import jsonschema

    document = json.loads(resources.files("grammar_parse").joinpath("schemas/lmsp.json").read_text(encoding="utf-8"))
    if name not in document["$defs"]:
        raise SchemaNameError(f"no schema {name!r}", code="usage.schema",
                              hint=f"The package ships {sorted(document['$defs'])}.")
    schema = {**document, "$ref": f"#/$defs/{name}"}
    return jsonschema.Draft202012Validator(schema)


__all__ = ["ResponseStream", "parse_sse", "problem", "respond", "response_object", "schema_validator", "sse", "usage"]
