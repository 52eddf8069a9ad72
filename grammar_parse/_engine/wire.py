"""Wire values valid by construction: a tool call's ``arguments`` string is strict JSON, however it was written.

Clients read a call's arguments with a strict JSON parser. Model output, and Python's own ``json`` module,
allow what strict JSON has not: ``NaN`` and ``Infinity``, invalid escapes, raw control characters, lone
surrogates, arguments that are not an object, integers longer than Python converts, nesting deeper than a
parser's stack; and a call cut off at the token limit stops in the middle of its JSON.
:class:`WireArguments` stands between the tool-call streamer and the wire. It passes the arguments text
through as it arrives and holds back only what cannot be sent yet (a number or literal until it ends, an
escape until it is complete, a comma and the next key until its value starts), so that what was sent is,
at every point, a prefix of a JSON object text that closing brackets complete. Where the text stops being
valid, sending stops; :meth:`WireArguments.finish` closes what was sent. The mapping, one rule per case:

* ``NaN``, ``Infinity``, ``-Infinity`` are sent as ``null`` (problem ``parse.json_constant``);
* a lone surrogate in a string is sent as its ``\\uXXXX`` escape: the same JSON value, and the text stays
  encodable as UTF-8;
* arguments that are not an object (``[1, 2]``, ``"x"``) are sent as ``{}`` (``parse.arguments``);
* from the first character that is not strict JSON (an invalid escape, a raw control character, a missing
  comma, text after the object), nothing more is sent, and what was sent is closed (``parse.arguments``);
* an integer longer than Python converts (``parse.digits``) and nesting deeper than the parser's ``max_json_depth``
  (``parse.json_depth``) end the arguments the same way: at the value that breaks the limit;
* arguments that end before their JSON does (a call cut off) are closed (``parse.arguments``).

Each problem is ``{"path", "message", "code"}`` with the JSON path of the value it concerns
(``$.function.arguments.city``), as a call's ``errors`` are. Its message quotes nothing the model wrote
(a :class:`ClientText`), so a server may send it; the path's keys are the model's, for a server to show
as :meth:`CallChecker.path` does. Cost is linear in the text: string runs are
skipped with one search, and nothing is scanned twice.

:func:`wire_json` writes a whole wire object (an event, a response) as JSON text that is valid UTF-8.

What a client is told about a call that is wrong quotes nothing of the model's output: a gateway sends that
output to clients it does not fully trust, and it can hold anything (text from the prompt, secrets meant
for a tool). Per-call errors say what is wrong in the request's own terms: a stable code
(``call.unknown_tool``, ``call.type``, ``call.required``, ``call.schema``, or the wire's ``parse.*`` code), a
JSON path whose keys are the tool schema's property names (a key the schema does not name shows as ``*``),
the JSON types involved, the schema keyword broken and the tools offered; never an argument value, a key
or a tool name only the model wrote. :class:`ClientText` marks text built that way (a server sends it as it
is, anything else in general terms); :class:`CallChecker` checks a call against the request's tools and
says each problem so, and rewrites any path into a call the same way; :func:`parse_failure` says why
output failed to parse (the code, the region, where, the call being read).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import ERROR_CODES, GrammarParseError
from .reading import LONE_SURROGATE, int_digits_limit, json_depth, may_nest_deeper
from .tools import CallValidator

if TYPE_CHECKING:
    from jsonschema import ValidationError

_STRING_STOP = re.compile(r'["\\\x00-\x1f\ud800-\udfff]')
# A run of string text that needs no look: plain characters and complete, valid escapes (one match for a
# long string, however many escapes it has). The standard library's engine: a quarter of regex's cost per
# call on these short fragments (200 KB of source code in 4-char pieces: 0.85 us a piece, 1.5 with regex).
# Written as plain characters, then escapes each followed by plain characters ("unrolled"): each character has
# one way to be read, so a text that fails to end as _STRING_BODY wants costs linear time. The form with a
# repeated run inside a repeat, ``(?:[^"\\...]+|...)*``, splits a run in exponentially many ways: a key of
# 40 "[" and a lone surrogate (a model's, through member's fullmatch) never finished.
_STRING_RUN = re.compile(r'[^"\\\x00-\x1f\ud800-\udfff]*(?:(?:\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})[^"\\\x00-\x1f\ud800-\udfff]*)*')
#: A JSON string the filter passes as it is: its quotes around what _STRING_RUN reads in one run.
_STRING_BODY = re.compile(f'"{_STRING_RUN.pattern}"')
_WS = " \t\n\r"
_WS_RUN = re.compile(r"[ \t\n\r]*")
_NUMBER_RUN = re.compile(r"[-+0-9.eE]*")
_LETTER_RUN = re.compile(r"[A-Za-z]*")
_HEX_RUN = re.compile(r"[0-9a-fA-F]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")
_ESCAPES = frozenset('"\\/bfnrt')
_LITERALS = frozenset({"true", "false", "null"})
_NOT_JSON = frozenset({"NaN", "Infinity", "-Infinity"})
_LONGEST_LITERAL = len("-Infinity")

# states (in this order: feed() tells the token states and the two final ones apart by comparing)
_START, _KEY_OR_END, _KEY, _COLON, _VALUE, _VALUE_OR_END, _AFTER_VALUE = range(7)
_STRING, _ESCAPE, _UNICODE, _NUMBER_TOKEN, _LITERAL_TOKEN, _DONE, _BROKEN = range(7, 14)
_SAFE = frozenset({_KEY_OR_END, _VALUE_OR_END, _AFTER_VALUE})  # pending text can go out: closers complete it


class WireArguments:
    """One call's arguments string, filtered into strict JSON (see the module doc).

    ``feed(text)`` returns the part of the text that can be sent now; ``finish()`` the text that completes
    what was sent (``{}`` when nothing was). ``problems`` says what was changed or left out.

    >>> w = WireArguments()
    >>> w.feed('{"a": NaN, "b": "x\\\\q'), w.finish()
    ('{"a": null, "b": "x', '"}')
    >>> [p["code"] for p in w.problems]
    ['parse.json_constant', 'parse.arguments']
    """

    def __init__(self, path: str = "$.function.arguments") -> None:
        self.path = path
        self.problems: list[dict[str, str]] = []
        self._state = _START
        self._closers: list[str] = []  # "}" or "]" for every open container
        self._members: list[Any] = []  # per container: the current key's JSON text (objects) or index (arrays)
        self._pending: list[str] = []  # accepted text that cannot go out yet
        self._token: list[str] = []  # a number, literal or escape being read
        self._token_len = 0
        self._in_key = False
        self._key_start = 0  # where in _pending the key being read starts
        self._sent = False
        self._open_string = False  # the text broke inside a string value that was being sent

    # ---------------------------------------------------------------- public
    @property
    def done(self) -> bool:
        """Whether the arguments object is complete (nothing more will be sent)."""
        return self._state == _DONE

    def feed(self, text: str) -> str:
        """The part of ``text`` (the next piece of the arguments) that can be sent now."""
        if self._state == _STRING and not self._in_key:
            m = _STRING_RUN.match(text)
            if m is not None and m.end() == len(text):
                return text  # inside a string value, nothing to look at (most fragments of long arguments)
        out: list[str] = []
        i, n = 0, len(text)
        while i < n:
            state = self._state
            if state == _STRING:
                j = _run_end(_STRING_RUN, text, i, n)
                if j > i:
                    self._string_text(out, text[i:j])
                if j == n:
                    break
                ch, i = text[j], j + 1
                if ch == '"':
                    if self._in_key:
                        self._pending.append('"')
                        self._state = _COLON
                    else:
                        out.append('"')
                        self._after_value(out)
                elif ch == "\\":
                    self._start_token("\\")
                    self._state = _ESCAPE
                elif ch < " ":
                    self._break(out, "a raw control character in a string", "parse.arguments")
                else:  # a lone surrogate: its escape is the same JSON value, in text UTF-8 can encode
                    self._string_text(out, f"\\u{ord(ch):04x}")
            elif state == _ESCAPE:  # (a backslash that ended the last chunk: common in code, so read here)
                ch = text[i]
                i += 1
                if ch in _ESCAPES:
                    self._string_text(out, "\\" + ch)
                    self._state = _STRING
                elif ch == "u":
                    self._start_token("\\u")
                    self._state = _UNICODE
                else:
                    self._break(out, "an invalid escape in a string", "parse.arguments")
            elif state == _UNICODE:  # (inline: ASCII-only JSON writes every non-ASCII character so; a call: +3%)
                j = _run_end(_HEX_RUN, text, i, min(n, i + 6 - self._token_len))
                self._add_token(text[i:j])
                i = j
                if self._token_len == 6:
                    self._string_text(out, "".join(self._token))
                    self._state = _STRING
                elif i < n:
                    self._break(out, "an invalid \\u escape", "parse.arguments")
            elif state >= _DONE:  # (_DONE or _BROKEN)
                break
            elif state > _UNICODE:  # in a number or a literal
                i = self._token_text(out, text, i, n)
            elif text[i] in _WS:
                j = _run_end(_WS_RUN, text, i, n)
                if state != _START:  # (leading whitespace is dropped: the object starts the string)
                    self._pending.append(text[i:j])
                    if state in _SAFE:
                        self._flush(out)
                i = j
            else:
                self._structure(out, text[i])
                i += 1
        return "".join(out)

    def _token_text(self, out: list[str], text: str, i: int, n: int) -> int:
        """Read on in a number or a literal from ``text[i]``; where reading stopped. Kept out of
        :meth:`feed`'s loop: it is called once per token and chunk, never per character."""
        if self._state == _NUMBER_TOKEN:
            j = _run_end(_NUMBER_RUN, text, i, n)
            self._add_token(text[i:j])
            i = j
            if i < n:
                if self._token == ["-"] and text[i] == "I":
                    self._state = _LITERAL_TOKEN  # -Infinity
                else:
                    self._end_number(out)
        else:  # _LITERAL_TOKEN
            j = _run_end(_LETTER_RUN, text, i, min(n, i + _LONGEST_LITERAL + 1 - self._token_len))
            self._add_token(text[i:j])
            i = j
            if self._token_len > _LONGEST_LITERAL:
                self._break(out, "a word that is not a JSON value", "parse.arguments")
            elif i < n:
                self._end_literal(out)
        return i

    def member(self, prefix: str, key: str, value: str) -> str:
        """``feed(prefix + key + ": " + value)`` for an object member the streamer wrote itself: ``prefix`` is
        ``{`` (the first member) or ``, ``, ``key`` and ``value`` JSON text (``dumps``). Where the object is open
        at the top with nothing held but a number before this member, and the key holds nothing the filter
        changes (a lone surrogate), a string value passes unchanged and a number is held as reading it would
        hold it (it may go on): the state is set as reading the text would set it, without reading it.
        Anything else is read."""
        text = f"{prefix}{key}: {value}"
        ended = ""
        if self._state == _NUMBER_TOKEN and prefix == ", ":
            out: list[str] = []
            self._end_number(out)  # (what reading the comma does first: the number held ends, or breaks)
            ended = "".join(out)
        first = prefix == "{"
        # (nothing is held in either state: whitespace at the start is dropped, and after a value it goes out)
        if not (self._state == _START and first and json_depth() > 0
                or self._state == _AFTER_VALUE and prefix == ", " and self._closers == ["}"]) \
                or not _STRING_BODY.fullmatch(key):
            return ended + self.feed(text)
        string = _STRING_BODY.fullmatch(value) is not None
        if not string and not _NUMBER.fullmatch(value):
            return ended + self.feed(text)
        if first:  # (the object opens, as its "{" opens it)
            self._closers, self._members, self._sent = ["}"], [key], True
        else:
            self._members[-1] = key
        if string:
            self._state, self._in_key, self._key_start, self._pending = _AFTER_VALUE, False, 0 if first else 2, []
            return ended + text
        # A number: held with the member's text before it until what follows ends it, in the pieces reading
        # leaves (the comma, the space, the key's quotes around its body, the colon, the space; the token's
        # first character, then the rest).
        body = [key[1:-1]] if len(key) > 2 else []
        self._pending = ([] if first else [",", " "]) + ['"', *body, '"', ":", " "]
        self._state, self._in_key, self._key_start = _NUMBER_TOKEN, True, 0 if first else 2  # (as the key left it)
        self._token, self._token_len = [value[0], value[1:]] if len(value) > 1 else [value], len(value)
        return ended + ("{" if first else "")

    def whole(self, text: str) -> str:
        """Arguments already known to be one strict JSON object within every limit (the tool-call streamer
        checked them whole: a strict parse, no lone surrogate, no integer past the digits limit, no nesting
        past the depth limit): sent as they are, with nothing to hold back or close."""
        self._state, self._sent = _DONE, True
        return text

    def finish(self) -> str:
        """The text that completes what was sent: the end of a number or literal that ended with the
        arguments, and the closing quote and brackets of what is still open."""
        out: list[str] = []
        if self._state == _NUMBER_TOKEN:
            self._end_number(out)
        elif self._state == _LITERAL_TOKEN:
            self._end_literal(out)
        state = self._state
        if state == _DONE:
            return "".join(out)
        if not self._sent:
            self._state = _DONE
            return "{}"
        if state != _BROKEN:
            self._problem("the arguments ended before their JSON did: the wire closes them", "parse.arguments")
        if state in (_STRING, _ESCAPE, _UNICODE) and not self._in_key or state == _BROKEN and self._open_string:
            out.append('"')
        out.extend(reversed(self._closers))
        self._state = _DONE
        return "".join(out)

    # ---------------------------------------------------------------- the grammar
    def _structure(self, out: list[str], ch: str) -> None:
        """One structural character (not whitespace) in a state between tokens."""
        state = self._state
        if state == _START:
            if ch != "{":
                self._break(out, "the arguments are not a JSON object", "parse.arguments")
                return
            self._open(out, "{")
        elif state in (_KEY_OR_END, _KEY):
            if ch == '"':
                self._key_start = len(self._pending)
                self._pending.append('"')
                self._in_key = True
                self._state = _STRING
            elif ch == "}" and state == _KEY_OR_END:
                self._close(out, ch)
            else:
                self._break(out, "something other than a key where a key belongs", "parse.arguments")
        elif state == _COLON:
            if ch == ":":
                self._members[-1] = "".join(self._pending[self._key_start:])
                self._pending.append(":")
                self._state = _VALUE
            else:
                self._break(out, "something other than ':' after a key", "parse.arguments")
        elif state in (_VALUE, _VALUE_OR_END):
            if ch == "]" and state == _VALUE_OR_END:
                self._close(out, ch)
            elif ch == '"':
                self._flush(out)
                out.append('"')
                self._in_key = False
                self._state = _STRING
            elif ch in "{[":
                self._open(out, ch)
            elif ch == "-" or "0" <= ch <= "9":
                self._start_token(ch)
                self._state = _NUMBER_TOKEN
            elif "a" <= ch <= "z" or "A" <= ch <= "Z":
                self._start_token(ch)
                self._state = _LITERAL_TOKEN
            else:
                self._break(out, "something other than a value where a value belongs", "parse.arguments")
        elif state == _AFTER_VALUE:
            if ch == ",":
                self._pending.append(",")
                if self._closers[-1] == "}":
                    self._state = _KEY
                else:
                    self._members[-1] += 1
                    self._state = _VALUE
            elif ch == self._closers[-1]:
                self._close(out, ch)
            else:
                self._break(out, f"something other than ',' or {self._closers[-1]!r} after a value", "parse.arguments")

    def _open(self, out: list[str], ch: str) -> None:
        if len(self._closers) >= (limit := json_depth()):
            self._break(out, f"the arguments nest deeper than {limit} levels", "parse.json_depth")
            return
        self._pending.append(ch)
        self._flush(out)
        self._sent = True
        self._closers.append("}" if ch == "{" else "]")
        self._members.append(None if ch == "{" else 0)
        self._state = _KEY_OR_END if ch == "{" else _VALUE_OR_END

    def _close(self, out: list[str], ch: str) -> None:
        self._pending.append(ch)
        self._closers.pop()
        self._members.pop()
        self._after_value(out)

    def _after_value(self, out: list[str]) -> None:
        self._state = _AFTER_VALUE if self._closers else _DONE
        self._flush(out)

    def _end_number(self, out: list[str]) -> None:
        token = "".join(self._token)
        if not _NUMBER.fullmatch(token):
            self._break(out, "a number that is not a JSON number", "parse.arguments")
            return
        limit, digits = int_digits_limit(), token.lstrip("-")
        if limit and len(digits) > limit and digits.isdigit():
            self._break(out, f"an integer of {len(digits)} digits, more than Python converts ({limit})", "parse.digits")
            return
        self._pending.append(token)
        self._after_value(out)

    def _end_literal(self, out: list[str]) -> None:
        token = "".join(self._token)
        if token in _NOT_JSON:
            self._problem("NaN or Infinity, which JSON has not: sent as null", "parse.json_constant")
            token = "null"
        elif token not in _LITERALS:
            self._break(out, "a word that is not a JSON value", "parse.arguments")
            return
        self._pending.append(token)
        self._after_value(out)

    # ---------------------------------------------------------------- helpers
    def _string_text(self, out: list[str], text: str) -> None:
        (self._pending if self._in_key else out).append(text)

    def _start_token(self, text: str) -> None:
        self._token = [text]
        self._token_len = len(text)

    def _add_token(self, text: str) -> None:
        if text:
            self._token.append(text)
            self._token_len += len(text)

    def _flush(self, out: list[str]) -> None:
        if self._pending:
            out.extend(self._pending)
            self._pending = []

    def _break(self, out: list[str], message: str, code: str) -> None:
        """Stop sending here: what was sent is closed by finish()."""
        self._open_string = self._state in (_STRING, _ESCAPE, _UNICODE) and not self._in_key
        self._problem(f"{message}; the rest of the arguments is not sent", code)
        self._pending = []
        self._state = _BROKEN

    def _problem(self, message: str, code: str) -> None:
        # The message names no character or token of the model's: the wire's words, sent to clients as they are.
        self.problems.append({"path": self._where(), "message": ClientText(message), "code": code})

    def _where(self) -> str:
        """The JSON path of the value being read."""
        steps = [self.path]
        for member in self._members:
            if isinstance(member, int):
                steps.append(f"[{member}]")
            elif member is not None:
                try:
                    steps.append(f".{json.loads(member)}")
                except ValueError:
                    steps.append(f".{member}")
        return "".join(steps)


