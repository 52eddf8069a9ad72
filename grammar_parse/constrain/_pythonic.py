"""Tool calls written in a call syntax, as a constraint: Python-style calls (``[get_weather(city="Paris",
days=3)]``) and Gemma's ``call:get_weather{city:<escape>Paris<escape>,days:3}``, typed by each tool's schema.

Which syntax a call region's payload is in comes from its value spec, the parser that reads the payload
when the call closes: ``pythonic`` (grammar_parse._engine.content.pythonic: Python call syntax, parsed and never run) or
``json`` with ``string_delims`` (JSON in a model's dialect: strings between custom quotes, and with
``unquoted_keys`` bare keys). The payload is a tree of structural-tag nodes over regexes, the form of every
value fixed by its schema, so no part of it needs a JSON grammar: small regexes are merged (one lexeme for
llguidance), a string's regex stays a node of its own (xgrammar compiles each distinct regex once).

What is offered, and why:

* **Keyword arguments in the order of the schema's ``properties``.** The value parser takes them in any
  order, but a constraint that admits every order of n optional arguments must track which were written
  (2^n states); in declared order the form is linear (quadratic in the optional arguments before the first
  required one), and models write them in the order the tool declares them, the order the prompt shows.
  Required arguments must be written, optional ones may be left out; arguments the schema does not
  declare are not offered, nor are optional ones whose names are not Python identifiers.
* **Python literals the value parser reads as the same JSON value.** Strings in double or single quotes
  with the escapes ``\\\\ \\" \\' \\a \\b \\f \\n \\r \\t \\v \\xHH \\uHHHH`` (no lone surrogate; an
  unknown escape such as ``\\d`` is a SyntaxWarning, ``\\/`` is not JSON's slash); numbers as JSON writes
  them; ``True``/``False``/``None`` and JSON's ``true``/``false``/``null``; lists and dicts with string
  keys. A JSON Schema node is not used for nested values: JSON's ``\\/`` and surrogate-pair escapes are
  not Python's, and in Gemma's dialect the bare-key rewriting would reach into a JSON string holding
  ``, key:``. Gemma strings sit between the region's string quotes with no escapes at all.
* **A string never holds what would end the call** (``<|python_end|>``, ``<end_function_call>``, Gemma's
  string quote): the scanner ends the region at its closer wherever it stands. Where a form of the region
  may end without its closer (Gemma 4's call ended by ``<turn|>``), every delimiter of the grammar that
  starts with literal text is kept out. Raw control characters are not written in a Python string either
  (``\\n`` is).
* **Bounded sizes where the parser has limits.** Integers have at most MAX_DIGITS digits (Python refuses
  to convert past 4300, and a float past about 1e308 is infinity, not JSON); exponents have two digits.
  A value the schema leaves untyped (no ``type``, an object without ``properties``, an array without
  ``items``) nests at most ANY_DEPTH containers deep: a structural tag has no recursion, and each level
  repeats the one below it four times. A recursive model (``Node.children: list[Node]``) is written
  RECURSION_DEPTH levels inside itself; below that its lists are empty and its optional parts left out.
* **Keywords it cannot express are refused**, with the parameter's path: ``pattern``, numeric bounds on
  non-integers, ``multipleOf``, ``uniqueItems``, ``allOf`` of several schemas, a recursion no value
  ends (a required part that is the model again) and the like raise
  :class:`~grammar_parse.constrain._regexes.Unsupported`. Length bounds on strings are kept, with the
  strings' delimiter characters (``<``) written as escapes in Python and left out in Gemma's dialect.
  ``format`` is an annotation in JSON Schema 2020-12 and is not checked.

Calls in a Python-style payload are a list (``[f(a=1), g()]``) or one per line (Olmo 3): the value parser
reads both, and the region's spec does not say which its model writes, so both are offered.
"""

from __future__ import annotations

import json
import keyword
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from referencing.exceptions import Unresolvable

from .._engine.delimiters import LiteralMatcher, RegexMatcher
from .._engine.grammar import Grammar
from .._engine.symbols import Region
from .._engine.tools import bounded_validator
from ._regexes import Unsupported, delim_of, escape
from ._schemas import json_equal

__all__ = ["payload", "call_body", "MAX_DIGITS", "ANY_DEPTH", "RECURSION_DEPTH"]

#: The most digits an integer (or a number's integer part) may have.
MAX_DIGITS = 64
#: The most containers a value its schema leaves untyped may nest (``{}``: scalar, or a list or dict of
#: values one level less deep).
ANY_DEPTH = 2
#: How often a recursive model is written inside itself (``Node.children: list[Node]``), and the most such
#: expansions one tool may make (a model with several recursive fields multiplies them): a regex has no
#: recursion, so below that the value is left out where the schema lets it be (an empty list, an optional
#: argument not written, another branch of an anyOf).
RECURSION_DEPTH = 2
RECURSION_BUDGET = 256

#: Whitespace between tokens: what both JSON and Python read inside brackets (``\s`` also matches
#: characters JSON refuses, such as ``\v``).
WS = r"[ \t\n\r]*"
#: Keywords that do not constrain a value (format is an annotation in JSON Schema 2020-12).
_ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$comment", "format", "deprecated",
                          "readOnly", "writeOnly", "$schema", "$id", "$anchor", "contentMediaType",
                          "contentEncoding", "$defs", "definitions"})
_TYPED = {"string": ("minLength", "maxLength", "pattern"),
          "number": ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"),
          "array": ("items", "minItems", "maxItems", "uniqueItems", "prefixItems", "contains", "additionalItems"),
          "object": ("properties", "required", "additionalProperties", "minProperties", "maxProperties",
                     "patternProperties", "propertyNames", "dependentRequired", "dependentSchemas",
                     "dependencies", "unevaluatedProperties")}
