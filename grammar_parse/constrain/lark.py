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
from dataclasses import dataclass, field
from typing import Any

from .regexes import Unsupported, escape

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


# A node renders as a list of items: ("rx", regex) for text of a fixed language, ("text", terminal) for free text,
# ("or", [items, ...]) for alternatives, ("expr", lark) for anything else (a %json lexeme, a repeat).
_Item = tuple[Any, ...]


@dataclass
class LarkWriter:
    """Collects the rules a translation needs (free-text lexemes, alternations) under fresh names."""

    prefix: str = "p"
    rules: list[str] = field(default_factory=list)
    count: int = 0
    named: dict[str, str] = field(default_factory=dict)  # an expression written before, and its rule

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
            return [("rx", escape(node["value"]))] if node["value"] else []
        if kind == "regex":
            return [("rx", _group(node["pattern"]))] if node["pattern"] else []
        if kind == "json_schema":
            return [("expr", "%json " + json.dumps(node["json_schema"], ensure_ascii=False))]
        if kind == "any_text":
            return [("text", self._text(tuple(node.get("excludes") or ())))]
        if kind == "sequence":
            return [item for element in node["elements"] for item in self._items(element)]
        if kind == "tag":
            end = node["end"] if isinstance(node["end"], list) else [node["end"]]
            items = self._items({"type": "const_string", "value": node["begin"]}) + self._items(node["content"])
            return items + ([("rx", _alternatives(end))] if any(end) else [])
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
        """Items as Lark: each run of regexes one lexeme, free text one lazy lexeme with the runs beside it."""
        out: list[str] = []
        run: list[str] = []  # regexes since the last non-regex item
        text = ""  # the terminal of free text since then, with ``run`` before it
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
                if not text and run:
                    branches = [[("rx", "".join(run)), *b] for b in branches]
                    run = []
                after = 0
                while items[i + after][0] == "rx":
                    after += 1
                if after:
                    branches = [[*b, *items[i:i + after]] for b in branches]
                    i += after
                item = ("expr", "(" + " | ".join(self._rule(self._join(b)) for b in branches) + ")")
            if item[0] == "rx" and text:
                # Free text ends at its end text, the first regex after it: the regexes after that end
                # start the next lexeme (a lazy lexeme ending in ``\\s*`` would end before the whitespace).
                parts = ([lark_regex("".join(before))] if before else []) + [text, lark_regex(item[1])]
                out.append(self._new(" ".join(parts), lazy=True))
                text, before = "", []
                continue
            if item[0] == "rx":
                run.append(item[1])
                continue
            if item[0] == "text":
                if text:
                    raise Unsupported("two free texts with no end text between them")
                text, before, run = item[1], run, []
                continue
            if text:
                raise Unsupported("free text with no end text after it")
            if run:
                out.append(lark_regex("".join(run)))
                run = []
            if item[1]:
                out.append(item[1])
        return " ".join(out) if out else '""'

