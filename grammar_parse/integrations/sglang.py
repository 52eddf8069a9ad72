"""Every grammar as an SGLang tool-call parser and reasoning parser (``pip install grammar-parse[sglang]``).

::

    python -m sglang.launch_server --model-path Qwen/Qwen3-8B \\
        --tool-call-parser gp_qwen3 --reasoning-parser gp_qwen3

SGLang's plugin loader (``sglang.srt.plugins.load_plugins``, run in every server process before the
arguments are parsed) calls :func:`install` through the ``sglang.srt.plugins`` entry point. It registers,
in SGLang's own ``FunctionCallParser.ToolCallParserEnum`` and ``ReasoningParser.DetectorMap``, a detector
pair under every name of :func:`grammar_parse.integrations.parser_names` (``gp_qwen3``, ``gp_glm45``,
...), ``gp`` (the grammar the model's tokenizer carries) and any grammar
:func:`grammar_parse.integrations.register` adds later.

**One parse per request, handed from the reasoning detector to the tool detector.** SGLang runs the
reasoning parser first and gives the tool-call parser the normal text it returns. A grammar reads the
whole output at once (a call written inside the reasoning is still a call), so the reasoning detector
runs the grammar on the raw output (one :class:`~grammar_parse.integrations.SharedParse`, its stream of deltas,
per request, fed only the new text of each step: a step costs its own length) and keeps the reasoning.
When SGLang says a tool parser reads its normal text (``tool_call_parser_active``), that text is a
:class:`Handoff`: the content as a ``str``, carrying the content and call deltas of the step (streaming)
or the parsed message (one-shot). The tool detector reads those instead of parsing again, so the result
is grammar_parse's own ``chat_message`` for the output. The handoff needs no registry pairing the two
detectors of a request (SGLang interleaves requests on one event loop): the string itself carries it.
SGLang builds both detectors per request (per choice), so a session never sees two outputs.

Alone, each detector still gives the whole message's share it can: ``--reasoning-parser`` without a tool
parser (or a request whose tool parsing is off: no tools, ``tool_choice="none"``) sends the content with
all markup removed and drops calls (the client asked for none); ``--tool-call-parser`` alone (or
``separate_reasoning=false``) parses the raw output itself and sends the reasoning as content, markup
removed, as SGLang sends reasoning when it does not separate it. Parsing is lenient: model output never
raises; a call whose arguments are broken is still a call, with the arguments text that was valid JSON.

**The prompt and special tokens.** Where the parse starts depends on the prompt (a pre-filled
``<think>``, a tool result). :func:`install` adds three hooks through SGLang's ``HookRegistry``: the chat
server treats a request served by our parsers as it treats its ``response_template`` parsers
(``skip_special_tokens=False``, since most grammars' delimiters are special tokens, and the rendered
prompt recorded on the request), and ``ReasoningParser`` / ``FunctionCallParser`` hand that prompt (and
the request's tools) to our detectors. Without them (the parsers used directly) the parse starts at the
output's start, as ``prefix=""``.

**Constrained tool calls.** Calls are read in the model's own format whatever ``tool_choice`` says, and
for ``tool_choice="required"``, a named tool, or ``"auto"`` with a strict tool (or SGLang's
``SGLANG_TOOL_STRICT_LEVEL`` at ``function`` and above), ``FunctionCallParser.get_structure_constraint``
asks the tool detector's ``get_structural_tag`` for the constraint, which is the grammar's own
(:func:`grammar_parse.constrain.to_structural_tag`, as xgrammar's ``StructuralTag``): reasoning and content
are free text, and a call, from its trigger on, must be one of the tools with arguments that follow its
schema. SGLang's ``thinking_mode`` says whether the tag covers the reasoning: False (what SGLang passes
whenever ``--reasoning-parser`` is set, since its reasoner grammar backend then holds the constraint
back until the reasoning ends) leaves the reasoning out (``reasoning=False``). A request with a
``response_format``, ``regex`` or ``ebnf`` of its own is SGLang's to settle (it refuses required calls
under another constraint and drops the tool constraint for ``"auto"``).

A grammar the constraint cannot express (``constrain.unsupported``), or a request it cannot constrain,
gets no tag (logged once at info level) and is read unconstrained, as before: ``supports_structural_tag``
says whether the detector's grammar (and the request's tools, once asked) has a tag, and
``parses_required_natively`` is its opposite, so that SGLang never falls back to its JSON-array
constraint for a grammar whose calls are not a JSON array. ``structure_info`` (SGLang's legacy
per-tool tags) still refuses: SGLang only reads it when ``supports_structural_tag`` is True and the
detector's own tag is None, which does not happen.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

try:
    import sglang  # noqa: F401
except ImportError as e:  # (the plugin is an optional extra: say how to get the engine)
    raise ImportError("grammar_parse.integrations.sglang runs inside SGLang, which is not installed: "
                      "pip install 'grammar-parse[sglang]'") from e

from sglang.srt.function_call.base_format_detector import BaseFormatDetector
from sglang.srt.function_call.core_types import StreamingParseResult, ToolCallItem
from sglang.srt.function_call.function_call_parser import FunctionCallParser
from sglang.srt.parser.reasoning_parser import BaseReasoningFormatDetector, ReasoningParser
from sglang.srt.plugins import hook_registry
from sglang.srt.plugins.hook_registry import HookRegistry, HookType

from grammar_parse.constrain import to_structural_tag
from grammar_parse.errors import ArgumentError
from grammar_parse.integrations import (
    GENERIC,
    SharedParse,
    grammar_for,
    on_register,
    parser_names,
    tool_dicts,
)

#: The reasoning field of grammar_parse's messages and deltas (SGLang's own name too).
_REASONING = "reasoning_content"
#: How much of the rendered prompt the parser starts after: the prompt's last turn opener and any
#: pre-filled reasoning opener are a few dozen characters; reading a 240,000-character prompt whole costs
#: 0.24 s per request, 4,096 characters about 4 ms.
_PROMPT_TAIL_CHARS = 4096
_installed = False
_log = logging.getLogger(__name__)
_unconstrained_logged: set[tuple[str, str]] = set()  # (parser name, reason): logged once each


def _log_unconstrained(parser_name: str, error: ArgumentError) -> None:
    key = (parser_name, str(error))
    if key not in _unconstrained_logged:
        _unconstrained_logged.add(key)
        _log.info("grammar_parse: %s leaves tool calls unconstrained (%s): %s", parser_name, error.code, error)


class Handoff(str):
    """The normal text the reasoning detector hands the tool detector: the content, carrying the deltas of
    the same parse (streaming) or its message (one-shot), so the tool detector need not parse again."""

    deltas: list[dict[str, Any]]
    message: dict[str, Any] | None


def _handoff(text: str, deltas: list[dict[str, Any]], message: dict[str, Any] | None = None) -> Handoff:
    out = Handoff(text)
    out.deltas = deltas
    out.message = message
    return out


class _ReasoningResult:
    """What ``ReasoningParser`` reads from a detector (SGLang's own result class turns an empty
    :class:`Handoff` into a plain ``""`` and would lose the calls it carries)."""

    def __init__(self, normal_text: str = "", reasoning_text: str = "") -> None:
        self.normal_text = normal_text
        self.reasoning_text = reasoning_text


def _prompt_tail(prompt: str | None) -> str:
    return (prompt or "")[-_PROMPT_TAIL_CHARS:]


def _text(deltas: Iterable[dict[str, Any]], fields: tuple[str, ...]) -> str:
    return "".join(d[f] for d in deltas for f in fields if f in d)


class GrammarReasoningDetector(BaseReasoningFormatDetector):
    """SGLang reasoning detector for one grammar (subclassed per parser name: ``parser_name``); runs the
    whole grammar and hands content and calls on (see the module doc)."""

    parser_name: str = GENERIC

    def __init__(self, stream_reasoning: bool = True, force_reasoning: bool = False, tokenizer: Any = None,
                 tool_call_parser_active: bool = False, **kwargs: Any) -> None:
        self.grammar = grammar_for(self.parser_name, tokenizer)
        opener, closer = self.grammar.format.reasoning_delimiters
        super().__init__(opener, closer, force_reasoning=force_reasoning, stream_reasoning=stream_reasoning,
                         **kwargs)
        self.hands_off = tool_call_parser_active
        self.shared = SharedParse(self.grammar, reasoning_field=_REASONING)
        self._held = ""  # reasoning held back while stream_reasoning is False
        self._last: Handoff | None = None

    def start(self, prompt: str | None, tools: Any = None) -> None:
        """The request's rendered prompt and tools (from the ``ReasoningParser`` hook)."""
        self.shared.start(_prompt_tail(prompt), tools)

    # one-shot
    def detect_and_parse(self, text: str) -> _ReasoningResult:
        message = self.shared.message(text)
        content = message.get("content") or ""
        reasoning = message.get(_REASONING) or ""
        return _ReasoningResult(_handoff(content, [], message) if self.hands_off else content, reasoning)

    # streaming
    def parse_streaming_increment(self, new_text: str) -> _ReasoningResult:
        return self._split(self.shared.feed(new_text), final=False)

    def finish(self) -> _ReasoningResult:
        """The last deltas. Handed off, content and calls join the text handed on this step, which SGLang
        passes to the tool parser after this call."""
        handed = self._last
        result = self._split(self.shared.finish(), final=True)
        if isinstance(result.normal_text, Handoff) and handed is not None:
            handed.deltas.extend(result.normal_text.deltas)
            result.normal_text = ""
        return result

    def _split(self, deltas: list[dict[str, Any]], *, final: bool) -> _ReasoningResult:
        reasoning = _text(deltas, (_REASONING,))
        rest = [d for d in deltas if "content" in d or "tool_calls" in d]
        if not self.stream_reasoning:  # (reasoning goes out whole, once the answer begins or at the end)
            self._held += reasoning
            reasoning, self._held = (self._held, "") if rest or final else ("", self._held)
        content = _text(rest, ("content",))
        if not self.hands_off:
            return _ReasoningResult(content, reasoning)
        self._last = _handoff(content, rest)
        return _ReasoningResult(self._last, reasoning)


