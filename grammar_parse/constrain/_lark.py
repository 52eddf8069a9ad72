"""An xgrammar structural-tag format written in llguidance's Lark dialect, so each payload is described
once (as a structural tag) and both engines get it.

llguidance's lexer commits to a lexeme once it ends and never gives text back, so the translation fuses
what a one-to-one rendering would split: a run of literals and regexes side by side is one regex lexeme,
and free text (``any_text``) is one lazy lexeme together with the literals around it, ending at the first
end text (``r[lazy]: /<parameter=city>/ TEXT /<\\/parameter>/``). A greedy text lexeme of its own would
swallow the end text and never return it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ._regexes import Unsupported, escape, regex_with_tokens, text_with_tokens
from ._schemas import rooted

#: A bounded repeat at least this long is written as ``*``: the bound is xgrammar's (it refuses an unbounded
#: repeat in a tag with no end text), llguidance needs none.
UNBOUNDED = 32


def lark_regex(regex: str) -> str:
    """A regex as a Lark terminal (``/`` is escaped by :func:`regexes.escape`)."""
    return "/" + regex + "/"


def _group(regex: str) -> str:
    return regex if not regex else f"(?:{regex})"


def _alternatives(texts: list[str]) -> str:
    return "(?:" + "|".join(escape(t) for t in texts) + ")" if len(texts) > 1 else escape(texts[0])


# A node renders as a list of items: ("rx", regex) for text of a fixed language, ("text", excludes) for free text,
# ("tok", reference, text) for an added token, ("or", [items, ...]) for alternatives, ("expr", lark) for anything
# else (a %json lexeme, a repeat).
_Item = tuple[Any, ...]


@dataclass
class LarkWriter:
    """Collects the rules a translation needs (free-text lexemes, alternations) under fresh names.

    ``tokens`` are the tokenizer's added tokens (text: id): their texts are written as token references
    (``<[id]>``), and free text before one is a greedy lexeme that may not spell it (the parser would read
    the spelled text as the delimiter too)."""

    prefix: str = "p"
    tokens: Mapping[str, int] = field(default_factory=dict)
    rules: list[str] = field(default_factory=list)
    count: int = 0
    named: dict[str, str] = field(default_factory=dict)  # an expression written before, and its rule

    def __post_init__(self) -> None:
        self._token_texts = {i: t for t, i in self.tokens.items()}

    def expression(self, node: dict[str, Any]) -> str:
        """The Lark expression of a structural-tag format (its helper rules go to ``rules``)."""
        return self._join(self._items(node))

    def _rule(self, expression: str) -> str:
        """A rule for an expression, one per distinct expression (a call form in ``call (sep call)*``
        is written once, not once per place)."""
        if " " not in expression:
            return expression
        if expression not in self.named:
            self.named[expression] = self._new(expression)
        return self.named[expression]

    def _text(self, excludes: tuple[str, ...]) -> str:
        """The terminal of free text that holds none of ``excludes`` (``TEXT`` when none)."""
        if not excludes:
            return "TEXT"
        body = "/(?s:.*)/ & ~/(?s:.*)" + _alternatives(list(excludes)) + "(?s:.*)/"
        key = "TEXT " + body
        if key not in self.named:
            self.count += 1
            self.named[key] = f"{self.prefix.upper()}TEXT_{self.count}"
            self.rules.append(f"{self.named[key]}: {body}")
        return self.named[key]

    def _new(self, body: str, lazy: bool = False) -> str:
        self.count += 1
        name = f"{self.prefix}_{self.count}"
        self.rules.append(f"{name}{'[lazy]' if lazy else ''}: {body}")
        return name

    def _items(self, node: dict[str, Any]) -> list[_Item]:
        kind = node.get("type")
        if kind == "const_string":
            if self.tokens and any(t and t in node["value"] for t in self.tokens):
                return self._items({"type": "sequence", "elements": text_with_tokens(node["value"], self.tokens)})
            return [("rx", escape(node["value"]))] if node["value"] else []
        if kind == "regex":
            split = regex_with_tokens(node["pattern"], self.tokens) if self.tokens else None
            if split is not None:
                return self._items(split)
            return [("rx", _group(node["pattern"]))] if node["pattern"] else []
        if kind == "token":
            ident = node["token"]
            text = self._token_texts.get(ident)
            if text is None:
                raise Unsupported(f"the token {ident!r} is not one of the tokenizer's added tokens given")
            return [("tok", f"<[{ident}]>", text)]
        if kind == "json_schema":
            return [("expr", "%json " + json.dumps(rooted(node["json_schema"]), ensure_ascii=False))]
        if kind == "any_text":
            return [("text", tuple(node.get("excludes") or ()))]
        if kind == "sequence":
            return [item for element in node["elements"] for item in self._items(element)]
        if kind == "tag":
            end = node["end"] if isinstance(node["end"], list) else [node["end"]]
            items = self._items({"type": "const_string", "value": node["begin"]}) + self._items(node["content"])
            if not any(end):
                return items
            if self.tokens and any(t and t in e for t in self.tokens for e in end):
                ends = [{"type": "const_string", "value": e} for e in end]
                return items + self._items(ends[0] if len(ends) == 1 else {"type": "or", "elements": ends})
            return items + [("rx", _alternatives(end))]
        if kind == "or":
            return [("or", [self._items(e) for e in node["elements"]])]
        if kind in ("optional", "star", "plus", "repeat"):
            inner = self._rule(self.expression(node["content"]))
            if kind == "repeat":
                lo, hi = int(node["min"]), int(node["max"])
                if hi >= UNBOUNDED or hi < 0:
                    return [("expr", " ".join([inner] * lo + [f"({inner})*"]))]
                return [("expr", " ".join([inner] * lo + [f"({inner})?"] * (hi - lo)) or '""')]
            return [("expr", f"({inner}){ {'optional': '?', 'star': '*', 'plus': '+'}[kind] }")]
        raise Unsupported(f"the structural-tag format {kind!r} has no llguidance equivalent here")

    def _join(self, items: list[_Item]) -> str:
        """Items as Lark: each run of regexes one lexeme, free text one lazy lexeme with the runs beside it
        (or, before a token, a greedy lexeme: a token is no text it could swallow)."""
        out: list[str] = []
        run: list[str] = []  # regexes since the last non-regex item
        text: tuple[str, ...] | None = None  # the excludes of the free text since then, with ``before`` before it
        before: list[str] = []
        items = [*items, ("expr", "")]
        i = 0
        while i < len(items):
            item = items[i]
            i += 1
            if item[0] == "or":
                branches = list(item[1])
                # The regexes before alternatives start each of them, and those after end each: a lexeme
                # of their own (whitespace) would be extended into whichever sibling lexeme also starts
                # with it, and never given back.
                if text is None and run:
                    branches = [[("rx", "".join(run)), *b] for b in branches]
                    run = []
                after = 0
                while items[i + after][0] == "rx":
                    after += 1
                if after:
                    branches = [[*b, *items[i:i + after]] for b in branches]
                    i += after
                heads = [b[0] for b in branches if b]
                if text is not None and len(heads) == len(branches) and all(h[0] == "tok" for h in heads):
                    self._greedy(out, before, text + tuple(h[2] for h in heads))
                    text, before = None, []
                item = ("expr", "(" + " | ".join(self._rule(self._join(b)) for b in branches) + ")")
            if item[0] == "tok":
                if text is not None:
                    self._greedy(out, before, text + (item[2],))
                    text, before = None, []
                elif run:
                    out.append(lark_regex("".join(run)))
                    run = []
                out.append(item[1])
                continue
            if item[0] == "rx" and text is not None:
                # Free text ends at its end text, the first regex after it: the regexes after that end
                # start the next lexeme (a lazy lexeme ending in ``\\s*`` would end before the whitespace).
                parts = ([lark_regex("".join(before))] if before else []) + [self._text(text), lark_regex(item[1])]
                out.append(self._new(" ".join(parts), lazy=True))
                text, before = None, []
                continue
            if item[0] == "rx":
                run.append(item[1])
                continue
            if item[0] == "text":
                if text is not None:
                    raise Unsupported("two free texts with no end text between them")
                text, before, run = item[1], run, []
                continue
            if text is not None:
                raise Unsupported("free text with no end text after it")
            if run:
                out.append(lark_regex("".join(run)))
                run = []
            if item[1]:
                out.append(item[1])
        return " ".join(out) if out else '""'

    def _greedy(self, out: list[str], before: list[str], excludes: tuple[str, ...]) -> None:
        """Free text that ends at a token: the regexes before it, then the text, which may not spell the
        token (nor its own excludes)."""
        if before:
            out.append(lark_regex("".join(before)))
        out.append(self._text(excludes))
