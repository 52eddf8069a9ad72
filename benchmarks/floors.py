"""Hand-written parsers for four formats: the floor that plain Python reaches for one format.

Written the way a careful engine author writes one parser per model, with nothing general: qwen3's
Hermes JSON calls, qwen3_coder's XML parameters, deepseek_v3's fenced JSON in a calls section and kimi_k2's JSON
after a call id in one, each after an optional ``<think>`` block. They do the work the benchmark checks (reasoning, content, each call's name
and typed arguments, streamed as arguments arrive) and nothing more: no lenient mode, no limits, no error
spans. ``bench_peers.py`` times
them beside grammar_parse and the engines' parsers as the bound that a generated parser can approach.
(``bench.py``'s ``HandWritten`` is a floor too, for its own comparison with transformers: the Qwen3 template
without tools, so nothing typed; these take the tools and type the arguments, as the peers' workload needs.)

Each parser has ``oneshot(text) -> (reasoning, content, calls)`` and a streaming object whose
``feed(delta)`` returns ``(reasoning, content, call_deltas)`` pieces, ``(index, name or None, arguments
text)`` for the calls, and ``finish()`` the rest.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

Call = tuple[str, Any]
Pieces = tuple[str, str, list[tuple[int, str | None, str]]]

THINK, END_THINK, CALL, END_CALL = "<think>", "</think>", "<tool_call>", "</tool_call>"


def _partial_tail(buf: str, marks: tuple[str, ...]) -> int:
    """Where a proper prefix of one of ``marks`` starts at the end of ``buf`` (len(buf): none)."""
    start = buf.rfind("<", max(0, len(buf) - max(map(len, marks)) + 1))
    if start != -1 and any(m.startswith(buf[start:]) for m in marks):
        return start
    return len(buf)


def _split_think(text: str) -> tuple[str, str]:
    """(reasoning, the rest) of a whole output."""
    if text.lstrip().startswith(THINK):
        head = text.find(THINK) + len(THINK)
        end = text.find(END_THINK, head)
        if end == -1:
            return text[head:].strip(), ""
        return text[head:end].strip(), text[end + len(END_THINK):]
    end = text.find(END_THINK)
    if end != -1:  # the prompt opened the block
        return text[:end].strip(), text[end + len(END_THINK):]
    return "", text


class _Stream:
    """The reasoning and content part, shared by the formats: text until a call, held back only where a
    delimiter may be starting. ``call_text`` takes the text of each call as it grows. ``call_mark`` and
    ``end_call_mark`` bracket a call; with a ``section`` (its begin and end marks), calls sit in a section
    whose other text is dropped, and content ends where the section begins."""

    call_mark, end_call_mark = CALL, END_CALL
    section: tuple[str, str] | None = None

    def __init__(self) -> None:
        self.buf = ""
        self.state = "start"  # start, think, content, call
        self.index = -1
        self.seen = 0  # in a call: where its closing tag may start, at the earliest

    def feed(self, delta: str) -> Pieces:
        self.buf += delta
        reasoning, content, calls = [], [], []
        while True:
            buf = self.buf
            if self.state == "start":
                stripped = buf.lstrip()
                if len(stripped) < len(THINK) and THINK.startswith(stripped):
                    break
                if stripped.startswith(THINK):
                    self.buf, self.state = stripped[len(THINK):], "think"
                else:
                    self.state = "content"
                continue
            if self.state in ("think", "content"):
                mark = END_THINK if self.state == "think" else self.section[0] if self.section else self.call_mark
                at = buf.find(mark)
                upto = at if at != -1 else _partial_tail(buf, (mark,))
                (reasoning if self.state == "think" else content).append(buf[:upto])
                if at == -1:
                    self.buf = buf[upto:]
                    break
                self.buf = buf[at + len(mark):]
                if self.state == "think":
                    self.state = "content"
                elif self.section:
                    self.state = "section"
                else:
                    self.state, self.index = "call", self.index + 1
                    self.open_call()
                continue
            if self.state == "section":  # (between calls: dropped, up to the next call or the section's end)
                assert self.section is not None
                marks = (self.call_mark, self.section[1])
                at, ended = buf.find(marks[0]), buf.find(marks[1])
                if at == -1 and ended == -1:
                    self.buf = buf[_partial_tail(buf, marks):]
                    break
                if at != -1 and (ended == -1 or at < ended):
                    self.buf, self.state, self.index = buf[at + len(marks[0]):], "call", self.index + 1
                    self.open_call()
                else:
                    self.buf, self.state = buf[ended + len(marks[1]):], "content"
                continue
            # in a call: the body so far, less what the call's reader is done with (cost linear in it)
            end_mark = self.end_call_mark
            at = buf.find(end_mark, self.seen)
            if at == -1:
                self.seen = max(self.seen, len(buf) - len(end_mark) + 1)
                pieces, done = self.call_text(buf, _partial_tail(buf, (end_mark,)), final=False)
                calls.extend(pieces)
                self.buf, self.seen = buf[done:], max(0, self.seen - done)
                break
            calls.extend(self.call_text(buf, at, final=True)[0])
            self.buf, self.state, self.seen = buf[at + len(end_mark):], "section" if self.section else "content", 0
        return "".join(reasoning), "".join(content), calls

    def finish(self) -> Pieces:
        return self.feed("")

    def open_call(self) -> None:
        raise NotImplementedError

    def call_text(self, body: str, upto: int, final: bool) -> tuple[list[tuple[int, str | None, str]], int]:
        """The call deltas ``body[:upto]`` completes, and how many leading characters of it are done with."""
        raise NotImplementedError


# ---------------------------------------------------------------------------- qwen3: Hermes JSON
def _oneshot(text: str, read_call: Callable[[str], Call]) -> tuple[str, str, list[Call]]:
    """A whole output: its reasoning, its content (the text before the first call) and each call's body
    read by ``read_call``."""
    reasoning, rest = _split_think(text)
    first = rest.find(CALL)
    content = (rest if first == -1 else rest[:first]).strip()
    calls: list[Call] = []
    while first != -1:
        end = rest.find(END_CALL, first)
        calls.append(read_call(rest[first + len(CALL):end if end != -1 else len(rest)]))
        first = rest.find(CALL, end) if end != -1 else -1
    return reasoning, content, calls


def _json_call(body: str) -> Call:
    value = json.loads(body)
    return value["name"], value.get("arguments", {})


def qwen3_oneshot(text: str) -> tuple[str, str, list[Call]]:
    return _oneshot(text, _json_call)


class Qwen3Stream(_Stream):
    """Arguments stream as written: after ``"arguments":``, everything but the call object's closing brace."""

    def open_call(self) -> None:
        self.sent = 0  # characters of the call's body already sent as arguments
        self.args_at = -1
        self.named = False

    def call_text(self, body: str, upto: int, final: bool) -> tuple[list[tuple[int, str | None, str]], int]:
        out: list[tuple[int, str | None, str]] = []
        if not self.named:
            key = body.find('"name"', 0, upto)
            colon = body.find(":", key + 6, upto) if key != -1 else -1
            quote = body.find('"', colon + 1, upto) if colon != -1 else -1
            close = body.find('"', quote + 1, upto) if quote != -1 else -1
            if close == -1:
                return out, 0
            self.named = True
            out.append((self.index, json.loads(body[quote:close + 1]), ""))
        if self.args_at == -1:
            key = body.find('"arguments"', 0, upto)
            colon = body.find(":", key + 11, upto) if key != -1 else -1
            if colon == -1:
                return out, 0
            self.args_at = self.sent = colon + 1
        # All but the call object's closing brace: at the end, the last one; before, the last character
        # written, which may be it.
        end = upto
        while end > self.sent and body[end - 1] in " \t\r\n":
            end -= 1
        end = body.rfind("}", self.sent, end) if final else end - 1
        if end > self.sent:
            text = body[self.sent:end]
            out.append((self.index, None, text.lstrip() if self.sent == self.args_at else text))
            self.sent = end
        done, self.sent, self.args_at = self.sent, 0, (0 if self.args_at == self.sent else -2)
        return out, done