class GrammarToolDetector(BaseFormatDetector):
    """SGLang tool-call detector for one grammar (subclassed per parser name: ``parser_name``); reads the
    calls the reasoning detector hands on, or parses the raw output itself (see the module doc)."""

    parser_name: str = GENERIC

    def __init__(self, tokenizer: Any = None) -> None:
        super().__init__()
        self.grammar = grammar_for(self.parser_name, tokenizer)
        self.shared = SharedParse(self.grammar, reasoning_field=_REASONING)  # (when it serves alone)
        self._has_tag: bool | None = None  # (whether the grammar, or the last request asked, has a tag)

    def start(self, prompt: str | None, tools: Any = None) -> None:
        """The request's rendered prompt and tools (from the ``FunctionCallParser`` hook: ``has_tool_call``
        is given no tools, and its parse is the one ``detect_and_parse`` returns)."""
        self.shared.start(_prompt_tail(prompt), tools)

    # one-shot
    def _message(self, text: str, tools: Any) -> dict[str, Any]:
        if isinstance(text, Handoff) and text.message is not None:
            return text.message
        if not self.shared.tools:
            self.shared.start(tools=tools)
        return self.shared.message(text, reasoning_as_content=True)  # (no reasoning parser: the reasoning is content)

    def has_tool_call(self, text: str) -> bool:
        """Whether the output has calls, or (parsed raw) markup the content must lose: SGLang keeps the raw
        text as content when this says no."""
        message = self._message(text, None)
        return bool(message.get("tool_calls")) or (
            not isinstance(text, Handoff) and (message.get("content") or "") != text)

    def detect_and_parse(self, text: str, tools: list[Any]) -> StreamingParseResult:
        message = self._message(text, tools)
        calls = [ToolCallItem(tool_index=i, name=call["function"]["name"], parameters=call["function"]["arguments"])
                 for i, call in enumerate(message.get("tool_calls") or ())]
        return StreamingParseResult(normal_text=message.get("content") or "", calls=calls)

    # streaming
    def parse_streaming_increment(self, new_text: str, tools: list[Any]) -> StreamingParseResult:
        if isinstance(new_text, Handoff):
            return self._result(new_text.deltas)
        if self.shared.stream is None and not self.shared.tools:
            self.shared.start(tools=tools)
        return self._result(self.shared.feed(new_text))

    def finish(self, tools: list[Any]) -> StreamingParseResult:
        if self.shared.stream is None:  # (handed off: the reasoning detector has sent everything)
            return StreamingParseResult()
        return self._result(self.shared.finish())

    def _result(self, deltas: list[dict[str, Any]]) -> StreamingParseResult:
        """SGLang's result for a step's deltas, keeping the base class's per-call records in step (the chat
        server compares them at the end to send arguments never streamed: here there are none)."""
        calls: list[ToolCallItem] = []
        for delta in deltas:
            for call in delta.get("tool_calls", ()):
                index, function = call["index"], call.get("function", {})
                fragment = function.get("arguments") or ""
                while len(self.streamed_args_for_tool) <= index:
                    self.streamed_args_for_tool.append("")
                    self.prev_tool_call_arr.append({})
                if "id" in call:
                    self.prev_tool_call_arr[index] = {"name": function.get("name"), "arguments": ""}
                    self.current_tool_id, self.current_tool_name_sent = index, True
                self.streamed_args_for_tool[index] += fragment
                self.prev_tool_call_arr[index]["arguments"] = self.streamed_args_for_tool[index]
                calls.append(ToolCallItem(tool_index=index, name=function.get("name") if "id" in call else None,
                                          parameters=fragment))
        text = _text(deltas, ("content",) if self.shared.stream is None else (_REASONING, "content"))
        return StreamingParseResult(normal_text=text, calls=calls)

    # constrained decoding
    def get_structural_tag(self, tools: Any = None, tool_choice: Any = "auto", thinking_mode: bool = False,
                           parallel_tool_calls: bool = True, **kwargs: Any) -> Any:
        """The grammar's constraint for these tools as xgrammar's ``StructuralTag`` (what SGLang serializes
        with ``model_dump``), or None when the grammar or the request cannot be constrained."""
        from xgrammar import StructuralTag  # (SGLang's own grammar backend, installed with it)

        choice = tool_choice.model_dump(exclude_none=True) if hasattr(tool_choice, "model_dump") else tool_choice
        try:
            tag = to_structural_tag(self.grammar, tools=tool_dicts(tools) or [], tool_choice=choice,
                                    parallel_tool_calls=parallel_tool_calls is not False,
                                    prefix=self.shared.prefix or None, reasoning=bool(thinking_mode))
        except ArgumentError as e:
            _log_unconstrained(self.parser_name, e)
            self._has_tag = False
            return None
        self._has_tag = True
        return StructuralTag.model_validate(tag)

    def supports_structural_tag(self) -> bool:
        """Whether the grammar has a structural tag (and, once :meth:`get_structural_tag` was asked, the
        request has one): when not, SGLang must not fall back to its legacy per-tool tags."""
        if self._has_tag is None:
            try:
                to_structural_tag(self.grammar, tools=[], tool_choice="none")
                self._has_tag = True
            except ArgumentError:
                self._has_tag = False
        return self._has_tag

    def parses_required_natively(self) -> bool:
        """Whether ``tool_choice="required"`` goes unconstrained: when the grammar has no tag. SGLang's
        fallback, a JSON array of calls, is no format these grammars read."""
        return not self.supports_structural_tag()

    @classmethod
    def parses_without_tools(cls) -> bool:
        return True  # (call markup never reaches the content, whether or not the request declared tools)

    def structure_info(self) -> Any:
        raise NotImplementedError(f"{self.parser_name} writes its whole constraint in get_structural_tag and "
                                  "has no per-tool structure info")


