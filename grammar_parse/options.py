"""ParseOptions: every per-parse switch and limit in one frozen, picklable value.

A parse's limits used to be keyword arguments of the parser alone (and module globals below it), so the
wire adapters and batch could not pass them on. One value travels instead: to ``ResponseParser``,
``parse_response``, both wire adapters and batch (whose workers receive it pickled). The old keywords
(``strict=``, ``max_region_chars=``, ...) stay as shorthands; :func:`merge_options` folds them in.

>>> ParseOptions(max_json_depth=32).replace(strict=False).max_json_depth
32

Serving limits (``server.Limits``) and the limits of loading a template stay where they apply; the
package's table of every limit is docs/limits.md.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from ._engine.drafts import reading
from ._engine.reading import JSON_MAX_DEPTH
from .errors import ArgumentError

#: Default bound on one region's text (characters): a runaway region stops growing past it.
MAX_REGION_CHARS = 64 * 1024 * 1024
#: Seconds the regex module may search a prompt for a start_anchor_pattern before the linear matcher takes
#: over (grammar_parse._engine.linear_regex: the same matches, so the choice never changes where the output starts).
START_ANCHOR_LIMIT = 0.25


@dataclass(frozen=True)
class ParseOptions:
    """How one output is parsed: ``strict`` (raise, or record problems and go on), the size, depth and
    time limits, span tracing, and how calls written inside reasoning are read (see ``ResponseParser``).

    ``start_anchor_seconds=None`` is the package default (``START_ANCHOR_LIMIT``, read when the prompt is
    searched). Values are checked when the options are made: a bad one is an ArgumentError naming the field.
    """

    strict: bool = True
    max_region_chars: int = MAX_REGION_CHARS
    max_json_depth: int = JSON_MAX_DEPTH
    trace: bool = False
    calls_in_reasoning: str | bool | None = None
    start_anchor_seconds: float | None = None

    def __post_init__(self) -> None:
        for name in ("strict", "trace"):
            if type(getattr(self, name)) is not bool:
                _refuse(name, getattr(self, name), "True or False")
        for name in ("max_region_chars", "max_json_depth"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                _refuse(name, value, "a positive integer")
        if self.calls_in_reasoning is not None:
            # (its own ArgumentError, usage.calls_in_reasoning, names the field); kept as its name, so that
            # True and "always" are the same options
            object.__setattr__(self, "calls_in_reasoning", reading(self.calls_in_reasoning))
        seconds = self.start_anchor_seconds
        if seconds is not None and (type(seconds) not in (int, float) or not math.isfinite(seconds) or seconds < 0):
            _refuse("start_anchor_seconds", seconds, "None or a finite number of seconds, 0 or more")

    def replace(self, **changes: Any) -> ParseOptions:
        """A copy with ``changes`` (checked as a new value is)."""
        return dataclasses.replace(self, **changes)


def _refuse(name: str, value: object, expected: str) -> None:
    raise ArgumentError(f"ParseOptions.{name} must be {expected}, not {value!r}", code="usage.argument",
                        hint=f"Give {name} as {expected}.")


#: The parse options with every field at its default.
DEFAULT_OPTIONS = ParseOptions()


def merge_options(options: ParseOptions | None, **given: Any) -> ParseOptions:
    """``options`` with the shorthand keywords a caller gave folded in (a keyword left at None was not given).

    A keyword that says otherwise than the options object is an ArgumentError: which one wins would be a
    guess. Without an options object the keywords make one (the caller's own defaults for the rest).
    """
    given = {name: value for name, value in given.items() if value is not None}
    if options is None:
        return ParseOptions(**given) if given else DEFAULT_OPTIONS
    if not isinstance(options, ParseOptions):
        raise ArgumentError(f"options must be a ParseOptions, not {type(options).__name__}", code="usage.argument",
                            hint="Pass options=ParseOptions(...), or the keywords alone.")
    if not given:
        return options
    merged = options.replace(**given)  # (checks the keywords' values as the options' own)
    conflicts = [name for name in given if getattr(merged, name) != getattr(options, name)]
    if conflicts:
        listed = ", ".join(f"{name}={given[name]!r} (options say {getattr(options, name)!r})" for name in conflicts)
        raise ArgumentError(f"conflicting parse options: {listed}", code="usage.argument",
                            hint="Give each option once: in the ParseOptions object or as a keyword, not both.")
    return options


__all__ = ["DEFAULT_OPTIONS", "MAX_REGION_CHARS", "START_ANCHOR_LIMIT", "ParseOptions", "merge_options"]