def _run_end(run: re.Pattern[str], text: str, start: int, end: int) -> int:
    """Where a run of ``run``'s characters (a ``[...]*`` pattern) from ``start`` ends, at most at ``end``."""
    m = run.match(text, start, end)
    return m.end() if m is not None else start


#: ``json.dumps(value, ensure_ascii=False, default=repr)``, and the same with ``allow_nan=False``: one encoder
#: each, made once (json.dumps makes one per call given any option: a third of the time of a short value).
_DUMPS = json.JSONEncoder(ensure_ascii=False, default=repr).encode
_DUMPS_STRICT = json.JSONEncoder(ensure_ascii=False, default=repr, allow_nan=False).encode
_QUOTE: Callable[[str], str] = json.encoder.encode_basestring


def dumps(value: Any) -> str:
    """``json.dumps`` for the wire filter: never fails (the content parsers give JSON values; anything else
    becomes its ``repr`` as a string, a value JSON cannot hold at all becomes null)."""
    kind = type(value)
    if kind is str:
        return _QUOTE(value)  # (what the encoder's encode calls for a string: two calls fewer per member)
    try:
        if kind is int:
            return int.__repr__(value)  # (the encoder's text for an int; past the digits limit a ValueError)
        if kind is bool:
            return "true" if value else "false"
        return _DUMPS(value)
    except (TypeError, ValueError, RecursionError):  # a key JSON cannot have, a cycle, or too deep to encode
        return "null"


