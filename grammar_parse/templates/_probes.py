"""Probe conversations: known assistant turns rendered with a model's chat template, to find (``detect``) or
build (``derive``) the grammar that reads the template's own renderings back.

A rendering is split where generation starts: ``prompt`` is the conversation before the assistant turn with
the generation prompt, ``output`` is what the template writes for the turn (what a model trained on it
writes). When the generation prompt pre-fills text the history form does not have (a ``<think>`` the
template drops from past turns, say), the split is at the common prefix and ``prefilled`` holds the rest.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._engine.grammar import Grammar
from .._engine.session import parse_response
from ..errors import ChatTemplateError
from ._chat_template import ChatTemplate

#: Template failures that end probing: running out of time or size (a template that always does would cost
#: that once per probe), or no template at all. A sandbox refusal stays a refusal of one probe's shape (Kimi
#: K2's template reaches for list.append only when it writes calls).
HOSTILE = frozenset({"chat_template.timeout", "chat_template.too_large", "chat_template.recursion",
                     "chat_template.syntax", "chat_template.jinja"})

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
            # (additionalProperties: Command R+'s template prints an object's value type from it)
            "options": {"type": "object", "description": "Extra options.", "additionalProperties": {"type": "string"}},
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

    @property
    def reasoning_rendered(self) -> bool:
        """Whether the template wrote the probe's reasoning (many drop it from past turns)."""
        return self.probe.reasoning is not None and self.probe.reasoning in self.output

    @property
    def calls_rendered(self) -> bool:
        """Whether the template wrote every call (some render only the first, some none at all)."""
        return bool(self.probe.calls) and all(
            f"{name}" in self.output and _written(arguments, self.output) for name, arguments in self.probe.calls)

    @property
    def informative(self) -> bool:
        """Whether the rendering shows what it probes: its calls, when it has calls."""
        return not self.probe.calls or self.calls_rendered


def render_probe(template: ChatTemplate, probe: Probe, **kwargs: Any) -> Rendering:
    """``probe`` rendered with ``template`` (template kwargs such as ``enable_thinking`` passed through).

    Arguments are passed as a dict, the transformers convention; a template that rejects that or does not
    write the arguments out is tried with them as JSON text. Raises what the template raises."""
    user = {"role": "user", "content": USER}
    tools = TOOLS  # always: a template may render its system prompt differently with tools
    generation = template.render([user], tools=tools, add_generation_prompt=True, **kwargs)
    attempts = (False, True) if probe.calls else (False,)
    chosen: tuple[str, bool] | None = None
    error: Exception | None = None
    for as_text in attempts:
        try:
            full = template.render([user, probe.message(arguments_as_text=as_text)], tools=tools,
                                   add_generation_prompt=False, **kwargs)
        except ChatTemplateError as exc:  # a template's own raise_exception, or a type error on the arguments' form
            if exc.code in HOSTILE:
                raise
            error = error or exc
            continue
        if chosen is None or all(_written(arguments, full) for _, arguments in probe.calls):
            chosen = (full, as_text)
        if all(_written(arguments, full) for _, arguments in probe.calls):
            break
    if chosen is None:
        assert error is not None
        raise error
    full, as_text = chosen
    if full.startswith(generation):
        return Rendering(probe, generation, full[len(generation):], "", dict(kwargs), as_text)
    common = _split(generation, full)
    rest = full[common:]
    for k in range(min(len(generation), len(rest)), 2, -1):
        # The generation prompt adds a turn before the assistant header the history also writes (Command R+'s
        # tool instructions): the model continues the generation prompt, after the header.
        if rest[:k].strip() and generation.endswith(rest[:k]):
            return Rendering(probe, generation, rest[k:], "", dict(kwargs), as_text)
    return Rendering(probe, full[:common], rest, generation[common:], dict(kwargs), as_text)


