"""A delimiter's regex as a piece of a decoding constraint: parsed with the standard library's regex parser,
re-emitted in the subset that both llguidance (Rust's regex crate) and xgrammar read, with the call opener's
``name`` group (and an argument opener's ``key`` group) replaced by one tool's name or parameter."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .._engine.delimiters import LiteralMatcher, RegexMatcher, ValueEnd
from .._engine.symbols import Terminal

# The standard library's regex parser (re._parser since 3.11, sre_parse before; both untyped internals),
# public here for the other stages that read delimiter regexes (constrain._tagged).
sre_c: Any = importlib.import_module("re._constants" if sys.version_info >= (3, 11) else "sre_constants")
sre_p: Any = importlib.import_module("re._parser" if sys.version_info >= (3, 11) else "sre_parse")

#: The group of a call opener that holds the tool's name (grammar_parse's convention).
NAME_GROUP = "name"


# ---------------------------------------------------------------------------- regexes, piece by piece
# A delimiter becomes a list of pieces: ("lit", text) or ("re", regex). The regex text is the subset that
# Rust's regex crate (llguidance) and xgrammar's regex both read: no lookaround, no named groups.


_META = set("\\.+*?()|[]{}^$-/#&~")
_CONTROL = {"\n": "\\n", "\t": "\\t", "\r": "\\r", "\f": "\\f", "\v": "\\v"}


def escape(text: str) -> str:
    """Text as a regex both dialects read the same way: metacharacters escaped with a backslash, control
    characters by name (xgrammar reads a ``\\x`` escape's hex digits greedily, so none is written)."""
    return "".join("\\" + c if c in _META else _CONTROL.get(c, c) for c in text)


_CATEGORIES = {
    sre_c.CATEGORY_DIGIT: r"\d", sre_c.CATEGORY_NOT_DIGIT: r"\D", sre_c.CATEGORY_SPACE: r"\s",
    sre_c.CATEGORY_NOT_SPACE: r"\S", sre_c.CATEGORY_WORD: r"\w", sre_c.CATEGORY_NOT_WORD: r"\W",
}
_SAMPLES = {sre_c.CATEGORY_DIGIT: "0", sre_c.CATEGORY_SPACE: " ", sre_c.CATEGORY_WORD: "a"}


class Unsupported(Exception):
    pass


@dataclass
class Regex:
    """A parsed delimiter regex, emitted with the ``name`` group(s) replaced by one tool's name."""

    items: Any
    names: frozenset[int]  # group numbers that hold the name
    dotall: bool
    lookahead: bool = False  # a lookahead at a non-space ended it: what follows starts at once (phi4's functools(?=\[))
    groups: Mapping[str, int] = field(default_factory=dict)  # the source's group names and numbers

    def emit(self, items: Any, name: str | None) -> str:
        return "".join(self._node(op, av, name) for op, av in items)

    def _node(self, op: Any, av: Any, name: str | None) -> str:
        c = sre_c
        if op is c.LITERAL:
            return escape(chr(av))
        if op is c.NOT_LITERAL:
            return f"[^{escape(chr(av))}]"
        if op is c.ANY:
            return r"[\s\S]" if self.dotall else r"[^\n]"
        if op is c.IN:
            return self._set(av)
        if op is c.BRANCH:
            return "(?:" + "|".join(self.emit(b, name) for b in av[1]) + ")"
        if op is c.SUBPATTERN:
            group, _add, _del, sub = av
            if group in self.names:
                if name is None:
                    raise Unsupported("the call opener's name group has no tool name here")
                return escape(name)
            return "(?:" + self.emit(sub, name) + ")"
        if op in (c.MAX_REPEAT, c.MIN_REPEAT, getattr(c, "POSSESSIVE_REPEAT", None)):
            lo, hi, sub = av
            try:
                body = self.emit(sub, name)
            except Unsupported:
                if lo == 0:  # an optional part no constraint can write (a lookahead inside it) is left out
                    return ""
                raise
            body = body if len(sub) == 1 and sub[0][0] in (c.LITERAL, c.IN, c.ANY, c.NOT_LITERAL) \
                and len(body) <= 6 or body.startswith("(?:") and self._balanced(body) else f"(?:{body})"
            if (lo, hi) == (0, c.MAXREPEAT):
                return body + "*"
            if (lo, hi) == (1, c.MAXREPEAT):
                return body + "+"
            if (lo, hi) == (0, 1):
                return body + "?"
            return body + (f"{{{lo},}}" if hi == c.MAXREPEAT else f"{{{lo},{hi}}}")
        raise Unsupported(f"the regex construct {op} has no equivalent in a constraint")

    @staticmethod
    def _balanced(body: str) -> bool:
        """Whether ``(?:...)`` spans the whole text (not ``(?:a)(?:b)``)."""
        depth = 0
        for i, ch in enumerate(body):
            if ch == "\\":
                continue
            depth += ch == "(" if (i == 0 or body[i - 1] != "\\") else 0
            depth -= ch == ")" if (i == 0 or body[i - 1] != "\\") else 0
            if depth == 0 and i < len(body) - 1:
                return False
        return True

    def _set(self, items: Any) -> str:
        c = sre_c
        out, negate = [], False
        for op, av in items:
            if op is c.NEGATE:
                negate = True
            elif op is c.LITERAL:
                out.append(escape(chr(av)))
            elif op is c.RANGE:
                out.append(f"{escape(chr(av[0]))}-{escape(chr(av[1]))}")
            elif op is c.CATEGORY and av in _CATEGORIES:
                out.append(_CATEGORIES[av])
            else:
                raise Unsupported(f"the character-set item {op} has no equivalent in a constraint")
        return "[" + ("^" if negate else "") + "".join(out) + "]"

    def canonical(self, items: Any, name: str | None) -> str | None:
        """The text the model card writes for these items: the first alternative, an optional group
        written, ``*`` and a run of a class its least, ``+`` once (None: not one text, e.g. a negated class)."""
        c = sre_c
        out = []
        for op, av in items:
            if op is c.LITERAL:
                out.append(chr(av))
            elif op is c.SUBPATTERN:
                if av[0] in self.names:
                    if name is None:
                        return None
                    out.append(name)
                else:
                    sub = self.canonical(av[3], name)
                    if sub is None:
                        return None
                    out.append(sub)
            elif op is c.BRANCH:
                sub = self.canonical(av[1][0], name)
                if sub is None:
                    return None
                out.append(sub)
            elif op in (c.MAX_REPEAT, c.MIN_REPEAT):
                lo, hi, sub_items = av
                # A run of one character class (``\s{0,8}``, ``[ \t]*``) is written its least; an optional
                # group of text (``(?:<\/function>\s*)?``) is written once, as the model card shows it.
                single = len(sub_items) == 1 and sub_items[0][0] in (c.IN, c.ANY, c.NOT_LITERAL, c.CATEGORY)
                times = lo if single else max(lo, 1) if hi != c.MAXREPEAT or lo > 0 else 0
                sub = self.canonical(sub_items, name) if times else ""
                if sub is None and lo == 0:  # an optional part with no one text (``(?::[^\s<>]+)?``)
                    continue
                if sub is None:
                    return None
                out.append(sub * times)
            elif op is c.IN:
                first = av[0]
                if first[0] is c.LITERAL:
                    out.append(chr(first[1]))
                elif first[0] is c.RANGE:
                    out.append(chr(first[1][0]))
                elif first[0] is c.CATEGORY and first[1] in _SAMPLES:
                    out.append(_SAMPLES[first[1]])
                else:
                    return None
            else:
                return None
        return "".join(out)


def without_start(rx: Regex) -> Regex | None:
    """The regex without an alternative that is the start of the output alone (``(?:^|<think>\\s*)``: the
    reasoning opens implicitly), or None when it has no such alternative."""
    c = sre_c
    if len(rx.items) != 1:
        return None
    op, av = rx.items[0]
    if op is c.SUBPATTERN and len(av[3]) == 1:
        op, av = av[3][0]
    if op is not c.BRANCH:
        return None
    kept = [b for b in av[1] if not (len(b) == 1 and b[0][0] is c.AT)]
    if len(kept) == len(av[1]) or not kept:
        return None
    return Regex([(c.BRANCH, (None, kept))] if len(kept) > 1 else list(kept[0]), rx.names, rx.dotall)


def parse_regex(pattern: str, flags: int, group: str = NAME_GROUP) -> Regex:
    """A delimiter regex parsed, with every ``group`` (the tool's name; an argument opener's ``key``) and every
    ``(?P=group)`` back-reference as a group :meth:`Regex.emit` writes as the name given to it. A trailing
    lookahead is dropped (the payload after it is constrained anyway); other lookarounds and anchors are
    refused when emitted."""
    # The regex module allows one group name twice (alternatives that both capture the name); re does not.
    parts = pattern.replace(f"(?P={group})", f"(?P<{group}>)").split(f"(?P<{group}>")
    source = parts[0] + "".join(f"(?P<{group}__{i}>" + part for i, part in enumerate(parts[1:], 1))
    try:
        parsed = sre_p.parse(source, flags & ~0x100)  # (regex.VERSION0/1 bits are not re's)
    except Exception as e:  # re refuses what the regex module allows (possessive forms in 3.10, ...)
        raise Unsupported(f"the regex {pattern!r} is not understood here ({e})") from None
    groups: dict[str, int] = dict(parsed.state.groupdict)
    names = frozenset(n for g, n in groups.items() if g.startswith(group + "__"))
    items: list[Any] = list(parsed.data)
    lookahead = False
    while items and items[-1][0] is sre_c.ASSERT and items[-1][1][0] == 1:
        ahead = list(items.pop()[1][1])
        # (qwen3's (?=\s*[{\[]) allows whitespace first; phi4's (?=\[) does not)
        lookahead = bool(ahead) and ahead[0][0] is sre_c.LITERAL and not chr(ahead[0][1]).isspace()
    return Regex(items, names, bool(flags & 16), lookahead, groups)


# ---------------------------------------------------------------------------- a delimiter, for one tool
@dataclass(frozen=True)
class Delim:
    """One delimiter of the grammar: literal alternatives, a regex, or nothing (a JSON value's end)."""

    literals: tuple[str, ...] = ()
    regex: Regex | None = None

    @property
    def empty(self) -> bool:
        return not self.literals and self.regex is None

    def has_name(self) -> bool:
        return self.regex is not None and bool(self.regex.names)

    def regex_text(self, name: str | None = None) -> str:
        """The whole delimiter as one regex."""
        if self.regex is not None:
            return self.regex.emit(self.regex.items, name)
        return "(?:" + "|".join(escape(lit) for lit in self.literals) + ")" if self.literals else ""

    def alternatives(self) -> list[Delim]:
        """One delimiter per alternative of a regex that is a choice of forms (gigachat3's call opener,
        ``<|message_sep|>...`` or ``<|function_call|>``, which the regex parser stores as a common head and
        a branch): each has its own literal head, so each is its own trigger."""
        if self.regex is None:
            return [Delim(literals=(literal,)) for literal in self.literals] or [self]
        items = self.regex.items
        i = 0
        while i < len(items) and items[i][0] is sre_c.LITERAL:
            i += 1
        if i == len(items) or items[i][0] is not sre_c.BRANCH:
            return [self]
        return [Delim(regex=Regex([*items[:i], *branch, *items[i + 1:]], self.regex.names, self.regex.dotall,
                                  self.regex.lookahead))
                for branch in items[i][1][1]]

    def lead(self) -> str:
        """The literal text every canonical match starts with (the trigger of a call opener)."""
        if self.literals:
            return self.literals[0] if len(self.literals) == 1 else ""
        return self._head()[1]

    def _head(self) -> tuple[int, str]:
        """(items, text) of the opener's head: its literals, and runs of whitespace that must be written
        (gpt-oss's ``commentary\\s+to=``, as one space), up to the first item that varies otherwise."""
        assert self.regex is not None
        c, items, out = sre_c, self.regex.items, []
        count = 0
        for op, av in items:
            if op is c.LITERAL:
                out.append(chr(av))
            elif op in (c.MAX_REPEAT, c.MIN_REPEAT) and av[0] >= 1 and len(av[2]) == 1 \
                    and av[2][0][0] is c.IN and av[2][0][1] == [(c.CATEGORY, c.CATEGORY_SPACE)] \
                    and count + 1 < len(items) and items[count + 1][0] is c.LITERAL:
                out.append(" " * av[0])
            else:
                break
            count += 1
        return count, "".join(out)

    def rest_after_lead(self, name: str | None) -> str:
        """The regex after the head (the trigger, already written)."""
        if self.literals:
            return ""
        assert self.regex is not None
        return self.regex.emit(self.regex.items[self._head()[0]:], name)

    def split(self, name: str | None) -> tuple[str, str]:
        """(begin, rest): the literal text up to and including the tool's name (for a structural tag's
        ``begin``, which is a literal), or only the literal head when something else comes before the name,
        and the rest as a regex."""
        if self.literals:
            return self.literals[0], ""
        assert self.regex is not None
        items = self.regex.items
        cut = len(items)
        for i, (op, av) in enumerate(items):
            if self.regex.names and self._holds_name(op, av):
                # Up to the name when the item is the name; before it when the name is inside a larger
                # item (Kimi's id group, whose call index follows the name): the rest stays a regex.
                is_name = op is sre_c.SUBPATTERN and av[0] in self.regex.names
                cut = i + 1 if is_name else i
                break
        lead = self._head()[0]
        if not self.regex.names or any(op is not sre_c.LITERAL and not (op is sre_c.SUBPATTERN and
                                                                       av[0] in self.regex.names)
                                       for op, av in items[:cut]):
            # Text before the name that is not one literal (DeepSeek R1's call type, Qwen3-Coder's
            # whitespace) stays a regex: the begin is the literal head, which several tools then share.
            cut = lead
        begin = self.regex.canonical(items[:cut], name) if cut != lead else self._head()[1]
        if begin is None:
            raise Unsupported("the call opener has no canonical text up to the tool name")
        return begin, self.regex.emit(self._after_name(items, cut), name)

    def _after_name(self, items: Any, cut: int) -> list[Any]:
        """The items from ``cut`` on, less the optional runs of a negated class after the name (MiniCPM5's
        ``(?P<name>...)["']?[^<>\n]*>``): text written there would be read back as part of the name."""
        assert self.regex is not None
        c = sre_c
        named = next((i for i, (op, av) in enumerate(items) if op is c.SUBPATTERN and av[0] in self.regex.names),
                     None)
        return [(op, av) for i, (op, av) in enumerate(items) if i >= cut and not (
            named is not None and i > named and op in (c.MAX_REPEAT, c.MIN_REPEAT) and av[0] == 0
            and len(av[2]) == 1 and av[2][0][0] is c.IN and av[2][0][1][:1] == [(c.NEGATE, None)])]

    def _holds_name(self, op: Any, av: Any) -> bool:
        assert self.regex is not None
        if op is sre_c.SUBPATTERN:
            return av[0] in self.regex.names or any(self._holds_name(o, a) for o, a in av[3])
        if op is sre_c.BRANCH:
            return any(self._holds_name(o, a) for b in av[1] for o, a in b)
        if op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT):
            return any(self._holds_name(o, a) for o, a in av[2])
        return False

    def canonical(self) -> list[str]:
        """Every text of a delimiter with no name, for a structural tag's ``end`` (the canonical first)."""
        if self.literals:
            return list(self.literals)
        if self.regex is None:
            return [""]
        text = self.regex.canonical(self.regex.items, None)
        if text is None:
            raise Unsupported("a close delimiter has no canonical text")
        return expansions(self.regex, self.regex.items) or [text]


