"""Derive a grammar from a model's chat template, for templates no built-in grammar reads.

The probe conversations (:mod:`grammar_parse.templates._probes`) are rendered with the template; since their reasoning,
content and tool calls are known, everything else in a rendering is the template's markup. Differencing the
renderings finds it: the assistant header the generation prompt ends with, the reasoning markers (and
whether the generation prompt pre-fills the opener), content wrappers, the end-of-turn token, the tool-call
section and per-call markers, the separator between calls, where the name goes and how the arguments are
written (a JSON object, tagged key/value pairs, or a pythonic call). Boundaries snap to special tokens and
tags, never to a common substring of the probe's own words.

The result is a ``.lark`` grammar in the authoring format (docs/grammar-authoring.md), headed by what was
found, built, and checked by reading every probe rendering back as detect does
(:func:`grammar_parse.templates._probes.read_back`, and stricter: no parse errors, the start anchor in the prompt); a
grammar that does not read them back is never returned::

    derived = derive_grammar(ChatTemplate(source, special_tokens={"eos_token": "</s>"}))
    parse_response(output, derived.grammar, prefix=prompt)   # prompt: the rendered generation prompt
    derived.report.call_open                                  # '<tool_call>' for a Qwen template

Errors are :class:`~grammar_parse.errors.GrammarError` naming the template, with the codes
``derive.no_calls`` (the template writes no tool calls), ``derive.shape`` (no consistent markup was
found) and ``derive.round_trip`` (the derived grammar misreads a probe; the message names the probe and
what came back).
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import regex

from .._engine.arguments import template_source_problem
from .._engine.events import Message
from .._engine.grammar import Grammar, build_grammar
from .._engine.session import parse_response
from .._engine.content import parse_content
from ..errors import GrammarError, GrammarParseError
from ._chat_template import ChatTemplate, load_chat_template
from ._probes import CONTENT, REASONING, TOOLS, USER, Probe, Rendering, read_back, render_probes

__all__ = ["Derived", "DeriveReport", "derive_grammar"]

_SOURCE = "<derived>"  # the derived grammar's source name in its own errors

# A marker unit: a special token (<|im_end|>, <｜Assistant｜>, <|turn>, <channel|>, [TOOL_CALLS], MiniMax's
# namespace marker ]<]minimax[>[), a tag (<think>, </tool_call>, <parameter=city>), a word, a whitespace run,
# or one other character. Boundaries between units are the only places a marker may start or end.
_SPECIAL = r"\]<\][a-z_]{1,32}\[>\[|<[^<>\n]{1,128}>|\[/?[A-Z][A-Z0-9_ ]{0,40}\]"
_SPECIAL_RE = regex.compile(_SPECIAL)
_UNITS = regex.compile(rf"{_SPECIAL}|\w+|\s+|.", regex.DOTALL)


# ---------------------------------------------------------------------------------------------- results


@dataclass(frozen=True)
class DeriveReport:
    """What derivation found in the renderings (marker strings as the template writes them)."""

    start_anchor: str
    end_of_turn: tuple[str, ...] = ()
    reasoning_open: str | None = None
    reasoning_close: str | None = None
    reasoning_prefilled: bool = False
    reasoning_stray_close: bool = False
    content_markers: tuple[str, ...] = ()
    section_open: str | None = None
    section_close: str | None = None
    call_open: str | None = None
    call_close: str | None = None
    separator: str | None = None
    name_encoding: str = ""
    argument_encoding: str = ""
    skipped: Mapping[str, str] = field(default_factory=dict)

    def lines(self) -> list[str]:
        """The report as ``key: value`` lines (the derived grammar's header comment)."""
        out = []
        for key, value in self.__dict__.items():
            if key == "skipped" or value in (None, (), "", False):
                continue
            out.append(f"{key}: {value!r}" if not isinstance(value, tuple) else f"{key}: {list(value)!r}")
        out += [f"not checked: {name} ({why})" for name, why in self.skipped.items()]
        return out


@dataclass(frozen=True)
class Derived:
    """A derived grammar, its ``.lark`` text, what was found, and the round trip that checked it."""

    grammar: Grammar
    lark: str
    report: DeriveReport
    round_trip: Mapping[str, list[str]]


_HINT = "This template's format needs a hand-written grammar (docs/grammar-authoring.md)."


class _Refusal(Exception):
    """Why no grammar is derived; :func:`derive_grammar` raises it as a GrammarError naming the template."""

    def __init__(self, code: str, message: str, hint: str = _HINT) -> None:
        super().__init__(message)
        self.code, self.message, self.hint = code, message, hint


# ---------------------------------------------------------------------------------------------- units


def _bounds(text: str, phrases: bool = True) -> set[int]:
    """Where a marker may start or end in ``text``: between marker phrases (a special token and the words
    glued to it: ``<|close|>think<|sep|>``), that is at whitespace and where one tag follows another; with
    ``phrases=False`` between any two units (for the variable parts of a connector: ``string="true">``)."""
    units = list(_UNITS.finditer(text))
    out = {0, len(text)}
    for prev, cur in zip(units, units[1:]):
        a, b = prev.group(), cur.group()
        if not phrases or a.isspace() or b.isspace() or ((a[-1] in ">]" or _is_special(a)) and b[0] in "<["):
            out.add(cur.start())
    return out


def _units(text: str) -> list[str]:
    return [m.group() for m in _UNITS.finditer(text)]


def _is_special(unit: str) -> bool:
    return _SPECIAL_RE.fullmatch(unit) is not None


def _prefix_len(a: str, b: str, phrases: bool = True) -> int:
    """The common prefix of ``a`` and ``b``, cut back to a boundary of both."""
    n = len(os.path.commonprefix([a, b]))
    ba, bb = _bounds(a, phrases), _bounds(b, phrases)
    while n and (n not in ba or n not in bb):
        n -= 1
    return n


def _suffix_len(a: str, b: str, phrases: bool = True) -> int:
    """The common suffix of ``a`` and ``b``, cut back to a boundary of both."""
    n = 0
    while n < min(len(a), len(b)) and a[-1 - n] == b[-1 - n]:
        n += 1
    ba, bb = _bounds(a, phrases), _bounds(b, phrases)
    while n and (len(a) - n not in ba or len(b) - n not in bb):
        n -= 1
    return n


def _common_prefix(texts: Sequence[str], phrases: bool = True) -> str:
    out = texts[0]
    for text in texts[1:]:
        out = out[:_prefix_len(out, text, phrases)]
    return out


def _common_suffix(texts: Sequence[str], phrases: bool = True) -> str:
    out = texts[0]
    for text in texts[1:]:
        n = _suffix_len(out, text, phrases)
        out = out[len(out) - n:]
    return out


def _trailing_phrase(text: str) -> str:
    """The last marker phrase of ``text`` (``<think>``, ``<|open|>think<|sep|>``): special tokens and the
    words glued between them, back to a token that follows another token or whitespace."""
    units = _units(text.rstrip())
    taken: list[str] = []
    while units:
        unit = units.pop()
        if unit.isspace():
            break
        taken.insert(0, unit)
        if _is_special(unit) and (not units or units[-1].isspace() or _is_special(units[-1])):
            break
    phrase = "".join(taken)
    return phrase if taken and _is_special(taken[0]) else ""


def _first_phrase(text: str) -> str:
    """The first marker phrase of ``text``: its leading special token and the words and tokens glued to it,
    up to a token that follows another token, ending with a token (``<|close|>think<|sep|>``)."""
    units = _units(text.lstrip())
    taken: list[str] = []
    for unit in units:
        if unit.isspace():
            break
        if taken and _is_special(unit) and _is_special(taken[-1]):
            break
        taken.append(unit)
    while taken and not _is_special(taken[-1]):
        taken.pop()  # words glued after the last token are text (</think>It is ...)
    return "".join(taken) if taken and _is_special(taken[0]) else ""


def _phrases(text: str) -> list[str]:
    """``text`` cut at its phrase boundaries, without the whitespace."""
    cuts = sorted(_bounds(text))
    return [p for a, b in zip(cuts, cuts[1:]) if (p := text[a:b].strip())]


def _has_special(text: str) -> bool:
    return _SPECIAL_RE.search(text) is not None


# ---------------------------------------------------------------------------------------------- regexes


def _re_literal(text: str) -> str:
    """``text`` as a regex, its inner whitespace runs loosened to ``\\s*``."""
    parts = regex.split(r"(\s+)", text)
    return "".join(r"\s*" if part.isspace() else regex.escape(part, special_only=True) for part in parts if part)


def _re_instances(instances: Sequence[str]) -> str:
    """A regex matching every instance of one connector (``:0<|arg|>`` and ``:1<|arg|>``; ``string="true">``
    and ``string="false">``): the common head and tail, the middle generalised, digits generalised."""
    stripped = list(instances)
    if len(set(stripped)) == 1:
        return _digits(stripped[0])
    head = _common_prefix(stripped, phrases=False)
    tail = _common_suffix([s[len(head):] for s in stripped], phrases=False)
    middles = [s[len(head):len(s) - len(tail)] for s in stripped]
    if all(m.isdigit() for m in middles):
        middle = r"\d+"
    else:
        stop = regex.escape(tail[:1], special_only=True) if tail and not tail[0].isalnum() else ""
        middle = rf"[^<>\n{stop}]*?"
    return _digits(head) + middle + _digits(tail)


def _digits(text: str) -> str:
    """``text`` as a regex with its numbers generalised (call indices: ``:0``, ``index="1"``)."""
    parts = regex.split(r"(\d+)", text)
    return "".join(r"\d+" if part.isdigit() else _re_literal(part) for part in parts if part)


def _name_class(after: str, extra: str = "") -> str:
    """A run of name characters that stops at what follows the name (and at markup)."""
    stop = after.lstrip()[:1] if after.strip() else ""
    chars = set("<>\"'[](){}|" + extra)
    if stop and not stop.isalnum() and stop != "_":
        chars.add(stop)
    escaped = "".join(regex.escape(c) if c not in "-" else r"\-" for c in sorted(chars))
    return rf"[^\s{escaped}]+"


def _lark_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _lark_regex(pattern: str) -> str:
    return "/" + pattern.replace("/", r"\/") + "/"


def _terminal(text: str) -> str:
    """A terminal definition for a marker: a string when it has no whitespace, else a loosened regex."""
    if regex.search(r"\s", text):
        return _lark_regex(_re_literal(text))
    return _lark_string(text)


# ---------------------------------------------------------------------------------------------- turns


@dataclass(frozen=True)
class _Turn:
    """One probe as the history renders it, from the start of the assistant turn; ``rendering`` is the
    original (the round trip parses it as given)."""

    rendering: Rendering
    text: str

    @property
    def probe(self) -> Probe:
        return self.rendering.probe


def _turns(template: ChatTemplate, renderings: Sequence[Rendering]) -> tuple[list[_Turn], str, str]:
    """The turns, the generation prompt's tail (what follows the history before the model writes) and the
    text before the turns (the conversation so far)."""
    kwargs = dict(renderings[0].kwargs) if renderings else {}
    user = [{"role": "user", "content": USER}]
    fulls = [r.prompt + r.output for r in renderings]
    try:
        nogen = template.render(user, tools=TOOLS, add_generation_prompt=False, **kwargs)
        gen = template.render(user, tools=TOOLS, add_generation_prompt=True, **kwargs)
    except Exception:  # noqa: BLE001 - the renderings alone then give the split
        nogen, gen = "", renderings[0].prompt + renderings[0].prefilled
    if nogen and gen.startswith(nogen) and all(f.startswith(nogen) for f in fulls):
        base = nogen
    else:
        base = _common_prefix([*fulls, gen], phrases=False)
    return [_Turn(r, f[len(base):]) for r, f in zip(renderings, fulls)], gen[len(base):], base


# ---------------------------------------------------------------------------------------------- shape


@dataclass(frozen=True)
class _Reasoning:
    open: str
    close: str
    prefilled: bool
    glue: str | None  # markup between the close and the content that repeats the header (harmony's <|start|>assistant)


@dataclass(frozen=True)
class _Encoding:
    """How one call is written: ``kind`` is json_object, json_list, json_name_keys, name_json, tagged or
    pythonic; ``name_path`` / ``args_path`` locate the name and arguments inside a JSON call."""

    kind: str
    name_path: str = "name"
    args_path: str = "arguments"
    listed: bool = False  # one JSON / pythonic list holds every call of a turn
    dialect: str = ""  # the string quote of a JSON dialect with bare keys (Gemma's {city:<|"|>Paris<|"|>})


@dataclass(frozen=True)
class _Slot:
    """Where one of a call's parts is written: its name (name_again when written twice), id, args (a JSON
    value), or an argument's key and value."""

    kind: str
    start: int
    end: int


@dataclass(frozen=True)
class _Params:
    open: str  # regex up to the key
    key_class: str
    connector: str  # regex between the key and the value
    close: str  # literal
    open_text: str  # the opener as written
    separators: tuple[str, str] = ("", "")  # whitespace the template writes around every value (Qwen3's newlines)


@dataclass(frozen=True)
class _Elements:
    """Arguments written as elements named by their key, objects and lists nested (MiniMax-M3's
    ``]<]minimax[>[<city>Paris]<]minimax[>[</city>``): the marker before every tag and the list element's name."""

    marker: str
    item: str | None

    @property
    def open_text(self) -> str:
        return self.marker + "<"

    def content_args(self) -> dict[str, Any]:
        """The xml-inline content parser's arguments that read them (as the built-in minimax_m3 grammar)."""
        m = regex.escape(self.marker, special_only=True)
        key = r"[^/>\s][^>\s]{0,127}"
        elements: dict[str, Any] = {"open": f"{m}<(?P<key>{key})>", "close": f"{m}</(?P<key>{key})>"}
        if self.item is not None:
            elements["item"] = self.item
        return {"tag_pattern": f"{m}<(?P<key>{key})>(?P<value>(?:(?!{m}<).)*?){m}</(?P=key)>",
                "merge_duplicates": True, "elements": elements}


@dataclass
class _Shape:
    """Everything the grammar is written from."""

    anchor: str
    end: tuple[str, ...]
    reasoning: _Reasoning | None
    stray_close: bool
    marks: tuple[str, ...]
    encoding: _Encoding
    section_open: str = ""
    section_close: str = ""
    call_open: str = ""  # regex ("" with a lookahead opener)
    call_open_text: str = ""  # as the template writes it, for the report
    call_close: str = ""  # literal ("" = where the JSON value ends)
    separator: str = ""
    params: _Params | None = None
    elements: _Elements | None = None
    first_key: str = "name"
    has_id: bool = False


def _find_reasoning(by: Mapping[str, _Turn], header: str, gen_tail: str) -> tuple[_Reasoning | None, str]:
    """The reasoning markers and the header without an opener it ends with (which is then replayed).

    Read from the reasoning probe, or from the reasoning-and-call probe when a template renders reasoning
    only before tool calls; the probe without reasoning shows whether an opener in the header belongs to
    an (empty) reasoning block."""
    for source, plain_name in (("reasoning", "content"), ("reasoning_call", "one_call")):
        turn, plain = by.get(source), by.get(plain_name)
        if turn is not None and plain is not None and REASONING in turn.text[len(header):]:
            break
    else:
        return None, header
    at = turn.text.index(REASONING, len(header))
    before, after = turn.text[len(header):at], turn.text[at + len(REASONING):]
    closer = _first_phrase(after)
    if not closer:
        raise _Refusal("derive.shape", f"the {source} probe's reasoning is not followed by a closing marker")
    glue = None
    head = header.strip()
    if source == "reasoning" and CONTENT in after:
        rest = after[:after.index(CONTENT)].strip()[len(closer):].strip()
        if head and rest.startswith(head):
            glue = head
    opener = before.strip()
    kept = header
    if not opener:
        phrase = _trailing_phrase(header)
        if phrase and plain.text[len(header):].lstrip().startswith(closer):
            opener = phrase
            kept = header[:header.rstrip().rindex(phrase)]
    if not opener:
        raise _Refusal("derive.shape", f"the {source} probe's reasoning has no opening marker in the turn or the "
                                     "generation prompt", hint="A model that always reasons without an opener "
                                     "needs a hand-written grammar.")
    prefilled = gen_tail[len(kept):].lstrip().startswith(opener)
    return _Reasoning(opener, closer, prefilled, glue), kept


def _anchor(header: str, base: str) -> str:
    """The start anchor: the assistant header, with the conversation's last special token in front when the
    header has none of its own (Mistral's turn starts right after [/INST])."""
    if _has_special(header) or len(header.strip()) >= 8:
        return header
    tokens = list(_SPECIAL_RE.finditer(base))
    if not tokens or base[tokens[-1].end():].strip():
        return header
    return base[tokens[-1].start():] + header


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [s for k, v in value.items() for s in (str(k), *_strings(v))]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings(v)]
    return []


