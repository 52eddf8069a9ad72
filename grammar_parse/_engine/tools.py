"""Typing tool-call arguments from each tool's JSON Schema, as transformers does.

Models write every argument as text in XML-ish and key/value formats (``<parameter=n>3</parameter>``).
With ``tools=`` a region value shaped like a tool call (``{"function": {"name", "arguments": {...}}}``,
or a list of them) has its string arguments cast to the parameter's declared type as the region closes:
integer, number, boolean, null, object, array, and unions (``type`` lists, ``anyOf``, ``oneOf``,
``nullable``). A cast that fails keeps the text; values that are already typed are left alone.
"""

from __future__ import annotations

import difflib
import inspect
import itertools
import json
import marshal
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache
from typing import Any, Union

import regex

from ..errors import ArgumentError
from .delimiters import search_budget
from .linear_regex import BoundedRegex
from .reading import json_pointer, load_json


#: Tool lists read, by their content (:func:`_content_key`): what reading a copy of it gave. A server
#: decodes each request's list afresh (the same tools, a new list), and a stream reads it three times (the
#: parser, its call streamer, the final message's check): about 60 µs a request for three tools.
_READ_TOOLS: dict[bytes, _ReadTools] = {}
#: At most this many lists, of at most this many bytes marshalled, are kept (whatever lists a process is sent).
_READ_LIMIT = 16
_KEY_BYTES = 1 << 20


def call_function(value: Any) -> dict[str, Any] | None:
    """The function object of a tool-call value (``{"function": {"name", "arguments"}}``), or None when the
    value is not shaped like a call: the one check of a call's shape, wherever a call value is read."""
    fn = value.get("function") if isinstance(value, dict) else None
    return fn if isinstance(fn, dict) else None


def schema_types(schema: Any) -> tuple[str, ...]:
    """The JSON types a parameter schema admits, in declaration order."""
    if not isinstance(schema, dict):
        return ()
    declared = schema.get("type")
    found = [declared] if isinstance(declared, str) else []
    if isinstance(declared, list):
        found.extend(t for t in declared if isinstance(t, str))
    for union in ("anyOf", "oneOf"):
        for choice in schema.get(union) or []:
            found.extend(schema_types(choice))
    if not found and isinstance(schema.get("allOf"), list):  # (pydantic v1: {"allOf": [{"$ref": ...}]})
        every = [t for t in (schema_types(part) for part in schema["allOf"]) if t]
        found.extend(t for t in (every[0] if every else ()) if all(t in other for other in every[1:]))
    if not found:  # (an enum or a const without a type: the types of its values, as SGLang reads them)
        values = [schema["const"]] if "const" in schema else schema.get("enum")
        if isinstance(values, list):
            found.extend(dict.fromkeys(t for t in map(_json_type, values) if t is not None))
    if schema.get("nullable") and "null" not in found:
        found.append("null")
    return tuple(found)


def _json_type(value: Any) -> str | None:
    """The JSON type of a schema's literal value (an enum's, a const's)."""
    for type_, name in ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"),
                        (type(None), "null"), (dict, "object"), (list, "array")):
        if isinstance(value, type_):
            return name
    return None


#: How models write null as text (JSON's and Python's).
_NULL_WORDS = ("null", "None")


def _cast(raw: str, type_name: str) -> tuple[bool, Any]:
    """Try one JSON type; (True, value) on success. Mirrors Python's own int()/float() leniency."""
    if type_name == "integer":
        try:
            return True, int(raw)
        except ValueError:
            number = float(raw)  # JSON Schema integers include "3.0"
            return (True, int(number)) if number.is_integer() else (False, None)
    if type_name == "number":
        number = float(raw)
        if number != number or number in (float("inf"), float("-inf")):
            return False, None
        if number.is_integer() and "." not in raw:
            try:
                return True, int(raw)  # (exact: past 2**53 the float has lost digits of an id or a timestamp)
            except ValueError:
                return True, int(number)  # ("1e3")
        return True, number
    if type_name == "boolean":
        word = raw.strip().lower()
        return (True, word in ("true", "1")) if word in ("true", "1", "false", "0") else (False, None)
    if type_name == "null":
        return (True, None) if raw.strip() in _NULL_WORDS else (False, None)
    if type_name in ("object", "array"):
        decoded = load_json(raw)  # (past a limit: a ParseError, a ValueError too)
        return (True, decoded) if isinstance(decoded, dict if type_name == "object" else list) else (False, None)
    return False, None


def coerce(raw: str, types_: tuple[str, ...]) -> Any:
    """Cast ``raw`` to the first of ``types_`` that accepts it; otherwise keep the text, but for ``null`` where
    no string is allowed (models write it for an argument they leave unset; vLLM's and Ollama's parsers read
    it as null too), which is null."""
    for type_name in types_:
        try:
            ok, value = _cast(raw, type_name)
        except ValueError:
            continue
        if ok:
            return value
    if "string" not in types_ and raw.strip() in _NULL_WORDS:
        return None
    return raw


def _declaring(schema: Any, type_name: str) -> dict[str, Any]:
    """The part of a schema that declares ``type_name`` (itself, or the anyOf/oneOf choice that does)."""
    if not isinstance(schema, dict):
        return {}
    declared = schema.get("type")
    if declared == type_name or (isinstance(declared, list) and type_name in declared):
        return schema
    for union in ("anyOf", "oneOf", "allOf"):
        for choice in schema.get(union) or []:
            if type_name in schema_types(choice):
                return _declaring(choice, type_name)
    return schema