def expansions(rx: Regex, items: Any, limit: int = 16) -> list[str]:
    """Every text of a small finite regex (literals, optional groups, alternatives), or [] if not finite."""
    c = sre_c
    out = [""]
    for op, av in items:
        if op is c.LITERAL:
            choices = [chr(av)]
        elif op is c.SUBPATTERN:
            choices = expansions(rx, av[3], limit)
        elif op is c.BRANCH:
            choices = [t for b in av[1] for t in expansions(rx, b, limit)]
        elif op in (c.MAX_REPEAT, c.MIN_REPEAT) and av[1] != c.MAXREPEAT and av[1] <= 2:
            sub = expansions(rx, av[2], limit)
            choices = [t * n for n in range(av[1], av[0] - 1, -1) for t in sub]
        else:
            return []
        if not choices:
            return []
        out = [a + b for a in out for b in choices]
        if len(out) > limit:
            return []
    return out


def delim_of(terminal: Terminal | None) -> Delim:
    if terminal is None or isinstance(terminal.matcher, ValueEnd) or terminal.matcher is None:
        return Delim()
    if isinstance(terminal.matcher, LiteralMatcher):
        return Delim(literals=tuple(terminal.matcher.literals))
    assert isinstance(terminal.matcher, RegexMatcher)
    return Delim(regex=parse_regex(terminal.matcher.pattern, terminal.matcher.flags))