def _payload_end(turn: _Turn, body: str) -> int:
    """Where the last of the probe's own words ends in ``body`` (what the end-of-turn marker must follow)."""
    probe = turn.probe
    words = [w for w in (probe.content, probe.reasoning) if w]
    words += [s for name, arguments in probe.calls for s in (name, *_strings(dict(arguments)))]
    ends = [at + len(w) for w in words if (at := body.rfind(w)) >= 0]
    return max(ends, default=0)


def _end_markers(template: ChatTemplate, turns: Sequence[_Turn], header: str) -> tuple[str, ...]:
    """End-of-turn markers: the first marker phrase of what every turn ends with, found nowhere before the
    probe's own words end; when the turns end differently (functionary's <|eot_id|> / <|eom_id|>), each
    turn's own last token, and what the template writes when another message follows."""
    bodies = [t.text[len(header):] for t in turns]
    after = [_payload_end(t, b) for t, b in zip(turns, bodies)]
    tails = [b[a:] for b, a in zip(bodies, after)]

    def clean(literal: str) -> bool:
        return all(b.find(literal) < 0 or b.find(literal) >= a for b, a in zip(bodies, after))

    common = _common_suffix(tails).strip()
    if common:
        units = _units(common)
        for n in range(1, len(units) + 1):
            literal = "".join(units[:n]).rstrip()
            if literal and (_has_special(literal) or n == len(units)) and clean(literal):
                return (literal,)
        return ()
    found: list[str] = []
    for body in bodies:
        units = _units(body.rstrip())
        last = units[-1] if units else ""
        if _is_special(last) and last not in found and clean(last) and all(
                b.count(last) == 1 for b in bodies if last in b):
            found.append(last)
    return tuple(dict.fromkeys([*found, *_next_turn_ends(template, turns, header, found)]))


