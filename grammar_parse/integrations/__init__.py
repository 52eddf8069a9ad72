"""grammar_parse inside the engines people serve with: vLLM (:mod:`.vllm`) and SGLang (:mod:`.sglang`).

Each engine picks its parsers by name (``--tool-call-parser NAME --reasoning-parser NAME``). Every
built-in grammar is registered under ``gp_`` plus its name and each alias (``gp_qwen3``, ``gp_qwen3_5``,
...), and ``gp`` stands for the grammar the served model's tokenizer carries (its ``response_template``,
else its legacy ``response_schema``). :func:`register` adds a grammar of one's own (a ``.lark`` file, a
template dict) under a name, from a plugin file the engine loads.

What every engine plugin shares lives here: the names, the grammar each stands for, tools as the plain dicts
grammar_parse reads (the engines pass pydantic models), the prompt tail the parser starts after, and
:class:`SharedParse`, the one parse of a request that an engine's reasoning parser and tool parser both read.
The engine modules import their engine; this one imports neither, so the core install can import it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from grammar_parse import Grammar, GrammarError, list_grammars, load_grammar, parse_response
from grammar_parse._engine.tools import call_function
from grammar_parse._engine.wire import arguments_text
from grammar_parse.adapters.chat_completions import ChatCompletionsStream

#: What every parser name of ours starts with (the engines' own names never do).
PREFIX = "gp_"
#: The parser that reads the grammar from the served model's tokenizer.
GENERIC = "gp"
#: How many prompt tokens are decoded for the prefix: enough for any start anchor or pre-filled
#: reasoning opener (``<|im_start|>assistant\n<think>\n`` is 4 to 6 tokens), short enough that decoding a
#: long prompt costs nothing per request.
PROMPT_TAIL_TOKENS = 256

_custom: dict[str, Grammar] = {}
_listeners: list[Callable[[str], None]] = []


def parser_name(grammar_name: str) -> str:
    """The engine-side name of a grammar name or alias (``qwen3.5`` -> ``gp_qwen3_5``)."""
    return PREFIX + grammar_name.replace("-", "_").replace(".", "_").lower()


def parser_names() -> dict[str, str]:
    """Every parser name (built-in grammars, their aliases, registered grammars) -> the grammar it stands
    for (``GENERIC`` itself is not listed: it has no fixed grammar)."""
    names: dict[str, str] = {}
    for canonical, aliases in list_grammars().items():
        for spelled in [canonical, *aliases]:
            names.setdefault(parser_name(spelled), canonical)
    names.update({name: name for name in _custom})
    return names


def register(name: str, template: Any) -> str:
    """Serve ``template`` (a ``.lark`` path, a template dict or JSON path, a built-in name) under parser
    name ``name`` (taken as given when it starts with ``gp_``, else prefixed), in every engine module
    imported now or later. Returns the name. Bad templates fail here, at load time."""
    from grammar_parse._engine.session import resolve_grammar

    key = name if name.startswith(PREFIX) else parser_name(name)
    _custom[key] = resolve_grammar(template)  # (a bad template raises its own error, naming field and key)
    for listener in list(_listeners):
        listener(key)
    return key


def on_register(listener: Callable[[str], None]) -> None:
    """Call ``listener(name)`` for each grammar :func:`register` adds (an engine module registers its
    parser classes under the name)."""
    _listeners.append(listener)


def grammar_for(name: str, tokenizer: Any = None) -> Grammar:
    """The grammar a parser name stands for; ``gp`` reads it from ``tokenizer``."""
    if name in _custom:
        return _custom[name]
    if name == GENERIC:
        if tokenizer is None:
            raise GrammarError("the gp parser reads its grammar from the tokenizer, and there is none",
                               code="grammar.not_found", source=name,
                               hint="Serve with a tokenizer, or pick a named parser (gp_qwen3, ...).")
        from grammar_parse.compat.tokenizer import grammar_for as from_tokenizer

        return from_tokenizer(tokenizer)
    canonical = parser_names().get(name)
    if canonical is None:
        raise GrammarError(f"no grammar is served as {name!r}", code="grammar.not_found", source=name,
                           hint="Use gp_ and a built-in grammar name (grammar-parse list), or register() one.")
    return load_grammar(canonical)


def tool_dicts(tools: Iterable[Any] | None) -> list[dict[str, Any]] | None:
    """Tools as plain OpenAI tool dicts (pydantic models are dumped; Responses-style function tools, which
    carry name and parameters at the top, are wrapped). None when there are none."""
    out: list[dict[str, Any]] = []
    for tool in tools or ():
        if hasattr(tool, "model_dump"):
            tool = tool.model_dump(exclude_none=True)
        if not isinstance(tool, dict):
            continue
        if "function" not in tool and tool.get("type") == "function" and "name" in tool:
            tool = {"type": "function", "function": {k: v for k, v in tool.items() if k != "type"}}
        out.append(tool)
    return out or None


def oneshot_message(text: str, grammar: Grammar, prefix: str, tools: list[dict[str, Any]] | None, *,
                    reasoning_field: str = "reasoning_content", reasoning_as_content: bool = False) -> dict[str, Any]:
    """A whole output's message as the engines return one: ``reasoning_field``, ``content`` and
    ``tool_calls`` (``{"id", "type", "function": {"name", "arguments"}}``, arguments a strict JSON text),
    plus ``parsed_calls``: the calls' parsed values, which say what is wrong with each (``errors``).

    Parsed once (``parse_response``, lenient), not streamed through the Chat Completions adapter:
    ``chat_message`` costs about 2.6 times as much (Qwen3, 14 kB with 30 calls: 1.3 ms against 0.5 ms), since
    it runs the tool-call streamer. The arguments are the parsed value written out (the stream sends the model's own
    text): the same JSON value, spaced as ``json.dumps`` spaces it. A value that names no function is not
    a call, as in the stream. ``reasoning_as_content``: for a tool parser serving alone, whose result has no
    reasoning slot, the reasoning text goes ahead of the content (markup removed), as the engines treat
    reasoning when no reasoning parser is set."""
    parsed = parse_response(text, grammar, prefix=prefix, tools=tools, strict=False)
    fmt = grammar.format
    values = fmt.calls_in(parsed)
    calls = []
    for call in values:
        function = call_function(call)
        if function is None or not isinstance(function.get("name"), str) or not function["name"]:
            continue
        arguments = arguments_text(function.get("arguments", {}))
        calls.append({"id": call.get("id") if isinstance(call.get("id"), str) else None, "type": "function",
                      "function": {"name": function["name"], "arguments": arguments}})
    reasoning = next((parsed[f] for f in fmt.reasoning_fields if parsed.get(f)), None) or None
    content = next((parsed[f] for f in fmt.content_fields if parsed.get(f)), None) or None
    if reasoning_as_content:
        reasoning, content = None, "".join(t for t in (reasoning, content) if t) or None
    message: dict[str, Any] = {reasoning_field: reasoning, "content": content,
                               "parsed_calls": values}
    if calls:
        message["tool_calls"] = calls
    return message


class SharedParse:
    """One request's parse, which an engine's reasoning parser and tool parser share: the grammar, the request's
    prompt tail and tools, one Chat Completions stream over the output (built at its first text, once the
    prompt is known; lenient) whose deltas both parsers take their part of, and one-shot one message per
    output. vLLM's two parsers hold the same one; SGLang's reasoning detector hands its deltas to the tool
    detector, which parses on its own only when it serves alone."""

    def __init__(self, grammar: Grammar, *, reasoning_field: str = "reasoning_content") -> None:
        self.grammar = grammar
        self.reasoning_field = reasoning_field
        self.prefix = ""
        self.tools: list[dict[str, Any]] | None = None
        self.stream: ChatCompletionsStream | None = None
        self.finished = False
        self._oneshot: tuple[str, bool, dict[str, Any]] | None = None

    def start(self, prefix: str | None = None, tools: Iterable[Any] | None = None) -> None:
        """The request's prompt tail and tools, taken until the output starts streaming."""
        if self.stream is None:
            if prefix is not None:
                self.prefix = prefix
            if tools is not None:
                self.tools = tool_dicts(tools)

    def _stream(self) -> ChatCompletionsStream:
        if self.stream is None:
            self.stream = ChatCompletionsStream(self.grammar, self.prefix, tools=self.tools,
                                                reasoning_field=self.reasoning_field, strict=False)
        return self.stream

    def feed(self, text: str) -> list[dict[str, Any]]:
        """The Chat Completions deltas this piece of output completes."""
        return self._stream().feed(text)

    def finish(self) -> list[dict[str, Any]]:
        """The last deltas, once (the partner parser's call gets none)."""
        if self.finished:
            return []
        self.finished = True
        return self._stream().finish()

    def message(self, text: str, *, reasoning_as_content: bool = False) -> dict[str, Any]:
        """The one-shot message of a whole output (:func:`oneshot_message`), parsed once however many of the
        two parsers ask; each gets its own copy."""
        if self._oneshot is None or self._oneshot[:2] != (text, reasoning_as_content):
            message = oneshot_message(text, self.grammar, self.prefix, self.tools, reasoning_field=self.reasoning_field,
                                      reasoning_as_content=reasoning_as_content)
            self._oneshot = (text, reasoning_as_content, message)
        return dict(self._oneshot[2])


def prompt_tail(decode: Callable[[Sequence[int]], str], prompt_ids: Sequence[int] | None) -> str | None:
    """The decoded end of the prompt, which the parser starts after (None when the engine gave none)."""
    if prompt_ids is None:
        return None
    return decode(list(prompt_ids[-PROMPT_TAIL_TOKENS:]))


__all__ = ["GENERIC", "PREFIX", "SharedParse", "grammar_for", "on_register", "oneshot_message", "parser_name", "parser_names",
           "prompt_tail", "register", "tool_dicts"]
