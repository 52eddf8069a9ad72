"""Every grammar as a vLLM tool-call parser and reasoning parser (``pip install grammar-parse[vllm]``).

::

    vllm serve Qwen/Qwen3-8B --enable-auto-tool-choice \\
        --tool-parser-plugin grammar_parse.integrations.vllm --tool-call-parser gp_qwen3 \\
        --reasoning-parser-plugin grammar_parse.integrations.vllm --reasoning-parser gp_qwen3

Importing this module registers, with vLLM's own ``ToolParserManager`` and ``ReasoningParserManager``,
a parser pair under every name of :func:`grammar_parse.integrations.parser_names` (``gp_qwen3``,
``gp_glm45``, ...), ``gp`` (the grammar the model's tokenizer carries) and any grammar
:func:`grammar_parse.integrations.register` adds later.

**One session per request, shared by the pair.** vLLM composes the two into its ``DelegatingParser``,
which gives the reasoning parser the text until it says reasoning has ended and the tool parser the text
after. A grammar reads the whole output at once (a call written inside the reasoning is still a call),
so both parsers of a request share one :class:`~grammar_parse.integrations.SharedParse` (its stream of deltas):
vLLM builds a request's reasoning parser and then, in the same constructor, its tool parser, and the tool
parser joins the reasoning parser built just before it on this thread for the same tokenizer (and hands
it the request's tools, which vLLM gives only to the tool parser). The reasoning parser never reports the
end of reasoning to the stream composition, so it sends every delta (reasoning, content and calls);
both parsers declare ``engine_based_streaming``, so vLLM hands them only the new text of each step and
a step costs its own length, not the length of the output so far.

One-shot, ``extract_reasoning`` parses the whole output and returns the content as a ``str`` that
carries the parsed message; the tool parser reads the calls from it instead of parsing the content again
(calls written inside the reasoning are kept). Without a companion reasoning parser
(``--tool-call-parser`` alone), reasoning text goes to the content, as vLLM treats reasoning when no
reasoning parser is set, with its markup removed. Parsing is lenient: model output never raises; a call
whose arguments are broken is still a call, with the arguments text that was valid JSON. What is wrong
with a call (an unknown tool, arguments against its schema) is logged on the server by code and JSON
path; the client gets the call as the model wrote it, as from vLLM's own parsers.

The parsers ask vLLM to keep special tokens in the text (``skip_special_tokens=False``): most
grammars' delimiters are special tokens.

**Constrained tool calls.** For ``tool_choice="required"``, a named tool, or ``"auto"`` with a tool
marked ``"strict": true``, the tool parser's ``adjust_request`` sets the grammar's own constraint
(:func:`grammar_parse.constrain.to_structural_tag`) as the request's ``structured_outputs.structural_tag``:
reasoning and content stay free text, and a call, from its trigger on, must be one of the request's tools
with arguments that follow its schema, in the model's own format. A request with a structured output of
its own (``structured_outputs``, or a ``response_format`` other than text) is left as the client sent
it, and so is plain ``"auto"``. The constraint holds the (optional) reasoning and vLLM constrains from
the first token, unless the prompt leaves a reasoning open (a template that pre-fills ``<think>``, or a
grammar whose reasoning opens at the start): then, with ``--reasoning-parser``, vLLM's structured-output
manager holds the constraint back until the reasoning parser says the reasoning has ended, and the
constraint starts at the content (``reasoning=False``). For a chat request the grammar's own reasoning
parser, partnered with the tool parser, tells vLLM the reasoning has ended when the prompt leaves none
open (``is_reasoning_end``), so a call written before any reasoning or text is checked from its opener
on; had vLLM waited for the parser to see the reasoning end, it would have started the constraint inside
that call. A Responses request asks vLLM's own request-local reasoner instead, which knows nothing of the
constraint: it is constrained from the content on, and a call written first goes unchecked there.
Without a reasoning parser (vLLM sets the tool parser's ``skip_reasoning_parsing``), or for a Chat
Completions request with ``include_reasoning=false``, vLLM constrains from the first token and the
constraint holds the reasoning as the prompt left it. A grammar the constraint cannot express
(``constrain.unsupported``) leaves the request unconstrained, as before, and is logged once at info
level; the request never fails for it.

``supports_required_and_named`` stays False: to vLLM it means that required and named output is its
own JSON array of calls, read without the tool parser. The constraint keeps the model's own format, so
the tool parser reads those calls as it reads automatic ones. ``structural_tag_model`` stays None:
the grammar is no xgrammar built-in format, and the parser writes the tag itself.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Sequence
from typing import Any

try:
    import vllm  # noqa: F401
except ImportError as e:  # (the plugin is an optional extra: say how to get the engine)
    raise ImportError("grammar_parse.integrations.vllm runs inside vLLM, which is not installed: "
                      "pip install 'grammar-parse[vllm]'") from e

from vllm.entrypoints.generate.base.protocol import (
    DeltaFunctionCall,
    DeltaMessage,
    DeltaToolCall,
    ExtractedToolCallInformation,
    FunctionCall,
    ToolCall,
)
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
from vllm.entrypoints.openai.responses.protocol import ResponsesRequest
from vllm.logger import init_logger
from vllm.reasoning import ReasoningParser, ReasoningParserManager
from vllm.sampling_params import StructuredOutputsParams
from vllm.tool_parsers import ToolParser, ToolParserManager

from grammar_parse import Grammar, ResponseParser
from grammar_parse._engine.events import Event
from grammar_parse._engine.tools import call_function
from grammar_parse.constrain import to_structural_tag
from grammar_parse.errors import ArgumentError
from grammar_parse.integrations import (
    GENERIC,
    SharedParse,
    grammar_for,
    on_register,
    parser_names,
    prompt_tail,
    register,
    tool_dicts,
)

#: The reasoning field of vLLM's deltas and messages.
_REASONING = "reasoning"
_pending = threading.local()  # the reasoning parser built last on this thread (see the module doc)
_log = init_logger(__name__)


def _report(calls: Iterable[Any]) -> None:
    """Log what is wrong with each call (an unknown tool, arguments against the schema, broken JSON) the
    way vLLM's own parsers log: on the server, by code and JSON path, never the model's text. The
    client gets the call as the model wrote it, as vLLM's own parsers return it."""
    for index, call in enumerate(calls):
        problems = call.get("errors") if isinstance(call, dict) else None
        for problem in problems or ():
            name = (call_function(call) or {}).get("name")
            _log.warning("grammar_parse: tool call %d (%s): %s at %s", index, name, problem.get("code"),
                         problem.get("path"))