def _next_turn_ends(template: ChatTemplate, turns: Sequence[_Turn], header: str,
                    known: Sequence[str]) -> tuple[str, ...]:
    """For turns that end with no marker: the token a template writes only when another message follows
    (Apertus's <|assistant_end|>), or the next message's first token, which is where the model stops (GLM's
    <|user|>, and <|observation|> after tool calls)."""
    follow = {"content": {"role": "user", "content": "Thanks."},
              "one_call": {"role": "tool", "tool_call_id": "call00001", "name": "get_weather", "content": "Sunny."}}
    found: list[str] = []
    bodies = [(t, t.text[len(header):]) for t in turns]
    for turn in turns:
        body = turn.text[len(header):]
        if turn.probe.name not in follow or any(body.find(e, _payload_end(turn, body)) >= 0 for e in known):
            continue
        r = turn.rendering
        message = turn.probe.message(arguments_as_text=r.arguments_as_text)
        try:
            longer = template.render([{"role": "user", "content": USER}, message, follow[turn.probe.name]],
                                     tools=TOOLS, add_generation_prompt=False, **r.kwargs)
        except Exception:  # noqa: BLE001 - a template may refuse the longer conversation: nothing learnt
            continue
        alone = r.prompt + r.output
        n = len(os.path.commonprefix([alone, longer]))
        units = _units(longer[n:].lstrip())
        marker = units[0] if units and _is_special(units[0]) else ""
        if marker and marker not in found and all(
                b.find(marker) < 0 or b.find(marker) >= _payload_end(t, b) for t, b in bodies):
            found.append(marker)
    return tuple(found)


def _end_at(body: str, ends: Sequence[str]) -> int:
    found = [body.find(e) for e in ends if e in body]
    return min(found) if found else len(body)


def _strip_lead(body: str, reasoning: _Reasoning | None, marks: Sequence[str]) -> int:
    """Where the turn's own text starts: past whitespace, the reasoning block (or a bare close), and the
    content markers written before it."""
    at = 0
    changed = True
    while changed:
        changed = False
        while at < len(body) and body[at].isspace():
            at += 1
        if reasoning is not None:
            if body.startswith(reasoning.open, at):
                close = body.find(reasoning.close, at + len(reasoning.open))
                if close >= 0:
                    at, changed = close + len(reasoning.close), True
                    continue
            if body.startswith(reasoning.close, at):
                at, changed = at + len(reasoning.close), True
                continue
        for mark in marks:
            if mark and body.startswith(mark, at):
                at, changed = at + len(mark), True
                break
    return at


def _content_marks(by: Mapping[str, _Turn], header: str, reasoning: _Reasoning | None,
                   ends: Sequence[str], gen_tail: str, exclude: Sequence[str] = ()) -> tuple[str, ...]:
    """Markup around content (<|START_TEXT|> ... <|END_TEXT|>, <|channel|>final<|message|>), and what the
    generation prompt leaves after the header (a pre-written <think></think>): dropped wherever it shows."""
    marks: list[str] = []
    if reasoning is not None and reasoning.glue:
        marks.append(reasoning.glue)
    plain = by.get("content")
    if plain is not None and CONTENT in plain.text[len(header):]:
        body = plain.text[len(header):]
        at = body.index(CONTENT)
        pre = body[_strip_lead(body[:at], reasoning, ()):at].strip()
        tail = body[at + len(CONTENT):]
        post = tail[:_end_at(tail, ends)].strip()
        marks += [m for m in (pre, post) if m]
    rest = gen_tail[len(header):].strip()
    if reasoning is not None:
        for marker in (reasoning.open, reasoning.close):
            rest = rest[len(marker):].lstrip() if rest.startswith(marker) else rest
    marks += _phrases(rest)
    taken = {reasoning.open, reasoning.close, *exclude} if reasoning is not None else set(exclude)
    return tuple(m for m in dict.fromkeys(marks) if m not in taken)


