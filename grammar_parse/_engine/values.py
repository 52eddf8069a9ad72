"""Region values: how a region's body becomes the value stored under its field (:class:`ValueSpec`: its
content parser, grammar_parse._engine.content, then the transform template), and the transform templates
themselves (``{placeholder}`` filling). A placeholder with nothing to fill raises
:class:`~grammar_parse.errors.PlaceholderError` (a ``KeyError``) where transformers raises ``KeyError``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import ParseError, PlaceholderError
from .content import CONTENT_PARSERS, STREAMABLE_PARSERS, parse_content
from .reading import PLACEHOLDER

_MISSING = object()  # an optional placeholder with nothing to fill in: its key or element is left out


def _fill(template: Any, scope: Mapping[str, Any], partial: bool = False) -> Any:
    """Rebuild ``template`` with every whole-string ``{path}`` replaced by the value it names.

    Beyond transformers' ``{path}``: ``{a|b}`` takes the first path that exists, and a trailing ``?``
    (``{id?}``) leaves the key (or list element) out when none does. ``partial`` treats every placeholder
    as optional (a broken tool call is built from the parts that exist).
    """
    return _filler(template)(scope, partial)


#: A template's filler is a function of (scope, partial); dicts and lists are rebuilt on every fill.
_Filler = Callable[[Mapping[str, Any], bool], Any]
#: Fillers by template object (grammar data: a region's transform, filled at every close), each kept
#: with its template so that the id is not reused while the entry lives.
_FILLERS: dict[int, tuple[Any, _Filler]] = {}


def _filler(template: Any) -> _Filler:
    """The template read once into nested functions: no type tests or placeholder matching per fill."""
    known = _FILLERS.get(id(template))
    if known is not None and known[0] is template:
        return known[1]
    filler = _build_filler(template)
    if len(_FILLERS) >= 4096:
        _FILLERS.clear()  # (bounded, whatever templates a process uses)
    _FILLERS[id(template)] = (template, filler)
    return filler


def _build_filler(template: Any) -> _Filler:
    if isinstance(template, dict):
        items = [(key, _build_filler(item)) for key, item in template.items()]

        def fill_dict(scope: Mapping[str, Any], partial: bool) -> Any:
            out = {}
            for key, fill_item in items:
                if (value := fill_item(scope, partial)) is not _MISSING:
                    out[key] = value
            return out
        return fill_dict
    if isinstance(template, list):
        elements = [_build_filler(item) for item in template]
        return lambda scope, partial: [v for v in (f(scope, partial) for f in elements) if v is not _MISSING]
    placeholder = _placeholder(template) if isinstance(template, str) else None
    if placeholder is None:
        return lambda scope, partial: template
    paths, optional = placeholder

    def fill_placeholder(scope: Mapping[str, Any], partial: bool) -> Any:
        first_error: ParseError | None = None
        for path in paths:
            try:
                return _lookup(path, scope)
            except ParseError as e:  # PlaceholderError too
                first_error = first_error or e
        if optional or partial:
            return _MISSING
        assert first_error is not None
        raise first_error
    return fill_placeholder


def _placeholder(template: str) -> tuple[list[str], bool] | None:
    """A whole-string placeholder's paths and whether it is optional (None: the string is literal)."""
    whole = PLACEHOLDER.fullmatch(template)
    return None if whole is None else (whole.group(1).split("|"), whole.group(2) == "?")


def _lookup(path: str, scope: Mapping[str, Any]) -> Any:
    root, *keys = path.split(".")
    if root not in scope:
        raise PlaceholderError(
            f"transform placeholder '{{{path}}}' is not defined. Available: {sorted(scope)}",
            code="parse.placeholder",
        )
    value = scope[root]
    for key in keys:
        if not isinstance(value, dict):
            raise ParseError(
                f"transform placeholder '{{{path}}}' cannot index into {type(value).__name__} at '{key}'",
                code="parse.transform",
            )
        if key not in value:
            raise ParseError(
                f"transform placeholder '{{{path}}}' is missing key '{key}'. Available: {sorted(value)}",
                code="parse.transform",
            )
        value = value[key]
    return value


def fill(template: Any, scope: Mapping[str, Any]) -> Any:
    """``template`` with its whole-string ``{path}`` placeholders replaced from ``scope``."""
    value = _fill(template, scope)
    if value is _MISSING:
        raise PlaceholderError(f"nothing to fill in for {template!r}", code="parse.placeholder")
    return value


def fill_known(template: Any, scope: Mapping[str, Any]) -> Any:
    """``template`` filled from ``scope`` with every placeholder that names nothing left out (None if
    nothing is left at all): the parts of a value that are known when the rest could not be parsed."""
    value = _fill(template, scope, partial=True)
    return None if value is _MISSING else value


