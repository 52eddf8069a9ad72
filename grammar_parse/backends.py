"""Generation backends for the reference server: where the text the parser reads comes from.

A backend's ``start(request, prompt)`` returns a :class:`Generation`: an async iterator of text pieces,
plus what the backend says about the generation (token counts, whether it was cut off), read once the
pieces are exhausted. :class:`ReplayBackend` replays recorded outputs, so the server runs anywhere.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from importlib import resources
from typing import Any

import regex

_TOKENISH = regex.compile(r"\s*[^\s]{1,4}|\s+")


def tokens(text: str) -> list[str]:
    """Text cut into token-sized pieces (a word piece of up to four characters with its leading space)."""
    return _TOKENISH.findall(text)


@dataclass
class Generation:
    """One generation in progress: text pieces, and what the backend says about them once done."""

    pieces: AsyncIterator[str]
    input_tokens: int = 0
    output_tokens: int = 0
    truncated: bool = False


class ReplayBackend:
    """Replays recorded outputs (Qwen3 format, shipped with the package): a tool call when the request
    offers tools, an answer after a tool result, otherwise a greeting; at most ``max_output_tokens``."""

    def __init__(self, samples: dict[str, str] | None = None, *, delay: float = 0.0) -> None:
        folder = resources.files("grammar_parse").joinpath("samples")
        self.samples = samples or {name: folder.joinpath(f"{name}.txt").read_text(encoding="utf-8")
                                   for name in ("answer", "tool_call", "after_tool")}
        self.delay = delay
        self.pulled = 0  # pieces handed out, across generations (tests watch it stop)

    def choose(self, request: dict[str, Any]) -> str:
        items = request.get("input", [])
        if items and items[-1].get("type") == "function_call_output":
            return self.samples["after_tool"]
        return self.samples["tool_call"] if request.get("tools") else self.samples["answer"]

    def start(self, request: dict[str, Any], prompt: str) -> Generation:
        pieces = tokens(self.choose(request))
        limit = request.get("max_output_tokens")
        truncated = limit is not None and limit < len(pieces)
        kept = pieces[:limit] if truncated else pieces
        generation = Generation(pieces=self._emit(kept), input_tokens=len(tokens(prompt)), output_tokens=len(kept),
                                truncated=truncated)
        return generation

    async def _emit(self, pieces: list[str]) -> AsyncIterator[str]:
        for piece in pieces:
            self.pulled += 1
            if self.delay:
                await asyncio.sleep(self.delay)
            yield piece


__all__ = ["Generation", "ReplayBackend", "tokens"]