# ---------------------------------------------------------------------------- qwen3_coder: XML parameters
def _types(tools: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    return {t["function"]["name"]: {k: s.get("type", "string") for k, s in
                                    t["function"]["parameters"].get("properties", {}).items()} for t in tools}


def _typed(raw: str, kind: str) -> Any:
    if kind == "string":
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _parameters(body: str, types: dict[str, str]) -> dict[str, Any]:
    args: dict[str, Any] = {}
    at = body.find("<parameter=")
    while at != -1:
        name_end = body.find(">", at)
        end = body.find("</parameter>", name_end)
        key = body[at + 11:name_end]
        value = body[name_end + 1:end]
        value = value[1:] if value.startswith("\n") else value
        value = value[:-1] if value.endswith("\n") else value
        args[key] = _typed(value, types.get(key, "string"))
        at = body.find("<parameter=", end)
    return args


def qwen3_coder_oneshot(text: str, tools: list[dict[str, Any]]) -> tuple[str, str, list[Call]]:
    types = _types(tools)

    def xml_call(body: str) -> Call:
        name_at = body.find("<function=")
        name = body[name_at + 10:body.find(">", name_at)]
        return name, _parameters(body, types.get(name, {}))
    return _oneshot(text, xml_call)


class Qwen3CoderStream(_Stream):
    """Each parameter goes out as a JSON member once its closing tag arrives."""

    def __init__(self, tools: list[dict[str, Any]]) -> None:
        super().__init__()
        self.types = _types(tools)

    def open_call(self) -> None:
        self.name: str | None = None
        self.scanned = 0
        self.members = 0

    def call_text(self, body: str, upto: int, final: bool) -> tuple[list[tuple[int, str | None, str]], int]:
        out: list[tuple[int, str | None, str]] = []
        if self.name is None:
            at = body.find("<function=", 0, upto)
            close = body.find(">", at, upto) if at != -1 else -1
            if close == -1:
                return out, 0
            self.name, self.scanned = body[at + 10:close], close + 1
            out.append((self.index, self.name, ""))
        types = self.types.get(self.name, {})
        while (end := body.find("</parameter>", self.scanned, upto)) != -1:
            member = _parameters(body[self.scanned:end + 12], types)
            text = json.dumps(member, ensure_ascii=False)[1:-1]
            out.append((self.index, None, ("{" if not self.members else ", ") + text))
            self.members += 1
            self.scanned = end + 12
        if final:
            out.append((self.index, None, "}" if self.members else "{}"))
        # (a parameter's value is kept until its closing tag; the next search starts past what can't hold one)
        done, self.scanned = self.scanned, 0
        return out, done


# ---------------------------------------------------------------------------- deepseek_v3: JSON in a fence
DS_SECTION = ("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>")
DS_CALL, DS_END_CALL, DS_SEP, FENCE, CLOSE_FENCE = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>", \
    "```json\n", "\n```"


def _ds_arguments(args: str) -> str:
    """A call's arguments text without the fences around it."""
    args = args[len(FENCE):] if args.startswith(FENCE) else args
    args = args.rstrip()
    return args[:-3].rstrip() if args.endswith("```") else args


def deepseek_v3_oneshot(text: str) -> tuple[str, str, list[Call]]:
    reasoning, rest = _split_think(text)
    begin = rest.find(DS_SECTION[0])
    content = (rest if begin == -1 else rest[:begin]).strip()
    calls: list[Call] = []
    at = rest.find(DS_CALL, begin) if begin != -1 else -1
    while at != -1:
        end = rest.find(DS_END_CALL, at)
        body = rest[at + len(DS_CALL):end if end != -1 else len(rest)]
        sep = body.find(DS_SEP)
        newline = body.find("\n", sep)
        calls.append((body[sep + len(DS_SEP):newline], json.loads(_ds_arguments(body[newline + 1:]))))
        at = rest.find(DS_CALL, end) if end != -1 else -1
    return reasoning, content, calls


class DeepseekV3Stream(_Stream):
    """``function<｜tool▁sep｜>NAME\n```json\n{...}\n```: the name once its newline arrives, then the
    arguments as written, less what may be the closing fence."""

    call_mark, end_call_mark, section = DS_CALL, DS_END_CALL, DS_SECTION

    def open_call(self) -> None:
        self.named = self.fenced = False
        self.sent = 0  # where the arguments start in the body, then how far they were sent

    def call_text(self, body: str, upto: int, final: bool) -> tuple[list[tuple[int, str | None, str]], int]:
        out: list[tuple[int, str | None, str]] = []
        if not self.named:
            sep = body.find(DS_SEP, 0, upto)
            newline = body.find("\n", sep, upto) if sep != -1 else -1
            if newline == -1:
                return out, 0
            self.named, self.sent = True, newline + 1
            out.append((self.index, body[sep + len(DS_SEP):newline], ""))
        if not self.fenced:
            head = body[self.sent:upto]
            if not final and len(head) < len(FENCE) and FENCE.startswith(head):
                return out, 0
            self.sent += len(FENCE) if head.startswith(FENCE) else 0
            self.fenced = True
        end = self.sent + len(_ds_arguments(body[self.sent:upto])) if final else upto - len(CLOSE_FENCE)
        if end > self.sent:
            out.append((self.index, None, body[self.sent:end]))
            self.sent = end
        done, self.sent = self.sent, 0
        return out, done


# ---------------------------------------------------------------------------- kimi_k2: JSON after a call id, in a section
KIMI_SECTION = ("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>")
KIMI_CALL, KIMI_ARGS, KIMI_END_CALL = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"


def _kimi_name(call_id: str) -> str:
    """``functions.NAME:IDX`` -> NAME."""
    call_id = call_id.strip()
    name = call_id[len("functions."):] if call_id.startswith("functions.") else call_id
    return name.rpartition(":")[0] or name


def kimi_k2_oneshot(text: str) -> tuple[str, str, list[Call]]:
    reasoning, rest = _split_think(text)
    begin = rest.find(KIMI_SECTION[0])
    content = (rest if begin == -1 else rest[:begin]).strip()
    calls: list[Call] = []
    at = rest.find(KIMI_CALL, begin) if begin != -1 else -1
    while at != -1:
        args = rest.find(KIMI_ARGS, at)
        end = rest.find(KIMI_END_CALL, args)
        calls.append((_kimi_name(rest[at + len(KIMI_CALL):args]), json.loads(rest[args + len(KIMI_ARGS):end])))
        at = rest.find(KIMI_CALL, end)
    return reasoning, content, calls


class KimiK2Stream(_Stream):
    """``functions.NAME:IDX<|tool_call_argument_begin|>{...}``: the name once the argument mark arrives, then the
    arguments as written."""

    call_mark, end_call_mark, section = KIMI_CALL, KIMI_END_CALL, KIMI_SECTION

    def open_call(self) -> None:
        self.named = False

    def call_text(self, body: str, upto: int, final: bool) -> tuple[list[tuple[int, str | None, str]], int]:
        out: list[tuple[int, str | None, str]] = []
        start = 0
        if not self.named:
            args = body.find(KIMI_ARGS, 0, upto)
            if args == -1:
                return out, 0
            self.named, start = True, args + len(KIMI_ARGS)
            out.append((self.index, _kimi_name(body[:args]), ""))
        if upto > start:
            out.append((self.index, None, body[start:upto]))
        return out, max(upto, start)


__all__ = ["DeepseekV3Stream", "KimiK2Stream", "Qwen3CoderStream", "Qwen3Stream", "deepseek_v3_oneshot",
           "kimi_k2_oneshot", "qwen3_coder_oneshot", "qwen3_oneshot"]
