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


# A node renders as a list of items: ("rx", regex) for text of a fixed language, ("text",) for free text,
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
            if node.get("excludes"):
                raise Unsupported("free text with excluded texts inside a call")
            return [("text",)]
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
        text = False  # free text since then, with ``run`` before it
        before: list[str] = []
        for item in [*items, ("expr", "")]:
            if item[0] == "or" and not text:
                # The regexes before alternatives start each of them: a lexeme of their own (whitespace)
                # would be extended into whichever sibling lexeme also starts with it, and never returned.
                prefix = [("rx", "".join(run))] if run else []
                run = []
                item = ("expr", "(" + " | ".join(self._rule(self._join(prefix + b)) for b in item[1]) + ")")
            elif item[0] == "or":
                item = ("expr", "(" + " | ".join(self._rule(self._join(b)) for b in item[1]) + ")")
            if item[0] == "rx":
                run.append(item[1])
                continue
            if item[0] == "text":
                if text:
                    raise Unsupported("two free texts with no end text between them")
                text, before, run = True, run, []
                continue
            if text:
                if not run:
                    raise Unsupported("free text with no end text after it")
                parts = ([lark_regex("".join(before))] if before else []) + ["TEXT", lark_regex("".join(run))]
                out.append(self._new(" ".join(parts), lazy=True))
                text, before, run = False, [], []
            elif run:
                out.append(lark_regex("".join(run)))
                run = []
            if item[1]:
                out.append(item[1])
        return " ".join(out) if out else '""'
