"""Probe conversations: known assistant turns rendered with a model's chat template, to find (``detect``) or
build (``derive``) the grammar that reads the template's own renderings back.

A rendering is split where generation starts: ``prompt`` is the conversation before the assistant turn with
the generation prompt, ``output`` is what the template writes for the turn (what a model trained on it
writes). When the generation prompt pre-fills text the history form does not have (a ``<think>`` the
template drops from past turns, say), the split is at the common prefix and ``prefilled`` holds the rest.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .chat_template import REASONING_KEYS, ChatTemplate

USER = "What is the weather in Paris?"
REASONING = "The user wants the weather in Paris, so I call the weather tool."
CONTENT = "It is sunny in Paris today."

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Get the weather forecast for a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "The city name."},
            "days": {"type": "integer", "description": "How many days to forecast."},
            "metric": {"type": "boolean", "description": "Metric units."},
            "hours": {"type": "array", "items": {"type": "integer"}, "description": "Hours of the day."},
            "options": {"type": "object", "description": "Extra options."},
        }, "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "Get the local time in a time zone.",
        "parameters": {"type": "object", "properties": {
            "timezone": {"type": "string", "description": "An IANA time zone."},
        }, "required": ["timezone"]}}},
]

PARIS = {"city": "Paris"}
TIMEZONE = {"timezone": "Europe/Paris"}
TYPED = {"city": "Paris", "days": 3, "metric": True, "hours": [9, 18], "options": {"units": "celsius"}}


@dataclass(frozen=True)
class Probe:
    """One assistant turn to render and read back: ``calls`` are (name, arguments) pairs."""

    name: str
    reasoning: str | None = None
    content: str | None = None
    calls: tuple[tuple[str, Mapping[str, Any]], ...] = ()

    def message(self, *, arguments_as_text: bool = False) -> dict[str, Any]:
        """The assistant message in the transformers chat format (arguments as a dict, or as JSON text)."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content or ""}
        if self.reasoning is not None:
            message["reasoning_content"] = self.reasoning
        if self.calls:
            message["tool_calls"] = [
                {"type": "function", "id": f"call{index:05d}",
                 "function": {"name": name, "arguments": json.dumps(arguments) if arguments_as_text else dict(arguments)}}
                for index, (name, arguments) in enumerate(self.calls, 1)]
        return message


PROBES: tuple[Probe, ...] = (
    Probe("content", content=CONTENT),
    Probe("reasoning", reasoning=REASONING, content=CONTENT),
    Probe("one_call", calls=(("get_weather", PARIS),)),
    Probe("two_calls", calls=(("get_weather", PARIS), ("get_time", TIMEZONE))),
    Probe("typed_arguments", calls=(("get_weather", TYPED),)),
    Probe("reasoning_call", reasoning=REASONING, calls=(("get_weather", PARIS),)),
)


@dataclass(frozen=True)
class Rendering:
    """A probe rendered with a template: the parser reads ``output`` after ``prompt``."""

    probe: Probe
    prompt: str
    output: str
    prefilled: str = ""
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    arguments_as_text: bool = False


def render_probe(template: ChatTemplate, probe: Probe, **kwargs: Any) -> Rendering:
    """``probe`` rendered with ``template`` (template kwargs such as ``enable_thinking`` passed through).

    Arguments are passed as a dict, the transformers convention; a template that rejects that or does not
    write the arguments out is tried with them as JSON text. Raises what the template raises."""
    user = {"role": "user", "content": USER}
    tools = TOOLS  # always: a template may render its system prompt differently with tools
    generation = template.render([user], tools=tools, add_generation_prompt=True, **kwargs)
    attempts = (False, True) if probe.calls else (False,)
    full = ""
    as_text = False
    error: Exception | None = None
    for as_text in attempts:
        try:
            full = template.render([user, probe.message(arguments_as_text=as_text)], tools=tools,
                                   add_generation_prompt=False, **kwargs)
        except Exception as exc:  # a template's own raise_exception, or a type error on the arguments' form
            error = exc
            continue
        if not probe.calls or all(_written(arguments, full) for _, arguments in probe.calls):
            break
    else:
        if error is not None and not full:
            raise error
    if full.startswith(generation):
        return Rendering(probe, generation, full[len(generation):], "", dict(kwargs), as_text)
    common = _common_prefix(generation, full)
    return Rendering(probe, full[:common], full[common:], generation[common:], dict(kwargs), as_text)


def render_probes(template: ChatTemplate, probes: tuple[Probe, ...] = PROBES, **kwargs: Any) -> list[Rendering]:
    """Every probe rendered; a probe the template refuses (raises on) is left out."""
    out = []
    for probe in probes:
        try:
            out.append(render_probe(template, probe, **kwargs))
        except Exception:  # noqa: BLE001 - a template may refuse a probe shape (no tools support, say)
            continue
    return out


def _written(arguments: Mapping[str, Any], text: str) -> bool:
    """Whether every argument value shows in the rendering (as itself or as JSON)."""
    for value in arguments.values():
        shown = value if isinstance(value, str) else json.dumps(value)
        if shown not in text and str(value) not in text:
            return False
    return True


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def differences(message: Mapping[str, Any], probe: Probe, *, reasoning_rendered: bool = True) -> list[str]:
    """How a parsed message differs from the probe it should read back as ([] when it reads back exactly).

    Reasoning is compared under whichever reasoning key the grammar uses; text is compared without the
    whitespace templates add around it; arguments are compared as values (``3`` and ``"3"`` differ)."""
    out: list[str] = []
    reasoning = next((message[k] for k in REASONING_KEYS if message.get(k) is not None), None)
    want_reasoning = probe.reasoning if reasoning_rendered else None
    if (reasoning or "").strip() != (want_reasoning or ""):
        out.append(f"reasoning: {reasoning!r} != {want_reasoning!r}")
    content = message.get("content")
    if (content or "").strip() != (probe.content or ""):
        out.append(f"content: {content!r} != {probe.content!r}")
    calls = []
    for call in message.get("tool_calls") or []:
        function = call.get("function", call) if isinstance(call, Mapping) else {}
        arguments = function.get("arguments") if isinstance(function, Mapping) else None
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                pass
        calls.append((function.get("name") if isinstance(function, Mapping) else None, arguments))
    want = [(name, dict(arguments)) for name, arguments in probe.calls]
    if calls != want:
        out.append(f"tool_calls: {calls!r} != {want!r}")
    return out