_KNOWN = frozenset({"type", "enum", "const", "nullable", "anyOf", "oneOf", "allOf", "$ref",
                    *(k for keys in _TYPED.values() for k in keys)})
_UNSUPPORTED = frozenset({"pattern", "multipleOf", "prefixItems", "contains", "patternProperties", "propertyNames",
                          "dependentRequired", "dependentSchemas", "dependencies", "unevaluatedProperties"})
_ASCII_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BARE_KEY = re.compile(r"[A-Za-z0-9_]+")


# ---------------------------------------------------------------------------- the two exports
def payload(grammar: Grammar, region: Region, tools: list[tuple[str, dict[str, Any]]],
            parallel: bool) -> dict[str, Any]:
    """The xgrammar structural-tag format of a Python-style payload between the call region's open and close
    delimiters: ``[get_weather(city="Paris", days=3), get_time()]`` or one call per line, each call one of
    ``tools`` (name, parameters schema) with its keyword arguments typed by the schema; one call when
    ``parallel`` is False. Raises Unsupported for a region whose value parser is not ``pythonic``."""
    spec = region.spec
    content = getattr(spec, "content", None)
    if content != "pythonic":
        raise Unsupported(f"the call region's value parser is {content!r}, not a call syntax this module writes")
    transform = getattr(spec, "transform", None)
    function = transform.get("function") if isinstance(transform, Mapping) else None
    if not getattr(spec, "transform_each", False) or not isinstance(function, Mapping) \
            or function.get("name") != "{name}" or function.get("arguments") != "{arguments}":
        raise Unsupported("the pythonic region's transform does not take each call's name and arguments")
    if not tools:
        raise Unsupported("no tools to call")
    syntax = _Python(_delimiters(grammar, region))
    call = _or(*(_python_call(syntax, name, params) for name, params in tools))
    # A list [f(), g()], or one call a line: later lines start at the margin (an indented one is a Python
    # IndentationError), blank lines between are fine.
    more_lines = _repeat_node(_seq(r"(?:[ \t]*\r?\n)+", call), 0, None if parallel else 0)
    more_items = _repeat_node(_seq(WS + "," + WS, call), 0, None if parallel else 0)
    listed = _seq(r"\[" + WS, call, more_items, WS + r"\]")
    return _seq(WS, _or(listed, _seq(call, more_lines)))