# the hooks (see the module doc)
def _ours(name: Any) -> bool:
    return isinstance(name, str) and isinstance(FunctionCallParser.ToolCallParserEnum.get(name), type) and (
        issubclass(FunctionCallParser.ToolCallParserEnum[name], GrammarToolDetector))


def _ours_reasoning(name: Any) -> bool:
    detector = ReasoningParser.DetectorMap.get(name.lower()) if isinstance(name, str) else None
    return isinstance(detector, type) and issubclass(detector, GrammarReasoningDetector)


def after_reasoning_parser_init(result: Any, parser: Any, model_type: Any = None, stream_reasoning: Any = True,
                                force_reasoning: Any = None, request: Any = None, *args: Any,
                                prefix: str | None = None, **kwargs: Any) -> None:
    """``ReasoningParser.__init__`` hook: give our detector the request's prompt and tools."""
    if isinstance(getattr(parser, "detector", None), GrammarReasoningDetector):
        if prefix is None:
            prefix = getattr(request, "_response_parser_prefix", "")
        parser.detector.start(prefix, getattr(request, "tools", None))


def after_function_call_parser_init(result: Any, parser: Any, *args: Any, prefix: str = "", **kwargs: Any) -> None:
    """``FunctionCallParser.__init__`` hook: give our detector the request's prompt and tools."""
    if isinstance(getattr(parser, "detector", None), GrammarToolDetector):
        parser.detector.start(prefix, getattr(parser, "tools", None))


