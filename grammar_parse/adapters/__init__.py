"""The wire adapters: a parser's events framed as a protocol's stream.

* :mod:`grammar_parse.adapters.chat_completions`: OpenAI Chat Completions deltas and messages
  (:class:`ChatCompletionsStream`, :func:`chat_message`, :func:`chunk`);
* :mod:`grammar_parse.adapters.lmsp`: LMSP Responses items and events (:class:`ResponseStream`, :func:`respond`);
* :class:`ToolCallStreamer`: the tool-call deltas both are built on, without a protocol's framing.
"""

from __future__ import annotations

from .._engine.toolstream import ToolCallDelta, ToolCallStreamer
from .chat_completions import ChatCompletionsStream, chat_message, chunk
from .lmsp import ResponseStream, respond

__all__ = ["ChatCompletionsStream", "ResponseStream", "ToolCallDelta", "ToolCallStreamer", "chat_message", "chunk",
           "respond"]