def arguments_text(value: Any) -> str:
    """The arguments string the wire sends for a parsed arguments value (or the model's text, when it did
    not parse): what :class:`WireArguments` makes of ``dumps(value)``. A plain object (no NaN or
    infinity, no integer past Python's digits limit, no lone surrogate, nested within ``max_json_depth``) is
    strict JSON as ``json.dumps`` writes it, which the filter passes unchanged: written directly."""
    if isinstance(value, dict):
        try:
            text = _DUMPS_STRICT(value)
        except (TypeError, ValueError, RecursionError):
            text = None
        # (the brackets bound the nesting: the filter's depth check cannot fire below them)
        if text is not None and not LONE_SURROGATE.search(text) and not may_nest_deeper(text):
            return text
    wire = WireArguments()
    return wire.feed(value if isinstance(value, str) else dumps(value)) + wire.finish()


def wire_json(obj: Any) -> str:
    """JSON text that is valid UTF-8 even when model output held lone surrogates (they become ``\\udXXX``
    escapes, which JSON allows)."""
    return json.dumps(obj, ensure_ascii=False).encode("utf-8", "backslashreplace").decode("utf-8")


# ---------------------------------------------------------------------------- what a client is told
ARGUMENTS = "$.function.arguments"
NAME = "$.function.name"
_INDEX = re.compile(r"\[(\d+)\]")
_SHOWN_TOOLS = 20  # tool names listed in an unknown tool's message (a request may offer 128)
_SHOWN_VALUE = 80  # characters of a schema value (an enum, a pattern) quoted in a message


