"""A tool's parameters schema made self-contained, so any part of it can be placed in a constraint.

A constraint places a tool's arguments schema inside larger documents (``{"name": ..., "arguments":
<schema>}``, an array of calls) or cuts it apart (one document per tagged argument, one regex per Python
argument). A ``$ref`` in it (``#/$defs/Address``, as pydantic's ``model_json_schema()`` writes for a nested
model; draft 7's ``#/definitions/...``; any JSON pointer into the schema) is resolved against the
*parameters*' root, which is no longer the root of the document it ends up in. So before anything is
written, every reference is resolved here:

* a reference is replaced by what it points at (its own references resolved the same way), with the
  annotations beside it (``description``) kept; other keywords beside it make an ``allOf`` of the two;
* a reference back into a definition that is being expanded (a recursive model: ``Node.children:
  list[Node]``) stays a reference, to ``#/$defs/<key>``, where the definition is kept once, itself
  expanded up to its own recursion; ``<key>`` names the tool, so the definitions of several tools placed
  in one document never collide. :func:`rooted` moves these up to the root of the document that holds
  them, and :func:`placed` gives a part of the schema its definitions when it becomes a document of its own;
* a reference that points at nothing, leaves the schema (``https://...``), or only ever points at another
  reference, is an :class:`~grammar_parse.errors.ArgumentError` (``constrain.tools``) naming the tool.

A schema whose definitions use each other many times over could expand to far more than it says (40
definitions each used twice by the one before: 2**40 nodes); the expansion is bounded by MAX_NODES, and its
depth by MAX_DEPTH.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .._engine.reading import NOWHERE, json_pointer
from ..errors import ArgumentError

__all__ = ["self_contained", "rooted", "rooted_documents", "placed", "json_equal", "MAX_NODES", "MAX_DEPTH"]

#: The most schema nodes a tool's expanded parameters may hold (a pydantic model of a few dozen classes
#: expands to a few hundred).
MAX_NODES = 20_000
#: The deepest a tool's expanded parameters may nest (schemas within schemas): the walks over them, and
#: the engines' own, recurse.
MAX_DEPTH = 64
#: Where the definitions a recursive schema keeps are (draft 2019-09 and later; both engines read it).
DEFS = "$defs"
#: Keywords whose value is one schema, a list of schemas, or a map of names to schemas.
_ONE = ("items", "additionalProperties", "additionalItems", "not", "contains", "propertyNames", "if", "then",
        "else", "unevaluatedItems", "unevaluatedProperties")
_LIST = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
_MAP = ("properties", "patternProperties", "dependentSchemas")
#: Keywords that say nothing about which values are valid: kept beside a resolved reference.
_ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$comment", "deprecated", "readOnly",
                          "writeOnly", "format", "$schema", "$id", "$anchor", "contentMediaType", "contentEncoding"})
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def _error(tool: str, why: str) -> ArgumentError:
    return ArgumentError(f"tool {tool!r}: {why}", code="constrain.tools",
                         hint="A tool's parameters may reference only their own parts (\"#/$defs/Name\", "
                              "\"#/definitions/Name\"), as pydantic's model_json_schema() writes them.")


class _Expander:
    """One tool's parameters, their references resolved (see the module docstring)."""

    def __init__(self, tool: str, root: Any, prefix: str) -> None:
        self.tool, self.root, self.prefix = tool, root, prefix
        self.keys: dict[str, str] = {}  # a recursive reference, and its key under DEFS
        self.defs: dict[str, Any] = {}
        self.nodes = 0
        self.depth = 0

    def target(self, ref: Any, where: str) -> Any:
        """What a local reference points at."""
        if not isinstance(ref, str) or not (ref == "#" or ref.startswith("#/")):
            raise _error(self.tool, f"the reference {ref!r} at {where} is not a pointer into the tool's own "
                                    "parameters (\"#/...\"), and no other is followed")
        node = json_pointer(self.root, ref)
        if node is NOWHERE:
            raise _error(self.tool, f"the reference {ref!r} at {where} points at nothing in its parameters")
        return node

    def key(self, ref: str) -> str:
        """The name under DEFS of a recursive reference's definition: the tool's, then the pointer's."""
        if ref not in self.keys:
            base = _UNSAFE.sub("_", f"{self.prefix}{self.tool}.{ref.rsplit('/', 1)[-1] or 'root'}")
            key, n = base, 1
            while key in self.keys.values():
                n += 1
                key = f"{base}_{n}"
            self.keys[ref] = key
        return self.keys[ref]

    def expand(self, node: Any, where: str, stack: tuple[str, ...]) -> Any:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise _error(self.tool, f"its parameters expand to more than {MAX_NODES} schemas once their "
                                    "references are resolved")
        if not isinstance(node, Mapping):
            return node
        ref = node.get("$ref")
        if ref is not None:
            return self.reference(node, ref, where, stack)
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise _error(self.tool, f"its parameters nest more than {MAX_DEPTH} schemas deep")
        try:
            return self._expand_keywords(node, where, stack)
        finally:
            self.depth -= 1

    def _expand_keywords(self, node: Mapping[str, Any], where: str, stack: tuple[str, ...]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in node.items():
            if k in (DEFS, "definitions"):
                continue  # (what is used is resolved where it is used)
            if k in _MAP and isinstance(v, Mapping):
                out[k] = {name: self.expand(sub, f"{where}.{k}.{name}", stack) for name, sub in v.items()}
            elif k in _LIST and isinstance(v, list):
                out[k] = [self.expand(sub, f"{where}.{k}[{i}]", stack) for i, sub in enumerate(v)]
            elif k in _ONE:
                out[k] = self.expand(v, f"{where}.{k}", stack)
            elif k == "dependencies" and isinstance(v, Mapping):  # (draft 7: a schema, or a list of names)
                out[k] = {name: sub if isinstance(sub, list) else self.expand(sub, f"{where}.{k}.{name}", stack)
                          for name, sub in v.items()}
            else:
                out[k] = v
        return out

    def reference(self, node: Mapping[str, Any], ref: Any, where: str, stack: tuple[str, ...]) -> Any:
        beside = {k: v for k, v in node.items() if k not in ("$ref", DEFS, "definitions")}
        if ref in stack:
            # A recursive model: the definition is kept once, and referred to.
            if stack[stack.index(ref):] and all(self._bare(r) for r in stack[stack.index(ref):]):
                raise _error(self.tool, f"the reference {ref!r} at {where} leads only to references, in a circle")
            key = self.key(ref)
            if key not in self.defs:
                self.defs[key] = None  # (claimed: a reference to it inside its own expansion stops here)
                self.defs[key] = self.expand(self.target(ref, where), f"{where}({ref})", (ref,))
            resolved: Any = {"$ref": f"#/{DEFS}/{key}"}
        else:
            resolved = self.expand(self.target(ref, where), f"{where}({ref})", (*stack, ref))
        if not beside:
            return resolved
        rest = self.expand(beside, where, stack)
        if set(rest) <= _ANNOTATIONS and isinstance(resolved, Mapping) and "$ref" not in resolved:
            return {**resolved, **rest}
        return {"allOf": [resolved, rest]}

    def _bare(self, ref: str) -> bool:
        """Whether a reference points at a schema that is only another reference."""
        try:
            target = self.target(ref, "")
        except ArgumentError:
            return False
        return isinstance(target, Mapping) and set(target) - {"$ref", DEFS, "definitions"} <= _ANNOTATIONS \
            and "$ref" in target


def self_contained(tool: str, parameters: Any, prefix: str = "") -> Any:
    """A tool's parameters with every reference resolved: no ``$ref`` left but those of a recursive model,
    to definitions under the result's own ``$defs`` (keys start with ``prefix``, then the tool's name).
    Raises ArgumentError ``constrain.tools`` naming the tool for a reference that leads nowhere."""
    expander = _Expander(tool, parameters, prefix)
    out = expander.expand(parameters, "parameters", ("#",))
    if expander.defs:
        # (a root that is itself a reference into a circle stays one, beside the definitions)
        defs = dict(expander.defs)
        out = {**out, DEFS: defs} if isinstance(out, Mapping) else {"allOf": [out], DEFS: defs}
    return out


def placed(part: Any, parameters: Any) -> Any:
    """A part of self-contained ``parameters`` (one argument's schema) as a document of its own: with the
    parameters' definitions when it refers to them, and a bare reference to one replaced by what it names."""
    defs = parameters.get(DEFS) if isinstance(parameters, Mapping) else None
    if not defs or not isinstance(part, Mapping):
        return part
    if set(part) == {"$ref"} and isinstance(part["$ref"], str) and part["$ref"].startswith(f"#/{DEFS}/"):
        part = defs.get(part["$ref"][len(DEFS) + 3:], part)
    return {**part, DEFS: defs} if _uses_refs(part) else part


def _uses_refs(node: Any) -> bool:
    if isinstance(node, Mapping):
        return "$ref" in node or any(_uses_refs(v) for k, v in node.items()
                                     if k not in ("enum", "const", "default", "examples"))
    if isinstance(node, list):
        return any(_uses_refs(v) for v in node)
    return False


def rooted(document: Any) -> Any:
    """A document that holds self-contained parameters anywhere inside it, their ``$defs`` moved up to its
    root (where their references point). Keys are unique per tool, so the definitions of several tools do
    not collide."""
    defs: dict[str, Any] = {}
    moved = _lift(document, defs, top=True)
    if not defs:
        return document
    if isinstance(moved, Mapping):
        return {**moved, DEFS: {**moved.get(DEFS, {}), **defs}}
    return {"allOf": [moved], DEFS: defs}


def rooted_documents(tag: Any) -> Any:
    """A structural tag with each of its ``json_schema`` documents :func:`rooted`."""
    if isinstance(tag, dict):
        if tag.get("type") == "json_schema" and "json_schema" in tag:
            return {**tag, "json_schema": rooted(tag["json_schema"])}
        return {k: rooted_documents(v) for k, v in tag.items()}
    if isinstance(tag, list):
        return [rooted_documents(v) for v in tag]
    return tag


def _lift(node: Any, defs: dict[str, Any], top: bool = False) -> Any:
    if not isinstance(node, Mapping):
        return node
    out: dict[str, Any] = {}
    for k, v in node.items():
        if k == DEFS and not top and isinstance(v, Mapping):
            for key, sub in v.items():
                defs[key] = _lift(sub, defs)
        elif k in _MAP and isinstance(v, Mapping):
            out[k] = {name: _lift(sub, defs) for name, sub in v.items()}
        elif k in _LIST and isinstance(v, list):
            out[k] = [_lift(sub, defs) for sub in v]
        elif k in _ONE:
            out[k] = _lift(v, defs)
        else:
            out[k] = v
    return out


def json_equal(a: Any, b: Any) -> bool:
    """JSON Schema's equality: numbers by value (``1`` is ``1.0``), but ``true`` is not ``1``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and bool(a == b)