def call_body(grammar: Grammar, region: Region, name: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """The structural-tag format of what follows an opener that names the tool up to the call's closer, for
    a region whose arguments are JSON in a model's dialect (Gemma's ``{city:<escape>Paris<escape>,n:3}``:
    custom string quotes, bare keys): the arguments object typed by ``parameters``."""
    spec = region.spec
    content = getattr(spec, "content", None)
    args: Mapping[str, Any] = getattr(spec, "content_args", None) or {}
    delims = args.get("string_delims") or []
    if content != "json" or not delims:
        why = "has no string_delims" if content == "json" else f"is {content!r}"
        raise Unsupported(f"the call region's value parser {why}: not a call syntax this module writes")
    transform = getattr(spec, "transform", None)
    function = transform.get("function") if isinstance(transform, Mapping) else None
    if getattr(spec, "transform_each", False) or not isinstance(function, Mapping) \
            or function.get("arguments") != "{content}":
        raise Unsupported("the call region's transform does not take the payload as the call's arguments")
    open_quote, close_quote = delims[0]
    syntax = _Dialect(_delimiters(grammar, region), open_quote, close_quote, args.get("unquoted_keys", False))
    schema = dict(parameters)
    if schema.get("type", "object") != "object":
        raise Unsupported(f"tool {name!r}: its parameters are not an object schema")
    schema["type"] = "object"
    return _Values(syntax, schema, name).value(schema, "$")  # (the brace right after the name, as Gemma writes it)


def _delimiters(grammar: Grammar, region: Region) -> set[str]:
    """The texts that end a call if a string argument holds them. In the offered form of the region (the one
    its own OPEN starts, when it has several) the scanner looks for the form's closer only; when a form may
    go without one (Gemma 4's call ended by <turn|>), every delimiter of the grammar that starts with literal
    text is kept out, rather than work out which may follow."""
    openers = {t.name for t in grammar.terminals.values() if t.region is region and t.role == "open"}
    if len(openers) > 1:
        openers &= {f"{region.rule.upper()}_OPEN"}
    closers = {t.name for t in grammar.terminals.values() if t.region is region and t.role == "close"}
    forms = [form for form in grammar.rules.get(region.rule, ()) if form and form[0] in openers]
    closed = bool(forms) and all(form[-1] in closers for form in forms)
    ends = {form[-1] for form in forms} if closed else set(grammar.terminals)
    out: set[str] = set()
    for name in sorted(ends):
        terminal = grammar.terminals[name]
        if isinstance(terminal.matcher, LiteralMatcher):
            out.update(lit for lit in terminal.matcher.literals if lit)
        elif isinstance(terminal.matcher, RegexMatcher):
            try:
                lead = delim_of(terminal).lead()
            except Unsupported:
                lead = ""
            if lead:
                out.add(lead)
            elif terminal.matcher.heads and terminal.matcher.pattern.startswith("(?="):
                out.update(terminal.matcher.heads)  # (a zero-width close: the text its lookahead reads ends the call)
            elif name in closers:
                # (llama3_pythonic's (?<=\)\]): a string holding ")]" would end the call)
                raise Unsupported(f"the call region's closer {name} starts with no literal text, so a string "
                                  "argument cannot be kept from holding it")
    return out


# ---------------------------------------------------------------------------- regex pieces
def _group(r: str) -> str:
    return r if len(r) == 1 or (len(r) == 2 and r[0] == "\\") else "(?:" + r + ")"


def _alt(*parts: str) -> str:
    unique = list(dict.fromkeys(parts))
    return unique[0] if len(unique) == 1 else "(?:" + "|".join(unique) + ")"


def _opt(r: str) -> str:
    return _group(r) + "?" if r else ""


def _star(r: str) -> str:
    return _group(r) + "*"


def _repeat(r: str, lo: int, hi: int | None) -> str:
    if (lo, hi) == (0, None):
        return _star(r)
    if (lo, hi) == (1, None):
        return _group(r) + "+"
    if hi == lo:
        return "" if lo == 0 else r if lo == 1 else _group(r) + f"{{{lo}}}"
    return _group(r) + (f"{{{lo},}}" if hi is None else f"{{{lo},{hi}}}")


# ---------------------------------------------------------------------------- structural-tag nodes
Node = dict[str, Any]
#: Regexes up to this long are merged with their neighbours into one; a longer one (a string) stays a node
#: of its own, which xgrammar compiles once however often it occurs: a 400 KB payload of six tools took
#: 26 s to compile written as one regex, 1.4 s as nodes.
MERGE = 256


def _re(pattern: str) -> Node:
    return {"type": "regex", "pattern": pattern}


def _small(node: Node) -> bool:
    return node["type"] == "regex" and len(node["pattern"]) <= MERGE


def _node(part: Node | str) -> Node:
    return _re(part) if isinstance(part, str) else part


_QUANTIFIERS = {"optional": (0, 1), "star": (0, None), "plus": (1, None)}


def _bounds(node: Node) -> tuple[int, int | None]:
    if node["type"] == "repeat":
        return int(node["min"]), None if node["max"] < 0 else int(node["max"])
    return _QUANTIFIERS[node["type"]]


def _quantified(node: Node) -> bool:
    """A repeat of a small regex: one regex once a required part follows it (see _seq)."""
    return (node["type"] in _QUANTIFIERS or node["type"] == "repeat") and _small(node["content"])


def _seq(*parts: Node | str) -> Node:
    """Parts in a row, small regexes merged into one. A repeated part is merged only when a required regex
    follows it in the same run: llguidance's lexer never gives text back, so a lexeme that could end before
    an optional tail (``days=3`` before ``(?:, metric=...)?``) and went on into it on a space would
    die at the ``)`` that follows; each lexeme ends on required text instead."""
    flat: list[Node] = []
    for part in parts:
        node = _node(part)
        for item in node["elements"] if node["type"] == "sequence" else [node]:
            if not (item["type"] == "regex" and not item["pattern"]):
                flat.append(item)
    out: list[Node] = []
    run: list[Node] = []  # small regexes and repeats of them since the last other node

    def flush() -> None:
        last = max((i for i, n in enumerate(run) if n["type"] == "regex"), default=-1)
        if last >= 0:
            out.append(_re("".join(n["pattern"] if n["type"] == "regex" else
                                   _repeat(n["content"]["pattern"], *_bounds(n)) for n in run[:last + 1])))
        out.extend(run[last + 1:])
        run.clear()

    for item in flat:
        if _small(item) or _quantified(item):
            run.append(item)
        else:
            flush()
            out.append(item)
    flush()
    if not out:
        return _re("")
    return out[0] if len(out) == 1 else {"type": "sequence", "elements": out}


def _or(*parts: Node | str) -> Node:
    nodes: dict[str, Node] = {}
    for part in parts:
        node = _node(part)
        for item in node["elements"] if node["type"] == "or" else [node]:
            nodes.setdefault(json.dumps(item, sort_keys=True), item)
    small = [n["pattern"] for n in nodes.values() if _small(n)]
    elements = ([_re(_alt(*small))] if small else []) + [n for n in nodes.values() if not _small(n)]
    return elements[0] if len(elements) == 1 else {"type": "or", "elements": elements}


def _repeat_node(part: Node | str, lo: int, hi: int | None) -> Node:
    node = _node(part)
    if hi == 0 or (node["type"] == "regex" and not node["pattern"]):
        return _re("")
    if lo == hi == 1:
        return node
    kind = {(0, None): "star", (1, None): "plus", (0, 1): "optional"}.get((lo, hi))
    if kind is not None:
        return {"type": kind, "content": node}
    return {"type": "repeat", "min": lo, "max": -1 if hi is None else hi, "content": node}


def _optional(part: Node | str) -> Node:
    return _repeat_node(part, 0, 1)


def _fields(fields: Sequence[tuple[Node, bool]], sep: str) -> Node:
    """Fields in order, ``sep`` between two: each (node, required); a required one is written, an optional
    one may be left out. One alternative per field that may come first (those up to the first required)."""
    if not fields:
        return _re("")
    first_required = next((i for i, (_, required) in enumerate(fields) if required), None)
    last_first = first_required if first_required is not None else len(fields) - 1
    alternatives = []
    for k in range(last_first + 1):
        rest = [_seq(sep, f) if required else _optional(_seq(sep, f)) for f, required in fields[k + 1:]]
        alternatives.append(_seq(fields[k][0], *rest))
    written = _or(*alternatives)
    return written if first_required is not None else _optional(written)


def _separated(item: Node, sep: str, lo: int, hi: int | None) -> Node:
    """``lo`` to ``hi`` items with ``sep`` between two (None: no upper bound)."""
    if hi == 0:
        return _re("")
    more = _repeat_node(_seq(sep, item), max(lo - 1, 0), None if hi is None else hi - 1)
    return _seq(item, more) if lo >= 1 else _optional(_seq(item, more))


def _class(chars: Iterable[str]) -> str:
    """The characters as the body of a character class (one control character as ``\\uHHHH``)."""
    return "".join(f"\\u{ord(ch):04x}" if ord(ch) < 0x20 else escape(ch) for ch in sorted(set(chars)))


_CONTROLS = r"\u0000-\u001f"


# ---------------------------------------------------------------------------- string bodies
@dataclass
class _Node:
    children: dict[str, _Node]
    word: bool = False


def _trie(tails: Iterable[str]) -> _Node:
    root = _Node({})
    for tail in tails:
        node = root
        for ch in tail:
            node = node.children.setdefault(ch, _Node({}))
        node.word = True
    return root


def _paths(node: _Node) -> str:
    """The paths into the trie that stop before a word is complete (``<esc`` of ``<escape>``)."""
    steps = [escape(ch) + _paths(child) for ch, child in sorted(node.children.items()) if not child.word]
    return _opt(_alt(*steps)) if steps else ""


def _mismatch(node: _Node, excluded: str) -> str:
    """A path into the trie, then one character that leaves every word (not an excluded one)."""
    off = "[^" + excluded + _class(node.children) + "]"
    steps = [escape(ch) + _mismatch(child, excluded) for ch, child in sorted(node.children.items()) if not child.word]
    return _alt(off, *steps)


def _body(excluded: str, escapes: str | None, words: set[str], length: tuple[int, int | None] | None) -> str:
    """Text that holds none of ``words``, made of characters other than ``excluded`` (a class body) and of
    ``escapes`` units.

    Every word starts with one of a few characters that occur nowhere else in any word (``<``, checked by
    the caller); text then holds a word only where one of them starts it. So the text is free units, and
    groups that start with such a character: a path into the trie of the words after it, ended either by
    a unit that leaves every word, or by the next group (or the end), which also leaves them. With a
    ``length`` bound (minLength, maxLength) the characters are left out instead, so that each unit is one
    character of the value."""
    firsts = {w[0] for w in words}
    unit_class = "[^" + excluded + _class(firsts) + "]"
    unit = _alt(unit_class, escapes) if escapes else unit_class
    if length is not None:
        return _repeat(unit, length[0], length[1])
    mismatch, paths = [], []
    for first in sorted(firsts):
        trie = _trie(w[1:] for w in words if w[0] == first)
        if trie.word:  # a one-character word: the character is never written
            continue
        path = _paths(trie)
        paths.append(escape(first) + path)
        mismatch.append(escape(first) + _alt(_mismatch(trie, excluded + _class(firsts)),
                                            *([path + _group(escapes)] if escapes else [])))
    if not paths:
        return _star(unit)
    ended = _star(_alt(*paths))
    return _star(_alt(unit, ended + _alt(*mismatch))) + ended


def _check_words(words: set[str], structural: str, quotes: Iterable[str] = ()) -> None:
    """Refuse delimiters the string bodies cannot keep out of a call: see _body."""
    firsts = {w[0] for w in words}
    for w in sorted(words):
        if any(ch in firsts for ch in w[1:]):
            raise Unsupported(f"the delimiter {w!r} holds a character another delimiter starts with, so a "
                              "string argument cannot be kept from holding one")
        if w not in quotes and w[0] in structural:
            raise Unsupported(f"the delimiter {w!r} starts with {w[0]!r}, which the call syntax writes outside "
                              "strings")
        for q in quotes:
            if w != q and (w.startswith(q) or q.startswith(w)):
                raise Unsupported(f"the delimiter {w!r} overlaps the string quote {q!r}")


# ---------------------------------------------------------------------------- the syntaxes
class _Syntax:
    """How a value parser spells JSON values."""

    true: str
    false: str
    null: str
    words: set[str]

    def string(self, length: tuple[int, int | None] | None) -> Node:
        raise NotImplementedError

    def literal_string(self, text: str) -> str | None:
        """The regex of one string value (None: it cannot be written)."""
        raise NotImplementedError

    def key(self, name: str) -> str | None:
        raise NotImplementedError

    def any_key(self) -> Node:
        raise NotImplementedError

    def entry_sep(self) -> str:
        """Between two entries of a dict (and before the key that follows)."""
        return WS + "," + WS

    def open_brace(self) -> str:
        return r"\{" + WS

    def colon(self) -> str:
        return WS + ":" + WS

    def number(self, value: int | float) -> str:
        return escape(repr(value) if isinstance(value, float) else str(value))


class _Python(_Syntax):
    """Python literals, as the ``pythonic`` value parser reads them (true/false/null too)."""

    true, false, null = "(?:True|true)", "(?:False|false)", "(?:None|null)"
    _ESCAPES = r"\\(?:[\\'" + '"' + r"abfnrtv]|x[0-9a-fA-F]{2}|u(?:[0-9a-cA-Ce-fE-F][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2}))"

    def __init__(self, words: set[str]) -> None:
        for w in words:
            if any(ch in w for ch in "\\\"'"):
                raise Unsupported(f"the delimiter {w!r} holds a quote or a backslash, which a Python string "
                                  "argument cannot be kept from forming")
        _check_words(words, "\"'\\()[]{},:=.+-_ \t\r\n0123456789"
                     "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
        self.words = words
        self._bodies: dict[tuple[str, tuple[int, int | None] | None], str] = {}

    def _body(self, quote: str, length: tuple[int, int | None] | None) -> str:
        got = self._bodies.get((quote, length))
        if got is None:
            got = self._bodies[(quote, length)] = _body(_class(quote + "\\") + _CONTROLS, self._ESCAPES,
                                                        self.words, length)
        return got

    def string(self, length: tuple[int, int | None] | None) -> Node:
        return _or(*(_re(q + self._body(q, length) + q) for q in "\"'"))

    def literal_string(self, text: str) -> str | None:
        if any(0xD800 <= ord(ch) < 0xE000 for ch in text):
            return None  # (a lone surrogate: not text a client can be sent)
        firsts = {w[0] for w in self.words}
        spelled = any(w in text for w in self.words)  # then each may-start-a-delimiter character is escaped
        forms = []
        for quote in "\"'":
            out = []
            for ch in text:
                if ch in ("\\", quote):
                    out.append("\\" + ch)
                elif ord(ch) < 0x20 or (spelled and ch in firsts):
                    out.append({"\n": "\\n", "\t": "\\t", "\r": "\\r"}.get(ch, f"\\x{ord(ch):02x}"))
                else:
                    out.append(ch)
            forms.append(escape(quote + "".join(out) + quote))
        return _alt(*forms)

    def key(self, name: str) -> str | None:
        return self.literal_string(name)

    def any_key(self) -> Node:
        return self.string(None)


class _Dialect(_Syntax):
    """JSON with custom string quotes and no escapes inside them (``<escape>text<escape>``), and with
    ``unquoted_keys`` bare keys: ``"spaced"`` (after ``{``/``,`` and whitespace, and before ``:``) or true
    (right after ``{``/``,`` and right before ``:``). The constraint offers word keys only (the parser also
    reads bare keys with spaces and punctuation, which a model is then kept from writing)."""

    true, false, null = "true", "false", "null"

    def __init__(self, words: set[str], open_quote: str, close_quote: str, unquoted: Any) -> None:
        if not open_quote or not close_quote:
            raise Unsupported("the call region's string quotes are empty")
        self.words = words | {open_quote, close_quote}
        _check_words(self.words, "[]{},:.+-_ \t\r\n0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
                     quotes=(open_quote, close_quote))
        self.open, self.close = escape(open_quote), escape(close_quote)
        self.unquoted = bool(unquoted)
        # transformers' dialect (unquoted_keys true, not "spaced") reads a bare key only right after the
        # "{" or "," and right before the ":"
        self.tight = unquoted is True
        # (\x01 and \x02 are the parser's stand-ins for hidden strings: a region holding one is refused)
        self._excluded = _class("\x01\x02")

    def string(self, length: tuple[int, int | None] | None) -> Node:
        return _re(self.open + _body(self._excluded, None, self.words, length) + self.close)

    def literal_string(self, text: str) -> str | None:
        if any(w in text for w in self.words) or "\x01" in text or "\x02" in text:
            return None
        return self.open + escape(text) + self.close

    def key(self, name: str) -> str | None:
        if self.unquoted and _BARE_KEY.fullmatch(name):
            return escape(name)
        return self.literal_string(name)

    def any_key(self) -> Node:
        return _or("[A-Za-z0-9_]+", self.string(None)) if self.unquoted else self.string(None)

    def entry_sep(self) -> str:
        return WS + "," + ("" if self.tight else WS)

    def open_brace(self) -> str:
        return r"\{" + ("" if self.tight else WS)

    def colon(self) -> str:
        return ("" if self.tight else WS) + ":" + WS

    def number(self, value: int | float) -> str:
        return escape(json.dumps(value))


# ---------------------------------------------------------------------------- numbers
_INT = "-?(?:0|[1-9][0-9]{0,%d})" % (MAX_DIGITS - 1)
_NUMBER = _INT + r"(?:\.[0-9]+)?(?:[eE][+-]?[0-9]{1,2})?"


def _digits(n: int) -> str:
    return "" if n == 0 else "[0-9]" if n == 1 else f"[0-9]{{{n}}}"


def _span(lo: str, hi: str) -> str:
    """Digit strings of one length from ``lo`` to ``hi``."""
    if lo == hi:
        return lo
    i = 0
    while lo[i] == hi[i]:
        i += 1
    prefix, lo, hi = lo[:i], lo[i:], hi[i:]
    n = len(lo) - 1
    low_full, high_full = lo[1:] == "0" * n, hi[1:] == "9" * n
    parts = []
    start, end = int(lo[0]) + (not low_full), int(hi[0]) - (not high_full)
    if not low_full:
        parts.append(lo[0] + _span(lo[1:], "9" * n))
    if start <= end:
        parts.append((str(start) if start == end else f"[{start}-{end}]") + _digits(n))
    if not high_full:
        parts.append(hi[0] + _span("0" * n, hi[1:]))
    return prefix + _alt(*parts)


def _naturals(lo: int, hi: int | None) -> str:
    """Natural numbers from ``lo`` to ``hi`` (None: up to MAX_DIGITS digits), without leading zeros."""
    parts = []
    top = 10 ** MAX_DIGITS - 1 if hi is None else hi
    length = len(str(lo))
    while length <= len(str(top)):
        first, last = max(lo, 10 ** (length - 1) if length > 1 else 0), min(top, 10 ** length - 1)
        if first == 10 ** (length - 1) and length > 1 and last == 10 ** length - 1 and hi is None:
            parts.append(f"[1-9][0-9]{{{length - 1},{MAX_DIGITS - 1}}}")  # every longer length at once
            break
        if first <= last:
            parts.append(_span(str(first), str(last)))
        length += 1
    return _alt(*parts)


def _integers(lo: int | None, hi: int | None) -> str:
    if lo is not None and hi is not None and lo > hi:
        raise Unsupported("an empty range")
    parts = []
    if hi is None or hi >= 0:
        parts.append(_naturals(max(lo, 0) if lo is not None else 0, hi))
    if lo is None or lo < 0:
        parts.append("-" + _naturals(max(-hi, 1) if hi is not None else 1, -lo if lo is not None else None))
    return _alt(*parts)


# ---------------------------------------------------------------------------- values by schema
class _TooDeep(Unsupported):
    """A recursive reference past RECURSION_DEPTH: the containers above leave it out where they can."""


class _Values:
    """Regexes of the values one tool's schema accepts, in one syntax."""

    def __init__(self, syntax: _Syntax, root: Mapping[str, Any], tool: str) -> None:
        self.syntax = syntax
        self.root = root
        self.tool = tool
        self.refs: list[str] = []
        self.expansions = 0
        self._any: dict[int, Node] = {}

    def refuse(self, where: str, why: str) -> Unsupported:
        return Unsupported(f"tool {self.tool!r}, {where}: {why}")

    def optional(self, schema: Any, where: str) -> Node | None:
        """The value of a part the schema lets be left out (None when it is a recursion too deep to write)."""
        try:
            return self.value(schema, where)
        except _TooDeep:
            return None

    def value(self, schema: Any, where: str) -> Node:
        if schema is True:
            return self.any(ANY_DEPTH)
        if not isinstance(schema, Mapping) or schema is False:
            raise self.refuse(where, "a schema that accepts nothing (or is not a schema)")
        keys = {k for k in schema if k not in _ANNOTATIONS and not k.startswith("x-")}
        unknown = sorted(keys - _KNOWN)
        if unknown:
            raise self.refuse(where, f"the schema keyword {unknown[0]!r} is not understood here")
        if "$ref" in keys:
            return self.reference(schema, keys, where)
        if "allOf" in keys:
            parts = schema["allOf"]
            if keys != {"allOf"} or not isinstance(parts, list) or len(parts) != 1:
                raise self.refuse(where, "allOf of several schemas (or beside other keywords) cannot be written")
            return self.value(parts[0], where)
        for union in ("anyOf", "oneOf"):
            if union in keys:
                return self.union(schema, union, keys, where)
        if "const" in keys or "enum" in keys:
            return self.literals(schema, where)
        refused = sorted(keys & _UNSUPPORTED)
        if refused:
            raise self.refuse(where, f"{refused[0]!r} cannot be written in a call syntax")
        types = self.types(schema, keys)
        if types is None:
            return self.any(ANY_DEPTH)
        if "integer" in types and "number" in types:
            types.remove("integer")  # (a number's form writes integers too)
        return _or(*(self.typed(t, schema, where) for t in types))

    def types(self, schema: Mapping[str, Any], keys: set[str]) -> list[str] | None:
        declared = schema.get("type")
        if isinstance(declared, str):
            types = [declared]
        elif isinstance(declared, list):
            types = [t for t in declared if isinstance(t, str)]
        else:
            inferred = [t for t, words in _TYPED.items() if keys & set(words)]
            if len(inferred) != 1:
                return None  # no type, or keywords of several: any value
            types = inferred
        if schema.get("nullable") and "null" not in types:
            types.append("null")
        return list(dict.fromkeys(types))

    def typed(self, kind: str, schema: Mapping[str, Any], where: str) -> Node:
        syntax = self.syntax
        if kind == "string":
            return syntax.string(self.length(schema, "minLength", "maxLength", where))
        if kind == "integer":
            return self.integer(schema, where)
        if kind == "number":
            bounds = [k for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum") if k in schema]
            if bounds:
                raise self.refuse(where, f"{bounds[0]!r} on a number that need not be an integer cannot be written")
            return _re(_NUMBER)
        if kind == "boolean":
            return _re(_alt(syntax.true, syntax.false))
        if kind == "null":
            return _re(syntax.null)
        if kind == "array":
            return self.array(schema, where)
        if kind == "object":
            return self.object(schema, where)
        raise self.refuse(where, f"the type {kind!r} is not a JSON type")

    def length(self, schema: Mapping[str, Any], low: str, high: str, where: str) -> tuple[int, int | None] | None:
        lo, hi = schema.get(low), schema.get(high)
        if lo is None and hi is None:
            return None
        if not isinstance(lo or 0, int) or not isinstance(hi if hi is not None else 0, int):
            raise self.refuse(where, f"{low}/{high} must be integers")
        return int(lo or 0), None if hi is None else int(hi)

    def integer(self, schema: Mapping[str, Any], where: str) -> Node:
        lo, hi = self.bound(schema, True, where), self.bound(schema, False, where)
        if lo is None and hi is None:
            return _re(_INT)
        if lo is not None and hi is not None and lo > hi:
            raise self.refuse(where, "no integer lies within the bounds")
        return _re(_integers(lo, hi))

    def bound(self, schema: Mapping[str, Any], low: bool, where: str) -> int | None:
        """The least (``low``) or greatest integer the bounds allow; None: unbounded that way."""
        plain = schema.get("minimum" if low else "maximum")
        strict = schema.get("exclusiveMinimum" if low else "exclusiveMaximum")
        edges = []
        for value, exclusive in ((plain, strict is True), (strict, True)):  # (draft 4: a flag on minimum)
            if value is None or isinstance(value, bool):
                continue
            if not isinstance(value, (int, float)) or math.isnan(value):
                raise self.refuse(where, "a numeric bound is not a number")
            if math.isinf(value):
                continue
            if low:
                edges.append(math.floor(value) + 1 if exclusive else math.ceil(value))
            else:
                edges.append(math.ceil(value) - 1 if exclusive else math.floor(value))
        if not edges:
            return None
        return max(edges) if low else min(edges)

    def array(self, schema: Mapping[str, Any], where: str) -> Node:
        items = schema.get("items", True)
        if isinstance(items, list):
            raise self.refuse(where, "items as a list (a tuple) cannot be written")
        bounds = self.length(schema, "minItems", "maxItems", where) or (0, None)
        if schema.get("uniqueItems") and (bounds[1] is None or bounds[1] > 1):
            raise self.refuse(where, "uniqueItems cannot be written")
        item = self.any(ANY_DEPTH - 1) if items is True else \
            self.value(items, where + "[]") if bounds[0] > 0 else self.optional(items, where + "[]")
        if item is None:
            return _re(r"\[" + WS + r"\]")  # (items of a recursion too deep: the list is empty)
        return _seq(r"\[" + WS, _separated(item, WS + "," + WS, *bounds), WS + r"\]")

    def object(self, schema: Mapping[str, Any], where: str) -> Node:
        syntax = self.syntax
        properties = schema.get("properties") or {}
        required = schema.get("required") or []
        if not isinstance(properties, Mapping) or not isinstance(required, list):
            raise self.refuse(where, "properties must be an object and required a list")
        missing = [r for r in required if r not in properties]
        if missing:
            raise self.refuse(where, f"{missing[0]!r} is required but not among the properties")
        counts = self.length(schema, "minProperties", "maxProperties", where)
        extra = schema.get("additionalProperties", True)
        if not properties and extra is not False:
            lo, hi = counts or (0, None)
            value = self.any(ANY_DEPTH - 1) if extra is True else \
                self.value(extra, where + ".*") if lo > 0 else self.optional(extra, where + ".*")
            if value is None:
                return _re(syntax.open_brace() + WS + r"\}")  # (values of a recursion too deep: no entries)
            entry = _seq(syntax.any_key(), syntax.colon(), value)
            return _seq(syntax.open_brace(), _separated(entry, syntax.entry_sep(), lo, hi), WS + r"\}")
        if counts is not None and (counts[0] > len(required) or (counts[1] is not None and counts[1] < len(properties))):
            raise self.refuse(where, "minProperties/maxProperties beyond what the required and declared "
                                     "properties give cannot be written")
        fields = []
        for name, sub in properties.items():
            key = syntax.key(name)
            if key is None:
                if name in required:
                    raise self.refuse(where, f"the required key {name!r} cannot be written")
                continue
            value = self.value(sub, f"{where}.{name}") if name in required else self.optional(sub, f"{where}.{name}")
            if value is not None:
                fields.append((_seq(key + syntax.colon(), value), name in required))
        return _seq(syntax.open_brace(), _fields(fields, syntax.entry_sep()), WS + r"\}")

    def union(self, schema: Mapping[str, Any], union: str, keys: set[str], where: str) -> Node:
        branches = schema[union]
        if not isinstance(branches, list) or not branches:
            raise self.refuse(where, f"{union} must be a non-empty list")
        if keys - {union, "nullable"}:
            raise self.refuse(where, f"{union} beside other keywords cannot be written")
        if union == "oneOf":
            kinds = [self.kinds(b) for b in branches]
            for i, a in enumerate(kinds):
                if a is None or any(b is None or a & b for b in kinds[i + 1:]):
                    raise self.refuse(where, "oneOf whose branches may accept the same value cannot be written")
        parts = [p for p in (self.optional(b, where) for b in branches) if p is not None]
        if schema.get("nullable"):
            parts.append(_re(self.syntax.null))
        if not parts:
            raise _TooDeep(f"tool {self.tool!r}, {where}: every branch is a recursion deeper than "
                           f"{RECURSION_DEPTH} levels, which a regex cannot write")
        return _or(*parts)

    @staticmethod
    def kinds(schema: Any) -> set[str] | None:
        """The JSON types a oneOf branch accepts (integer within number), None when any."""
        if not isinstance(schema, Mapping) or "type" not in schema or set(schema) & {"anyOf", "oneOf", "allOf", "$ref"}:
            return None
        declared = schema["type"]
        types = set(declared if isinstance(declared, list) else [declared])
        if types & {"integer", "number"}:
            types |= {"integer", "number"}
        if schema.get("nullable"):
            types.add("null")
        return types

    def literals(self, schema: Mapping[str, Any], where: str) -> Node:
        """The enum (or const) values the whole schema accepts, each written as itself: the other keywords
        beside it (a type, a minimum, a pattern) need no form of their own."""
        values = [schema["const"]] if "const" in schema else schema.get("enum")
        if not isinstance(values, list):
            raise self.refuse(where, "enum must be a list")
        if "const" in schema and "enum" in schema:
            enum = schema["enum"]
            values = values if isinstance(enum, list) and any(json_equal(values[0], e) for e in enum) else []
        # Each value is checked against the other keywords, not the enum itself: a validator's enum check
        # compares a value with every member, so checking n values was n**2 comparisons (20,000 values:
        # 14.2 s for lfm2, now 0.6 s). The root's definitions go along for a reference among the others.
        rest = {k: v for k, v in schema.items() if k not in ("enum", "const")}
        if isinstance(self.root, Mapping) and "$defs" in self.root:
            rest["$defs"] = self.root["$defs"]
        validator = bounded_validator(rest, draft_of=schema)  # (the schema is untrusted: see bounded_validator)
        try:
            parts = [p for p in (self.literal(v) for v in values if validator.is_valid(v)) if p is not None]
        except Unresolvable:
            raise self.refuse(where, "a $ref to a schema it does not hold (other documents are never fetched)") \
                from None
        if not parts:
            raise self.refuse(where, "none of its enum or const values can be written")
        return _re(_alt(*parts))

    def literal(self, value: Any) -> str | None:
        """The regex of one JSON value (None: it cannot be written)."""
        syntax = self.syntax
        if value is None:
            return syntax.null
        if isinstance(value, bool):
            return syntax.true if value else syntax.false
        if isinstance(value, (int, float)):
            if isinstance(value, float) and not math.isfinite(value):
                return None
            return syntax.number(value)
        if isinstance(value, str):
            return syntax.literal_string(value)
        if isinstance(value, list):
            items = [self.literal(v) for v in value]
            if any(i is None for i in items):
                return None
            return r"\[" + WS + (WS + "," + WS).join(i for i in items if i is not None) + WS + r"\]"
        if isinstance(value, dict):
            entries = []
            for k, v in value.items():
                key, item = syntax.key(k), self.literal(v)
                if key is None or item is None:
                    return None
                entries.append(key + syntax.colon() + item)
            return syntax.open_brace() + syntax.entry_sep().join(entries) + WS + r"\}"
        return None

    def reference(self, schema: Mapping[str, Any], keys: set[str], where: str) -> Node:
        ref = schema["$ref"]
        if keys != {"$ref"}:
            raise self.refuse(where, "$ref beside other keywords cannot be written")
        if not isinstance(ref, str) or not (ref == "#" or ref.startswith("#/")):
            raise self.refuse(where, f"only references within the tool's schema are followed, not {ref!r}")
        if self.refs.count(ref) >= RECURSION_DEPTH:
            raise _TooDeep(f"tool {self.tool!r}, {where}: the recursive reference {ref!r} must be written deeper "
                           f"than {RECURSION_DEPTH} levels, which a regex cannot")
        if ref in self.refs:
            self.expansions += 1
            if self.expansions > RECURSION_BUDGET:
                raise self.refuse(where, f"the recursive model expands to more than {RECURSION_BUDGET} forms")
        target: Any = self.root
        for part in ref[2:].split("/") if ref != "#" else ():
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, Mapping) or part not in target:
                raise self.refuse(where, f"the reference {ref!r} leads nowhere")
            target = target[part]
        self.refs.append(ref)
        try:
            return self.value(target, where)
        finally:
            self.refs.pop()

    def any(self, depth: int) -> Node:
        """Any JSON value with at most ``depth`` containers nested."""
        got = self._any.get(depth)
        if got is None:
            syntax = self.syntax
            scalar = _or(syntax.string(None), _NUMBER, syntax.true, syntax.false, syntax.null)
            if depth <= 0:
                got = scalar
            else:
                inner = self.any(depth - 1)
                items = _seq(r"\[" + WS, _separated(inner, WS + "," + WS, 0, None), WS + r"\]")
                entry = _seq(syntax.any_key(), syntax.colon(), inner)
                entries = _seq(syntax.open_brace(), _separated(entry, syntax.entry_sep(), 0, None), WS + r"\}")
                got = _or(scalar, items, entries)
            self._any[depth] = got
        return got


# ---------------------------------------------------------------------------- one Python-style call
def _python_name(name: str) -> bool:
    """Whether ``name`` is written as itself in a Python call (dotted names too): ASCII, since Python
    normalises other identifiers (NFKC) before the parser gives them back."""
    return all(_ASCII_NAME.fullmatch(part) and not keyword.iskeyword(part) and part != "__debug__"
               for part in name.split("."))


def _python_call(syntax: _Python, name: str, parameters: Mapping[str, Any]) -> Node:
    """``name(key=value, ...)``: the keyword arguments of the tool's schema, in its properties order."""
    if not _python_name(name):
        raise Unsupported(f"tool {name!r}: its name is not a Python name, so it cannot be called in Python syntax")
    schema = dict(parameters)
    if schema.get("type", "object") != "object":
        raise Unsupported(f"tool {name!r}: its parameters are not an object schema")
    values = _Values(syntax, schema, name)
    extra = {k for k in schema if k not in _ANNOTATIONS and not k.startswith("x-")} - {
        "type", "properties", "required", "additionalProperties"}
    if extra:
        raise Unsupported(f"tool {name!r}: the parameters keyword {sorted(extra)[0]!r} cannot be written as "
                          "keyword arguments")
    properties = schema.get("properties") or {}
    required = schema.get("required") or []
    if not isinstance(properties, Mapping) or not isinstance(required, list):
        raise Unsupported(f"tool {name!r}: properties must be an object and required a list")
    missing = [r for r in required if r not in properties]
    if missing:
        raise Unsupported(f"tool {name!r}: {missing[0]!r} is required but not among the properties")
    fields = []
    for arg, sub in properties.items():
        # Python keywords are fine (the value parser renames `from=` before parsing), __debug__ is not.
        if not (isinstance(arg, str) and _ASCII_NAME.fullmatch(arg)) or arg == "__debug__":
            if arg in required:
                raise Unsupported(f"tool {name!r}: the required argument {arg!r} is not a Python name")
            continue
        value = values.value(sub, f"$.{arg}") if arg in required else values.optional(sub, f"$.{arg}")
        if value is not None:
            fields.append((_seq(escape(arg) + WS + "=" + WS, value), arg in required))
    return _seq(escape(name) + r"\(" + WS, _fields(fields, WS + "," + WS), WS + r"\)")
