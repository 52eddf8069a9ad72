"""Plain text, and the scalars read from it (int, float, bool): the value is the body itself, stripped
(or taken off the template's own separators).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Any, TypeVar

from ...errors import ParseError
from .base import WHOLE, CallShape, CallTemplate, ContentParser, placeholder_path

_T = TypeVar("_T")


def text_value(text: str, args: Mapping[str, Any]) -> str:
    if args.get("strip", True):
        return text.strip()
    separators = args.get("separators")
    return without_separators(text, separators) if separators else text


def without_separators(text: str, separators: Sequence[str]) -> str:
    """``text`` without the template's own text around a value: one ``separators[0]`` at its start and one
    ``separators[1]`` at its end, each where present. Qwen3-Coder writes ``<parameter=k>\\nVALUE\\n</parameter>``,
    so its ``"\\n    x\\n\\n"`` is ``"    x\\n"``: the value's own indentation and newlines stay (as vLLM's
    parser, which removes one newline at each end)."""
    lead, trail = separators
    if lead and text.startswith(lead):
        text = text[len(lead):]
    if trail and text.endswith(trail):
        text = text[:len(text) - len(trail)]
    return text


def _cast(text: str, args: Mapping[str, Any], cast: Callable[[str], _T], expected: str) -> _T:
    body = text_value(text, args)
    try:
        return cast(body)
    except ValueError:
        raise ParseError(f"expected {expected}, got {body!r}", code="parse.content") from None


def _int(text: str, args: Mapping[str, Any]) -> int:
    return _cast(text, args, int, "an integer")


def _float(text: str, args: Mapping[str, Any]) -> float:
    return _cast(text, args, float, "a number")


def _bool(text: str, args: Mapping[str, Any]) -> bool:
    return text_value(text, args).lower() in ("true", "1")


def _text_arg_shape(spec: Any, fn: dict[str, Any], id_capture: str | None) -> CallShape | None:
    """The plan of a call whose arguments are one key holding the region's text (Functionary's ``python``
    call: ``{"code": "{content}"}``), or None."""
    args, name = fn.get("arguments"), fn.get("name")
    if spec.content != "text" or spec.content_args.get("separators") or not isinstance(args, dict) \
            or len(args) != 1 or placeholder_path(next(iter(args.values()))) != "content" or not isinstance(name, str):
        return None
    capture = placeholder_path(name)
    if capture is None and "{" in name or capture is not None and capture.startswith("content"):
        return None
    return CallShape("at_close", reader="text_arg", name_capture=capture, name=name if capture is None else None, args_key=next(iter(args)),
                    id_capture=id_capture if id_capture and not id_capture.startswith("content") else None,
                    content_args=dict(spec.content_args))


def _call_shape(spec: Any, call: CallTemplate) -> CallShape:
    """A call whose one argument is the region's text (Functionary's python call), or whose arguments are
    component regions (one child region per argument)."""
    if spec.transform_each or not isinstance(call.function, dict):
        return WHOLE
    if (text_shape := _text_arg_shape(spec, call.function, call.id_capture)) is not None:
        return text_shape
    common = call.common
    if common is None or call.arguments is None:
        return WHOLE
    if common.name_capture and "." not in call.arguments:
        return replace(common, mode="components", args_key=call.arguments)
    return WHOLE


def _specialise_text(args: Mapping[str, Any]) -> Callable[[str], str]:
    """text_value with its args read once."""
    if args.get("strip", True):
        return str.strip
    separators = args.get("separators")
    if separators:
        return partial(without_separators, separators=separators)  # (called from C: one Python call)
    return str


TEXT = ContentParser("text", text_value, streamable=True, call_shape=_call_shape, specialise=_specialise_text,
                     specialise_exact=True)
INT = ContentParser("int", _int, streamable=True)
FLOAT = ContentParser("float", _float, streamable=True)
BOOL = ContentParser("bool", _bool, streamable=True)
PARSERS = (TEXT, INT, FLOAT, BOOL)

__all__ = ["BOOL", "FLOAT", "INT", "PARSERS", "TEXT", "text_value", "without_separators"]
