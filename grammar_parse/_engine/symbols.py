"""A grammar's symbols as the scanner and the session see them: regions (rules that give a message
field) and terminals (delimiters, and the declared terminals that carry text).

They live below both :mod:`grammar_parse._engine.grammar`, which builds them, and :mod:`grammar_parse._engine.scanner`,
which matches them, so the imports follow the pipeline (grammar -> scanner -> symbols).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from functools import cached_property
from typing import Any

from .content.base import WHOLE
from .delimiters import Matcher
from .reading import copy_json
from .shapes import REASONING, TOOL_CALLS, CallShape, call_shape, infer_role
from .values import RegionValue


@dataclass(frozen=True)
class Region:
    """A message field produced by one grammar rule."""

    rule: str
    field: str
    spec: RegionValue
    implicit: bool
    parent: str | None = None  # a component: its value goes into this region's value, not the message
    key: str = ""  # a component's name in its parent's scope
    entry_key: str | None = None  # a component stored as parent[key][<entry_key filled in>] = value
    scope: Mapping[str, Any] = dataclass_field(default_factory=dict)  # component values before any arrives
    extend: bool = False  # a repeated field whose regions each give a list: the lists join into one
    #: What the region is in the message (grammar_parse._engine.format: reasoning, content, tool_calls, field or
    #: component); "" infers it from the field and value.
    role: str = ""
    #: A tool-call region's CallShape (None for other roles); worked out from the value spec.
    call: CallShape | None = dataclass_field(default=None, compare=False)

    def __post_init__(self) -> None:
        role = self.role or infer_role(self.field, self.parent, self.spec)
        object.__setattr__(self, "role", role)
        if role == TOOL_CALLS and self.call is None:
            object.__setattr__(self, "call", call_shape(self.spec))

    @property
    def shape(self) -> CallShape:
        """The region's call shape (``at_close``, read whole when it closes, for a region that is not calls)."""
        return self.call if self.call is not None else WHOLE

    @property
    def is_reasoning(self) -> bool:
        """Whether this region is a message's reasoning."""
        return self.role == REASONING

    @property
    def is_call(self) -> bool:
        """Whether this region's value is tool calls."""
        return self.role == TOOL_CALLS

    @property
    def made_of_components(self) -> bool:
        """Whether this is a call region whose value its component regions make (its own text between them is
        read by nothing)."""
        return self.call is not None and self.call.mode == "components"

    @property
    def unframed_text(self) -> bool:
        """Whether a wire adapter frames nothing of this region's text as it streams: a call's component, or a
        call its components make (their text says nothing until a delimiter closes a part)."""
        return self.parent is not None or self.role == TOOL_CALLS and self.made_of_components

    @cached_property
    def _empty_scope(self) -> tuple[str, ...] | None:
        """The scope's keys where each starts as an empty object (``{"arguments": {}}``, what every call with
        components declares), else None: worked out once, since a frame copies the scope at each opening."""
        scope = self.scope
        return tuple(scope) if all(type(v) is dict and not v for v in scope.values()) else None

    def new_scope(self) -> dict[str, Any]:
        """A fresh copy of ``scope`` for a region opening, sharing nothing with the grammar's."""
        keys = self._empty_scope
        if keys is not None:
            return {key: {} for key in keys}
        return {key: copy_json(value) for key, value in self.scope.items()}

    @cached_property
    def dirty(self) -> bool:
        """Whether this region's chunks are raw bytes of a structured value (read for every chunk, so
        worked out once)."""
        return self.spec.dirty


@dataclass(frozen=True)
class Terminal:
    """A grammar terminal as the session sees it."""

    name: str
    # "open" | "close" | "text" | "unclaimed" | "delimiter" | "repeat" (see grammar_parse._engine.tables)
    role: str
    region: Region | None
    matcher: Matcher | None
    priority: int = 0
    #: The ``repair.*`` error code of an opener that reads a known model glitch as its region (the
    #: grammar's ``repair`` directive): lenient mode records the repair, strict mode reads the text as text.
    repair: str | None = None

    @property
    def opens_call(self) -> bool:
        """Whether it opens a tool call's region (a call's opener: its region is a call)."""
        return self.role == "open" and self.region is not None and self.region.is_call

    @property
    def sort_key(self) -> tuple[int, str, str]:
        """Tie-break between matches at the same place with the same length (transformers' order)."""
        return (-self.priority, self.region.field if self.region else "", self.name)


__all__ = ["Region", "Terminal"]
