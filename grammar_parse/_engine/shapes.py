"""What one region is: its role in the message and, for tool calls, the shape its calls are written in.

Both are worked out from the region's field and value spec when the grammar is built, and kept on the region
(``Region.role``, ``Region.call``); :mod:`grammar_parse._engine.format` gathers them, with what the grammar's rules
say, into the grammar's format.

A region's role is inferred from its template field (``reasoning_content``, ``thinking`` or ``reasoning`` is
reasoning; ``tool_calls``, or a transform that builds ``{"function": ...}``, is tool calls; ``content`` is
content; a region with a parent is a component); an authored ``.lark`` region may state it
(``//@ region scratchpad {"role": "reasoning", ...}``) where its field name says nothing.
"""

from __future__ import annotations

from typing import Any

from .content import CONTENT_PARSERS, CallShape, call_template
from .content.base import WHOLE
from .values import ValueSpec

# ---------------------------------------------------------------------------- roles
REASONING = "reasoning"
CONTENT = "content"
TOOL_CALLS = "tool_calls"
COMPONENT = "component"  # a region whose value goes into its parent's, not the message
FIELD = "field"  # any other message key
#: The roles a region may have (an authored region states one of the first four, or none).
ROLES = (REASONING, CONTENT, TOOL_CALLS, FIELD, COMPONENT)
#: The message keys read as reasoning when a region does not state its role, in the order a reader looks
#: for them.
REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


def infer_role(field: str, parent: str | None, spec: Any) -> str:
    """A region's role from its field and value (the conventions templates follow)."""
    if parent is not None:
        return COMPONENT
    if field in REASONING_FIELDS:
        return REASONING
    transform = getattr(spec, "transform", None)
    if field == "tool_calls" or (isinstance(transform, dict) and "function" in transform):
        return TOOL_CALLS
    return CONTENT if field == "content" else FIELD


# ---------------------------------------------------------------------------- one call region's shape
def call_shape(spec: Any) -> CallShape:
    """The CallShape of a tool-call region's value spec, as its content parser reads calls written in it
    (grammar_parse._engine.content); ``at_close`` (read whole) where it recognises no shape."""
    if not isinstance(spec, ValueSpec) or not isinstance(spec.transform, dict):
        return WHOLE
    parser = CONTENT_PARSERS.get(spec.content)
    if parser is None or parser.call_shape is None:
        return WHOLE
    return parser.call_shape(spec, call_template(spec.transform))


__all__ = ["COMPONENT", "CONTENT", "FIELD", "REASONING", "REASONING_FIELDS", "ROLES", "TOOL_CALLS", "CallShape",
           "call_shape", "infer_role"]
