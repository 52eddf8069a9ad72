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
(``$.function.arguments.city``), as a call's ``errors`` are. Cost is linear in the text: string runs are
skipped with one search, and nothing is scanned twice.

:func:`wire_json` writes a whole wire object (an event, a response) as JSON text that is valid UTF-8.
"""

from __future__ import annotations

import json
from typing import Any

import re

from .values import int_digits_limit, json_depth

_STRING_STOP = re.compile(r'["\\\x00-\x1f\ud800-\udfff]')
# A run of string text that needs no look: plain characters and complete, valid escapes (one match for a
# long string, however many escapes it has). The standard library's engine: a quarter of regex's cost per
# call on these short fragments (200 KB of source code in 4-char pieces: 0.85 us a piece, 1.5 with regex).
_STRING_RUN = re.compile(r'(?:[^"\\\x00-\x1f\ud800-\udfff]+|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*')
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

# states
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
                    self._break(out, f"a raw control character {ch!r} in a string", "parse.arguments")
                else:  # a lone surrogate: its escape is the same JSON value, in text UTF-8 can encode
                    self._string_text(out, f"\\u{ord(ch):04x}")
            elif state == _ESCAPE:
                ch = text[i]
                i += 1
                if ch in _ESCAPES:
                    self._string_text(out, "\\" + ch)
                    self._state = _STRING
                elif ch == "u":
                    self._start_token("\\u")
                    self._state = _UNICODE
                else:
                    self._break(out, f"an invalid escape \\{ch}", "parse.arguments")
            elif state == _UNICODE:
                j = _run_end(_HEX_RUN, text, i, min(n, i + 6 - self._token_len))
                self._add_token(text[i:j])
                i = j
                if self._token_len == 6:
                    self._string_text(out, "".join(self._token))
                    self._state = _STRING
                elif i < n:
                    self._break(out, "an invalid \\u escape", "parse.arguments")
            elif state == _NUMBER_TOKEN:
                j = _run_end(_NUMBER_RUN, text, i, n)
                self._add_token(text[i:j])
                i = j
                if i < n:
                    if self._token == ["-"] and text[i] == "I":
                        self._state = _LITERAL_TOKEN  # -Infinity
                    else:
                        self._end_number(out)
            elif state == _LITERAL_TOKEN:
                j = _run_end(_LETTER_RUN, text, i, min(n, i + _LONGEST_LITERAL + 1 - self._token_len))
                self._add_token(text[i:j])
                i = j
                if self._token_len > _LONGEST_LITERAL:
                    self._break(out, f"{''.join(self._token)!r}... is not a JSON value", "parse.arguments")
                elif i < n:
                    self._end_literal(out)
            elif state in (_DONE, _BROKEN):
                break
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
                self._break(out, f"{ch!r} where a key belongs", "parse.arguments")
        elif state == _COLON:
            if ch == ":":
                self._members[-1] = "".join(self._pending[self._key_start:])
                self._pending.append(":")
                self._state = _VALUE
            else:
                self._break(out, f"{ch!r} where ':' belongs", "parse.arguments")
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
                self._break(out, f"{ch!r} where a value belongs", "parse.arguments")
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
                self._break(out, f"{ch!r} where ',' or {self._closers[-1]!r} belongs", "parse.arguments")

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
            self._break(out, f"{token[:40]!r} is not a JSON number", "parse.arguments")
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
            self._problem(f"{token} is not JSON: sent as null", "parse.json_constant")
            token = "null"
        elif token not in _LITERALS:
            self._break(out, f"{token!r} is not a JSON value", "parse.arguments")
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
        self.problems.append({"path": self._where(), "message": message, "code": code})

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


def dumps(value: Any) -> str:
    """``json.dumps`` for the wire filter: never fails (the content parsers give JSON values; anything else
    becomes its ``repr`` as a string, a value JSON cannot hold at all becomes null)."""
    try:
        return json.dumps(value, ensure_ascii=False, default=repr)
    except (TypeError, ValueError, RecursionError):  # a key JSON cannot have, a cycle, or too deep to encode
        return "null"


def wire_json(obj: Any) -> str:
    """JSON text that is valid UTF-8 even when model output held lone surrogates (they become ``\\udXXX``
    escapes, which JSON allows)."""
    return json.dumps(obj, ensure_ascii=False).encode("utf-8", "backslashreplace").decode("utf-8")


__all__ = ["WireArguments", "dumps", "wire_json"]