def after_requires_response_template_detokenization(result: Any, serving: Any, *args: Any, **kwargs: Any) -> bool:
    """``OpenAIServingChat._requires_response_template_detokenization`` hook: a request our parsers read
    keeps its special tokens and records its rendered prompt, as for SGLang's response_template parsers."""
    return bool(result) or _ours(getattr(serving, "tool_call_parser", None)) or _ours_reasoning(
        getattr(serving, "reasoning_parser", None))


_HOOKS = [
    ("sglang.srt.parser.reasoning_parser.ReasoningParser.__init__", after_reasoning_parser_init),
    ("sglang.srt.function_call.function_call_parser.FunctionCallParser.__init__", after_function_call_parser_init),
    ("sglang.srt.entrypoints.openai.serving_chat.OpenAIServingChat._requires_response_template_detokenization",
     after_requires_response_template_detokenization),
]


def _register(name: str) -> None:
    """Register the detector pair for one parser name in SGLang's registries (and its CLI name lists)."""
    from sglang.srt.function_call.parser_names import TOOL_CALL_PARSER_NAMES
    from sglang.srt.parser.reasoning_parser_names import REASONING_PARSER_NAMES

    suffix = "".join(part.capitalize() for part in name.split("_"))
    FunctionCallParser.ToolCallParserEnum[name] = type(f"{suffix}ToolDetector", (GrammarToolDetector,),
                                                       {"parser_name": name, "__module__": __name__})
    ReasoningParser.DetectorMap[name] = type(f"{suffix}ReasoningDetector", (GrammarReasoningDetector,),
                                             {"parser_name": name, "__module__": __name__})
    for names in (TOOL_CALL_PARSER_NAMES, REASONING_PARSER_NAMES):
        if name not in names:
            names.append(name)


def install() -> list[str]:
    """Register every parser name with SGLang and the hooks of the module doc; idempotent. SGLang's plugin
    loader calls it (entry point group ``sglang.srt.plugins``) and applies the hooks after; called outside
    the loader, it applies them itself. Returns the names."""
    global _installed
    names = [GENERIC, *parser_names()]
    for name in names:
        _register(name)
    if not _installed:
        _installed = True
        on_register(_register)
        for target, hook in _HOOKS:
            HookRegistry.register(target, hook, HookType.AFTER)
        if hook_registry._current_plugin_source.get() is None:
            HookRegistry.apply_hooks()  # (a target that cannot be imported here is logged and skipped)
    return names


__all__ = ["GrammarReasoningDetector", "GrammarToolDetector", "Handoff", "install"]