class ClientText(str):
    """Text that holds nothing of the model's output (only codes, JSON types, numbers and names the
    request's own tool schemas gave): what a server may send to a client as it is."""

    __slots__ = ()


def json_type(value: Any) -> str:
    """The JSON type name of a decoded JSON value (``integer`` for whole numbers, as JSON Schema says)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object" if isinstance(value, dict) else "value"


def _shown(value: Any) -> str:
    """A schema value (the request's, never the model's) short enough to quote."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = "..."
    return text if len(text) <= _SHOWN_VALUE else text[:_SHOWN_VALUE] + "..."


class _SchemaWalk:
    """Steps down a tool's parameters schema along a path into its arguments (properties, items, the
    choices of anyOf/oneOf/allOf, local ``$ref``s), naming each step as a client may see it."""

    def __init__(self, root: Any) -> None:
        self.root = root if isinstance(root, dict) else {}

    def _choices(self, schema: Any, depth: int = 0) -> list[dict[str, Any]]:
        if not isinstance(schema, dict) or depth > 8:  # (bounded: schemas can refer to themselves)
            return []
        found = [schema]
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/"):
            target: Any = self.root
            for part in ref[2:].split("/"):
                target = target.get(part.replace("~1", "/").replace("~0", "~")) if isinstance(target, dict) else None
            found += self._choices(target, depth + 1)
        for union in ("anyOf", "oneOf", "allOf"):
            choices = schema.get(union)
            for choice in choices if isinstance(choices, list) else []:
                found += self._choices(choice, depth + 1)
        return found

    def names(self, schema: Any) -> list[str]:
        """The property names the schema declares at this level."""
        return [name for choice in self._choices(schema) if isinstance(props := choice.get("properties"), dict)
                for name in props if isinstance(name, str)]

    def step(self, schema: Any, key: str | int) -> tuple[str, Any]:
        """(the step as shown, the schema below it)."""
        choices = self._choices(schema)
        if isinstance(key, int):
            for choice in choices:
                prefix = choice.get("prefixItems")
                if isinstance(prefix, list) and key < len(prefix):
                    return f"[{key}]", prefix[key]
                if isinstance(choice.get("items"), dict):
                    return f"[{key}]", choice["items"]
            return f"[{key}]", {}
        for choice in choices:
            props = choice.get("properties")
            if isinstance(props, dict) and key in props:
                return f".{key}", props[key]
        extra: Any = next((c["additionalProperties"] for c in choices
                           if isinstance(c.get("additionalProperties"), dict)), {})
        return ".*", extra  # a key the schema does not name: the model's, never shown

    def render(self, steps: Iterable[str | int]) -> ClientText:
        shown, schema = [ARGUMENTS], self.root
        for key in steps:
            text, schema = self.step(schema, key)
            shown.append(text)
        return ClientText("".join(shown))

    def parse(self, path: str) -> ClientText:
        """A path written as text (``$.function.arguments.a.b[0]``, keys unquoted) as a client may see it:
        keys are matched against the schema's names, longest first; from a key it does not name on, the
        path ends in ``*`` (where such a key ends cannot be told)."""
        if path in (NAME, ARGUMENTS, "$", "$.function"):
            return ClientText(path)
        if not path.startswith(ARGUMENTS):
            return ClientText("$.function")
        rest, steps = path[len(ARGUMENTS):], []
        schema: Any = self.root
        while rest:
            index = _INDEX.match(rest)
            if index is not None:
                key: str | int = int(index.group(1))
                rest = rest[index.end():]
            elif rest.startswith("."):
                fits = [n for n in self.names(schema)
                        if rest[1:].startswith(n) and rest[1 + len(n):][:1] in ("", ".", "[")]
                if not fits:
                    steps.append(".*")
                    break
                key = max(fits, key=len)
                rest = rest[1 + len(key):]
            else:
                steps.append(".*")
                break
            text, schema = self.step(schema, key)
            steps.append(text)
        return ClientText(ARGUMENTS + "".join(steps))