# ---------------------------------------------------------------------------------------------- calls


def _json_values(text: str) -> list[tuple[int, int, Any]]:
    """Every outermost JSON object or array in ``text``: (start, end, value)."""
    decoder = json.JSONDecoder()
    out: list[tuple[int, int, Any]] = []
    i = 0
    while i < len(text):
        if text[i] in "{[":
            try:
                value, end = decoder.raw_decode(text, i)
            except ValueError:
                i += 1
                continue
            out.append((i, end, value))
            i = end
            continue
        i += 1
    return out


def _same_arguments(value: Any, arguments: Mapping[str, Any]) -> bool:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return False
    return isinstance(value, dict) and value == dict(arguments)


def _paths(value: Any, name: str, arguments: Mapping[str, Any], prefix: str = "") -> tuple[str, str] | None:
    """Where a JSON call keeps its name and arguments (``name`` / ``parameters``, ``function.name`` ...)."""
    if not isinstance(value, dict):
        return None
    name_key = next((k for k, v in value.items() if v == name), None)
    args_key = next((k for k, v in value.items() if _same_arguments(v, arguments)), None)
    if name_key is not None and args_key is not None:
        return prefix + name_key, prefix + args_key
    if not prefix:
        for key, inner in value.items():
            found = _paths(inner, name, arguments, key + ".")
            if found is not None:
                return found
    return None


def _detect(body: str, name: str, arguments: Mapping[str, Any]) -> _Encoding | None:
    """How the one-call probe's call is written."""
    for start, _end, value in _json_values(body):
        listed = isinstance(value, list)
        items = value if listed else [value]
        if not items:
            continue
        paths = _paths(items[0], name, arguments)
        if paths is not None:
            return _Encoding("json_list" if listed else "json_object", paths[0], paths[1], listed)
        if items[0] == {name: dict(arguments)}:
            return _Encoding("json_name_keys", listed=True)
        if not listed and value == dict(arguments) and name in body[:start]:
            return _Encoding("name_json")
    key = next(iter(arguments))
    quote = _dialect_quote(body, name, key, arguments[key])
    if quote and any(v == dict(arguments) for _, _, v in _dialect_values(body, quote)):
        return _Encoding("name_json", dialect=quote)
    call = regex.search(rf"{regex.escape(name)}\(\s*{regex.escape(key)}\s*=", body)
    if call is not None:
        return _Encoding("pythonic", listed=body[:call.start()].rstrip().endswith("["))
    at = body.find(name)
    if at >= 0 and body.find(key, at) >= 0 and body.find(str(arguments[key]), body.find(key, at)) >= 0:
        return _Encoding("tagged")
    return None


def _dialect_quote(body: str, name: str, key: str, value: Any) -> str:
    """The string quote of arguments written ``{key:QUOTEvalueQUOTE}`` after the name ("" if not so)."""
    match = regex.search(rf"{regex.escape(name)}\W{{0,8}}\{{{regex.escape(key)}:(\S{{1,8}}?){regex.escape(str(value))}"
                         r"\1[,}]", body)
    return match.group(1) if match is not None and not match.group(1).isalnum() else ""


def _dialect_values(body: str, quote: str) -> list[tuple[int, int, Any]]:
    """Every ``{...}`` of ``body`` that parses in the bare-key dialect with ``quote`` for strings."""
    out: list[tuple[int, int, Any]] = []
    at = body.find("{")
    while at >= 0:
        end = _closing(body.replace(quote, "\x00" * len(quote)), at, "{}[]")
        if end > at:
            try:
                out.append((at, end, parse_content(body[at:end], "json", _dialect_args(quote))))
            except GrammarParseError:
                pass
            else:
                at = body.find("{", end)
                continue
        at = body.find("{", at + 1)
    return out


def _dialect_args(quote: str) -> dict[str, Any]:
    return {"unquoted_keys": True, "string_delims": [[quote, quote]]}


def _value_at(body: str, value: Any, start: int) -> tuple[int, int] | None:
    """Where an argument value is written after ``start`` (as the text, JSON, or Python's repr)."""
    if isinstance(value, str):
        forms = [value]
    else:
        forms = [json.dumps(value), json.dumps(value, separators=(",", ":")), str(value), str(value).lower(),
                 json.dumps(value, ensure_ascii=False)]
    found = [(body.find(f, start), f) for f in forms]
    hits = [(at, at + len(f)) for at, f in found if at >= 0]
    return min(hits) if hits else None


