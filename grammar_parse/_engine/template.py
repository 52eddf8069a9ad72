"""Loading and validating transformers ``response_template`` dicts (format version 1).

Everything a template can get wrong is caught here, before any text is parsed, with a
:class:`~grammar_parse.errors.TemplateError` whose ``path`` names the field and key
(``fields.tool_calls.open_pattern``). The checks are a superset of transformers' own: every template
transformers rejects is rejected, with the same wording where its tests look for it, and content-parser
arguments that transformers would only trip over mid-stream are rejected up front.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import regex

from ..errors import TemplateError
from .content import CONTENT_PARSERS
from .delimiters import PlainState
from .linear_regex import BoundedRegex
from .regex_safety import refusal
from .values import RegionValue, ValueSpec, mixed_placeholder

TEMPLATE_KEYS = frozenset({"version", "defaults", "fields", "start_anchor", "start_anchor_pattern"})
DELIMITER_KEYS = frozenset({"open", "open_pattern", "close", "close_pattern"})
VALUE_KEYS = frozenset(
    {"content", "content_args", "repeats", "join", "optional", "transform", "transform_each"}
)
FIELD_KEYS = DELIMITER_KEYS | VALUE_KEYS

# Arguments each content parser reads; anything else is a typo we report instead of ignoring.
_CONTENT_ARGS: dict[str, frozenset[str]] = {
    "text": frozenset({"strip"}),
    "int": frozenset({"strip"}),
    "float": frozenset({"strip"}),
    "bool": frozenset({"strip"}),
    "json": frozenset({"strip", "unquoted_keys", "string_delims", "allow_non_json"}),
    "xml-inline": frozenset({"tag_pattern", "value_parser", "value_parser_when", "merge_duplicates"}),
    "kv-lines": frozenset({"strip", "line_sep", "kv_sep", "value_parser"}),
    "pythonic": frozenset(),
    "json-name-keys": frozenset({"strip", "unquoted_keys", "string_delims", "allow_non_json"}),
}
# Arguments only a .lark grammar's regions may use (transformers' templates keep its exact parsers): the
# template's own separators around a text value, and nested elements for xml-inline (MiniMax-M3) and its
# report of text in no argument (content.xml.text_outside).
_AUTHORED_ARGS: dict[str, frozenset[str]] = {"text": frozenset({"separators"}),
                                             "xml-inline": frozenset({"elements", "report_stray"})}


@dataclass(frozen=True)
class Delimiter(PlainState):
    """An open/close/start delimiter: literal strings (any of them) or one regular expression; it pickles
    as plain data (its worked-out matchers stay behind, :class:`grammar_parse._engine.delimiters.PlainState`).

    Literals keep transformers' fast path: a complete literal match can be committed at once unless
    another literal of the set extends it; a regex match at the edge of the text seen so far may grow.
    """

    literals: tuple[str, ...] | None = None
    pattern: str | None = None

    @property
    def regex_source(self) -> str:
        """The delimiter as one regex; literal sets prefer the longest alternative, as transformers does."""
        if self.literals is None:
            assert self.pattern is not None
            return self.pattern
        return "|".join(regex.escape(s) for s in sorted(self.literals, key=len, reverse=True))

    def compile(self) -> regex.Pattern[str]:
        return regex.compile(self.regex_source, regex.DOTALL)

    def describe(self) -> str:
        """The delimiter as a reader would write it: its literals quoted, or ``/pattern/``."""
        if self.literals is None:
            return f"/{self.pattern}/"
        return " or ".join(repr(s) for s in self.literals)

    @cached_property
    def bounded(self) -> BoundedRegex:
        """The delimiter as a regex that cannot run away on hostile text (the start anchor on a prompt)."""
        return BoundedRegex(self.regex_source, regex.DOTALL)

    @cached_property
    def _lone_literal(self) -> str | None:
        """The one literal, if its occurrences cannot overlap (no proper prefix of it is also a suffix):
        then the last occurrence is the last of the non-overlapping matches a search finds."""
        if self.literals is None or len(self.literals) != 1:
            return None
        lit = self.literals[0]
        return None if not lit or any(lit.endswith(lit[:k]) for k in range(1, len(lit))) else lit

    def last_end(self, text: str, limit: float | None) -> int | None:
        """Where the last match in ``text`` ends, of the non-overlapping matches a search finds from the
        start (None: no match): where a prompt's last start anchor ends. ``limit``: seconds the regex
        module may search before the linear matcher finishes (the same matches)."""
        lit = self._lone_literal
        if lit is not None:
            at = text.rfind(lit)
            return None if at < 0 else at + len(lit)
        matches = self.bounded.finditer(text, limit)
        return matches[-1].end() if matches else None


@dataclass(frozen=True)
class FieldTemplate:
    """One message field: how its region opens and closes, and how its body becomes a value."""

    name: str
    open: Delimiter | None
    close: Delimiter | None
    spec: RegionValue


@dataclass(frozen=True)
class Template:
    """A validated response template."""

    defaults: Mapping[str, Any]
    fields: tuple[FieldTemplate, ...]
    start_anchor: Delimiter | None  # None only for grammars translated from legacy schemas

    @property
    def implicit(self) -> FieldTemplate | None:
        """The field without an opener, which collects text outside every other region."""
        return next((f for f in self.fields if f.open is None), None)


#: Deepest nesting of lists and objects a template (or legacy schema) may have. The loaders walk templates
#: recursively (copies, placeholder checks, schema nodes), so deeper input would exhaust Python's stack;
#: real templates nest fewer than ten levels.
MAX_TEMPLATE_DEPTH = 100


def check_depth(value: Any, path: str = "", limit: int = MAX_TEMPLATE_DEPTH) -> None:
    """Raise TemplateError (``template.depth``) where ``value`` nests lists and objects deeper than ``limit``,
    before anything walks it recursively (a deep template raised RecursionError). The path names the
    first few keys on the way down."""
    stack: list[tuple[Any, int, str]] = [(value, 0, path)]
    while stack:
        node, depth, where = stack.pop()
        if isinstance(node, dict):
            children: Any = node.items()
        elif isinstance(node, (list, tuple)):
            children = enumerate(node)
        else:
            continue
        if depth >= limit:
            raise _fail(where, f"nests lists and objects deeper than {limit} levels", "template.depth",
                        hint="Flatten it; templates need only a few levels.")
        for key, child in children:
            step = where if depth >= 3 else (f"{where}.{key}" if where else str(key))
            stack.append((child, depth + 1, step))


#: Most fields a template may have. The LALR table of a template grows with the square of its fields (each
#: state can see each field's opener: 400 fields took 4 s to load); real templates have fewer than ten.
MAX_TEMPLATE_FIELDS = 128


#: What to do about a refused pattern (see grammar_parse._engine.regex_safety).
REGEX_HINT = ("Let each part of the text match one way only: keep repeats that can take the same characters "
              "apart with a literal, write counts up to 1000, and merge repeats written side by side.")


def _fail(path: str, message: str, code: str, hint: str | None = None) -> TemplateError:
    return TemplateError(message, path=path, code=code, hint=hint)


def _refuse_unknown(path: str, given: Mapping[str, Any], known: Iterable[str], message: Callable[[list[str]], str],
                    code: str, hint: str) -> None:
    """TemplateError where ``given`` has keys outside ``known``: ``message`` says so of them, and the hint
    lists the known ones after ``hint``."""
    if unknown := sorted(set(given) - set(known)):
        raise _fail(path, message(unknown), code, hint=f"{hint} {sorted(known)}.")


def _compile_regex(path: str, pattern: Any) -> regex.Pattern[str]:
    if not isinstance(pattern, str):
        raise _fail(path, f"must be a regex string, got {type(pattern).__name__}", "template.type")
    refused = refusal(pattern)
    if refused is not None and refused.kind == "size":  # (before compiling: a{1000000} takes a second)
        raise _fail(path, f"regex {pattern!r} has {refused.reason}", "template.regex_size", hint=REGEX_HINT)
    try:
        compiled = regex.compile(pattern, regex.DOTALL)
    except regex.error as e:
        raise _fail(path, f"invalid regex {pattern!r}: {e}", "template.regex") from None
    if refused is not None:
        raise _fail(path, f"regex {pattern!r} has {refused.reason}", f"template.regex_{refused.kind}", hint=REGEX_HINT)
    return compiled


def load_delimiter(
    spec: Mapping[str, Any], scope: str, literal_key: str, pattern_key: str
) -> Delimiter | None:
    """Read ``literal_key`` (a string or list of strings) or ``pattern_key`` (a regex) from ``spec``."""
    prefix = f"{scope}." if scope else ""
    if literal_key in spec and pattern_key in spec:
        raise _fail(
            f"{prefix}{literal_key}",
            f"cannot specify both '{literal_key}' and '{pattern_key}'",
            "template.delimiter",
            hint=f"Keep '{literal_key}' for fixed strings or '{pattern_key}' for a regex, not both.",
        )
    if literal_key in spec:
        path = f"{prefix}{literal_key}"
        raw = spec[literal_key]
        if isinstance(raw, str):
            literals = [raw]
        elif isinstance(raw, list):
            if not raw:
                raise _fail(path, f"'{literal_key}' list must contain at least one literal", "template.delimiter")
            if not all(isinstance(s, str) for s in raw):
                raise _fail(path, f"'{literal_key}' list must contain only strings", "template.delimiter")
            literals = list(dict.fromkeys(raw))
        else:
            raise _fail(
                path,
                f"'{literal_key}' must be a string or list of strings, got {type(raw).__name__}",
                "template.delimiter",
            )
        if any(s == "" for s in literals):
            raise _fail(path, f"'{literal_key}' literals cannot be empty strings", "template.delimiter")
        return Delimiter(literals=tuple(literals))
    if pattern_key in spec:
        _compile_regex(f"{prefix}{pattern_key}", spec[pattern_key])
        return Delimiter(pattern=spec[pattern_key])
    return None


def _content_name(path: str, name: Any) -> str:
    if not isinstance(name, str) or name not in CONTENT_PARSERS:
        raise _fail(path, f"unknown content parser '{name}'. Available: {sorted(CONTENT_PARSERS)}", "template.content")
    return name


def _check_bool(path: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise _fail(path, f"must be true or false, got {value!r}", "template.type")
    return value


def _check_content_args(path: str, content: str, args: Any, *, authored: bool = False) -> dict[str, Any]:
    if not isinstance(args, dict):
        raise _fail(path, f"must be a dict, got {type(args).__name__}", "template.type")
    known = _CONTENT_ARGS[content] | (_AUTHORED_ARGS.get(content, frozenset()) if authored else frozenset())
    _refuse_unknown(path, args, known, lambda keys: f"unknown argument(s) {keys} for content parser '{content}'",
                    "template.content", f"'{content}' reads")
    if "separators" in args:
        seps = args["separators"]
        if not isinstance(seps, list) or len(seps) != 2 or not all(isinstance(x, str) for x in seps):
            raise _fail(f"{path}.separators", f"must be [after_open, before_close] strings, got {seps!r}",
                        "template.content")
        if args.get("strip", True):
            raise _fail(f"{path}.separators", "separators are removed from a value that is not stripped",
                        "template.content", hint='Add "strip": false (a stripped value has lost them anyway).')
    for key in ("strip", "unquoted_keys", "allow_non_json", "merge_duplicates", "report_stray"):
        if key in args and not (authored and key == "unquoted_keys" and args[key] == "spaced"):
            _check_bool(f"{path}.{key}", args[key])
    for key in ("line_sep", "kv_sep"):
        if key in args and (not isinstance(args[key], str) or not args[key]):
            raise _fail(f"{path}.{key}", "must be a non-empty string", "template.content")
    if "string_delims" in args:
        delims = args["string_delims"]
        if not isinstance(delims, list) or not all(
            isinstance(d, list) and len(d) == 2 and all(isinstance(q, str) and q for q in d) for d in delims
        ):
            raise _fail(
                f"{path}.string_delims",
                f"must be a list of [open, close] string pairs, got {delims!r}",
                "template.content",
            )
    if content == "xml-inline":
        if "tag_pattern" not in args:
            raise _fail(
                path,
                "xml-inline: 'tag_pattern' content_arg is required",
                "template.content",
                hint="Give a regex with named groups 'key' and 'value', e.g. <(?P<key>\\w+)>(?P<value>.*?)</\\1>.",
            )
        tag = _compile_regex(f"{path}.tag_pattern", args["tag_pattern"])
        if "key" not in tag.groupindex:
            raise _fail(
                f"{path}.tag_pattern",
                f"xml-inline: tag_pattern must have a named group 'key'. Pattern: {args['tag_pattern']}",
                "template.content",
            )
        if "elements" in args:
            _check_elements(f"{path}.elements", args["elements"])
    if "value_parser" in args:
        _check_value_parser(f"{path}.value_parser", args["value_parser"])
    if "value_parser_when" in args:  # an xml-inline key only, so `tag` is its compiled tag_pattern
        when = args["value_parser_when"]
        if not isinstance(when, dict) or set(when) != {"group", "equals", "parser"}:
            raise _fail(f"{path}.value_parser_when", "must be {\"group\": ..., \"equals\": ..., \"parser\": {...}}",
                        "template.content")
        if when["group"] not in tag.groupindex:
            raise _fail(f"{path}.value_parser_when.group", f"tag_pattern has no group {when['group']!r}",
                        "template.content")
        _check_value_parser(f"{path}.value_parser_when.parser", when["parser"])
    return args


def _check_elements(path: str, elements: Any) -> None:
    """xml-inline's nested elements: open and close tag patterns, each with a 'key' group, and an optional
    list element name."""
    if not isinstance(elements, dict) or not {"open", "close"} <= set(elements) or set(elements) - {"open", "close", "item"}:
        raise _fail(path, f"must be {{\"open\": ..., \"close\": ..., \"item\": ...}}, got {elements!r}",
                    "template.content")
    for part in ("open", "close"):
        if "key" not in _compile_regex(f"{path}.{part}", elements[part]).groupindex:
            raise _fail(f"{path}.{part}", f"the {part} tag pattern must have a named group 'key'", "template.content")
    if "item" in elements and not (isinstance(elements["item"], str) and elements["item"]):
        raise _fail(f"{path}.item", "must be a non-empty string (the list element's name)", "template.content")


def _check_value_parser(path: str, parser: Any) -> None:
    if not isinstance(parser, dict) or set(parser) - {"name", "args"}:
        raise _fail(path, f"must be a dict with 'name' and optional 'args', got {parser!r}", "template.content")
    name = _content_name(f"{path}.name", parser.get("name", "text"))
    _check_content_args(f"{path}.args", name, parser.get("args", {}))


def load_value_spec(path: str, spec: Mapping[str, Any], *, authored: bool = False) -> ValueSpec:
    """Validate the value keys of a field (content, repeats, join, transform, ...) into a ValueSpec.
    ``authored``: a ``.lark`` region, which may also use the grammar-only ``"unquoted_keys": "spaced"``
    (transformers' templates keep its exact dialect)."""
    check_depth(spec, path)  # (a .lark region's options are not checked by load_template)
    content = _content_name(f"{path}.content", spec.get("content", "text"))
    args = _check_content_args(f"{path}.content_args", content, spec.get("content_args", {}), authored=authored)
    repeats = _check_bool(f"{path}.repeats", spec.get("repeats", False))
    optional = _check_bool(f"{path}.optional", spec.get("optional", True))
    join = spec.get("join")
    if join is not None and not isinstance(join, str):
        raise _fail(f"{path}.join", f"'join' must be a string, got {type(join).__name__}", "template.join")
    if join is not None and not repeats:
        raise _fail(
            f"{path}.join",
            "'join' requires 'repeats': true",
            "template.join",
            hint="Add \"repeats\": true, or drop 'join'.",
        )
    transform = spec.get("transform")
    transform_each = spec.get("transform_each", False)
    if not isinstance(transform_each, bool):
        raise _fail(
            f"{path}.transform_each",
            f"transform_each must be a bool, got {type(transform_each).__name__}",
            "template.transform",
        )
    if transform_each and transform is None:
        raise _fail(f"{path}.transform_each", "transform_each is set but no transform was provided", "template.transform")
    if transform is not None and (mixed := mixed_placeholder(transform)) is not None:
        raise _fail(
            f"{path}.transform",
            f"transform string {mixed!r} mixes a {{placeholder}} with literal text; string interpolation "
            "is not supported.",
            "template.transform",
            hint='Use either a whole-string placeholder (e.g. "{content}") or a plain literal.',
        )
    return ValueSpec(
        content=content,
        content_args=copy.deepcopy(args),
        repeats=repeats,
        join=join,
        optional=optional,
        transform=copy.deepcopy(transform),
        transform_each=transform_each,
    )


def check_named_groups(path: str, spec: ValueSpec, delimiters: list[Delimiter | None]) -> None:
    """Named captures only reach the message through a transform; without one they would vanish."""
    if spec.transform is not None:
        return
    names: set[str] = set()
    for d in delimiters:
        if d is not None and d.pattern is not None:
            names |= set(regex.compile(d.pattern, regex.DOTALL).groupindex)
    if names:
        raise _fail(
            path,
            f"open_pattern/close_pattern declares named group(s) {sorted(names)}, but the field has no "
            "'transform'; named captures only reach the output through a transform.",
            "template.named_groups",
            hint="Add a transform that uses the captures (e.g. {\"name\": \"{name}\"}), or remove the named groups.",
        )


def _load_field(name: str, raw: Any) -> FieldTemplate:
    path = f"fields.{name}"
    if not isinstance(raw, dict):
        raise _fail(path, f"Field '{name}' must be a dict, got {type(raw).__name__}", "template.type")
    _refuse_unknown(path, raw, FIELD_KEYS, lambda keys: f"Field '{name}': unknown keys {keys}", "template.unknown_key",
                    "A field may have")
    _content_name(f"{path}.content", raw.get("content", "text"))  # checked first, as transformers does
    open_ = load_delimiter(raw, path, "open", "open_pattern")
    close = load_delimiter(raw, path, "close", "close_pattern")
    spec = load_value_spec(path, raw)
    check_named_groups(path, spec, [open_, close])
    return FieldTemplate(name=name, open=open_, close=close, spec=spec)


def load_template(spec: Any) -> Template:
    """Validate a ``response_template`` dict; raise TemplateError naming the field and key on any problem."""
    if not isinstance(spec, dict):
        raise _fail("", f"response_template must be a dict, got {type(spec).__name__}", "template.type")
    check_depth(spec)
    version = spec.get("version", 1)
    if version != 1 or isinstance(version, bool):
        raise _fail("version", f"Unsupported response_template version: {version}", "template.version",
                    hint="Only version 1 exists.")
    _refuse_unknown("", spec, TEMPLATE_KEYS, lambda keys: f"Unknown keys in response_template: {keys}",
                    "template.unknown_key", "A template may have")
    defaults = spec.get("defaults", {})
    if not isinstance(defaults, dict):
        raise _fail("defaults", "response_template.defaults must be a dict", "template.type")
    fields_raw = spec.get("fields", {})
    if not isinstance(fields_raw, dict) or not fields_raw:
        raise _fail("fields", "response_template.fields must be a non-empty dict", "template.fields")
    if len(fields_raw) > MAX_TEMPLATE_FIELDS:
        raise _fail("fields", f"response_template has {len(fields_raw)} fields, more than {MAX_TEMPLATE_FIELDS}",
                    "template.fields", hint="Group related markers into one field with a content parser.")
    fields = tuple(_load_field(str(name), raw) for name, raw in fields_raw.items())
    implicit = [f.name for f in fields if f.open is None]
    if len(implicit) > 1:
        raise _fail(
            "fields",
            "At most one field may omit 'open'/'open_pattern' (that field becomes the implicit-open / "
            f"leftover sink). Found: {', '.join(implicit)}",
            "template.fields",
            hint="Give every field but one an 'open' or 'open_pattern'.",
        )
    anchor = load_delimiter(spec, "", "start_anchor", "start_anchor_pattern")
    if anchor is None:
        raise _fail(
            "start_anchor",
            "response_template must define 'start_anchor' or 'start_anchor_pattern'.",
            "template.start_anchor",
            hint="Set start_anchor to the text that opens the assistant turn in the prompt, "
            "e.g. \"<|im_start|>assistant\\n\".",
        )
    return Template(defaults=copy.deepcopy(defaults), fields=fields, start_anchor=anchor)


__all__ = ["MAX_TEMPLATE_DEPTH", "MAX_TEMPLATE_FIELDS", "Delimiter", "FieldTemplate", "Template", "check_depth", "load_delimiter",
           "load_template", "load_value_spec"]