class CallChecker(CallValidator):
    """Checks tool calls against the request's tools, saying each problem as :class:`ClientText` with a
    stable code (see the module doc). Each tool's validator is built once (:class:`CallValidator`)."""

    @property
    def offered(self) -> list[str]:
        """The names of the tools the request offers."""
        return list(self._schemas)

    def path(self, name: str | None, path: str) -> ClientText:
        """``path`` (into a call of tool ``name``) with the keys its schema does not name shown as ``*``."""
        schema = self._schemas.get(name) if name is not None else None
        return _SchemaWalk(schema).parse(path)

    def client_problems(self, name: str, arguments: Any) -> list[dict[str, str]]:
        """``{"code", "path", "message"}`` for each way a call of ``name`` with these (decoded) arguments
        is wrong for the request's tools; empty when it is right."""
        if name not in self._schemas:
            offered = sorted(self._schemas)
            listed = ", ".join(offered[:_SHOWN_TOOLS]) + (f" and {len(offered) - _SHOWN_TOOLS} more"
                                                          if len(offered) > _SHOWN_TOOLS else "")
            return [{"code": "call.unknown_tool", "path": ClientText(NAME),
                     "message": ClientText(f"the call names a tool that is not offered; the request offers: {listed}")}]
        validator = self._validator(name)
        if isinstance(validator, dict):
            return [{"code": "call.schema", "path": ClientText(ARGUMENTS), "message": ClientText(
                "the tool's parameters are not a valid JSON Schema, so its arguments cannot be checked")}]
        try:
            errors = self._errors(name, validator, arguments)
        except RecursionError:  # a recursive schema over deeply nested arguments
            return [{"code": "call.schema", "path": ClientText(ARGUMENTS),
                     "message": ClientText("the arguments nest too deeply to check")}]
        walk = _SchemaWalk(self._schemas[name])
        problems: list[dict[str, str]] = []
        for error in errors:
            for problem in _said(error, walk):
                if problem not in problems:  # (jsonschema says a missing argument once per name it lacks)
                    problems.append(problem)
        return sorted(problems, key=lambda p: (p["path"], p["code"], p["message"]))