def render_probes(template: ChatTemplate, probes: tuple[Probe, ...] = PROBES, **kwargs: Any) -> list[Rendering]:
    """Every probe rendered; a probe the template refuses (raises on) is left out."""
    out = []
    for probe in probes:
        try:
            out.append(render_probe(template, probe, **kwargs))
        except ChatTemplateError as exc:  # a template may refuse a probe shape (no tools support, say)
            if exc.code in HOSTILE:
                raise
            continue
    return out


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, Mapping):
        return [leaf for item in value.values() for leaf in _leaves(item)]
    if isinstance(value, (list, tuple)):
        return [leaf for item in value for leaf in _leaves(item)]
    return [value]


def _written(arguments: Mapping[str, Any], text: str) -> bool:
    """Whether the rendering writes the arguments in a form a parser can read back: every value shows (a
    string as itself, a boolean as true or True), and no nested object or list is printed as a Python repr
    (``{'units': 'celsius'}``, which some templates write with ``| string``)."""
    for value in arguments.values():
        for leaf in _leaves(value):
            shown = [leaf] if isinstance(leaf, str) else [json.dumps(leaf), str(leaf)]
            if not any(s in text for s in shown):
                return False
        if isinstance(value, (Mapping, list)) and any(isinstance(leaf, str) for leaf in _leaves(value)) \
                and repr(value) in text:
            return False
    return True


def _split(generation: str, full: str) -> int:
    """Where the generation prompt and the history rendering part: their common prefix, moved back to the
    start of a marker it would cut (``<|START_RESPONSE|>`` and ``<|START_THINKING|>`` share ``<|START_``)."""
    i = len(os.path.commonprefix([generation, full]))
    for opener, closer in (("<", ">"), ("[", "]")):
        head = generation[:i]
        if head.rfind(opener) > head.rfind(closer):
            i = head.rfind(opener)
    return i


def differences(message: Mapping[str, Any], probe: Probe, *, reasoning_rendered: bool = True,
                reasoning_keys: Sequence[str]) -> list[str]:
    """How a parsed message differs from the probe it should read back as ([] when it reads back exactly).

    Reasoning is compared under whichever reasoning key the grammar uses (``reasoning_keys``: its format's); text is compared without the
    whitespace templates add around it; arguments are compared as values (``3`` and ``"3"`` differ). When
    the template does not render reasoning (``reasoning_rendered=False``), the split between reasoning and
    content cannot be seen in its renderings: a grammar that reads unmarked text as reasoning cut short
    (the model is expected to start thinking) is right there, so the two are compared joined."""
    out: list[str] = []
    reasoning = next((message[k] for k in reasoning_keys if message.get(k) is not None), None)
    content = message.get("content")
    if reasoning_rendered:
        if (reasoning or "").strip() != (probe.reasoning or ""):
            out.append(f"reasoning: {reasoning!r} != {probe.reasoning!r}")
        if (content or "").strip() != (probe.content or ""):
            out.append(f"content: {content!r} != {probe.content!r}")
    else:
        text = " ".join(part.strip() for part in (reasoning, content) if isinstance(part, str) and part.strip())
        if text != (probe.content or ""):
            out.append(f"content: {content!r} (reasoning {reasoning!r}) != {probe.content!r}")
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


def read_back(rendering: Rendering, grammar: Grammar, *, template_renders_reasoning: bool = True,
              tools: Any = TOOLS) -> list[str]:
    """How ``grammar`` reads ``rendering`` back: [] when exactly, else the differences (or the error);
    ``tools`` type the arguments (the probes' own by default).

    The reasoning/content split is checked only where the rendering shows it: not when the template
    dropped the probe's reasoning (or never renders reasoning), nor for a turn without reasoning after a
    generation prompt that pre-fills a reasoning opener (a model never writes that turn)."""
    probe = rendering.probe
    if probe.reasoning is not None:
        shown = rendering.reasoning_rendered
    else:
        shown = template_renders_reasoning and not rendering.prefilled.strip()
    try:
        message = parse_response(rendering.output, grammar, prefix=rendering.prompt, tools=tools, strict=False)
    except Exception as exc:  # noqa: BLE001 - a grammar that cannot read the rendering at all
        return [f"{type(exc).__name__}: {exc}"]
    return differences(message, probe, reasoning_rendered=shown, reasoning_keys=grammar.format.reasoning_fields)