class Parsed(str):
    """Content text that carries the message it came from: what ``extract_reasoning`` returns, so that the
    tool parser takes the calls of the same parse (a ``str`` to everything else)."""

    message: dict[str, Any]


def _decode(tokenizer: Any, ids: Sequence[int]) -> str:
    try:
        return str(tokenizer.decode(list(ids), skip_special_tokens=False))
    except TypeError:  # (a tokenizer without the keyword)
        return str(tokenizer.decode(list(ids)))


def _keep_special_tokens(request: Any) -> Any:
    if hasattr(request, "skip_special_tokens"):
        request.skip_special_tokens = False
    return request


def _tool_choice(request: Any) -> Any:
    """The request's tool_choice as :func:`~grammar_parse.constrain.to_structural_tag` takes it when the
    constraint applies to it (``"required"``, or a named function as a dict), else None."""
    choice = request.tool_choice
    if choice == "required":
        return choice
    if hasattr(choice, "model_dump"):  # (Chat Completions' {"type", "function": {"name"}}, Responses' {"type", "name"})
        choice = choice.model_dump(exclude_none=True)
        return choice if choice.get("type") == "function" else None
    return None


def _strict(tools: Sequence[dict[str, Any]]) -> bool:
    return any(tool.get("function", {}).get("strict") is True for tool in tools)