def _said(error: ValidationError, walk: _SchemaWalk) -> list[dict[str, str]]:
    """One jsonschema error as client problems (several for ``required``: one per missing name)."""
    path = walk.render(error.absolute_path)
    keyword, value = error.validator, error.validator_value
    if keyword == "type":
        expected = " or ".join(str(t) for t in (value if isinstance(value, list) else [value]))
        return [{"code": "call.type", "path": path,
                 "message": ClientText(f"expected {expected}, got {json_type(error.instance)}")}]
    if keyword == "required" and isinstance(value, list) and isinstance(error.instance, dict):
        missing = [n for n in value if isinstance(n, str) and n not in error.instance]  # (the schema's names)
        return [{"code": "call.required", "path": ClientText(f"{path}.{n}"),
                 "message": ClientText("a required argument is missing")} for n in missing]
    if keyword == "additionalProperties" and value is False:
        why = "holds an argument the schema does not define (additionalProperties is false)"
    elif keyword in ("enum", "const"):
        allowed = "one of the values" if keyword == "enum" else "the value"
        why = f"is not {allowed} the schema's {keyword} allows ({_shown(value)})"
    elif keyword in ("anyOf", "oneOf"):
        why = f"fits {'none' if keyword == 'anyOf' else 'not exactly one'} of the schema's {keyword} choices"
    elif keyword == "not":
        why = "fits the schema's 'not'"
    elif keyword == "$ref":
        why = ("cannot be checked: the schema refers ($ref) to a schema it does not hold (other documents are "
               "never fetched)")
    else:
        why = f"breaks the schema's {keyword} ({_shown(value)})"
    return [{"code": "call.schema", "path": path, "message": ClientText(why)}]