def mixed_placeholder(template: Any) -> str | None:
    """The first string in ``template`` that mixes a placeholder with literal text, if any."""
    if isinstance(template, dict):
        template = list(template.values())
    if isinstance(template, list):
        for item in template:
            found = mixed_placeholder(item)
            if found is not None:
                return found
        return None
    if isinstance(template, str) and PLACEHOLDER.search(template) and not PLACEHOLDER.fullmatch(template):
        return template
    return None


class RegionValue(Protocol):
    """What a region asks of its value spec: a :class:`ValueSpec`, or compat's ``LegacyValue`` (a legacy
    response_schema node)."""

    @property
    def repeats(self) -> bool: ...

    @property
    def join(self) -> str | None: ...

    @property
    def optional(self) -> bool: ...

    @property
    def dirty(self) -> bool: ...

    def directive(self) -> dict[str, Any]:
        """The region options as a ``//@ region`` directive writes them."""
        ...

    def value(self, body: str, captures: Mapping[str, Any], open_text: str = "", close_text: str = "",
              children: Mapping[str, Any] | None = None) -> Any:
        """The region's value from its body, open-delimiter captures, delimiter texts and components."""
        ...


@dataclass(frozen=True)
class ValueSpec:
    """How a region's body becomes the value stored under its field."""

    content: str = "text"
    content_args: Mapping[str, Any] = field(default_factory=dict)
    repeats: bool = False
    join: str | None = None
    optional: bool = True
    transform: Any = None
    transform_each: bool = False

    @property
    def dirty(self) -> bool:
        """Whether chunks are raw bytes of a structured value (only meaningful once the region closes)."""
        return self.content not in STREAMABLE_PARSERS

    def directive(self) -> dict[str, Any]:
        """The region options as a grammar's ``//@ region`` directive writes them (defaults left out)."""
        out: dict[str, Any] = {"content": self.content}
        if self.content_args:
            out["content_args"] = self.content_args
        if self.repeats:
            out["repeats"] = True
        if self.join is not None:
            out["join"] = self.join
        if not self.optional:
            out["optional"] = False
        if self.transform is not None:
            out["transform"] = self.transform
        if self.transform_each:
            out["transform_each"] = True
        return out

    def value(self, body: str, captures: Mapping[str, Any], open_text: str = "", close_text: str = "",
              children: Mapping[str, Any] | None = None) -> Any:
        """Parse ``body`` and apply the transform (per element with ``transform_each``).

        ``children`` are the values of component regions inside this one: they join the captures in the
        transform's scope, and without a transform they are the value. ``open_text`` and ``close_text``
        (the delimiters' text) are for value functions that need them.
        """
        if children:
            captures = {**captures, **children}
            if self.transform is None:
                return dict(children)
        parsed = parse_content(body, self.content, self.content_args)
        if self.transform is None:
            return parsed
        if not self.transform_each:
            return _fill(self.transform, {**captures, "content": parsed})
        if not isinstance(parsed, list):
            raise ParseError(
                f"transform_each requires the parsed content to be a list, got {type(parsed).__name__}.",
                code="parse.transform",
            )
        out = []
        for item in parsed:
            if not isinstance(item, dict):
                raise ParseError(
                    f"transform_each requires each list element to be a dict, got {type(item).__name__}.",
                    code="parse.transform",
                )
            out.append(_fill(self.transform, {**captures, **item}))
        return out


def specialised_content(spec: Any) -> Callable[[str], Any] | None:
    """The value of a region with this spec and no components, as a function of its body alone (its content
    parser specialised, ContentParser.specialised), where the spec has no transform; else None."""
    if not isinstance(spec, ValueSpec) or spec.transform is not None:
        return None
    return CONTENT_PARSERS[spec.content].specialised(spec.content_args)


