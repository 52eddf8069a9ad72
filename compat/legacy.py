"""Legacy ``response_schema`` parsing, exactly as transformers 5.13's ``recursive_parse``.

A legacy schema is a JSON Schema whose nodes say how to cut text apart: ``x-regex`` (search; one
unnamed group gives a string, named groups a dict), ``x-regex-iterator`` (every match, for arrays),
``x-regex-key-value`` (groups ``key`` and ``value``, for objects), ``x-regex-substitutions``,
``x-parser`` (``json`` or ``gemma4-tool-call``) with ``x-parser-args`` (a jmespath ``transform``,
``allow_non_json``), ``const``, ``default``, ``required``, ``additionalProperties``, ``items`` and
``prefixItems``. All regexes are DOTALL; past a time limit per parse they run on a linear-time matcher
with the same matches, because some legacy regexes backtrack for hours on an unterminated region.

Errors are the types transformers raises (``ValueError`` or ``TypeError``), as grammar_parse errors
that name the schema node.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any, TypeVar, Union

import jmespath
import regex
from jmespath.parser import ParsedResult

from grammar_parse._engine.linear_regex import BoundedRegex
from grammar_parse._engine.linear_regex import Match as LinearMatch
from grammar_parse._engine.regex_safety import refusal
from grammar_parse._engine.template import REGEX_HINT
from grammar_parse._engine.reading import load_json
from grammar_parse.errors import ParseError, SchemaTypeError, TemplateError

#: Default limit, in seconds, for each regex operation a legacy schema runs (a grammar's
#: ``//@ legacy_timeout`` directive overrides it).
DEFAULT_TIMEOUT = 2.0

REGEX_KEYS = ("x-regex", "x-regex-iterator", "x-regex-key-value", "x-regex-substitutions")
_REGEX_KEYS = frozenset(REGEX_KEYS)

#: A match of any engine (the standard library's without a time limit, see _Regexes).
Match = Union[re.Match[str], regex.Match[str], LinearMatch]
_T = TypeVar("_T")

#: A schema node's location, built lazily: the root's name, or (parent, step, key) joined on error.
Node = Any


def node_path(node: Node) -> str:
    """The dotted path of a schema node (``(root).properties.tool_calls.items``)."""
    steps = []
    while isinstance(node, tuple):
        node, step, key = node
        steps.append(step if key is None else f"{step}.{key}" if step == "properties" else f"{step}[{key}]")
    return ".".join([node, *reversed(steps)])
SCHEMA_KEYS = frozenset({
    *REGEX_KEYS, "x-parser", "x-parser-args", "type", "properties", "items", "prefixItems", "const",
    "default", "required", "additionalProperties",
})


def is_legacy_schema(obj: Any) -> bool:
    """Whether ``obj`` looks like a legacy response_schema rather than a v1 response_template."""
    return isinstance(obj, dict) and "fields" not in obj and bool(SCHEMA_KEYS & set(obj))


#: The JSON type each schema key must have: what the parser indexes, iterates or calls on it.
_KEY_TYPES: dict[str, tuple[type, ...]] = {
    "type": (str,), "x-regex": (str,), "x-regex-iterator": (str,), "x-regex-key-value": (str,),
    "x-regex-substitutions": (list,), "x-parser": (str,), "x-parser-args": (dict,), "properties": (dict,),
    "items": (dict,), "prefixItems": (list,), "required": (list,), "additionalProperties": (bool, dict),
}
_JSON_TYPES = {str: "string", list: "array", dict: "object", bool: "boolean", int: "number", float: "number"}


def _json_type(value: Any) -> str:
    return "null" if value is None else _JSON_TYPES.get(type(value), type(value).__name__)


def check_schema(schema: Any, node: Node = "(root)") -> None:
    """Reject, when the schema loads, a node whose keys have a JSON type the parser cannot use (a list of
    ``properties``, a lone substitution pair, ...): transformers would crash on them mid-parse with a bare
    Python error. What transformers reports as a parse error (an unknown parser, a bad regex group) is left
    to the parse, so those errors stay exactly its own."""
    path = node_path(node)
    if not isinstance(schema, dict):
        raise TemplateError(f"a schema node must be a JSON object, not {_json_type(schema)}", path=path,
                            code="template.type", hint="Write the node as an object such as {\"type\": \"string\"}.")
    for key, kinds in _KEY_TYPES.items():
        if key in schema and not isinstance(schema[key], kinds):
            expected = " or ".join(("an " if _JSON_TYPES[k][0] in "aeiou" else "a ") + _JSON_TYPES[k] for k in kinds)
            raise TemplateError(f"must be {expected}, not {_json_type(schema[key])}", path=f"{path}.{key}",
                                code="template.type")
    substitutions = schema.get("x-regex-substitutions", [])
    for i, pair in enumerate(substitutions):
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(s, str) for s in pair)):
            raise TemplateError("each substitution must be a [pattern, replacement] pair of strings",
                                path=f"{path}.x-regex-substitutions[{i}]", code="template.type")
    patterns = [(key, schema[key]) for key in REGEX_KEYS[:3] if key in schema]
    patterns += [(f"x-regex-substitutions[{i}]", pair[0]) for i, pair in enumerate(substitutions)]
    for key, pattern in patterns:
        try:
            _compiled_stdlib(pattern)  # the parse compiles (and caches) the same pattern
        except re.error as e:
            raise TemplateError(f"is not a valid regular expression: {e}", path=f"{path}.{key}", code="template.regex",
                                hint="Legacy schemas use Python's re syntax.") from None
        # The same analysis as template patterns: refused where a near miss would backtrack for ever.
        refused = refusal(pattern, regex.DOTALL)
        if refused is not None:
            raise TemplateError(f"regex {pattern!r} has {refused.reason}", path=f"{path}.{key}",
                                code=f"template.regex_{refused.kind}", hint=REGEX_HINT)
    for i, (pattern, replacement) in enumerate(substitutions):
        try:  # (the replacement is compiled before any match, so an empty text checks it)
            _compiled_stdlib(pattern).sub(replacement, "")
        except (re.error, IndexError) as e:  # a bad escape, or a group the pattern does not have
            raise TemplateError(f"the replacement {replacement!r} is not valid for its pattern: {e}",
                                path=f"{path}.x-regex-substitutions[{i}]", code="template.regex",
                                hint="Refer only to groups the pattern has (\\1, \\g<name>), and escape '\\' as '\\\\'.") from None
    transform = schema.get("x-parser-args", {}).get("transform")
    if transform is not None and not isinstance(transform, str):
        raise TemplateError("must be a jmespath expression string", path=f"{path}.x-parser-args.transform",
                            code="template.type")
    if not all(isinstance(key, str) for key in schema.get("required", [])):
        raise TemplateError("must list property names (strings)", path=f"{path}.required", code="template.type")
    for key, child in schema.get("properties", {}).items():
        check_schema(child, (node, "properties", key))
    if "items" in schema:
        check_schema(schema["items"], (node, "items", None))
    for i, child in enumerate(schema.get("prefixItems", [])):
        check_schema(child, (node, "prefixItems", i))
    if isinstance(schema.get("additionalProperties"), dict):
        check_schema(schema["additionalProperties"], (node, "additionalProperties", None))


@lru_cache(maxsize=512)
def _compiled(pattern: str) -> BoundedRegex:
    return BoundedRegex(pattern, regex.DOTALL)


@lru_cache(maxsize=512)
def _compiled_stdlib(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.DOTALL)


@lru_cache(maxsize=256)
def compiled_jmespath(expression: str) -> ParsedResult:
    """A JMESPath expression compiled once (schemas reuse their transforms on every parse)."""
    return jmespath.compile(expression)


def _value_error(node: Node, message: str, code: str, hint: str | None = None) -> ParseError:
    return ParseError(f"schema node {node_path(node)}: {message}", code=code, hint=hint)


def _type_error(node: Node, message: str) -> SchemaTypeError:
    return SchemaTypeError(message, node=node_path(node))


class _Regexes:
    """The regex operations of one parse.

    Without a limit (``timeout=None``) they run on the standard library's ``re``, exactly as transformers
    5.13 did (an unterminated region can then take quadratic time or worse). With one, on the ``regex``
    module until the parse has spent ``timeout`` seconds there, then on grammar_parse's linear matcher,
    which finds the same matches in linear time: the TRL Qwen3 schema on 100 KB of unclosed ``<think>``
    ran for hours, now a bounded wait, and the message never depends on the clock.
    """

    def __init__(self, timeout: float | None) -> None:
        self.timeout = timeout
        self.left = timeout  # seconds the regex module may still spend in this parse

    def _bounded(self, node: Node, pattern: str, op: Callable[[BoundedRegex, float], _T]) -> _T:
        assert self.left is not None
        started = time.perf_counter()
        try:
            return op(_compiled(pattern), max(self.left, 0.0))
        except (regex.error, re.error, IndexError) as e:  # a schema that never went through check_schema
            raise TemplateError(f"regex {pattern!r} (or its replacement) is not valid: {e}", path=node_path(node),
                                code="template.regex", hint="Legacy schemas use Python's re syntax.") from None
        except TimeoutError:  # (only where the linear matcher cannot read the pattern)
            raise _value_error(
                node, f"regex {pattern!r} ran longer than {self.timeout} s on this output", "legacy.timeout",
                hint="The regex backtracks catastrophically on this text (often an unterminated region); "
                "raise the timeout or make its lazy groups more specific.",
            ) from None
        finally:
            self.left -= time.perf_counter() - started

    def search(self, node: Node, pattern: str, text: str) -> Match | None:
        if self.timeout is None:
            return _compiled_stdlib(pattern).search(text)
        found: Match | None = self._bounded(node, pattern, lambda rx, limit: rx.search(text, limit))
        return found

    def finditer(self, node: Node, pattern: str, text: str) -> list[Match]:
        if self.timeout is None:
            return list(_compiled_stdlib(pattern).finditer(text))
        found: list[Match] = self._bounded(node, pattern, lambda rx, limit: rx.finditer(text, limit))
        return found

    def sub(self, node: Node, pattern: str, repl: str | Callable[[Match], str], text: str) -> str:
        if self.timeout is None:
            return _compiled_stdlib(pattern).sub(repl, text)
        if isinstance(repl, str):
            # a replacement that cannot work fails whether or not the pattern matches (as `re` checks it)
            self._bounded(node, pattern, lambda rx, limit: _compiled_stdlib(pattern).sub(repl, ""))
        return self._bounded(node, pattern, lambda rx, limit: rx.sub(repl, text, limit))


def _gemma4_to_json(text: str, rx: _Regexes, node: Node) -> str:
    """Gemma 4 call arguments (bare keys, ``<|"|>`` string quotes) as JSON."""
    strings: list[str] = []

    def capture(m: Match) -> str:
        strings.append(m.group(1))
        return f"\x00{len(strings) - 1}\x00"

    text = rx.sub(node, r'<\|"\|>(.*?)<\|"\|>', capture, text)
    text = rx.sub(node, r"(?<=[{,])(\w+):", r'"\1":', text)
    for i, s in enumerate(strings):
        text = text.replace(f"\x00{i}\x00", json.dumps(s))
    return text


def _match_value(node: Node, match: Match) -> Any:
    groups = match.groupdict()
    if groups:
        return {k: v for k, v in groups.items() if v is not None}
    unnamed = list(match.groups())
    if len(unnamed) > 1:
        raise _value_error(node, f"Regex has multiple unnamed groups!\nGroups: {unnamed}", "legacy.groups",
                           hint="Name the groups, or make all but one non-capturing (?:...).")
    if not unnamed:
        raise _value_error(node, f"Regex has no capture groups:\n\n{match.group(0)}", "legacy.groups",
                           hint="Wrap the part to extract in a (...) group.")
    return unnamed[0]


def recursive_parse(content: Any, schema: dict[str, Any], *, timeout: float | None = DEFAULT_TIMEOUT) -> Any:
    """Parse ``content`` with a legacy schema; the same result (or error type) as transformers 5.13."""
    return _parse(content, schema, "(root)", _Regexes(timeout))


def _parse(content: Any, schema: dict[str, Any], node: Node, rx: _Regexes) -> Any:
    if "const" in schema:
        return schema["const"]
    if content is None:
        return None
    node_type = schema.get("type")
    if not _REGEX_KEYS.isdisjoint(schema) and not isinstance(content, str):
        raise _type_error(node, f"got a non-string input, but has a regex for parsing or substitution.\nInput: {content}")
    for pattern, replacement in schema.get("x-regex-substitutions", []):
        content = rx.sub(node, pattern, replacement, content)
    if (pattern := schema.get("x-regex")) is not None:
        match = rx.search(node, pattern, content)
        if match is None:
            return None
        content = _match_value(node, match)
    if (pattern := schema.get("x-regex-iterator")) is not None:
        if node_type != "array":
            raise _type_error(node, f"type {node_type} cannot use x-regex-iterator.")
        _string_for(node, content, "x-regex-iterator")
        content = [_match_value(node, m) for m in rx.finditer(node, pattern, content)]
        if not content:
            return None
    if (pattern := schema.get("x-regex-key-value")) is not None:
        if node_type != "object":
            raise _type_error(node, f"type {node_type} cannot use x-regex-key-value.")
        _string_for(node, content, "x-regex-key-value")
        pairs = {}
        for m in rx.finditer(node, pattern, content):
            groups = _match_value(node, m)
            if not isinstance(groups, dict) or "key" not in groups or "value" not in groups:
                raise _value_error(
                    node, f"Regex for x-regex-key-value must have named groups 'key' and 'value'.\n"
                    f"Match groups: {groups}", "legacy.groups")
            pairs[groups["key"]] = groups["value"]
        content = pairs
        if not content:
            return None
    if "x-parser" in schema:
        content = _apply_parser(content, schema, node, rx)
    if node_type == "object":
        return _parse_object(content, schema, node, rx)
    if node_type == "array":
        return _parse_array(content, schema, node, rx)
    if node_type in ("string", "integer", "number", "boolean"):
        return _parse_scalar(content, node_type, node)
    if node_type is None or node_type == "any":
        return content
    raise _type_error(node, f"Unsupported schema type {node_type} for node content {content!r}")


def _string_for(node: Node, content: Any, key: str) -> None:
    """An ``x-regex`` with named groups leaves a dict, which ``key``'s regex cannot read: transformers' ``re``
    raises TypeError there, and so does this (a SchemaTypeError), on every regex engine."""
    if not isinstance(content, str):
        raise _type_error(node, f"{key} got a non-string input (the groups of its x-regex): {content}")


def _apply_parser(content: Any, schema: dict[str, Any], node: Node, rx: _Regexes) -> Any:
    parser = schema["x-parser"]
    if parser not in ("json", "gemma4-tool-call"):
        raise _value_error(node, f"Unknown parser {parser} for schema node", "legacy.schema",
                           hint="Legacy schemas know the parsers json and gemma4-tool-call.")
    if not isinstance(content, str):
        raise _type_error(node, f"has the {parser} parser but got non-string input: {content}")
    if parser == "gemma4-tool-call":
        content = _gemma4_to_json(content, rx, node)
    args = schema.get("x-parser-args", {})
    try:
        parsed = load_json(content)
    except ParseError as e:  # past a limit (depth, digits): transformers crashes here; allow_non_json does not apply
        raise _value_error(node, e.detail, e.code, e.hint) from None
    except json.JSONDecodeError as e:
        if not args.get("allow_non_json", False):
            raise _value_error(
                node, f"Node has JSON parser but could not parse its contents as JSON.\n\nContent: {content}\n\n"
                f"Error: {e}", "parse.json",
                hint="Use the allow_non_json parser arg for nodes which may contain JSON or string content.",
            ) from None
        parsed = content
    if (transform := args.get("transform")) is not None:
        try:
            parsed = compiled_jmespath(transform).search(parsed)
        except jmespath.exceptions.JMESPathError as e:
            raise _value_error(node, f"jmespath transform {transform!r} failed: {e}", "legacy.transform") from None
    return parsed


def _parse_object(content: Any, schema: dict[str, Any], node: Node, rx: _Regexes) -> dict[str, Any]:
    out: dict[str, Any] = {}
    properties = schema.get("properties", {})
    if isinstance(content, str):
        # No regex at this level: every child parses the whole string itself.
        if "properties" not in schema:
            raise _value_error(node, f"Object node received string content but has no regex or parser to "
                               f"handle it.\nContent: {content}", "legacy.schema")
        for key, child in properties.items():
            value = _parse(content, child, (node, "properties", key), rx)
            if value is not None:
                out[key] = value
    elif isinstance(content, dict):
        for key, child in properties.items():
            if "const" in child:
                out[key] = child["const"]
            elif key in content:
                out[key] = _parse(content[key], child, (node, "properties", key), rx)
            elif "default" in child:
                out[key] = child["default"]
        additional = schema.get("additionalProperties", True)
        if additional is not False:  # {} is falsy but means "anything"
            additional = additional if isinstance(additional, dict) else {}
            for key, value in content.items():
                if key not in properties:
                    out[key] = _parse(value, additional, (node, "additionalProperties", None), rx)
    else:
        raise _type_error(node, f"Expected a dict or str for schema node with type object, got {content}")
    if missing := [key for key in schema.get("required", []) if key not in out]:
        preview = repr(content[:500]) if isinstance(content, str) else repr(content)
        raise _value_error(node, f"Required fields {missing} are missing from parsed output.\nParsed: {out}\n"
                           f"Input: {preview}", "legacy.required")
    return out


def _parse_array(content: Any, schema: dict[str, Any], node: Node, rx: _Regexes) -> list[Any]:
    if not content:
        return []
    if "items" in schema:
        if not isinstance(content, list):
            raise _type_error(node, f"Expected a list or regex for schema node with type array, got {content}")
        return [_parse(item, schema["items"], (node, "items", None), rx) for item in content]
    if "prefixItems" in schema:
        prefix = schema["prefixItems"]
        if not isinstance(content, list):
            if len(prefix) != 1:
                raise _type_error(node, f"Expected a list or regex for schema node with type array, got {content}")
            content = [content]  # a single-item array: wrap the value
        if len(content) != len(prefix):
            raise _value_error(node, f"Array node has {len(content)} items, but schema only has {len(prefix)} "
                               f"prefixItems defined.\nContent: {content}", "legacy.schema")
        return [_parse(item, sub, (node, "prefixItems", i), rx) for i, (item, sub) in enumerate(zip(content, prefix))]
    raise _value_error(node, "Array node has no items or prefixItems schema defined.", "legacy.schema")


def _parse_scalar(content: Any, node_type: str, node: Node) -> Any:
    if node_type == "integer":
        if isinstance(content, int):
            return content
        if not isinstance(content, str):
            raise _type_error(node, f"Expected a string or int for schema node with type integer, got "
                                  f"{type(content).__name__}: {content}")
        try:
            return int(content)
        except ValueError:
            raise _value_error(node, f"Schema node has type 'integer', but the parsed string content is not a "
                               f"valid integer: {content!r}", "legacy.value") from None
    if node_type == "number":
        if isinstance(content, (int, float)):
            return float(content)
        if not isinstance(content, str):
            raise _type_error(node, f"Expected a string or number for schema node with type number, got "
                                  f"{type(content).__name__}: {content}")
        try:
            return float(content)
        except ValueError:
            raise _value_error(node, f"Schema node has type 'number', but the parsed string content is not a "
                               f"valid number: {content!r}", "legacy.value") from None
    if node_type == "boolean":
        if isinstance(content, bool):
            return content
        if not isinstance(content, str):
            raise _type_error(node, f"Expected a string or bool for schema node with type boolean, got "
                                  f"{type(content).__name__}: {content}")
        if content.lower() in ("true", "1"):
            return True
        if content.lower() in ("false", "0"):
            return False
        raise _value_error(node, f"Invalid boolean value: {content}", "legacy.value")
    if not isinstance(content, str):
        raise _type_error(node, f"Expected a string for schema node with type string, got "
                              f"{type(content).__name__}: {content}")
    return content




class LegacyValue:
    """A region value computed by a legacy schema node (the value-spec interface of grammar regions).

    ``mode`` says what text the node sees: ``group`` the region body (a named group of the root
    regex), ``wrap`` the region with its delimiters (the node's own regex finds its match in it),
    ``item`` the same for an iterator node, whose one-element list gives the region's value. Errors
    are not raised mid-stream: the final run of the whole schema at finalize() decides.
    """

    join = None
    optional = True

    def __init__(self, node: dict[str, Any], mode: str, repeats: bool = False,
                 timeout: float | None = DEFAULT_TIMEOUT) -> None:
        if mode not in ("group", "wrap", "item"):
            raise ValueError(f"unknown legacy region mode {mode!r}")
        self.node = node
        self.mode = mode
        self.repeats = repeats
        self.timeout = timeout

    @property
    def dirty(self) -> bool:
        plain = self.mode == "group" and self.node.get("type") == "string" and not any(
            k.startswith("x-") for k in self.node)
        return not plain

    def directive(self) -> dict[str, Any]:
        out: dict[str, Any] = {"legacy": {"mode": self.mode, "node": self.node}}
        if self.repeats:
            out["repeats"] = True
        return out

    @classmethod
    def from_directive(cls, options: dict[str, Any], timeout: float | None = DEFAULT_TIMEOUT) -> LegacyValue:
        legacy = options.get("legacy")
        if not isinstance(legacy, dict) or not isinstance(legacy.get("node"), dict):
            raise ValueError("'legacy' must be an object with a schema 'node' and a 'mode'")
        unknown = set(options) - {"legacy", "repeats"}
        if unknown:
            raise ValueError(f"a legacy region takes only 'legacy' and 'repeats', not {sorted(unknown)}")
        return cls(legacy["node"], legacy.get("mode", "group"), bool(options.get("repeats", False)), timeout)

    def value(self, body: str, captures: Mapping[str, Any], open_text: str = "", close_text: str = "",
              children: Mapping[str, Any] | None = None) -> Any:
        text = body if self.mode == "group" else open_text + body + close_text
        try:
            value = recursive_parse(text, self.node, timeout=self.timeout)
        except (ValueError, TypeError):
            return None  # settled by the final run of the whole schema
        if self.mode == "item":
            return value[0] if isinstance(value, list) and value else None
        return value


class LegacySettle:
    """The engine's finalize hook for a legacy schema: transformers <= 5.14 parsed the generated text
    alone, with one run of the whole schema, so the streamed regions' message is settled by that run.

    The session keeps the output text for it, refuses a prompt (there is no start anchor to find the
    output in one), calls :meth:`settle` once at finalize, and says in one ``correction`` event where the
    settled message differs from the streamed one."""

    prompt_error = ("a legacy response_schema parses the generated text only and has no start anchor to find "
                    "it in a prompt")
    prompt_hint = 'Pass prefix=None (or "") with a legacy schema.'

    def __init__(self, schema: dict[str, Any], timeout: float | None) -> None:
        self.schema = schema
        self.timeout = timeout

    def settle(self, text: str) -> Any:
        """The message the whole schema gives ``text``; raises what the schema's run raises."""
        return recursive_parse(text, self.schema, timeout=self.timeout)


__all__ = ["DEFAULT_TIMEOUT", "LegacySettle", "LegacyValue", "compiled_jmespath", "is_legacy_schema", "recursive_parse"]