def _closing(body: str, start: int, pairs: str = "()[]{}") -> int:
    """The index after the bracket matching the one at ``start`` (quotes respected); -1 if unclosed."""
    opens, closes = pairs[0::2], pairs[1::2]
    depth, quote, i = 0, "", start
    while i < len(body):
        ch = body[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch in opens:
            depth += 1
        elif ch in closes:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return -1


@dataclass(frozen=True)
class _Block:
    """One call (or one list of calls) in a turn, with its inner slots."""

    start: int
    end: int
    calls: int
    slots: tuple[_Slot, ...] = ()


def _key_at(body: str, key: str, start: int) -> int:
    """Where an argument's key is next written as a whole word (len(body) when it is not)."""
    match = regex.compile(rf"(?<!\w){regex.escape(key)}(?!\w)").search(body, start)
    return match.start() if match is not None else len(body)


#: A probe's calls as (name, arguments), in order.
_Calls = Sequence[tuple[str, Mapping[str, Any]]]


def _locate(body: str, probe: Probe, encoding: _Encoding) -> list[_Block] | None:
    """The probe's calls in ``body`` as blocks; None when they are not all where the encoding puts them."""
    blocks: list[_Block] = []
    pos = 0
    calls = list(probe.calls)
    ids = [c["id"] for c in probe.message().get("tool_calls", [])]
    index = 0
    values = _dialect_values(body, encoding.dialect) if encoding.dialect else \
        _json_values(body) if encoding.kind.startswith("json") or encoding.kind == "name_json" else []
    while index < len(calls):
        name, arguments = calls[index]
        if encoding.kind in ("json_object", "json_list", "json_name_keys"):
            hit = _json_block(values, calls, index, pos, encoding)
        elif encoding.kind == "name_json":
            hit = _name_json_block(body, values, pos, name, arguments, ids[index] if index < len(ids) else "")
        elif encoding.kind == "pythonic":
            hit = _pythonic_block(body, calls, index, pos, encoding.listed)
        else:
            hit = _tagged_block(body, pos, name, arguments)
        if hit is None:
            return None
        blocks.append(hit)
        pos = hit.end
        index += hit.calls
    return blocks


def _json_block(values: Sequence[tuple[int, int, Any]], calls: _Calls, index: int, pos: int,
                encoding: _Encoding) -> _Block | None:
    """The first JSON value from ``pos`` that holds the calls from ``index`` on (one, or a list of them)."""
    for start, end, value in values:
        if start < pos:
            continue
        items = value if isinstance(value, list) else [value]
        want = calls[index:index + len(items)]
        if encoding.kind == "json_name_keys":
            ok = [dict(i) if isinstance(i, dict) else None for i in items] == [{n: dict(a)} for n, a in want]
        else:
            ok = len(want) == len(items) and all(_paths(i, n, a) == (encoding.name_path, encoding.args_path)
                                                 for i, (n, a) in zip(items, want))
        if ok:
            return _Block(start, end, len(items))
    return None


def _name_json_block(body: str, values: Sequence[tuple[int, int, Any]], pos: int, name: str,
                     arguments: Mapping[str, Any], ident: str) -> _Block | None:
    """A call written as its name, then its arguments as JSON (and its id, where the template writes one)."""
    found = next(((s, e) for s, e, v in values if s >= pos and v == dict(arguments)), None)
    if found is None:
        return None
    at = body.rfind(name, pos, found[0])
    if at < 0:
        return None
    slots = [_Slot("name", at, at + len(name)), _Slot("args", found[0], found[1])]
    ident_at = body.find(ident, pos, found[0]) if ident else -1
    if ident_at >= 0:  # the call id the template writes (Mistral's [CALL_ID], Solar's <|tool_call:begin|>)
        slots.append(_Slot("id", ident_at, ident_at + len(ident)))
    slots.sort(key=lambda s: s.start)
    return _Block(slots[0].start, found[1], 1, tuple(slots))


def _pythonic_block(body: str, calls: _Calls, index: int, pos: int, listed: bool) -> _Block | None:
    """A call written as Python (``name(key=value)``), or the list of calls around it."""
    name = calls[index][0]
    at = body.find(name + "(", pos)
    if at < 0:
        return None
    if listed:
        start = body.rfind("[", pos, at)
        end = _closing(body, start, "[]") if start >= 0 else -1
        if end < 0:
            return None
        count = len([n for n, _ in calls[index:] if body.find(n + "(", start, end) >= 0])
        return _Block(start, end, max(count, 1))
    end = _closing(body, at + len(name))
    if end < 0:
        return None
    return _Block(at, end, 1)


def _tagged_block(body: str, pos: int, name: str, arguments: Mapping[str, Any]) -> _Block | None:
    """A call written as its name, then each argument's key and value in markup, as slots."""
    at = body.find(name, pos)
    keys = list(arguments)
    if at < 0 or not keys:
        return None
    first = min(_key_at(body, key, at + len(name)) for key in keys)
    if first >= len(body):
        return None
    last = body.rfind(name, at, first)
    slots = [_Slot("name", at, at + len(name))]
    if last != at:  # the name written twice (muse's " to=NAME<|message|>... invoke name="NAME""")
        slots.append(_Slot("name_again", last, last + len(name)))
    at = last
    cur = at + len(name)
    written = sorted(arguments.items(), key=lambda kv: _key_at(body, kv[0], cur))  # (some templates sort)
    for key, value in written:
        key_at = _key_at(body, key, cur)
        where = _value_at(body, value, key_at + len(key)) if key_at < len(body) else None
        if where is None:
            return None
        slots += [_Slot("key", key_at, key_at + len(key)), _Slot("value", where[0], where[1])]
        cur = where[1]
        closed = _element_close(body, key, key_at, where)
        if closed is not None:  # (the value's close tag is the argument's, not the call's)
            slots.append(_Slot("element_close", cur, closed))
            cur = closed
    return _Block(slots[0].start, cur, 1, tuple(slots))


def _element_close(body: str, key: str, key_at: int, value: tuple[int, int]) -> int | None:
    """Where an argument written as an element closes (``<city>Paris</city>``, or MiniMax-M3's
    ``]<]minimax[>[<city>Paris]<]minimax[>[</city>``: the same marker before both tags), or None when the
    argument is not written so."""
    tag_end = key_at + len(key)
    if key_at == 0 or body[key_at - 1] != "<" or body[tag_end:tag_end + 1] != ">" or value[0] != tag_end + 1:
        return None
    at = body.find(f"</{key}>", value[1])
    marker = body[value[1]:at] if at >= 0 else ""
    if at < 0 or len(marker) > 32 or regex.search(r"\s", marker) or not body[:key_at - 1].endswith(marker):
        return None
    return at + len(key) + 3


def _elements(located: Mapping[str, tuple[str, list[_Block]]], by: Mapping[str, _Turn],
              header: str) -> _Elements | None:
    """The element form of tagged arguments, when every argument of every call is written so with one marker;
    the list element's name from the typed probe (how it writes a list argument), if it is rendered."""
    markers = set()
    for body, blocks in located.values():
        for block in blocks:
            parts = [s for s in block.slots if s.kind in ("key", "value", "element_close")]
            if not parts or [s.kind for s in parts] != ["key", "value", "element_close"] * (len(parts) // 3):
                return None
            for key, close in zip(parts[0::3], parts[2::3]):  # (the close is marker + "</" + key + ">")
                markers.add(body[close.start:close.end - (key.end - key.start) - 3])
    if len(markers) != 1:
        return None
    marker = markers.pop()
    item = None
    typed = by.get("typed_arguments")
    if typed is not None:
        for name, value in typed.probe.calls[0][1].items():
            if isinstance(value, list) and value:
                opened = regex.escape(f"{marker}<{name}>{marker}<")
                found = regex.search(opened + r"([^/>\s<]+)>", typed.text[len(header):])
                item = found.group(1) if found is not None else item
    return _Elements(marker, item)


def _group(kind: str, after: str, head: str) -> str:
    """A name or id group; its run also stops at a character of the opener's head (``=`` of ``to=functions.``),
    so that a flood of heads is searched in linear time."""
    stop = next((c for c in head if not c.isalnum() and c not in "_.-: "), "")
    return "(?P=name)" if kind == "name_again" else f"(?P<{kind}>{_name_class(after, stop)})"


def _call_shape(by: Mapping[str, _Turn], header: str, reasoning: _Reasoning | None, marks: Sequence[str],
                ends: Sequence[str]) -> dict[str, Any]:
    """The tool-call markup: section and per-call markers, separator, and where the name and arguments go."""
    one = by["one_call"]
    name, arguments = one.probe.calls[0]
    encoding = _detect(one.text[len(header):], name, arguments)
    if encoding is None:
        raise _Refusal("derive.shape", f"the one-call probe's call ({name} with {dict(arguments)}) is written in no "
                                     "known form (JSON, a name then JSON or tagged arguments, pythonic)")
    located = _locate_probes(by, header, encoding)
    if "one_call" not in located:
        raise _Refusal("derive.shape", f"the one-call probe's call is not found as a {encoding.kind} call")
    pick = "two_calls" if len(located.get("two_calls", ("", []))[1]) >= 2 else "one_call"
    body, blocks = located[pick]
    section_open, section_close, separator, call_open, call_close = _call_markers(body, blocks, reasoning, marks,
                                                                                  ends)
    out: dict[str, Any] = {"encoding": encoding, "section_open": section_open.strip(),
                           "section_close": section_close.strip(), "separator": separator.strip(),
                           "call_open_text": call_open.strip()}
    call_open, call_close = call_open.strip(), call_close.strip()
    out["open_literal"] = call_open
    if encoding.kind in ("json_object", "json_list", "json_name_keys", "pythonic"):
        if encoding.kind == "json_object":
            first = next(v for s, _, v in _json_values(body) if s == blocks[0].start)
            out["first_key"] = next(iter(first))
        out["call_open"] = _re_literal(call_open) if call_open else ""
        out["call_close"] = call_close
        return out
    out.update(_named_opener(located, by, header, encoding, call_open, call_close, marks))
    return out


def _locate_probes(by: Mapping[str, _Turn], header: str, encoding: _Encoding) -> dict[str, tuple[str, list[_Block]]]:
    """Each informative call probe's body (its turn after the header) and its calls located in it, where
    they are all found as ``encoding`` writes them."""
    located: dict[str, tuple[str, list[_Block]]] = {}
    for probe_name in ("one_call", "two_calls", "typed_arguments", "reasoning_call"):
        turn = by.get(probe_name)
        if turn is None or not turn.rendering.informative:
            continue
        body = turn.text[len(header):]
        blocks = _locate(body, turn.probe, encoding)
        if blocks is not None:
            located[probe_name] = (body, blocks)
    return located


def _call_markers(body: str, blocks: Sequence[_Block], reasoning: _Reasoning | None, marks: Sequence[str],
                  ends: Sequence[str]) -> tuple[str, str, str, str, str]:
    """The text around the calls of one turn, as written (unstripped): section open and close, the
    separator between two calls, and one call's open and close. With two calls, what stands between them
    tells a call's own markers from the section's; with one, all of it is the call's."""
    start = _strip_lead(body, reasoning, marks)
    end = _end_at(body, ends)
    lead, trail = body[start:blocks[0].start], body[blocks[-1].end:end]
    if len(blocks) < 2:
        return "", "", "", lead, trail
    inter = body[blocks[0].end:blocks[1].start]
    close_n = _prefix_len(trail, inter)
    open_n = _suffix_len(lead, inter[close_n:])
    call_open, call_close = lead[len(lead) - open_n:], trail[:close_n]
    separator = inter[close_n:len(inter) - open_n]
    return lead[:len(lead) - open_n], trail[close_n:], separator, call_open, call_close


def _named_opener(located: Mapping[str, tuple[str, list[_Block]]], by: Mapping[str, _Turn], header: str,
                  encoding: _Encoding, call_open: str, call_close: str, marks: Sequence[str]) -> dict[str, Any]:
    """The shape's fields for calls whose name (and id) are in the opener: its pattern runs from the open
    marker to the arguments; tagged arguments' markup (parameters or elements) and the call's close."""
    elements = _elements(located, by, header) if encoding.kind == "tagged" else None
    params = _params(located) if encoding.kind == "tagged" and elements is None else None
    tags = params or elements
    heads = _opener_heads(located, tags)
    out: dict[str, Any] = {"call_open": _opener_pattern(heads, call_open, marks),
                           "has_id": any(kind == "id" for kind, _ in heads[0])}
    out["call_open_text"] = call_open + "".join(
        (text.strip() if not kind else text) + (f"{{{kind}}}" if kind else "") for kind, text in heads[0])
    if params is not None:
        out["params"] = params
        if call_close.startswith(params.close):
            call_close = call_close[len(params.close):].strip()
    if elements is not None:
        out["elements"] = elements
    if tags is not None and not call_close:
        raise _Refusal("derive.shape", "the calls' tagged arguments are not followed by a closing marker")
    out["call_close"] = call_close
    return out


def _opener_heads(located: Mapping[str, tuple[str, list[_Block]]],
                  tags: _Params | _Elements | None) -> list[list[tuple[str, str]]]:
    """Per located call, what its opener holds before the payload: (slot kind, text before it) ..., then
    ("", text before the payload, up to the tags' opener); refused unless every call has the same slots."""
    heads: list[list[tuple[str, str]]] = []
    for body_i, blocks_i in located.values():
        for block in blocks_i:
            payload = next(s for s in block.slots if s.kind in ("args", "key"))
            head = [s for s in block.slots if s.start < payload.start]
            seq = [(s.kind, body_i[head[k - 1].end:s.start] if k else "") for k, s in enumerate(head)]
            final = body_i[head[-1].end:payload.start]
            if tags is not None:
                cut = final.rfind(tags.open_text)
                final = final[:cut] if cut >= 0 else final
            heads.append([*seq, ("", final)])
    shapes = {tuple(kind for kind, _ in h) for h in heads}
    if len(shapes) != 1:
        raise _Refusal("derive.shape", "the calls' names and ids are not written the same way in every probe")
    return heads


def _opener_pattern(heads: Sequence[Sequence[tuple[str, str]]], call_open: str, marks: Sequence[str]) -> str:
    """The opener's regex: the open marker, then each slot's group between the texts every call agrees on."""
    pattern = _re_literal(call_open)
    for k, (kind, _) in enumerate(heads[0]):
        connector = _re_instances([h[k][1].rstrip() if k == len(heads[0]) - 1 else h[k][1] for h in heads]) if k else ""
        pattern += connector
        if kind:
            pattern += _group(kind, heads[0][k + 1][1], call_open)
    for mark in marks:
        if mark.startswith(call_open) and len(mark) > len(call_open) and regex.match(pattern, mark):
            # A content marker the opener would read as a call (functionary's ">>>all" before text).
            pattern = _re_literal(call_open) + f"(?!{regex.escape(mark[len(call_open):])}\\b)" + \
                pattern[len(_re_literal(call_open)):]
    return pattern


def _pairs(block: _Block) -> Iterator[tuple[_Slot, _Slot]]:
    kv = [s for s in block.slots if s.kind in ("key", "value")]
    return zip(kv[0::2], kv[1::2])


def _params(located: Mapping[str, tuple[str, list[_Block]]]) -> _Params:
    """Tagged arguments: the key's opener, the key-to-value connector and the value's closer (from the probe
    with the most arguments)."""
    body, blocks = located.get("typed_arguments") or located["one_call"]
    block = blocks[0]
    name = [s for s in block.slots if s.kind in ("name", "name_again")][-1]
    pairs = list(_pairs(block))
    to_key = body[name.end:pairs[0][0].start]
    rest = body[pairs[-1][1].end:]
    between = [body[pairs[j][1].end:pairs[j + 1][0].start] for j in range(len(pairs) - 1)]
    if between:
        open_raw = _common_suffix([*between, to_key])
        close_raw = _common_prefix([*between, rest])
    else:
        close_raw = _first_phrase(rest)
        cut = max(to_key.rstrip().rfind("<"), to_key.rstrip().rfind("["))
        open_raw = to_key[cut:] if cut >= 0 else ""
    opener, closer = open_raw.strip(), close_raw.strip()
    if not opener or not closer:
        raise _Refusal("derive.shape", "the tagged arguments have no opening or closing marker")
    connectors = [b[k.end:v.start].rstrip() for b, bl in located.values() for blk in bl for k, v in _pairs(blk)]
    connector = _re_instances(connectors)
    return _Params(_re_literal(opener), _name_class(connectors[0]), connector, closer, opener,
                   _separators(located, closer))


def _separators(located: Mapping[str, tuple[str, list[_Block]]], closer: str) -> tuple[str, str]:
    """The whitespace the template writes around every value, after the value's opener and before its closer
    (Qwen3-Coder's ``<parameter=city>\\nParis\\n</parameter>``): the markup a value loses, and only that, so
    that the model's own whitespace (an indented line of code) stays. "" where the renderings disagree."""
    leads, trails = set(), set()
    for body, blocks in located.values():
        for block in blocks:
            for key, value in _pairs(block):
                gap = body[key.end:value.start]
                leads.add(gap[len(gap.rstrip()):])
                at = body.find(closer, value.end)
                trails.add(body[value.end:at] if at >= 0 and not body[value.end:at].strip() else "")
    return (leads.pop() if len(leads) == 1 else "", trails.pop() if len(trails) == 1 else "")


# ---------------------------------------------------------------------------------------------- grammar


def _alternatives(markers: Sequence[str]) -> str:
    return " | ".join(_terminal(m) for m in markers)


def _region_directives(shape: _Shape) -> list[str]:
    enc = shape.encoding
    call_id = {"id": "{id}"} if shape.has_id else {}
    if enc.kind == "json_object":
        spec: dict[str, Any] = {"content": "json", "repeats": True, "transform": {"type": "function", "function": {
            "name": f"{{content.{enc.name_path}}}", "arguments": f"{{content.{enc.args_path}}}"}}}
    elif enc.kind == "json_list":
        spec = {"content": "json", "repeats": True, "transform": {"type": "function", "function": {
            "name": f"{{{enc.name_path}}}", "arguments": f"{{{enc.args_path}}}"}},
            "transform_each": True, "extend": True}
    elif enc.kind in ("json_name_keys", "pythonic"):
        spec = {"content": "json-name-keys" if enc.kind == "json_name_keys" else "pythonic", "repeats": True,
                "transform": {"type": "function", "function": {"name": "{name}", "arguments": "{arguments}"}},
                "transform_each": True, "extend": True}
    elif shape.elements is not None:
        spec = {"content": "xml-inline", "content_args": shape.elements.content_args(), "repeats": True,
                "transform": {**call_id, "type": "function", "function": {"name": "{name}", "arguments": "{content}"}}}
    elif enc.kind == "name_json":
        spec = {"content": "json", "repeats": True,
                "transform": {**call_id, "type": "function", "function": {"name": "{name}", "arguments": "{content}"}}}
        if enc.dialect:
            spec["content_args"] = _dialect_args(enc.dialect)
    else:
        spec = {"repeats": True, "scope": {"arguments": {}},
                "transform": {**call_id, "type": "function",
                              "function": {"name": "{name}", "arguments": "{arguments}"}}}
    out = [f"//@ region tool_calls {json.dumps(spec, ensure_ascii=False)}"]
    if shape.params is not None:
        # A value is the model's text as written (an indented line of code keeps its indentation), less the
        # whitespace the template itself writes around every value.
        args: dict[str, Any] = {"strip": False}
        if any(shape.params.separators):
            args["separators"] = list(shape.params.separators)
        value: dict[str, Any] = {"parent": "tool_calls", "key": "arguments", "entry_key": "{key}", "content": "text",
                                 "content_args": args}
        out.append(f"//@ region parameter {json.dumps(value, ensure_ascii=False)}")
    return out


def _lark_text(shape: _Shape, name: str, origin: str, report: DeriveReport) -> str:
    """The grammar for ``shape`` in the authoring format: a header naming where it came from and what was
    found, the directives, the rules, the terminals."""
    header = [f"// Derived from {origin} by rendering the probe conversations with it (grammar_parse.templates._derive);",
              "// checked by reading every rendering back. Markers found:",
              *[f"//   {line}" for line in report.lines()]]
    directives = ["//@ grammar_parse 1", f"//@ name {json.dumps(name)}", '//@ defaults {"role": "assistant"}',
                  f"//@ start_anchor {json.dumps(shape.anchor, ensure_ascii=False)}"]
    if shape.reasoning is not None:
        directives.append('//@ region reasoning_content {"content": "text"}')
    directives += ['//@ region content {"content": "text"}', *_region_directives(shape)]
    rules, terminals, declared = _rules(shape), _terminals(shape), ["CONTENT_TEXT", "TOOL_CALLS_TEXT", "UNCLAIMED"]
    if shape.reasoning is not None:
        declared.insert(0, "REASONING_CONTENT_TEXT")
    if shape.params is not None:
        declared.append("PARAMETER_TEXT")
    if not shape.call_close:
        declared.append("TOOL_CALLS_CLOSE")  # the call ends where its JSON value does
    return "\n".join([*header, *directives, "", *rules, "", *terminals, "%declare " + " ".join(declared)]) + "\n"


def _rules(shape: _Shape) -> list[str]:
    think = " _think?" if shape.reasoning is not None else ""
    end = " _end?" if shape.end else ""
    marks = " | MARK" if shape.marks else ""
    if not shape.call_open and not shape.section_open:
        # Calls with no markup of their own (a bare JSON object) only where the turn starts, as vLLM and
        # llama.cpp read them: a JSON object later in the text stays content.
        calls = "_calls (CALL_SEP? _calls)*" if shape.separator else "_calls+"
        out = [f"start: LEADING_SPACE*{think} (_all_calls content? | content)?{end}", f"_all_calls: {calls}",
               f"content: (CONTENT_TEXT{marks})+"]
    else:
        sep = " | CALL_SEP" if shape.separator and not shape.section_open else ""
        out = [f"start: LEADING_SPACE*{think} content?{end}", f"content: (CONTENT_TEXT | _calls{marks}{sep})+"]
    if shape.reasoning is not None:
        if shape.end:  # a turn that ends inside its reasoning
            out.insert(1, "     | LEADING_SPACE* reasoning_unclosed__ _end")
            out.append("reasoning_unclosed__: _reasoning_body -> reasoning_content")
        # A close with no opener before it: the history's form of a turn whose pre-filled opener the model
        # did not reason after (GLM-4.7's "</think>text").
        out += ["_think: reasoning_content | STRAY_CLOSE" if shape.stray_close else "_think: reasoning_content",
                "reasoning_content: _reasoning_body REASONING_CONTENT_CLOSE",
                "_reasoning_body: REASONING_CONTENT_OPEN REASONING_CONTENT_TEXT*"]
    if shape.section_open:
        close = " SECTION_CLOSE" if shape.section_close else ""
        out.append(f"_calls: SECTION_OPEN (tool_calls | UNCLAIMED)*{close}")
    else:
        out.append("_calls: tool_calls")
    body = "(TOOL_CALLS_TEXT | parameter)*" if shape.params is not None else "TOOL_CALLS_TEXT*"
    out.append(f"tool_calls: TOOL_CALLS_OPEN {body} TOOL_CALLS_CLOSE{'' if shape.call_close else '?'}")
    if shape.params is not None:
        out.append("parameter: PARAMETER_OPEN PARAMETER_TEXT* PARAMETER_CLOSE")
    if shape.end:
        out.append("_end: END_OF_TURN UNCLAIMED*")
    return out


def _terminals(shape: _Shape) -> list[str]:
    r = shape.reasoning
    out = ["LEADING_SPACE: /\\s{1,64}/"]
    if r is not None:
        out += [f"REASONING_CONTENT_OPEN.1: {_terminal(r.open)}", f"REASONING_CONTENT_CLOSE: {_terminal(r.close)}"]
        if shape.stray_close:
            out.append(f"STRAY_CLOSE: {_terminal(r.close)}")
    if shape.section_open:
        out.append(f"SECTION_OPEN.1: {_terminal(shape.section_open)}")
        if shape.section_close:
            out.append(f"SECTION_CLOSE: {_terminal(shape.section_close)}")
    if shape.call_open:
        out.append(f"TOOL_CALLS_OPEN.1: {_lark_regex(shape.call_open)}")
    else:
        # A zero-width opener: the payload's own first characters stay in the region.
        lookahead = {"json_object": rf'\{{\s*"{regex.escape(shape.first_key)}"\s*:', "json_list": r"\[\s*\{",
                     "json_name_keys": r"\[\s*\{", "pythonic": r"\[\s*[A-Za-z_]"}.get(shape.encoding.kind, r"\{")
        out.append(f"TOOL_CALLS_OPEN.1: {_lark_regex(f'(?={lookahead})')}")
    if shape.call_close:
        out.append(f"TOOL_CALLS_CLOSE: {_terminal(shape.call_close)}")
    if shape.params is not None:
        p = shape.params
        out += [f"PARAMETER_OPEN.1: {_lark_regex(p.open + f'(?P<key>{p.key_class})' + p.connector)}",
                f"PARAMETER_CLOSE: {_terminal(p.close)}"]
    if shape.end:
        out.append(f"END_OF_TURN: {_alternatives(shape.end)}")
    if shape.marks:  # content wrappers and pre-written markup, dropped
        out.append(f"MARK: {_alternatives(shape.marks)}")
    if shape.separator and not shape.section_open:
        out.append(f"CALL_SEP: {_terminal(shape.separator)}")
    return out


# ---------------------------------------------------------------------------------------------- round trip


def _read_back(rendering: Rendering, grammar: Grammar, renders_reasoning: bool) -> list[str]:
    """:func:`grammar_parse.templates._probes.read_back` (the round trip detect uses too), and stricter: a parse error or
    a missing start anchor is a difference as well."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        diffs = read_back(rendering, grammar, template_renders_reasoning=renders_reasoning)
        try:
            message = parse_response(rendering.output, grammar, prefix=rendering.prompt, tools=TOOLS, strict=False)
        except GrammarParseError:
            message = Message()  # (read_back has said so)
    diffs += [f"parse error: {e.get('message', e)}" for e in message.get("parse_errors") or []]
    return diffs + [str(w.message) for w in caught]


# ---------------------------------------------------------------------------------------------- entry


def derive_grammar(template: ChatTemplate | str | os.PathLike[str] | Mapping[str, Any], *, name: str | None = None,
                   renderings: list[Rendering] | None = None) -> Derived:
    """A grammar for ``template``'s output, derived from its probe renderings (rendered here when not given)
    and checked by reading every one back; raises GrammarError ``derive.no_calls``, ``derive.shape`` or
    ``derive.round_trip`` instead of returning a grammar that misreads them.

    ``template`` is named as everywhere else: a :class:`ChatTemplate`, Jinja text, a path (a model directory,
    tokenizer_config.json, chat_template.jinja or .json) or a tokenizer config dict; anything else is an
    ArgumentError."""
    if not isinstance(template, ChatTemplate):
        if not isinstance(template, (str, os.PathLike, Mapping)):
            raise template_source_problem(template)
        template = load_chat_template(template)
    try:
        return _derive(template, name or "derived", renderings)
    except _Refusal as refusal:
        raise GrammarError(refusal.message, code=refusal.code, source=template.origin, hint=refusal.hint) from None


def _derive(template: ChatTemplate, name: str, renderings: list[Rendering] | None) -> Derived:
    if renderings is None:
        renderings = render_probes(template)
    one = next((r for r in renderings if r.probe.name == "one_call"), None)
    if one is None or not one.calls_rendered:
        raise _Refusal("derive.no_calls", "the template writes no tool calls (the one-call probe's call is not "
                                          "in its rendering)",
                     hint="Derivation needs a template that renders an assistant message's tool_calls.")
    shape = _derive_shape(template, renderings)
    skipped = {r.probe.name: "the template does not render all its calls" for r in renderings if not r.informative}
    report = replace(_report(shape), skipped=skipped)
    text = _lark_text(shape, name, template.origin, report)
    try:
        grammar = build_grammar(text, source_name=_SOURCE, name=name)
    except GrammarParseError as exc:
        raise _Refusal("derive.shape", f"the derived grammar does not build: {exc}") from None
    checked = {r.probe.name: _read_back(r, grammar, shape.reasoning is not None) for r in renderings if r.informative}
    if any(checked.values()):
        detail = "; ".join(f"{k}: {' / '.join(v)}" for k, v in checked.items() if v)
        raise _Refusal("derive.round_trip", f"the derived grammar does not read the probes back ({detail})")
    return Derived(grammar, text, report, checked)


def _derive_shape(template: ChatTemplate, renderings: Sequence[Rendering]) -> _Shape:
    """The markup of ``template``'s turns, from the probe renderings."""
    turns, gen_tail, base = _turns(template, renderings)
    by = {t.probe.name: t for t in turns}
    header = _common_prefix([gen_tail, *[t.text for t in turns]], phrases=False)
    reasoning, header = _find_reasoning(by, header, gen_tail)
    ends = _end_markers(template, turns, header)
    marks = _content_marks(by, header, reasoning, ends, gen_tail)
    calls = _call_shape(by, header, reasoning, marks, ends)
    sep = calls["separator"]
    if not calls.pop("open_literal") and sep and header.rstrip().endswith(sep):
        # The generation prompt writes the first call's opener (functionary's ">>>"): it opens every call,
        # and the header stops before it so that it is replayed.
        header = header[:header.rstrip().rindex(sep)]
        ends = _end_markers(template, turns, header)
        marks = _content_marks(by, header, reasoning, ends, gen_tail, exclude=(sep,))
        calls = _call_shape(by, header, reasoning, marks, ends)
        calls.pop("open_literal")
    anchor = _anchor(header, base)
    if not anchor.strip():
        raise _Refusal("derive.shape", "no assistant header was found before the turns")
    starts = [gen_tail[len(header):], *[t.text[len(header):] for t in turns]]
    stray = reasoning is not None and any(s.lstrip().startswith(reasoning.close) for s in starts)
    return _Shape(anchor=anchor, end=ends, reasoning=reasoning, stray_close=stray, marks=marks, **calls)


def _report(shape: _Shape) -> DeriveReport:
    r = shape.reasoning
    return DeriveReport(
        start_anchor=shape.anchor, end_of_turn=shape.end, reasoning_open=r.open if r else None,
        reasoning_close=r.close if r else None, reasoning_prefilled=bool(r and r.prefilled),
        reasoning_stray_close=shape.stray_close, content_markers=shape.marks,
        section_open=shape.section_open or None, section_close=shape.section_close or None,
        call_open=shape.call_open_text or None, call_close=shape.call_close or None,
        separator=shape.separator or None, name_encoding=_name_encoding(shape),
        argument_encoding=_argument_encoding(shape))


def _name_encoding(shape: _Shape) -> str:
    kind = shape.encoding.kind
    if kind in ("json_object", "json_list"):
        return f'JSON key "{shape.encoding.name_path}"'
    if kind == "json_name_keys":
        return "JSON object key"
    if kind == "pythonic":
        return "pythonic call"
    return "in the call opener"


def _argument_encoding(shape: _Shape) -> str:
    kind = shape.encoding.kind
    if kind in ("json_object", "json_list"):
        listed = " (a JSON list of calls)" if kind == "json_list" else ""
        return f'JSON object under "{shape.encoding.args_path}"{listed}'
    if kind == "json_name_keys":
        return "JSON object under the name (a JSON list of calls)"
    if kind == "name_json":
        return "JSON object after the name"
    if kind == "pythonic":
        return "pythonic keyword arguments" + (" (a list of calls)" if shape.encoding.listed else "")
    if shape.elements is not None:
        item = f", lists as <{shape.elements.item}> elements" if shape.elements.item else ""
        return f"elements named by the key, nested for objects{item} (text, typed by the tool's schema)"
    return "tagged key/value (text, typed by the tool's schema)"