# ---------------------------------------------------------------------------- a tokenizer's added tokens
# An engine reads an added token (``<|python_tag|>``, Qwen's ``<tool_call>``) as one token, not as its text:
# llguidance matches it only by a token reference. These split a literal or a regex at each token's text
# into structural-tag formats, a ``{"type": "token", "token": id}`` for each occurrence.


def text_with_tokens(text: str, tokens: Mapping[str, int]) -> list[dict[str, Any]]:
    """``text`` as ``const_string`` and ``token`` formats, each added token's text a token (longest first)."""
    out: list[dict[str, Any]] = []
    start = i = 0
    ordered = sorted((t for t in tokens if t), key=len, reverse=True)
    while i < len(text):
        token = next((t for t in ordered if text.startswith(t, i)), None)
        if token is None:
            i += 1
            continue
        if start < i:
            out.append({"type": "const_string", "value": text[start:i]})
        out.append({"type": "token", "token": tokens[token]})
        i = start = i + len(token)
    if start < len(text):
        out.append({"type": "const_string", "value": text[start:]})
    return out


def regex_with_tokens(pattern: str, tokens: Mapping[str, int]) -> dict[str, Any] | None:
    """``pattern`` as a structural-tag format in which each added token's text, wherever the regex spells it
    as literal characters (inside groups and alternatives too), is a token; None when it spells none, or
    holds a construct this re-emitting does not know (it is then kept whole)."""
    if not any(t and t in pattern.replace("\\", "") for t in tokens):
        return None
    try:
        items = list(sre_p.parse(pattern).data)
    except Exception:  # (a pattern Python's re reads differently: kept whole)
        return None
    rx = Regex(items, frozenset(), dotall=False)
    ordered = sorted((t for t in tokens if t), key=len, reverse=True)
    try:
        return _split_items(rx, items, ordered, tokens)
    except Unsupported:
        return None