def parse_failure(error: GrammarParseError, call: str | None = None) -> ClientText:
    """Why output that does not parse failed, as a client may read it: the error's code and what it
    means, the region and where it starts, and ``call``, the offered tool whose call was being read (a
    name the request gave, or None)."""
    code = error.code if error.code in ERROR_CODES else "parse.unexpected"
    parts = [f"{code} ({ERROR_CODES.get(code, 'the output does not parse')})"]
    field = getattr(error, "field", None)
    if isinstance(field, str) and field:  # (the grammar's own field names)
        parts.append(f"in the {field} region")
    if call is not None:
        parts.append(f"in the call to {call}")
    line, column = getattr(error, "line", None), getattr(error, "column", None)
    position = getattr(error, "position", None)
    if isinstance(line, int) and isinstance(column, int):
        parts.append(f"starting at line {line}, column {column} of the output")
    elif isinstance(position, int) and position >= 0:  # (an error whose place has no line: its offset)
        parts.append(f"starting at character {position} of the output")
    return ClientText(", ".join(parts))


class _ReadCall(Protocol):
    name: str | None
    closed: bool


class _CallReader(Protocol):
    """What :func:`open_call` reads of a ``toolstream.ToolCallStreamer`` (a later stage than the wire)."""

    @property
    def calls(self) -> Sequence[_ReadCall]: ...


def open_call(streamer: _CallReader, offered: Iterable[str]) -> str | None:
    """The tool of the last call the streamer was still reading, when the request offers it: the call a
    parse failure broke, named only by the request's own word (None otherwise)."""
    names = [call.name for call in streamer.calls if not call.closed and call.name is not None]
    return names[-1] if names and names[-1] in set(offered) else None


__all__ = ["ARGUMENTS", "NAME", "CallChecker", "ClientText", "WireArguments", "arguments_text", "dumps", "json_type",
           "open_call", "parse_failure", "wire_json"]