#: Typing follows at most this many local ``$ref`` along one path of a schema, and writes at most this many
#: of a tool's schema nodes out (a cycle or a diamond of references stays where the bound stops it: untyped).
_REF_DEPTH = 16
_REF_NODES = 4096
_REF_NESTING = 64  # (and no deeper into a schema than this: deeper parts are read as written)
#: Keys whose values are data, not schemas (a "$ref" key in a default is no reference).
_DATA_KEYS = frozenset({"enum", "const", "default", "examples", "$defs", "definitions"})


def _local_refs_inlined(properties: Mapping[str, Any], root: Any) -> dict[str, Any]:
    """A tool's properties with each local reference (``{"$ref": "#/$defs/Location"}``, as pydantic writes a
    nested model) replaced by the schema it names (keys beside the reference kept), so that typing reads
    them; bounded (_REF_DEPTH, _REF_NODES, _REF_NESTING). A reference to another document is never followed."""
    budget = [_REF_NODES]

    def walk(node: Any, depth: int, nesting: int) -> Any:
        if budget[0] <= 0 or nesting > _REF_NESTING:
            return node
        budget[0] -= 1
        if isinstance(node, list):
            return [walk(item, depth, nesting + 1) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and depth < _REF_DEPTH:
            target = json_pointer(root, ref)
            if isinstance(target, dict):
                return walk({**target, **{k: v for k, v in node.items() if k != "$ref"}}, depth + 1, nesting + 1)
        return {k: v if k in _DATA_KEYS else walk(v, depth, nesting + 1) for k, v in node.items()}
    return {key: walk(schema, 0, 0) for key, schema in properties.items()}


def typed_element(value: Any, schema: Any) -> Any:
    """A value read from nested elements (MiniMax-M3's ``<hours><item>9</item></hours>``) typed by its schema:
    text as a flat value is, an empty element as an empty list or object where the schema says so (and not
    string), an object's members by ``properties`` (or ``additionalProperties``), a list's by ``items``; an
    object whose schema says array is the list of its children (an element's children, whatever their name)."""
    types_ = schema_types(schema)
    if not types_:
        return value
    if isinstance(value, str):
        if not value.strip() and "string" not in types_:
            empty = next((t for t in types_ if t in ("array", "object")), None)
            if empty is not None:
                return [] if empty == "array" else {}
        return coerce(value, types_)
    if isinstance(value, dict):
        if "object" in types_:
            declared = _declaring(schema, "object")
            properties = declared.get("properties")
            properties = properties if isinstance(properties, dict) else {}
            extra = declared.get("additionalProperties")
            return {k: typed_element(v, properties[k] if k in properties else extra) for k, v in value.items()}
        if "array" not in types_:
            return value
        value = list(value.values())
    if isinstance(value, list):
        if "array" not in types_:
            return [typed_element(item, schema) for item in value]  # a repeated non-array argument
        items = _declaring(schema, "array").get("items")
        return [typed_element(item, items) for item in value]
    return value


def unknown_tool(name: Any, offered: Iterable[str]) -> dict[str, str]:
    """The ``errors`` entry of a call to a tool the request does not offer (one wording for the parser's
    message and the validator, so the Chat Completions message can tell a repeat)."""
    return {"code": "call.unknown_tool", "path": "$.function.name",
            "message": f"unknown tool {name!r}; offered: {sorted(offered)}"}


_PY_TYPES: dict[Any, str] = {int: "integer", float: "number", bool: "boolean", str: "string",
                             list: "array", tuple: "array", dict: "object", type(None): "null"}


def _annotation_schema(annotation: Any) -> dict[str, Any]:
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        return {"anyOf": [_annotation_schema(a) for a in typing.get_args(annotation)]}
    if origin is typing.Literal:
        values = typing.get_args(annotation)
        return {"type": sorted({_PY_TYPES.get(type(v), "string") for v in values})}
    base = origin if origin is not None else annotation
    name = _PY_TYPES.get(base)
    return {"type": name} if name else {}


def callable_schema(fn: Callable[..., Any]) -> dict[str, Any]:
    """A minimal OpenAI-style tool schema from a Python function's name and type hints."""
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # noqa: BLE001 - unresolvable forward references: fall back to no types
        hints = {}
    properties = {
        name: _annotation_schema(hints[name]) if name in hints else {}
        for name in inspect.signature(fn).parameters
        if name not in ("self", "cls")
    }
    return {"type": "function", "function": {"name": fn.__name__, "parameters": {"type": "object", "properties": properties}}}


class ToolTypes:
    """Parameter schemas of the tools a model may call, applied to tool-call shaped region values."""

    def __init__(self, parameters: Mapping[str, Mapping[str, Any]]) -> None:
        self.parameters = dict(parameters)
        # (read for every argument of every call: worked out once per request)
        self._types = {name: {key: schema_types(schema) for key, schema in properties.items()}
                       for name, properties in self.parameters.items()}
        # The arguments whose text a type other than string may take: the only ones a call's JSON
        # arguments need looked at (a string only ever stays itself; see coerce).
        self._castable = {name: {key: t for key, t in types.items() if any(x != "string" for x in t)}
                          for name, types in self._types.items()}

    @classmethod
    def from_tools(cls, tools: Iterable[Any] | None) -> ToolTypes | None:
        """Read tools in ``apply_chat_template`` form (dicts or callables); None when none is usable.
        A list of the same content as one read before gives what it gave then (:func:`_read_tools`)."""
        known = _read_tools(tools)
        return cls._read(tools) if known is None else known.types

    @classmethod
    def _read(cls, tools: Iterable[Any] | None) -> ToolTypes | None:
        return cls._from_specs(tool_specs(tools))

    @classmethod
    def _from_specs(cls, specs: Mapping[str, Mapping[str, Any]]) -> ToolTypes | None:
        parameters: dict[str, Mapping[str, Any]] = {}
        for name, fn in specs.items():
            params = fn.get("parameters")
            properties = params.get("properties") if isinstance(params, dict) else None
            parameters[name] = _local_refs_inlined(properties, params) if isinstance(properties, dict) else {}
        return cls(parameters) if parameters else None

    def types_of(self, name: str | None, key: str) -> tuple[str, ...]:
        """The JSON types the schema allows for argument ``key`` of tool ``name`` (empty: leave it be)."""
        types_ = self._types.get(name) if name is not None else None
        return types_.get(key, ()) if types_ is not None else ()

    def castable_of(self, name: str | None, key: str) -> tuple[str, ...]:
        """:meth:`types_of` for an argument whose value typing may change (a type other than string), else
        empty: a string-only argument stays as the model wrote it, so a stream need not hold it back."""
        castable = self._castable.get(name) if name is not None else None
        return castable.get(key, ()) if castable is not None else ()

    def retype(self, name: str | None, key: str, value: Any, *, elements: bool = False) -> Any:
        """One argument value cast to its schema's types (strings, and lists of strings that
        merge_duplicates collected for a non-array parameter, element-wise); ``elements``: a value read from
        nested elements, typed all the way down (:func:`typed_element`)."""
        types_ = self.types_of(name, key)
        if not types_:
            return value
        if elements and name is not None:
            return typed_element(value, self.parameters[name][key])
        if isinstance(value, str):
            return coerce(value, types_)
        if isinstance(value, list) and "array" not in types_:
            return [coerce(item, types_) if isinstance(item, str) else item for item in value]
        return value

    def resolve(self, name: str) -> str:
        """The name the request offers for a call's ``name``: ``name`` itself when offered; ``X.X`` as ``X``
        when ``X`` is offered and ``X.X`` is not (Muse Glimmer's chat template lists a tool named without a
        namespace as the recipient namespace ``X.*``, so the model calls it ``X.X``, as vLLM's muse_glimmer
        parser reads it). Any other name stays as written: matching on its last segment alone could pick
        another namespace's tool."""
        if name in self.parameters:
            return name
        head, dot, tail = name.partition(".")
        return head if dot and head == tail and head in self.parameters else name

    def apply(self, value: Any, *, elements: bool = False) -> Any:
        """Name every tool call in ``value`` as the request does (:meth:`resolve`; a name it does not offer
        gets an ``errors`` entry) and cast its string arguments, in place; return ``value``.
        ``elements``: the arguments were read from nested elements (content.xml.reads_elements), whose objects
        and lists are typed too; other formats' objects and lists are the model's typed JSON, left alone."""
        if isinstance(value, list):
            return [self.apply(item, elements=elements) for item in value]
        fn = call_function(value)
        if fn is None:
            return value
        name, arguments = fn.get("name"), fn.get("arguments")
        if isinstance(name, str) and name and name not in self.parameters:  # (an offered name resolves to itself)
            name = fn["name"] = self.resolve(name)
            if name not in self.parameters and (problem := unknown_tool(name, self.parameters)) not in \
                    value.get("errors", []):
                value["errors"] = [*value.get("errors", []), problem]
        if not isinstance(name, str) or not isinstance(arguments, dict):
            return value
        castable = self._castable.get(name)
        if elements:
            for key, argument in arguments.items():
                if isinstance(argument, str) and (castable is None or key not in castable):
                    continue  # (a string-only or untyped argument: typing leaves its text as it is)
                arguments[key] = self.retype(name, key, argument, elements=True)
            return value
        # (what retype changes without elements: a string, or a list's strings, of a castable argument)
        if castable:
            for key, argument in arguments.items():
                types_ = castable.get(key)
                if types_ is None:
                    continue
                if isinstance(argument, str):  # (what retype does with a string)
                    arguments[key] = coerce(argument, types_)
                elif isinstance(argument, list):
                    arguments[key] = self.retype(name, key, argument)
        return value


#: The keys of a function spec: OpenAI's (Chat Completions nests them under "function", Responses writes
#: them beside "type"), Anthropic's input_schema and cache_control, and an MCP tool's (inputSchema, ...).
_SPEC_KEYS = ("name", "description", "parameters", "strict", "type", "input_schema", "cache_control", "inputSchema",
              "outputSchema", "annotations", "title")
#: Where the parameters schema is found: OpenAI's key, Anthropic's, MCP's.
_SCHEMA_KEYS = ("parameters", "input_schema", "inputSchema")
#: Keys that hold a schema but not where any API reads one (a spec with one of them and no parameters).
_MISPLACED_SCHEMA_KEYS = ("arguments", "args", "properties", "schema", "json_schema")
_WRAPPER_KEYS = ("type", "function")
_TOOLS_HINT = ('Pass a list of tools: [{"type": "function", "function": {"name": "get_weather", "parameters": '
               '{"type": "object", "properties": {...}}}}], or Anthropic\'s {"name", "input_schema"}, or Python '
               'functions.')


def _tools_error(message: str, hint: str = _TOOLS_HINT) -> ArgumentError:
    return ArgumentError(message, code="usage.tools", hint=hint)


def _misspelled(keys: Iterable[Any], known: tuple[str, ...]) -> tuple[str, str] | None:
    """A key that is a near miss of a known key the dict lacks (``paramters``), and that key. Only the first
    keys are compared (a spec has a handful; a hostile one with thousands costs no more)."""
    present = set(keys)
    missing = [k for k in known if k not in present]
    unknown = (key for key in keys if isinstance(key, str) and key not in known)
    for key in itertools.islice(unknown, 32):
        close = difflib.get_close_matches(key, missing, n=1, cutoff=0.75)
        if close:
            return key, close[0]
    return None


def _looks_like_properties(schema: Mapping[str, Any]) -> bool:
    """A parameters schema that is the properties map itself (``{"city": {"type": "string"}}``)."""
    schema_words = {"type", "properties", "$ref", "$defs", "anyOf", "oneOf", "allOf", "additionalProperties",
                    "required", "definitions", "$schema", "title", "description", "not", "enum", "const"}
    return bool(schema) and not schema_words & set(schema) and all(
        isinstance(v, dict) and ("type" in v or "anyOf" in v or "enum" in v) for v in schema.values())


def _checked_spec(tool: Any, where: str) -> dict[str, Any] | None:
    """One tool's function spec, or None for a hosted tool (``{"type": "code_interpreter"}``, which names no
    function); an ArgumentError naming ``where`` for a shape that would be ignored without a word."""
    if inspect.isfunction(tool) or inspect.ismethod(tool) or (callable(tool) and not isinstance(tool, (dict, type))):
        name = getattr(tool, "__name__", None)
        if not isinstance(name, str) or not name.isidentifier():
            raise _tools_error(f"{where} is a {'lambda' if name == '<lambda>' else type(tool).__name__} with no "
                               "name a model can call.", hint="Pass a function defined with def (its name and type "
                                                               "hints are the tool's schema), or a tool dict.")
        try:
            return callable_schema(tool)["function"]  # type: ignore[no-any-return]
        except (TypeError, ValueError) as exc:  # no signature to read
            raise _tools_error(f"{where} ({name}) has no signature to read parameters from: {exc}") from None
    if not isinstance(tool, dict):
        raise _tools_error(f"{where} is a {type(tool).__name__} ({repr(tool)[:60]}), not a tool definition (a dict).")
    if "function" in tool:
        wrapper = _misspelled(tool, _WRAPPER_KEYS + _SPEC_KEYS)
        if wrapper:
            raise _tools_error(f"{where} has a key {wrapper[0]!r}: did you mean {wrapper[1]!r}?")
        spec = tool["function"]
        if not isinstance(spec, dict):
            raise _tools_error(f"{where}'s \"function\" is a {type(spec).__name__}, not an object with a name and "
                               "parameters.")
    else:
        spec = tool
        if "name" not in spec and not any(key in spec for key in _SCHEMA_KEYS):
            misspelled = _misspelled(spec, _WRAPPER_KEYS + _SPEC_KEYS)
            if misspelled:
                raise _tools_error(f"{where} has a key {misspelled[0]!r}: did you mean {misspelled[1]!r}?")
            if spec.get("type") not in (None, "function"):
                return None  # a hosted tool (code_interpreter, web_search, ...): no function to read
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        got = "no name" if name is None else f"the name {name!r} (a {type(name).__name__})" if not isinstance(name, str) \
            else "an empty name"
        raise _tools_error(f"{where} is a function with {got}; every tool needs a name (a non-empty string).")
    misspelled = _misspelled(spec, _SPEC_KEYS)
    if misspelled is None and not any(key in spec for key in _SCHEMA_KEYS):
        misspelled = next(((key, "parameters") for key in _MISPLACED_SCHEMA_KEYS if key in spec), None)
    if misspelled:
        raise _tools_error(f"tool {name!r} ({where}) has a key {misspelled[0]!r}: did you mean {misspelled[1]!r}? "
                           "As written, its arguments would be neither typed nor validated.")
    for key in _SCHEMA_KEYS:
        schema = spec.get(key)
        if schema is None:
            continue
        if not isinstance(schema, dict):
            raise _tools_error(f"tool {name!r} ({where}): {key} is a {type(schema).__name__}, not a JSON Schema "
                               "object.", hint=f'Give {key} as an object: {{"type": "object", "properties": {{...}}}} '
                                               "(decode a JSON string first).")
        if _looks_like_properties(schema):
            raise _tools_error(f"tool {name!r} ({where}): {key} holds the properties themselves "
                               f"({', '.join(list(schema)[:3])}), not a JSON Schema object.",
                               hint=f'Wrap them: {{"type": "object", "properties": {{...}}}} as {key}.')
        properties = schema.get("properties")
        if properties is not None and not isinstance(properties, dict):
            raise _tools_error(f"tool {name!r} ({where}): {key}.properties is a {type(properties).__name__}, not an "
                               "object of parameter schemas.",
                               hint='Give properties as {"param": {"type": ...}, ...}; the names that must be '
                                    'given go in "required".')
    schema_key = next((key for key in _SCHEMA_KEYS if isinstance(spec.get(key), dict)), "parameters")
    if schema_key != "parameters":
        spec = {**spec, "parameters": spec[schema_key]}  # (Anthropic's and MCP's name for it)
    return spec


def check_tools(tools: Any) -> list[dict[str, Any]]:
    """The function spec of each tool in ``tools`` (as ``apply_chat_template``, the OpenAI and the Anthropic
    APIs take them: dicts with or without a ``function`` wrapper, Anthropic's ``input_schema``, an MCP
    tool's ``inputSchema``, or Python functions), in order; hosted tools without a function are left out. A shape that would otherwise be
    ignored without a word (a ``{name: schema}`` dict, a list of names, a misspelled ``paramters``, a
    function without a name) raises ArgumentError ``usage.tools`` naming the tool and what was expected."""
    if tools is None:
        return []
    _check_container(tools)
    specs = []
    for index, tool in enumerate(tools):
        spec = _checked_spec(tool, f"tools[{index}]")
        if spec is not None:
            specs.append(spec)
    return specs


def _check_container(tools: Any) -> None:
    if isinstance(tools, Mapping):
        if "function" in tools or "name" in tools:
            raise _tools_error("tools is a single tool definition, not a list of them.",
                               hint="Wrap it in a list: tools=[tool].")
        raise _tools_error(f"tools is a dict (keys {', '.join(repr(k) for k in list(tools)[:3])}), not a list of "
                           "tool definitions.")
    if isinstance(tools, (str, bytes, bytearray)) or not isinstance(tools, Iterable):
        raise _tools_error(f"tools is a {type(tools).__name__}, not a list of tool definitions.")


def tool_list(tools: Any) -> list[Any] | None:
    """``tools`` as a list (None stays None), its container checked first: ``list()`` of a ``{name: schema}``
    dict or a string would make a list of names or characters, and the error would then name those."""
    if tools is None:
        return None
    _check_container(tools)
    return list(tools)


def tool_specs(tools: Iterable[Any] | None) -> dict[str, dict[str, Any]]:
    """Each tool's function spec by name (:func:`check_tools`: a tool in a shape that would be ignored is an
    ArgumentError)."""
    return {spec["name"]: spec for spec in check_tools(tools)}


class _ReadTools:
    """What one tool list gave, read once per process for all the requests that send it: its specs by name,
    its :class:`ToolTypes`, and the schemas and validators :class:`CallValidator` checks calls with (each
    validator built the first time a call names its tool). Nothing here is changed once made but the
    validators, which any reader builds alike."""

    __slots__ = ("specs", "types", "schemas", "validators", "checks")

    def __init__(self, tools: list[Any]) -> None:
        self.specs = tool_specs(tools)
        self.types = ToolTypes._from_specs(self.specs)
        self.schemas = _call_schemas(self.specs)
        self.validators: dict[str, Any] = {}
        self.checks: dict[str, Callable[[Any], bool]] = {}


def _content_key(tools: Any) -> bytes | None:
    """A key that only lists of the same content share: the list marshalled (format 2, which has no
    back-references, so equal content gives equal bytes; marshal keeps ``1``, ``1.0`` and ``True`` apart,
    which ``==`` does not, and refuses subclasses and callables). None for what is not such a list."""
    if type(tools) is not list or not tools:
        return None
    try:
        key = marshal.dumps(tools, 2)
    except ValueError:  # (a callable, a subclass, or nesting past marshal's limit: read uncached)
        return None
    return key if len(key) <= _KEY_BYTES else None


def _read_tools(tools: Any) -> _ReadTools | None:
    """What ``tools`` gives (read from a copy no caller holds: the marshalled key, loaded back), once per
    content; None for tools that are not kept (:func:`_content_key`). Reading raises as it does uncached."""
    key = _content_key(tools)
    if key is None:
        return None
    known = _READ_TOOLS.get(key)
    if known is None:
        known = _ReadTools(marshal.loads(key))
        if len(_READ_TOOLS) >= _READ_LIMIT:
            _READ_TOOLS.clear()
        _READ_TOOLS[key] = known
    return known


def _call_schemas(specs: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Each tool's parameters schema by name (an object with anything in it where the spec gives none)."""
    return {tool: spec.get("parameters") or {"type": "object"} for tool, spec in specs.items()}


def _schema_problem(message: str) -> dict[str, str]:
    """A ``call.schema`` problem with the whole arguments: what a call gets where its tool's schema cannot be
    used to check it."""
    return {"code": "call.schema", "path": "$.function.arguments", "message": message}


def _schema_validator(schema: Any) -> Any:
    """A JSON Schema validator for ``schema``, or the problem a call against an invalid one gets.

    A tool's schema is the request's, and the arguments are the model's: neither may make the check reach out
    or run away. Its ``$ref`` resolve within the schema and the published metaschemas only (jsonschema would
    otherwise fetch any other URI it names, a request to wherever the schema says); its regexes (``pattern``,
    ``patternProperties``) run bounded (:func:`_bounded_validator`)."""
    import jsonschema

    validator_cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        validator_cls.check_schema(schema)
    except jsonschema.SchemaError as e:
        return _schema_problem(f"the tool's parameters schema is invalid: {e.message}")
    if _holds(schema, "unevaluatedProperties") and _holds(schema, "patternProperties"):
        # (jsonschema reads which names patternProperties took with an unbounded regex search of its own)
        return _schema_problem("the tool's parameters schema joins unevaluatedProperties and patternProperties, "
                               "which cannot be checked in bounded time: its calls are not checked")
    return _bounded_instance(validator_cls, schema)


def bounded_validator(schema: Any, draft_of: Any = None) -> Any:
    """A jsonschema validator for ``schema`` (of the draft ``draft_of`` names, ``schema``'s by default) that
    never reaches out and never runs away: its ``$ref`` resolve within the schema and the published metaschemas
    (another document raises ``referencing.exceptions.Unresolvable``, never fetched), and its regexes run
    bounded (:func:`_bounded_validator`). For every check of an untrusted schema."""
    import jsonschema

    validator_cls = jsonschema.validators.validator_for(schema if draft_of is None else draft_of,
                                                        default=jsonschema.Draft202012Validator)
    return _bounded_instance(validator_cls, schema)


def _bounded_instance(validator_cls: Any, schema: Any) -> Any:
    """A validator of ``validator_cls``'s draft for ``schema``, bounded (see bounded_validator)."""
    from referencing import Registry

    return _bounded_validator(validator_cls)(schema, registry=Registry())


def _holds(schema: Any, keyword: str) -> bool:
    """Whether ``keyword`` is a key anywhere in ``schema`` (walked, not recursed: any depth)."""
    todo = [schema]
    while todo:
        node = todo.pop()
        if isinstance(node, dict):
            if keyword in node:
                return True
            todo.extend(node.values())
        elif isinstance(node, list):
            todo.extend(node)
    return False


@lru_cache(maxsize=None)
def _bounded_validator(validator_cls: Any) -> Any:
    """``validator_cls`` with the keywords that run a regex over the arguments bounded (BoundedRegex: the regex
    module under a time limit, then the linear matcher): ``pattern``, ``patternProperties``, and
    ``additionalProperties`` where ``patternProperties`` names the properties it leaves out. A pattern neither
    can read (or that is not a regex) fails the check, saying so."""
    import jsonschema

    plain_additional = validator_cls.VALIDATORS.get("additionalProperties")

    def pattern(validator: Any, pattern: Any, instance: Any, schema: Any) -> Any:
        if validator.is_type(instance, "string"):
            found = _schema_search(pattern, instance)
            if found is None:
                yield _unrunnable("pattern", pattern)
            elif not found:
                yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")

    def pattern_properties(validator: Any, patterns: Any, instance: Any, schema: Any) -> Any:
        if validator.is_type(instance, "object"):
            for regex_, subschema in patterns.items():
                for key, value in instance.items():
                    found = _schema_search(regex_, key)
                    if found is None:
                        yield _unrunnable("patternProperties regex", regex_)
                    elif found:
                        yield from validator.descend(value, subschema, path=key, schema_path=regex_)

    def additional_properties(validator: Any, additional: Any, instance: Any, schema: Any) -> Any:
        if "patternProperties" not in schema or plain_additional is None:
            if plain_additional is not None:  # (no regex in it: jsonschema's own)
                yield from plain_additional(validator, additional, instance, schema)
            return
        if not validator.is_type(instance, "object"):
            return
        named, patterns = schema.get("properties", {}), list(schema["patternProperties"])
        extras = [key for key in instance if key not in named and not any(_schema_search(p, key) for p in patterns)]
        if validator.is_type(additional, "object"):
            for key in extras:
                yield from validator.descend(instance[key], additional, path=key)
        elif not additional and extras:
            shown = ", ".join(repr(key) for key in sorted(extras))
            yield jsonschema.ValidationError(f"{shown} {'does' if len(extras) == 1 else 'do'} not match any of the "
                                             f"regexes: {', '.join(repr(p) for p in patterns)}")
    extend: Any = jsonschema.validators.extend  # (untyped in its stubs)
    return extend(validator_cls, {"pattern": pattern, "patternProperties": pattern_properties,
                                  "additionalProperties": additional_properties})


def _unrunnable(what: str, pattern: Any) -> Any:
    """The error of a schema regex that cannot be run (not a regex, or one neither matcher reads)."""
    import jsonschema

    return jsonschema.ValidationError(f"the schema's {what} {pattern!r} cannot be run (not a regex this checker "
                                      "reads)")


@lru_cache(maxsize=1024)
def _schema_regex(pattern: str) -> BoundedRegex | None:
    """A schema's regex, compiled once (as Python's ``re`` reads it: no flags); None where it is not one, or
    longer than MAX_SCHEMA_REGEX."""
    if len(pattern) > MAX_SCHEMA_REGEX:
        return None
    try:
        return BoundedRegex(pattern, 0)
    except (regex.error, ValueError, OverflowError, RecursionError):
        return None


#: The longest regex a tool schema may hold that calls are checked against (longer: the check says so).
MAX_SCHEMA_REGEX = 4096


def _schema_search(pattern: Any, text: str) -> bool | None:
    """Whether schema regex ``pattern`` is found in ``text`` (``re.search``, as jsonschema asks), in bounded
    time; None where it cannot be run."""
    compiled = _schema_regex(pattern) if isinstance(pattern, str) else None
    if compiled is None:
        return None
    try:
        return compiled.search(text, search_budget(len(text))) is not None
    except TimeoutError:  # (the linear matcher cannot read it)
        return None


@lru_cache(maxsize=256)
def _cached_validator(schema_json: str) -> Any:
    """Validators by schema text: a server sees the same tool lists request after request, and checking
    a schema costs about 2 ms."""
    return _schema_validator(json.loads(schema_json))


#: Keywords that only annotate (no validator built without a format checker asserts ``format``).
_ANNOTATIONS = frozenset({"title", "description", "default", "examples", "format", "deprecated", "readOnly",
                          "writeOnly", "$comment"})
#: What each JSON type admits, as jsonschema's checkers decide (an integer-valued float is an "integer"
#: there: left to jsonschema, as is any value whose type is not plainly one of these).
_PLAIN_TYPES: dict[str, Any] = {"string": str, "object": dict, "array": list, "boolean": bool, "null": type(None)}


def surely_valid(schema: Any, instance: Any, depth: int = 0) -> bool:
    """True only where jsonschema finds nothing wrong with ``instance`` under ``schema`` (the common case of
    a tool's parameters: types, properties, required names, string enums, items), read with a few checks
    instead of its validator (about ten times the cost). False where it is wrong or not known: a keyword
    outside that set, ``$schema`` (another draft), a float given for "integer", more than 32 levels; the
    validator says then."""
    if schema is True:
        return True
    if not isinstance(schema, dict) or depth > 32:
        return False
    for keyword, value in schema.items():
        if keyword in _ANNOTATIONS:
            continue
        if keyword == "type":
            if not any(_plainly(t, instance) for t in (value if isinstance(value, list) else [value])):
                return False
        elif keyword == "properties":
            if not isinstance(value, dict):
                return False
            if isinstance(instance, dict) and not all(
                    surely_valid(value[key], item, depth + 1) for key, item in instance.items() if key in value):
                return False
        elif keyword == "required":
            if not isinstance(value, list) or isinstance(instance, dict) and not all(
                    isinstance(name, str) and name in instance for name in value):
                return False
        elif keyword == "additionalProperties":
            if isinstance(instance, dict):
                named = schema.get("properties", {})
                extra = [item for key, item in instance.items() if not isinstance(named, dict) or key not in named]
                if extra and (value is False or not all(surely_valid(value, item, depth + 1) for item in extra)):
                    return False
        elif keyword == "enum":
            if not (isinstance(value, list) and isinstance(instance, str)
                    and all(isinstance(choice, str) for choice in value) and instance in value):
                return False
        elif keyword == "items":
            if not isinstance(value, (dict, bool)):
                return False  # (a list of schemas: an earlier draft's tuple form)
            if isinstance(instance, list) and not all(surely_valid(value, item, depth + 1) for item in instance):
                return False
        else:
            return False
    return True


def _plainly(name: Any, instance: Any) -> bool:
    if name == "number":
        return type(instance) in (int, float)
    if name == "integer":
        return type(instance) is int
    kind = _PLAIN_TYPES.get(name) if isinstance(name, str) else None
    return kind is not None and type(instance) is kind


def _never(instance: Any) -> bool:
    return False


def _always(instance: Any) -> bool:
    return True


#: The Python types each JSON type name admits as :func:`_plainly` reads them (a bool is no number).
_TYPE_CLASSES: dict[str, tuple[type, ...]] = {"number": (int, float), "integer": (int,),
                                              **{name: (kind,) for name, kind in _PLAIN_TYPES.items()}}
#: Schemas with more nodes than this are checked by surely_valid itself (a self-containing dict never ends).
_CHECK_NODES = 512


def plain_check(schema: Any) -> Callable[[Any], bool]:
    """:func:`surely_valid` of ``schema`` written once as nested checks (what each keyword asks worked out
    ahead: the types a ``type`` admits, the names ``required`` lists), so that checking each call of a tool
    costs a few calls instead of a walk of its schema: about a fifth of it for a usual tool. Its answer is
    surely_valid's on every instance; a schema too large to write out is checked by surely_valid."""
    budget = [_CHECK_NODES]
    try:
        return _check_of(schema, 0, budget)
    except _TooLarge:
        return lambda instance: surely_valid(schema, instance)


class _TooLarge(Exception):
    pass


def _check_of(schema: Any, depth: int, budget: list[int]) -> Callable[[Any], bool]:
    budget[0] -= 1
    if budget[0] < 0:
        raise _TooLarge
    if schema is True:
        return _always
    if not isinstance(schema, dict) or depth > 32:
        return _never
    checks: list[Callable[[Any], bool]] = []
    for keyword, value in schema.items():
        if keyword in _ANNOTATIONS:
            continue
        if keyword == "type":
            admitted = tuple({kind for name in (value if isinstance(value, list) else [value]) if isinstance(name, str)
                              for kind in _TYPE_CLASSES.get(name, ())})
            checks.append(lambda instance, admitted=admitted: type(instance) in admitted)  # type: ignore[misc]
        elif keyword == "properties":
            if not isinstance(value, dict):
                return _never
            checks.append(_properties_check({key: _check_of(sub, depth + 1, budget) for key, sub in value.items()}))
        elif keyword == "required":
            if not isinstance(value, list):
                return _never
            names = tuple(value)
            if all(isinstance(name, str) for name in names):
                checks.append(lambda instance, names=names: not isinstance(instance, dict)  # type: ignore[misc]
                              or all(name in instance for name in names))
            else:
                checks.append(lambda instance: not isinstance(instance, dict))
        elif keyword == "additionalProperties":
            checks.append(_extra_check(schema.get("properties", {}), _check_of(value, depth + 1, budget)))
        elif keyword == "enum":
            if not (isinstance(value, list) and all(isinstance(choice, str) for choice in value)):
                return _never
            choices = frozenset(value)
            checks.append(lambda instance, choices=choices: isinstance(instance, str)  # type: ignore[misc]
                          and instance in choices)
        elif keyword == "items":
            if not isinstance(value, (dict, bool)):
                return _never
            item = _check_of(value, depth + 1, budget)
            checks.append(lambda instance, item=item: not isinstance(instance, list)  # type: ignore[misc]
                          or all(item(element) for element in instance))
        else:
            return _never
    return _all_of(checks)


def _all_of(checks: list[Callable[[Any], bool]]) -> Callable[[Any], bool]:
    """A check that passes where all of ``checks`` pass (written out for the usual two or three)."""
    if not checks:
        return _always
    if len(checks) == 1:
        return checks[0]
    if len(checks) == 2:
        a, b = checks
        return lambda instance: a(instance) and b(instance)
    if len(checks) == 3:
        a, b, c = checks
        return lambda instance: a(instance) and b(instance) and c(instance)
    return lambda instance: all(check(instance) for check in checks)


def _properties_check(subs: dict[Any, Callable[[Any], bool]]) -> Callable[[Any], bool]:
    def check(instance: Any) -> bool:
        if not isinstance(instance, dict):
            return True
        for key, item in instance.items():
            sub = subs.get(key)
            if sub is not None and not sub(item):
                return False
        return True
    return check


def _extra_check(named: Any, extra: Callable[[Any], bool]) -> Callable[[Any], bool]:
    """``additionalProperties``: every argument ``properties`` (``named``) does not name must pass ``extra``
    (the check of ``value``: false refuses any)."""
    names = named if isinstance(named, dict) else {}

    def check(instance: Any) -> bool:
        if not isinstance(instance, dict):
            return True
        for key, item in instance.items():
            if key not in names and not extra(item):
                return False
        return True
    return check


_UNRESOLVED = ("the tool's parameters schema refers ($ref) to a schema it does not hold (other documents are "
               "never fetched): the arguments cannot be checked against it")
#: The stable code of a JSON Schema keyword a call's arguments break (any other keyword: call.schema).
_SCHEMA_CODES = {"type": "call.type", "required": "call.required"}


class CallValidator:
    """Checks tool calls against one list of tools. Each tool's schema is checked and its validator built
    once, for the first call that names it: built per call, they cost 2.5-3 ms a call (an 850-call
    response spent about 2 s there)."""

    def __init__(self, tools: Iterable[Any]) -> None:
        known = _read_tools(tools)
        self._schemas: dict[str, Any]
        self._validators: dict[str, Any]  # tool -> its validator, or the problem its schema has
        self._checks: dict[str, Callable[[Any], bool]]  # tool -> its plain_check
        if known is not None:  # (shared by every check of the same tools)
            self._schemas, self._validators, self._checks = known.schemas, known.validators, known.checks
        else:
            self._schemas, self._validators, self._checks = _call_schemas(tool_specs(tools)), {}, {}

    def _validator(self, name: str) -> Any:
        found = self._validators.get(name)
        if found is None:
            try:
                key = json.dumps(self._schemas[name], sort_keys=True)
                found = _cached_validator(key)
            except (TypeError, ValueError):  # (not JSON: checked here, uncached)
                found = _schema_validator(self._schemas[name])
            except RecursionError:  # (a schema nested past what Python's recursion reaches: only a caller's dict)
                found = _schema_problem("the tool's parameters schema nests too deeply to check")
            self._validators[name] = found
        return found

    def _errors(self, name: str, validator: Any, arguments: Any) -> list[Any]:
        """jsonschema's errors for a call of tool ``name`` with ``arguments`` (none without running it where
        surely_valid is sure); RecursionError where a recursive schema meets deeply nested arguments."""
        check = self._checks.get(name)
        if check is None:
            check = self._checks[name] = plain_check(self._schemas[name])
        if check(arguments):
            return []
        from referencing.exceptions import Unresolvable

        try:
            return list(validator.iter_errors(arguments))
        except Unresolvable:  # (a $ref to a schema it does not hold: other documents are never fetched)
            import jsonschema

            return [jsonschema.ValidationError(_UNRESOLVED, validator="$ref", validator_value="")]

    def problems(self, call: Any) -> list[dict[str, str]]:
        """What :func:`validate_call` says about ``call``."""
        fn = call_function(call) or {}
        name = fn.get("name")
        if name not in self._schemas:
            return [unknown_tool(name, self._schemas)]
        validator = self._validator(name)
        if isinstance(validator, dict):
            return [dict(validator)]
        try:
            errors = sorted(self._errors(name, validator, fn.get("arguments", {})),
                            key=lambda e: list(e.absolute_path))
        except RecursionError:  # a recursive schema over deeply nested arguments
            return [_schema_problem("the arguments nest too deeply to validate")]
        problems = []
        for error in errors:
            path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
            problems.append({"code": _SCHEMA_CODES.get(error.validator, "call.schema"),
                             "path": f"$.function.arguments{path}", "message": error.message})
        return problems


def validate_call(call: Any, tools: Iterable[Any]) -> list[dict[str, str]]:
    """Problems with one tool call against the tools offered: an unknown tool, or arguments that do not
    validate against the tool's parameters schema (JSON Schema). Each problem is ``{"code", "path",
    "message"}``, as every call's ``errors`` entry is: a stable code (``call.unknown_tool``, ``call.type``,
    ``call.required``, ``call.schema``) and a JSON path into the call (``$.function.arguments.city``); an
    empty list means the call is fine.
    For many calls against the same tools, a :class:`CallValidator` builds each validator once."""
    return CallValidator(tools).problems(call)


__all__ = ["CallValidator", "ToolTypes", "bounded_validator", "call_function", "callable_schema", "check_tools",
           "coerce", "schema_types", "surely_valid", "tool_list", "tool_specs", "typed_element", "validate_call"]