def _client_constrains(request: Any) -> bool:
    """Whether the client asked for a structured output of its own (``structured_outputs``, a
    ``response_format`` or Responses ``text.format`` other than text)."""
    return request.structured_outputs is not None or request.extract_structured_outputs() is not None


class _Joint:
    """What a request's reasoning and tool parser share: the one parse of the request
    (:class:`~grammar_parse.integrations.SharedParse`: grammar, tools, prompt tail, the stream of deltas), and
    what vLLM needs beside it (the tokenizer, where the reasoning goes, where the constraint starts)."""

    def __init__(self, grammar: Grammar, tokenizer: Any) -> None:
        self.shared = SharedParse(grammar, reasoning_field=_REASONING)
        self.reasoning_field = grammar.format.reasoning_field()
        self.tokenizer = tokenizer
        self.reasoning_to_content = True  # (until a reasoning parser is known to be there)
        #: The tool parser set a constraint that holds the reasoning too: the reasoning ends for vLLM's
        #: structured outputs wherever none is open, so the constraint starts at the first token.
        self.constrained_from_start = False

    def set_prompt(self, prompt_ids: Sequence[int] | None) -> None:
        self.shared.start(prefix=prompt_tail(lambda ids: _decode(self.tokenizer, ids), prompt_ids))

    def feed(self, text: str) -> DeltaMessage | None:
        return self.delta(self.shared.feed(text))

    def finish(self) -> DeltaMessage | None:
        if self.shared.finished or self.shared.stream is None:
            return None
        last = self.delta(self.shared.finish())
        _report(self.shared.stream.message.get("tool_calls") or ())
        return last

    def delta(self, deltas: list[dict[str, Any]]) -> DeltaMessage | None:
        """vLLM's DeltaMessage for the Chat Completions deltas of one step (None when they hold nothing)."""
        reasoning: list[str] = []
        content: list[str] = []
        calls: list[DeltaToolCall] = []
        for d in deltas:
            if _REASONING in d:
                (content if self.reasoning_to_content else reasoning).append(d[_REASONING])
            if "content" in d:
                content.append(d["content"])
            for call in d.get("tool_calls", ()):
                function = call.get("function", {})
                calls.append(DeltaToolCall(index=call["index"], id=call.get("id"), type=call.get("type"),
                                           function=DeltaFunctionCall(name=function.get("name"),
                                                                      arguments=function.get("arguments"))))
        if not (reasoning or content or calls):
            return None
        return DeltaMessage(reasoning="".join(reasoning) or None, content="".join(content) or None,
                            tool_calls=calls)

    def message(self, text: str) -> dict[str, Any]:
        """The one-shot message of a whole output (see :func:`grammar_parse.integrations.oneshot_message`)."""
        message = self.shared.message(text, reasoning_as_content=self.reasoning_to_content)
        _report(message.pop("parsed_calls"))
        return message


def _replayed(grammar: Grammar, text: str) -> list[Event] | None:
    """The events of replaying ``text`` (a prompt's tail and the output so far) through the grammar; None
    when the grammar cannot start after it."""
    try:
        return list(ResponseParser(grammar, text, strict=False).initial_events)
    except Exception:
        return None


def _reasoning_open(events: list[Event], field: str | None) -> bool:
    """Whether the replayed events leave a reasoning region open."""
    open_ = False
    for event in events:
        if field is not None and event.get("field") == field and event["type"] in ("region_open", "region_close"):
            open_ = event["type"] == "region_open"
    return open_


