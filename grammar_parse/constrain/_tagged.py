"""XML and tagged tool-call arguments as a constraint: one parameter after another, each value typed by the
tool's JSON Schema so that the parser reads it back as that type.

A grammar writes such arguments in one of two ways, and both are read off the grammar:

* **parameter regions** (``components``): each argument is a child region of the call region whose opener
  holds the key in a group (``<parameter=(?P<key>...)>``, ``<arg_key>(?P<key>...)</arg_key><arg_value>``)
  and whose closer ends the value. A grammar may have several such regions (DeepSeek's DSML: a text one with
  ``string="true"`` and a JSON one with ``string="false"``; MiniCPM5: a plain one and a ``<![CDATA[`` one).
* **a tag pattern** (``xml``, or ``at_close`` with an ``xml-inline`` value): the call region's value parser
  reads ``(?P<key>...)`` / ``(?P<value>...)`` matches of one regex; what comes before the value group is the
  opener, what comes after it the closer (a ``(?P=key)`` back-reference there is the parameter's name).

How a value is written, from its schema and the region that reads it:

* a string (a schema whose types include ``"string"``, or that declares no type at all: the parser keeps
  such a value as text) goes in a text region as free text up to the closer; an ``enum`` or ``const`` of
  strings is one of its values. Other string keywords (``pattern``, ``format``, lengths) are not enforced.
* any other type is the JSON text of a value the property's schema accepts: in a JSON region when the
  grammar has one, else in a text region (the parser casts the text by the schema: ``3``, ``true``,
  ``{"a": 1}``), with whitespace allowed around it (the casts ignore it).
* with no text region (Muse's ``allow_non_json`` JSON parameters) a string is written as a JSON string, since
  raw text that happens to be JSON (``42``) would be read as that JSON value.

Where a region's closer is optional in the grammar (``parameter: OPEN TEXT* CLOSE?``), the value also ends
at the next parameter's opener or the call's closer; a text value may then not contain those delimiters'
literal text (``excludes``: a literal run every match holds, the leading one else the longest; a bare word
such as MiMo's ``parameter`` is not excluded, which would forbid ordinary prose). Variants of a regex closer
other than its written forms (MiMo's ``</ parameter >``) are not excluded from a value either, nor is a
closer from the inside of a JSON value's strings.

Also read off the grammar: a delimiter right after the call's opener is written before the arguments
(Beam's ``<|channel|>analysis <|constrain|>xml<|message|>``); a negative lookahead in an argument's tag
restricts the next character (see :func:`_without_lookaheads`). Where repeated keys collect into a list
(``merge_duplicates``), a list is still offered as JSON only (see :func:`_argument`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from .._engine.delimiters import LiteralMatcher, RegexMatcher
from .._engine.grammar import Grammar
from .._engine.symbols import Region
from .._engine.tools import schema_types
from .._engine.reading import PLACEHOLDER
from .._engine.values import ValueSpec
from ._regexes import Delim, Regex, Unsupported, delim_of, escape, parse_regex, sre_c
from ._schemas import placed

#: Whitespace between parameters, and between a parameter's tags and a JSON value.
_SPACE = r"\s*"
#: The payload modes whose call opener and closer hold whitespace a structural tag's literal begin and end
#: cannot: the exports write the opener's literal head as the begin and the closer's literal tail as the end,
#: the rest as regexes (see :func:`call_end`).
TAGGED_MODES = ("components", "xml", "at_close")


# ---------------------------------------------------------------------------- regexes with a key group
def _first_chars(items: Any) -> list[Any]:
    """The set items (``re`` IN entries) of the characters a match of ``items`` can start with."""
    c = sre_c
    out: list[Any] = []
    for op, av in items:
        if op is c.LITERAL:
            return [*out, (c.LITERAL, av)]
        if op is c.IN and not any(o is c.NEGATE for o, _ in av):
            return [*out, *av]
        if op in (c.MAX_REPEAT, c.MIN_REPEAT):
            out += _first_chars(av[2])
            if av[0] > 0:
                return out
            continue
        if op is c.SUBPATTERN:
            inner = _first_chars(av[3])
            if av[1] & 2:  # (?i:...): both cases
                inner += [(c.LITERAL, ord(ch)) for o, v in inner if o is c.LITERAL
                          for ch in {chr(v).lower(), chr(v).upper()} - {chr(v)}]
            return [*out, *inner]
        if op is c.BRANCH:
            return [*out, *(item for branch in av[1] for item in _first_chars(branch))]
        break
    raise Unsupported("a negative lookahead in an argument tag does not start with a known character")


def _skipped_run(items: Any) -> list[Any]:
    """``[(SKIP, (set items, most))]`` when a lookahead starts with an optional bounded run of one set
    (MiniCPM5's ``(?!\\s{0,8}<!\\[CDATA\\[)``): a value may then start with that run, up to ``most``
    characters, as long as what follows it is no banned character (else ``[]``)."""
    c = sre_c
    if not items or items[0][0] is not c.MAX_REPEAT:
        return []
    least, most, inner = items[0][1]
    if least != 0 or most == c.MAXREPEAT or len(inner) != 1 or inner[0][0] not in (c.IN, c.LITERAL):
        return []
    run = list(inner[0][1]) if inner[0][0] is c.IN else [inner[0]]
    if any(op is c.NEGATE for op, _ in run):
        return []
    return [(_SKIP, (run, most))]


#: A marker in a slot's banned first characters: the value may start with a run of these (see _skipped_run).
_SKIP = "skip"


def _negated_set(items: Any) -> list[Any] | None:
    """The set items of a one-character negated class (``[^"]``, which re reads as NOT_LITERAL), or None."""
    c = sre_c
    if len(items) != 1:
        return None
    op, av = items[0]
    if op is c.NOT_LITERAL:
        return [(c.NEGATE, None), (c.LITERAL, av)]
    if op is c.IN and any(o is c.NEGATE for o, _ in av):
        return list(av)
    return None


def _nested(items: Any) -> list[Any]:
    """The items with the lookaheads inside their groups and repeats made restrictions too (K2 Horizon's
    optional ``<ifm|arg_type>(?!number|...)[^<\\s]+</ifm|arg_type>``, which would otherwise be left out),
    and a word boundary before a run of a negated class (``(?:number|...)\\b[^<\\s]*``) written as what it
    means there: nothing, or a first character that is no word character."""
    c = sre_c
    out: list[Any] = []
    items = list(items)
    for i, (op, av) in enumerate(items):
        if op is c.SUBPATTERN:
            inner, banned = _without_lookaheads(_nested(av[3]))
            out.append((op, (av[0], av[1], av[2], inner if not banned else av[3])))
        elif op in (c.MAX_REPEAT, c.MIN_REPEAT):
            inner, banned = _without_lookaheads(_nested(av[2]))
            out.append((op, (av[0], av[1], inner if not banned else av[2])))
        elif op is c.AT and av is c.AT_BOUNDARY and i + 1 < len(items) \
                and items[i + 1][0] in (c.MAX_REPEAT, c.MIN_REPEAT) and items[i + 1][1][0] == 0 \
                and (negated := _negated_set(items[i + 1][1][2])) is not None:
            first = (c.IN, [*negated, (c.CATEGORY, c.CATEGORY_WORD)])
            out.append((c.MAX_REPEAT, (0, 1, [first])))
        else:
            out.append((op, av))
    return out


def _without_lookaheads(items: Any) -> tuple[list[Any], list[Any]]:
    """(items, first) with each negative lookahead made a restriction of the next character: it may not be
    a first character of what the lookahead forbids (Kimi's ``type="(?!string")[^"]{1,32}"`` becomes
    ``type="[^"s][^"]{0,31}"``). A trailing one restricts the value's first character: ``first`` is the
    set items it may not start with (MiniCPM5's plain ``<param>`` is not followed by ``<![CDATA[``)."""
    c = sre_c
    out: list[Any] = []
    items = list(items)
    i = 0
    while i < len(items):
        op, av = items[i]
        if op is not c.ASSERT_NOT:
            out.append((op, av))
            i += 1
            continue
        banned = _first_chars(av[1])
        if i == len(items) - 1:
            return out, banned + _skipped_run(av[1])
        nop, nav = items[i + 1]
        negated = _negated_set(nav[2]) if nop in (c.MAX_REPEAT, c.MIN_REPEAT) and nav[0] >= 1 else None
        if negated is not None:
            first = (c.IN, [*negated, *banned])
            rest = nav[1] - 1 if nav[1] != c.MAXREPEAT else c.MAXREPEAT
            out += [first, (nop, (nav[0] - 1, rest, nav[2]))] if rest else [first]
            i += 2
            continue
        raise Unsupported("a negative lookahead in an argument tag is not followed by a negated character set")
    return out, []


def _texts(rx: Regex, items: Any, key: str | None, limit: int = 16) -> list[str] | None:
    """Every text of a small finite regex, the key group written as ``key`` (None: not finite or small)."""
    c = sre_c
    out = [""]
    for op, av in items:
        if op is c.LITERAL:
            choices: list[str] | None = [chr(av)]
        elif op is c.SUBPATTERN and av[0] in rx.names:
            choices = [key] if key is not None else None
        elif op is c.SUBPATTERN:
            choices = _texts(rx, av[3], key, limit)
        elif op is c.BRANCH:
            alternatives = [_texts(rx, b, key, limit) for b in av[1]]
            choices = None if None in alternatives else [t for a in alternatives for t in a or ()]
        elif op in (c.MAX_REPEAT, c.MIN_REPEAT) and av[1] <= 2:
            sub = _texts(rx, av[2], key, limit)
            choices = None if sub is None else [t * n for n in range(av[1], av[0] - 1, -1) for t in sub]
        else:
            choices = None
        if not choices:
            return None
        out = [a + b for a in out for b in choices]
        if len(out) > limit:
            return None
    return out


def _shortest(rx: Regex, items: Any, key: str | None) -> str | None:
    """The shortest text of a regex (optional parts and ``{0,n}`` runs left out), the key written as ``key``;
    None when a character class or a lookaround leaves it undecided."""
    c = sre_c
    out = []
    for op, av in items:
        part: str | None
        if op is c.LITERAL:
            part = chr(av)
        elif op is c.SUBPATTERN:
            part = key if av[0] in rx.names else _shortest(rx, av[3], key)
        elif op is c.BRANCH:
            found = [t for t in (_shortest(rx, b, key) for b in av[1]) if t is not None]
            part = min(found, key=len) if found else None
        elif op in (c.MAX_REPEAT, c.MIN_REPEAT):
            sub = _shortest(rx, av[2], key) if av[0] else ""
            part = None if sub is None else sub * av[0]
        else:
            part = None
        if part is None:
            return None
        out.append(part)
    return "".join(out)


def _ends(rx: Regex, items: Any, key: str | None) -> list[str]:
    """The literal texts a closer is written as (a structural tag's ``end``): every text of a small finite
    regex, leaving out alternatives that hold a lookaround (Beam's ``\\n(?=<rfl:parameter)``, a missing
    closer); otherwise its shortest text."""
    if len(items) == 1 and items[0][0] is sre_c.BRANCH:
        found = [t for b in items[0][1][1] for t in _texts(rx, b, key) or ()]
        if found:
            return found
    texts = _texts(rx, items, key)
    if texts:
        return texts
    short = _shortest(rx, items, key)
    if not short:
        raise Unsupported("an argument's closer has no literal text to end its value")
    return [short]


def _literal_runs(rx: Regex, items: Any) -> list[str]:
    """The runs of literal text every match of ``items`` holds (top level and groups, not repeats)."""
    c = sre_c
    runs, current = [], ""
    for op, av in items:
        if op is c.LITERAL:
            current += chr(av)
            continue
        if op is c.SUBPATTERN and av[0] not in rx.names:
            inner = _literal_runs(rx, av[3])
            if inner and len(inner) == 1 and _texts(rx, av[3], None) == inner:
                current += inner[0]
                continue
            runs += [current, *inner]
        else:
            runs.append(current)
        current = ""
    return [r for r in [*runs, current] if r]


def _head(items: Any) -> str:
    """The literal text a regex's items start with."""
    out = ""
    for op, av in items:
        if op is not sre_c.LITERAL:
            break
        out += chr(av)
    return out


def _cutting_text(rx: Regex, items: Any) -> str | None:
    """The text to keep out of a value that a delimiter would end: a literal run every match holds (the
    one it starts with, else the longest), unless that is a single character or only a word (which would
    forbid ordinary prose in the value)."""
    runs = _literal_runs(rx, items)
    lead = runs[0] if runs and items and items[0][0] is sre_c.LITERAL else ""
    best = lead if len(lead) > 1 else max(runs, key=len) if runs else ""
    return best if len(best) > 1 and not best.replace("_", "").isalnum() else None


def _content(region: Region) -> tuple[str, dict[str, Any]]:
    """A region's content parser and its arguments (("", {}) for a value that is no parsed content)."""
    spec = region.spec
    return (spec.content, dict(spec.content_args)) if isinstance(spec, ValueSpec) else ("", {})


# ---------------------------------------------------------------------------- the ways to write an argument
@dataclass(frozen=True)
class _Slot:
    """One way to write an argument: an opener regex holding the key, the value, a closer."""

    opener: Regex
    opener_items: tuple[Any, ...]
    closer: Regex | None  # None: literal closers
    closer_items: tuple[Any, ...]
    literal_ends: tuple[str, ...]
    json: bool  # the value is read as JSON (a json region); else as text the schema types
    excludes: tuple[str, ...]  # texts a text value may not hold (delimiters that would end it)
    banned_first: tuple[Any, ...]  # set items the value may not start with (a trailing lookahead)
    strip: bool  # whether the parser strips a text value
    separators: tuple[str, str] = ("", "")  # the template's own text around an unstripped value (Qwen3-Coder's newlines)
    item: str | None = None  # the element a list's items are written in, where values nest (MiniMax-M3's <item>)

    def opener_regex(self, key: str | None) -> str:
        """The opener with the key written, or (None) with the key group's own pattern."""
        if key is None:
            if self.closer is not None and self.closer.names:
                raise Unsupported("the closer repeats the key")
            return Regex(list(self.opener_items), frozenset(), self.opener.dotall).emit(self.opener_items, None)
        return self.opener.emit(self.opener_items, key)

    def ends(self, key: str | None) -> list[str]:
        if self.closer is None:
            return list(self.literal_ends)
        if self.closer_rest(key):
            return [_head(self.closer_items)]
        return _ends(self.closer, self.closer_items, key)

    def closer_rest(self, key: str | None) -> str:
        """The closer after its literal head, as a regex, where the closer has a part no literal holds
        (Hy3's ``</arg_value:opensource>``, any suffix or none): the value ends at the head, this follows.
        "" for a closer whose every text is known."""
        if self.closer is None or _texts(self.closer, self.closer_items, key) is not None:
            return ""
        head = _head(self.closer_items)
        # (a head of one character, MiMo's "<" of "< / parameter >", would keep it out of every value)
        if len(head) < 2 or len(head) == len(self.closer_items):
            return ""
        return self.closer.emit(self.closer_items[len(head):], key)

    def first(self) -> str:
        """A regex for the value's first character (only when a lookahead bans some); where the lookahead
        starts with an optional run (MiniCPM5's ``\\s{0,8}``), the value may start with that run and then
        a character that is not banned, or with a run longer than the lookahead looks (indented code)."""
        banned = [item for item in self.banned_first if item[0] != _SKIP]
        negated = [(sre_c.IN, [(sre_c.NEGATE, None), *banned])]
        first = Regex(negated, frozenset(), False).emit(negated, None)
        skip = next((av for op, av in self.banned_first if op == _SKIP), None)
        if skip is None:
            return first
        run_items = [(sre_c.IN, skip[0])]
        run = Regex(run_items, frozenset(), False).emit(run_items, None)
        return f"(?:{run}{{0,{skip[1]}}}{first}|{run}{{{skip[1] + 1}}})"


def _slot(opener: Regex, closer: Any, *, json: bool, strip: bool, excludes: tuple[str, ...] = (),
          separators: tuple[str, str] = ("", "")) -> _Slot:
    items, banned = _without_lookaheads(_nested(opener.items))
    if isinstance(closer, Regex):
        c_items, _ = _without_lookaheads(closer.items)
        return _Slot(opener, tuple(items), closer, tuple(c_items), (), json, excludes, tuple(banned), strip, separators)
    return _Slot(opener, tuple(items), None, (), tuple(closer), json, excludes, tuple(banned), strip, separators)


def _expansions(grammar: Grammar, rule: str) -> list[list[str]]:
    """The expansions of a rule and of the rules it uses that are no region (lark's helpers for ``*``,
    ``+`` and ``?``, inlined ``_rules``): the symbols that can appear inside the region."""
    by_origin = grammar.rules
    out: list[list[str]] = []
    seen, todo = set(), [rule]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        for exp in by_origin.get(current, []):
            out.append(list(exp))
            todo += [sym for sym in exp if sym in by_origin and sym not in grammar.regions]
    return out


def _call_header(grammar: Grammar, region: Region) -> str:
    """The delimiter the grammar reads right after the call's opener, before its arguments (Beam's
    ``<|channel|>analysis <|constrain|>xml<|message|>``), as a regex the call writes; "" when none."""
    terminals = grammar.terminals
    openers = {t.name for t in terminals.values() if t.region is region and t.role == "open"}
    found = {b for exp in _expansions(grammar, region.rule) for a, b in zip(exp, exp[1:])
             if a in openers and b in terminals and terminals[b].role == "delimiter"}
    if len(found) > 1:
        raise Unsupported(f"the call opener is followed by one of several headers ({', '.join(sorted(found))})")
    return delim_of(terminals[found.pop()]).regex_text() if found else ""


def _component_slots(grammar: Grammar, region: Region, args_key: str | None) -> list[_Slot]:
    """The slots of a ``components`` call region: one per keyed argument region."""
    children = [r for r in grammar.regions.values() if r.parent == region.rule and r.key == args_key]
    keyed = []
    for child in children:
        found = PLACEHOLDER.fullmatch(child.entry_key or "")
        if found is None:
            continue  # (the whole arguments as one value, DSML's JSON body: a variant not offered)
        keyed.append((child, found.group(1)))
    if not keyed:
        raise Unsupported("the call region has no argument region keyed by the argument's name")
    terminals = {t.name: t for t in grammar.terminals.values()}
    # What ends a value whose closer the grammar lets the model leave out: the delimiters of the call.
    # (not the call's own opener, which starts the rule)
    cutting: list[str] = []
    for exp in _expansions(grammar, region.rule):
        for sym in exp:
            t = terminals.get(sym)
            if t is not None and isinstance(t.matcher, (LiteralMatcher, RegexMatcher)) and t.role != "text" \
                    and not (t.region is region and t.role == "open"):
                cutting.append(sym)
    # (and the opener of every region of the call, keyed or not: Kimi K3's <|open|>json arguments)
    for child in (r for r in grammar.regions.values() if r.parent == region.rule):
        cutting += [t.name for t in terminals.values() if t.region is child and t.role == "open"]
    excludes = tuple(dict.fromkeys(x for n in cutting for x in _delimiter_texts(terminals[n].matcher)))
    slots = []
    for child, group in keyed:
        content, content_args = _content(child)
        if content not in ("text", "json"):
            raise Unsupported(f"the argument region {child.rule} reads its value as {content or 'no content'}")
        openers = [t for t in terminals.values() if t.region is child and t.role == "open"]
        # (a zero-width closer ends a value the model left open, at what follows: the constraint writes the close)
        closers = [t for t in terminals.values() if t.region is child and t.role == "close"
                   and not (isinstance(t.matcher, RegexMatcher) and t.matcher.pattern.startswith("(?="))]
        if len(closers) != 1 or not isinstance(closers[0].matcher, (LiteralMatcher, RegexMatcher)):
            raise Unsupported(f"the argument region {child.rule} has no closer that ends its value")
        close_t = closers[0]
        # (lark writes ``CLOSE?`` as alternatives of the rule itself: one of them lacks the closer)
        optional = any(close_t.name not in expansion for expansion in grammar.rules.get(child.rule, ()))
        closer: Any
        if isinstance(close_t.matcher, RegexMatcher):
            closer = parse_regex(close_t.matcher.pattern, close_t.matcher.flags, group)
        else:
            assert isinstance(close_t.matcher, LiteralMatcher)
            closer = close_t.matcher.literals
        for open_t in openers:
            if not isinstance(open_t.matcher, RegexMatcher) or f"(?P<{group}>" not in open_t.matcher.pattern:
                raise Unsupported(f"the argument opener {open_t.name} holds no (?P<{group}>...) group for the key")
            opener = parse_regex(open_t.matcher.pattern, open_t.matcher.flags, group)
            seps = content_args.get("separators") or ("", "")
            slots.append(_slot(opener, closer, json=content == "json", strip=bool(content_args.get("strip", True)),
                               excludes=excludes if optional else (), separators=(seps[0], seps[1])))
    return slots


def _delimiter_texts(matcher: Any) -> list[str]:
    """The texts to keep out of a value that this delimiter would end."""
    if isinstance(matcher, LiteralMatcher):
        return list(matcher.literals)
    rx = parse_regex(matcher.pattern, matcher.flags, "key")
    found = _cutting_text(rx, rx.items)
    return [found] if found else []


def _tag_pattern_slot(region: Region) -> _Slot:
    """The slot of a region read by a ``(?P<key>...)(?P<value>...)`` tag pattern (``xml-inline``)."""
    args = _content(region)[1]
    if args.get("value_parser") is not None or "value_parser_when" in args:
        raise Unsupported("the tag pattern's values go through a value parser")
    rx = parse_regex(args["tag_pattern"], 16, "key")
    groups = rx.groups
    value = groups.get("value")
    at = next((i for i, (op, av) in enumerate(rx.items) if op is sre_c.SUBPATTERN and av[0] == value), None)
    if at is None or not rx.names:
        raise Unsupported("the tag pattern has no top-level (?P<value>...) group, or no (?P<key>...) group")
    # A tempered value, (?:(?!X).)*?, may not hold X: X's leading literal text is kept out of it.
    excludes: tuple[str, ...] = ()
    inner = rx.items[at][1][3]
    if len(inner) == 1 and inner[0][0] in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT):
        body = inner[0][1][2]
        body = body[0][1][3] if len(body) == 1 and body[0][0] is sre_c.SUBPATTERN else body
        if len(body) == 2 and body[0][0] is sre_c.ASSERT_NOT and body[1][0] is sre_c.ANY:
            lead = ""
            for op, av in body[0][1][1]:
                if op is not sre_c.LITERAL:
                    break
                lead += chr(av)
            if not lead:
                raise Unsupported("the tag pattern's value excludes text with no literal start")
            excludes = (lead,)
    opener = Regex(rx.items[:at], rx.names, rx.dotall)
    closer = Regex(rx.items[at + 1:], rx.names, rx.dotall)
    slot = _slot(opener, closer, json=False, strip=False, excludes=excludes)
    elements = args.get("elements")
    item = elements.get("item") if isinstance(elements, dict) else None
    return replace(slot, item=item) if isinstance(item, str) and item else slot


# ---------------------------------------------------------------------------- values and parameters
def _is_text(schema: Any) -> bool:
    """Whether the parser keeps a text value of this schema as text (a string, or no declared type)."""
    types = schema_types(schema)
    return not types or "string" in types


def _string_choices(schema: Any) -> list[str] | None:
    if not isinstance(schema, dict):
        return None
    values = [schema["const"]] if "const" in schema else schema.get("enum")
    if isinstance(values, list) and values and all(isinstance(v, str) for v in values):
        return values
    return None


#: The levels of child elements a nested value is offered in; a deeper value (a recursive model's, which
#: would otherwise unfold without end) is written as JSON inside its element, which the parser reads too.
NEST_DEPTH = 4


def _nests(slot: _Slot, schema: Any, depth: int) -> bool:
    """Whether the value is written as child elements, as the template writes it (MiniMax-M3's to_xml: an
    object's properties each an element, a list's items each an <item>): an object schema with properties
    or an array schema with items, in a slot whose values nest. An object with free keys stays JSON: a
    free key's closer repeats it (</KEY>), which neither engine can match."""
    if slot.item is None or not isinstance(schema, dict) or depth >= NEST_DEPTH:
        return False
    types = set(schema_types(schema))
    if types == {"object"}:
        return isinstance(schema.get("properties"), dict) and bool(schema["properties"])
    return types == {"array"} and isinstance(schema.get("items"), dict)


def _elements(slot: _Slot, schema: dict[str, Any], depth: int) -> dict[str, Any]:
    """The child elements of a nested value: an object's properties in order (as the parameters), or any
    number of <item> elements holding the list's items."""
    if set(schema_types(schema)) == {"object"}:
        return _arguments([slot], schema, depth + 1)
    assert slot.item is not None
    return {"type": "star", "content": _argument([slot], slot.item, placed(schema["items"], schema), depth + 1)}


def _value(slot: _Slot, key: str | None, schema: Any, *, as_text: bool, depth: int = 0) -> dict[str, Any]:
    """The value of one argument and its closer, as a tag with an empty begin (then the rest of a closer
    no literal holds: see :meth:`_Slot.closer_rest`)."""
    if _nests(slot, schema, depth):
        # (the whole closer after the children, which open with the closer's own head: no tag may end there)
        closer = slot.closer.emit(slot.closer_items, key) if slot.closer is not None \
            else "|".join(escape(e) for e in slot.literal_ends)
        return {"type": "sequence", "elements": [_elements(slot, schema, depth),
                                                 {"type": "regex", "pattern": f"{_SPACE}(?:{closer})"}]}
    value = _value_to_head(slot, key, schema, as_text=as_text)
    rest = slot.closer_rest(key)
    return value if not rest else {"type": "sequence", "elements": [value, {"type": "regex", "pattern": rest}]}


def _value_to_head(slot: _Slot, key: str | None, schema: Any, *, as_text: bool) -> dict[str, Any]:
    ends: str | list[str] = slot.ends(key)
    ends = ends[0] if len(ends) == 1 else ends
    lead = [] if slot.banned_first else [{"type": "regex", "pattern": _SPACE}]
    if not as_text:
        content: dict[str, Any] = {"type": "sequence", "elements": [
            *lead, {"type": "json_schema", "json_schema": schema if isinstance(schema, dict) else {}},
            {"type": "regex", "pattern": _SPACE}]}
        return {"type": "tag", "begin": "", "content": content, "end": ends}
    choices = _string_choices(schema)
    if choices is not None:
        one = {"type": "or", "elements": [{"type": "const_string", "value": v} for v in choices]}
        # (around the value: whitespace the parser strips, or the separators it removes, each written or not)
        before, after = ([{"type": "regex", "pattern": f"(?:{escape(s)})?"}] if s else []
                         for s in slot.separators)
        space = [{"type": "regex", "pattern": _SPACE}] if slot.strip else after
        content = {"type": "sequence", "elements": [*(lead if slot.strip else before), one, *space]}
        return {"type": "tag", "begin": "", "content": content, "end": ends}
    text: dict[str, Any] = {"type": "any_text"}
    if slot.excludes:
        text["excludes"] = list(slot.excludes)
    free = {"type": "tag", "begin": "", "content": text, "end": ends}
    if not slot.banned_first:
        return free
    # The first character may not be one a lookahead bans; an empty value is the closer at once.
    empty = {"type": "tag", "begin": "", "content": {"type": "const_string", "value": ""}, "end": ends}
    return {"type": "or", "elements": [empty, {"type": "sequence", "elements": [
        {"type": "regex", "pattern": slot.first()}, free]}]}


def _argument(slots: list[_Slot], key: str | None, schema: Any, depth: int = 0) -> dict[str, Any]:
    """One argument in every slot that fits its type: strings in text slots, other types in JSON slots
    (either when the grammar has only the one kind)."""
    text = _is_text(schema)
    fitting = [s for s in slots if s.json != text] or slots
    forms: list[dict[str, Any]] = []
    # (the other slots when no fitting one can be written: k2_horizon's JSON slot names its type behind a
    # \b, and its text slot is typed by the tool's schema when parsed)
    for slot in fitting + [s for s in slots if s not in fitting]:
        if forms and slot not in fitting:
            break
        try:
            opener = slot.opener_regex(key)
        except Unsupported:
            continue
        value = _value(slot, key, schema, as_text=text and not slot.json, depth=depth)
        forms.append({"type": "sequence", "elements": [{"type": "regex", "pattern": _SPACE + opener}, value]})
        # (MiniMax-M3 also reads a list of strings as the key written twice or more, which is not offered:
        # that form and the JSON list open alike, and llguidance's lexer, which does not backtrack, would
        # take the repeated form's free text and lose the JSON one)
    if not forms:
        raise Unsupported("no argument form holds a free key")
    return forms[0] if len(forms) == 1 else {"type": "or", "elements": forms}


def _arguments(slots: list[_Slot], parameters: dict[str, Any], depth: int = 0) -> dict[str, Any]:
    """The parameters in the order of the schema's ``properties``, required ones required.

    One fixed order keeps the constraint linear in the number of parameters (any order with each key once
    would need a form per subset), is the order chat templates render the tool's parameters in and models
    write them back, and lets a required parameter be required by its place in the sequence. After them,
    any number of arguments with free keys where ``additionalProperties`` is true or a schema (which types
    their values), or where the schema has no ``properties`` (``{"type": "object"}``); a schema with
    ``properties`` (``{}`` too) and no ``additionalProperties`` gets only its own (as xgrammar's JSON Schema). A
    grammar whose closer repeats the key (MiniMax-M3's ``</KEY>``) offers no free keys.
    """
    properties = parameters.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    required = [k for k in parameters.get("required", []) if isinstance(k, str)]
    elements: list[dict[str, Any]] = []
    for key in [*properties, *(k for k in required if k not in properties)]:
        # (an argument's schema is a document of its own: it takes the definitions it refers to along)
        one = _argument(slots, key, placed(properties.get(key, {}), parameters), depth)
        elements.append(one if key in required else {"type": "optional", "content": one})
    # Extra keys: where the schema says so, or has no "properties" (a schema-less tool). Where it declares
    # properties (even none: a tool without parameters) and says nothing, none (as xgrammar's JSON Schema).
    extra = parameters.get("additionalProperties", None if "properties" in parameters else True)
    if extra is True or isinstance(extra, dict):
        try:
            free = _argument(slots, None, placed(extra, parameters) if isinstance(extra, dict) else {})
        except Unsupported:
            pass  # (the closer repeats the key: free keys cannot be written, so none are offered)
        else:
            elements.append({"type": "star", "content": free})
    if not elements:
        return {"type": "const_string", "value": ""}
    return elements[0] if len(elements) == 1 else {"type": "sequence", "elements": elements}


# ---------------------------------------------------------------------------- the exports' entry points
def call_body(grammar: Grammar, region: Region, name: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """The xgrammar structural-tag format of what follows a call's opener (the tool's name written) up to
    its closer: the tool's arguments, for a ``components`` call region (one child region per argument) or
    one read by a tag pattern (``xml``, or ``at_close`` with an ``xml-inline`` value)."""
    plan = region.shape
    if plan.mode == "components":
        slots = _component_slots(grammar, region, plan.args_key)
        header = _call_header(grammar, region)
        if header:
            return {"type": "sequence", "elements": [{"type": "regex", "pattern": header},
                                                     _arguments(slots, parameters)]}
    elif plan.mode in ("xml", "at_close") and _content(region)[0] == "xml-inline":
        slots = [_tag_pattern_slot(region)]
    else:
        raise Unsupported(f"the call's payload ({plan.mode}, {_content(region)[0] or 'no content'}) is not tagged "
                          "arguments")
    return _arguments(slots, parameters)


def payload(grammar: Grammar, region: Region, tools: list[tuple[str, dict[str, Any]]],
            parallel: bool) -> dict[str, Any]:
    """The structural-tag format of an ``at_close`` call region's payload written as XML (the tool's name
    inside the payload, as MiniMax's ``<invoke name="...">``), between the region's open and close."""
    if _content(region)[0] == "xml-inline":
        raise Unsupported("the call's XML arguments are read at its close but its opener does not name the tool")
    raise Unsupported(f"the call's payload ({_content(region)[0] or 'no content'}) is not XML arguments")


def call_end(closer: Delim) -> tuple[str, list[str]]:
    """(regex, ends): a tagged call's closer as a regex written before the structural tag's end and the
    literal texts of that end (its trailing literal run). Qwen3-Coder's ``(?:</function>\\s*)?</tool_call>``
    is ``(?:</function>\\s*)?`` then the end ``</tool_call>``: a literal end alone could not hold the newline
    the model writes between the two."""
    if closer.regex is None:
        return "", closer.canonical()
    items = closer.regex.items
    cut = len(items)
    while cut > 0 and items[cut - 1][0] is sre_c.LITERAL:
        cut -= 1
    if cut == len(items) or cut == 0:
        return "", closer.canonical()
    end = "".join(chr(av) for _op, av in items[cut:])
    return closer.regex.emit(items[:cut], None), [end]