def _split_items(rx: Regex, items: Any, ordered: list[str], tokens: Mapping[str, int]) -> dict[str, Any] | None:
    """A sequence format for ``items`` with its tokens split out, or None when no token occurs in them."""
    c = sre_c
    out: list[dict[str, Any]] = []
    run: list[Any] = []  # the items since the last token, emitted as one regex
    found = False

    def flush() -> None:
        if run:
            if any(op is c.ANY for op, _ in run):  # (the dotall flag of a group is not carried here)
                raise Unsupported("a wildcard beside a token")
            out.append({"type": "regex", "pattern": rx.emit(run, None)})
            run.clear()

    i = 0
    while i < len(items):
        op, av = items[i]
        if op is c.LITERAL:
            token = next((t for t in ordered if len(t) <= len(items) - i and all(
                items[i + k][0] is c.LITERAL and items[i + k][1] == ord(ch) for k, ch in enumerate(t))), None)
            if token is not None:
                flush()
                out.append({"type": "token", "token": tokens[token]})
                found, i = True, i + len(token)
                continue
        inner = _split_nested(rx, op, av, ordered, tokens)
        if inner is None:
            run.append((op, av))
        else:
            flush()
            out.append(inner)
            found = True
        i += 1
    if not found:
        return None
    flush()
    return {"type": "sequence", "elements": out}


def _split_nested(rx: Regex, op: Any, av: Any, ordered: list[str],
                  tokens: Mapping[str, int]) -> dict[str, Any] | None:
    c = sre_c
    if op is c.SUBPATTERN:
        return _split_items(rx, av[3], ordered, tokens)
    if op is c.BRANCH:
        branches = [_split_items(rx, b, ordered, tokens) for b in av[1]]
        if all(b is None for b in branches):
            return None
        return {"type": "or", "elements": [b if b is not None else {"type": "regex", "pattern": rx.emit(branch, None)}
                                           for b, branch in zip(branches, av[1])]}
    if op in (c.MAX_REPEAT, c.MIN_REPEAT):
        lo, hi, sub = av
        inner = _split_items(rx, sub, ordered, tokens)
        if inner is None:
            return None
        if (lo, hi) == (0, 1):
            return {"type": "optional", "content": inner}
        if hi == c.MAXREPEAT:
            return {"type": "star" if lo == 0 else "plus", "content": inner} if lo <= 1 else \
                {"type": "repeat", "min": lo, "max": -1, "content": inner}
        return {"type": "repeat", "min": lo, "max": hi, "content": inner}
    return None