class GrammarReasoningParser(ReasoningParser):
    """vLLM reasoning parser for one grammar (subclassed per parser name: ``parser_name``)."""

    parser_name: str = GENERIC
    engine_based_streaming = True

    def __init__(self, tokenizer: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(tokenizer, *args, **kwargs)
        self.joint = _Joint(grammar_for(self.parser_name, tokenizer), tokenizer)
        self.joint.reasoning_to_content = False
        _pending.parser = self

    # the stream
    def set_prompt_token_ids(self, prompt_token_ids: Sequence[int]) -> None:
        self.joint.set_prompt(prompt_token_ids)

    def adjust_initial_state_from_prompt(self, prompt_token_ids: Sequence[int]) -> None:
        self.joint.set_prompt(prompt_token_ids)

    def extract_reasoning_streaming(self, previous_text: str, current_text: str, delta_text: str,
                                    previous_token_ids: Sequence[int], current_token_ids: Sequence[int],
                                    delta_token_ids: Sequence[int]) -> DeltaMessage | None:
        return self.joint.feed(delta_text)

    def has_engine_confirmed_reasoning_end(self) -> bool:
        return False  # (the shared stream sends everything itself: see the module doc)

    def finish_streaming(self) -> DeltaMessage | None:
        """The last deltas, at the end of generation (vLLM calls it on engine-based parsers)."""
        return self.joint.finish()

    # one-shot
    def extract_reasoning(self, model_output: str, request: Any) -> tuple[str | None, str | None]:
        if self.joint.shared.tools is None:
            self.joint.shared.start(tools=getattr(request, "tools", None))
        message = self.joint.message(model_output)
        if not message.get("content") and not message.get("tool_calls"):
            return message.get(_REASONING), None
        content = Parsed(message.get("content") or "")
        content.message = message
        return message.get(_REASONING), content

    # where reasoning ends, for structured outputs
    def is_reasoning_end(self, input_ids: Sequence[int]) -> bool:
        """Whether the text of ``input_ids`` leaves the grammar past its reasoning: a reasoning region was
        closed, or content or a call has begun. When the tool parser's constraint holds the reasoning
        (``constrained_from_start``), wherever no reasoning is open: vLLM then constrains from the first
        token, and a call written before any reasoning or text is checked from its opener on."""
        text = prompt_tail(lambda ids: _decode(self.model_tokenizer, ids), input_ids) or ""
        events = _replayed(self.joint.shared.grammar, text)
        if events is None:  # (a prompt the grammar cannot start after: nothing is known)
            return False
        reasoning = self.joint.reasoning_field
        if self.joint.constrained_from_start:
            return not _reasoning_open(events, reasoning)
        return any((event["type"] == "region_close" and event["field"] == reasoning)
                   or (event["type"] == "region_open" and event["field"] != reasoning)
                   for event in events)

    def extract_content_ids(self, input_ids: list[int]) -> list[int]:
        return list(input_ids)  # (the content is the stream's to cut, not the token ids')

    def adjust_request(self, request: Any) -> Any:
        return _keep_special_tokens(request)


class GrammarToolParser(ToolParser):
    """vLLM tool parser for one grammar (subclassed per parser name: ``parser_name``)."""

    parser_name: str = GENERIC
    engine_based_streaming = True
    supports_required_and_named = False  # (calls are read in the model's own format, whatever tool_choice)
    #: Set True by vLLM's DelegatingParser when no reasoning parser is configured: then nothing holds the
    #: constraint back until the reasoning ends, and the constraint covers the reasoning too.
    skip_reasoning_parsing = False

    def __init__(self, tokenizer: Any, tools: list[Any] | None = None, **kwargs: Any) -> None:
        super().__init__(tokenizer, tools)
        partner = getattr(_pending, "parser", None)
        _pending.parser = None
        if (isinstance(partner, GrammarReasoningParser) and partner.parser_name == self.parser_name
                and partner.model_tokenizer is tokenizer and partner.joint.shared.stream is None):
            self.joint = partner.joint
        else:
            self.joint = _Joint(grammar_for(self.parser_name, tokenizer), tokenizer)
        self.joint.shared.start(tools=tools)

    def extract_tool_calls(self, model_output: str, request: Any) -> ExtractedToolCallInformation:
        message = model_output.message if isinstance(model_output, Parsed) else self.joint.message(model_output)
        calls = [ToolCall(**({"id": call["id"]} if call["id"] else {}),
                          function=FunctionCall(name=call["function"]["name"], arguments=call["function"]["arguments"]))
                 for call in message.get("tool_calls") or ()]
        return ExtractedToolCallInformation(tools_called=bool(calls), tool_calls=calls,
                                            content=message.get("content") or None)

    def extract_tool_calls_streaming(self, previous_text: str, current_text: str, delta_text: str,
                                     previous_token_ids: Sequence[int], current_token_ids: Sequence[int],
                                     delta_token_ids: Sequence[int], request: Any) -> DeltaMessage | None:
        return self.joint.feed(delta_text)

    def finish_streaming(self) -> DeltaMessage | None:
        """The last deltas, at the end of generation (vLLM calls it on engine-based parsers)."""
        return self.joint.finish()

    def adjust_request(self, request: Any) -> Any:
        return _keep_special_tokens(super().adjust_request(self.constrain(request)))

    def constrain(self, request: Any) -> Any:
        """Set the grammar's structural tag on a request whose calls it should constrain (see the module
        doc); any other request, or one the grammar cannot constrain, is returned as it came."""
        if not isinstance(request, (ChatCompletionRequest, ResponsesRequest)):
            return request
        tools = tool_dicts(request.tools)
        choice = _tool_choice(request)
        if choice is None and request.tool_choice == "auto" and tools and _strict(tools):
            choice = "auto"
        if not tools or choice is None or _client_constrains(request):
            return request
        # vLLM constrains from the first token when no reasoning parser is set, or when a Chat Completions
        # request drops the reasoning (ChatCompletionRequest.resolve_reasoning_ended), or when the reasoning
        # parser (this parser's partner) says the prompt leaves no reasoning open; otherwise the constraint
        # starts where the reasoning parser says the reasoning has ended. A chat request whose output starts
        # outside a reasoning gets the constraint with the reasoning in it, and its partner reports the
        # reasoning ended at once; one whose output starts inside it (ERNIE's, which opens at the start)
        # gets it from the content on, as does a Responses request (vLLM asks its own reasoner there).
        reasoning = self.skip_reasoning_parsing or (isinstance(request, ChatCompletionRequest)
                                                    and not request.include_reasoning)
        partnered = not self.joint.reasoning_to_content and isinstance(request, ChatCompletionRequest)
        if not reasoning and partnered:
            events = _replayed(self.joint.shared.grammar, self.joint.shared.prefix)
            reasoning = self.joint.constrained_from_start = \
                events is not None and not _reasoning_open(events, self.joint.reasoning_field)
        try:
            tag = to_structural_tag(self.joint.shared.grammar, tools=tools, tool_choice=choice,
                                    parallel_tool_calls=request.parallel_tool_calls is not False,
                                    prefix=self.joint.shared.prefix or None, reasoning=reasoning)
        except ArgumentError as e:
            _log.info_once("grammar_parse: %s leaves tool calls unconstrained (%s): %s", self.parser_name,
                           e.code, str(e))
            return request
        params = StructuredOutputsParams(structural_tag=json.dumps(tag))
        if isinstance(request, ResponsesRequest):
            request._parser_structured_outputs = params  # (keeps the client's text settings)
        else:
            request.structured_outputs = params
            request.response_format = None
        return request


def _register(name: str) -> None:
    """Register the parser pair for one parser name with vLLM's managers."""
    suffix = "".join(part.capitalize() for part in name.split("_"))
    reasoning = type(f"{suffix}ReasoningParser", (GrammarReasoningParser,),
                     {"parser_name": name, "__module__": __name__})
    tool = type(f"{suffix}ToolParser", (GrammarToolParser,), {"parser_name": name, "__module__": __name__})
    ReasoningParserManager.register_module(name, module=reasoning)
    ToolParserManager.register_module(name, module=tool)


def install(names: Iterable[str] | None = None) -> list[str]:
    """Register the parsers (every name by default) with vLLM; idempotent. Returns the names."""
    names = [GENERIC, *parser_names()] if names is None else list(names)
    for name in names:
        _register(name)
    return names


install()
on_register(_register)

__all__ = ["GrammarReasoningParser", "GrammarToolParser", "Parsed", "install", "register"]