def specialised_value(spec: Any) -> Callable[[str, Mapping[str, Any], str, str, Mapping[str, Any]], Any]:
    """``spec.value`` with what the spec decides read once: its content parser specialised to its args
    (ContentParser.specialised) and its transform written out (_written_filler). For the specialised one-shot
    parser, which closes the same regions many times; a legacy schema's spec is its own ``value``."""
    if not isinstance(spec, ValueSpec):
        return spec.value  # type: ignore[no-any-return]
    parse = CONTENT_PARSERS[spec.content].specialised(spec.content_args)
    if spec.transform is None:
        def plain(body: str, captures: Mapping[str, Any], open_text: str, close_text: str,
                  children: Mapping[str, Any]) -> Any:
            return dict(children) if children else parse(body)
        return plain
    general, written = _filler(spec.transform), _written_filler(spec.transform)

    def fill_in(scope: Mapping[str, Any]) -> Any:
        if written is not None:
            try:
                return written(scope)
            except (KeyError, TypeError):  # (a placeholder with nothing to fill: the general filler's error)
                pass
        return general(scope, False)
    if spec.transform_each:
        def each(body: str, captures: Mapping[str, Any], open_text: str, close_text: str,
                 children: Mapping[str, Any]) -> Any:
            parsed = parse(body)
            if not isinstance(parsed, list) or not all(isinstance(item, dict) for item in parsed):
                return spec.value(body, captures, open_text, close_text, children)  # (its error)
            scope = {**captures, **children} if children else captures
            return [fill_in({**scope, **item}) for item in parsed]
        return each

    def transformed(body: str, captures: Mapping[str, Any], open_text: str, close_text: str,
                    children: Mapping[str, Any]) -> Any:
        return fill_in({**captures, **children, "content": parse(body)} if children else
                       {**captures, "content": parse(body)})
    return transformed


def _written_filler(template: Any) -> Callable[[Mapping[str, Any]], Any] | None:
    """A template's filler as one Python expression (a dict display per dict, a lookup per placeholder):
    the same value as its general filler where every placeholder is filled, KeyError or TypeError where one
    is not (then the general filler runs, for its error). None for a template with an optional placeholder
    other than a key's (``{name?}``, ``{a.b|c?}``), or nested past 32 levels (the general filler fills it).
    Template text is never written into the source: keys, literals and paths are constants read by number."""
    constants: list[Any] = []

    def const(value: Any) -> str:
        constants.append(value)
        return f"c[{len(constants) - 1}]"

    def write(node: Any, depth: int) -> str | None:
        if depth > 32:
            return None
        if isinstance(node, dict):
            items = []
            for key, item in node.items():
                placeholder = _placeholder(item) if isinstance(item, str) else None
                if placeholder is not None and placeholder[1]:  # an optional key: left out when nothing fills it
                    paths = placeholder[0]
                    if len(paths) == 1 and "." not in paths[0]:
                        name = const(paths[0])
                        items.append(f"**({{{const(key)}: scope[{name}]}} if {name} in scope else {{}})")
                    else:
                        items.append(f"**entry({const(key)}, scope, {const(_paths(paths))})")
                    continue
                value = write(item, depth + 1)
                if value is None:
                    return None
                items.append(f"{const(key)}: {value}")
            return "{" + ", ".join(items) + "}"
        if isinstance(node, list):
            elements = [write(item, depth + 1) for item in node]
            return None if any(e is None for e in elements) else "[" + ", ".join(e for e in elements if e) + "]"
        placeholder = _placeholder(node) if isinstance(node, str) else None
        if placeholder is None:
            return const(node)
        paths, optional = placeholder
        if optional:
            return None
        if len(paths) > 1:  # (the first path that names something)
            return f"pick(scope, {const(_paths(paths))})"
        root, *keys = paths[0].split(".")
        return f"scope[{const(root)}]" if not keys else f"dig(scope[{const(root)}], {const(tuple(keys))})"
    body = write(template, 0)
    if body is None:
        return None
    found: Callable[[Mapping[str, Any]], Any] = eval(  # (the source is ours; see the docstring)
        compile(f"lambda scope: {body}", "<grammar_parse transform>", "eval"), {"c": constants, "dig": _dig,
                                                                                 "pick": _pick, "entry": _entry})
    return found


def _paths(paths: list[str]) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(path.split(".")) for path in paths)


def _entry(key: str, scope: Mapping[str, Any], paths: tuple[tuple[str, ...], ...]) -> dict[str, Any]:
    """An optional key's entry (``{"arguments": "{content.arguments|content.parameters?}"}``): ``{key: the first
    of paths that names a value}``, or nothing where none does."""
    try:
        return {key: _pick(scope, paths)}
    except KeyError:
        return {}


def _pick(scope: Mapping[str, Any], paths: tuple[tuple[str, ...], ...]) -> Any:
    """The value of the first of ``paths`` that names one (``{a|b}``), KeyError where none does."""
    for root, *keys in paths:
        if root in scope:
            try:
                return _dig(scope[root], tuple(keys))
            except KeyError:
                continue
    raise KeyError(paths)


def _dig(value: Any, keys: tuple[str, ...]) -> Any:
    """``_lookup``'s walk down a dotted path, raising KeyError where it fails."""
    for key in keys:
        if not isinstance(value, dict):
            raise KeyError(key)
        value = value[key]
    return value


__all__ = ["RegionValue", "ValueSpec", "fill", "fill_known", "mixed_placeholder", "specialised_content",
           "specialised_value"]
