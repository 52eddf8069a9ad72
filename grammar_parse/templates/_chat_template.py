"""A model's chat template: loaded from the model's files and rendered exactly as transformers renders it,
with a hostile template contained.

Rendering is transformers 5.23's ``apply_chat_template(..., tokenize=False)``: the same Jinja environment
(``ImmutableSandboxedEnvironment`` with ``trim_blocks`` and ``lstrip_blocks``, the ``{% generation %}`` tag
and ``loopcontrols``; its ``tojson``, ``raise_exception``, ``strftime_now``, ``dict`` and a ``namespace``
that refuses underscore names), the same inputs (keys whose value is None dropped from messages, every
input rebuilt from plain JSON types, reasoning aliased under ``reasoning_content`` and ``thinking``), the
special tokens as variables, and the same ``continue_final_message``. So a prompt rendered here is the
prompt the model was trained on, and ``tests/test_chat_template.py`` holds 70 real templates to that.

Chat templates come from model repositories and are untrusted code. Beyond the sandbox, a render is held
to a time limit (``time_limit``, 5 s: the clock is read at every loop iteration and macro call, so loops
that write nothing are stopped too) and a size limit
(``max_output_chars``, 16 million characters) that applies to the output as it is written and to every
value the template builds: ``'a' * 10**9``, ``2 ** 10**8``, ``'%1000000000s' % x``, a padding filter
or str method with a huge width, ``x ~ x`` doubled in a loop... each fails at once with
``chat_template.too_large`` instead of allocating. What is not covered: memory held by many values each
under the limit (bounded only by the time limit), and a single filter or operation that runs long on a
value under the limit (it is not interrupted; the time limit stops the template at its next iteration).
Renders are thread-safe: each render's limits live in a context variable, not in the shared template.

jinja2 is an optional dependency (``pip install 'grammar-parse[chat-templates]'``), imported on first use.
"""

from __future__ import annotations

import contextvars
import dataclasses
import json
import os
import re
import sys
import time
import types
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, cast

from .._engine.arguments import expect_text, messages_problem, template_source_problem
from .._engine.json_input import JSONLimitError, load_user_json
from .._engine.shapes import REASONING_FIELDS
from ..errors import ChatTemplateError

if TYPE_CHECKING:
    import jinja2
    import jinja2.ext
    import jinja2.utils
    from jinja2.compiler import CodeGenerator
    from jinja2.sandbox import ImmutableSandboxedEnvironment as _SandboxBase
    from jinja2.sandbox import SandboxedEscapeFormatter, SandboxedFormatter
else:
    _SandboxBase = object  # (jinja2 is imported on first use: _environment_class mixes the guards into its sandbox)

# Names a message's reasoning is passed under; templates read one of them (transformers fills both).
REASONING_KEYS = REASONING_FIELDS  # (the name this module's readers know)

#: The special tokens transformers passes to every template (``tokenizer.special_tokens_map``).
SPECIAL_TOKEN_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")

MAX_SOURCE_CHARS = 1_000_000  # the largest Hub templates are ~40 KB
MAX_OUTPUT_CHARS = 16_000_000
TIME_LIMIT = 5.0  # seconds; real templates render in milliseconds

# transformers refuses older jinja2 releases: they have known sandbox escapes.
_JINJA_MINIMUM = (3, 1, 6)
_INSTALL = "Install it with: pip install 'grammar-parse[chat-templates]'"
# jinja2 compiles a template without a name under this file name; its traceback frames carry the
# template's own line numbers.
_TEMPLATE_FILE = "<template>"
# The filter the clock checks call: a filter is a plain function call in the compiled template (a global
# would go through the sandbox's call()); templates cannot name it by accident.
_CLOCK_FILTER = "__grammar_parse_check_clock__"
# transformers' marker for continue_final_message.
_CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "

Messages = Sequence[Mapping[str, Any]]
Now = Callable[[], datetime]


class ChatTemplate:
    """A compiled chat template and the special tokens it is rendered with (``bos_token``, ...).

    ``tool_use`` is the source of the model's "tool_use" template, which transformers renders instead
    when tools are given and no template was named. ``now`` is the clock ``strftime_now`` reads (the
    wall clock by default); ``max_output_chars`` and ``time_limit`` bound each render.
    """

    def __init__(self, source: str, *, special_tokens: Mapping[str, str] | None = None,
                 origin: str = "the chat template", tool_use: str | None = None, now: Now | None = None,
                 max_output_chars: int = MAX_OUTPUT_CHARS, time_limit: float = TIME_LIMIT) -> None:
        self.source = expect_text(source, "source")
        self.special_tokens = dict(special_tokens or {})
        self.origin = origin
        self.tool_use = tool_use
        self.now = now or datetime.now
        self.max_output_chars = max_output_chars
        self.time_limit = time_limit
        self._compiled = _compile_checked(source, origin)

    def __repr__(self) -> str:
        return f"ChatTemplate(origin={self.origin!r}, {len(self.source)} chars)"

    def render(self, messages: Messages, *, tools: Sequence[Mapping[str, Any]] | None = None,
               documents: Sequence[Mapping[str, Any]] | None = None, add_generation_prompt: bool | None = None,
               continue_final_message: bool | str = False, now: Now | None = None,
               max_output_chars: int | None = None, time_limit: float | None = None, **kwargs: Any) -> str:
        """The prompt for ``messages`` (and ``tools``), as ``tokenizer.apply_chat_template(..., tokenize=False)``.

        ``add_generation_prompt`` is True unless ``continue_final_message`` is set (then False: the two
        exclude each other). ``kwargs`` reach the template as variables (``enable_thinking=False``, ...)
        and override the special tokens; ``now``, ``max_output_chars`` and ``time_limit`` override the
        template's own for this render (they are not template variables). Raises :class:`ChatTemplateError`.
        """
        if isinstance(messages, (str, bytes, bytearray, Mapping)) or not isinstance(messages, Iterable):
            raise messages_problem(messages)
        messages = list(messages)
        if not messages:
            raise _input_error("the conversation is empty", self.origin, "Pass at least one message.")
        generation = not continue_final_message if add_generation_prompt is None else add_generation_prompt
        if continue_final_message and generation:
            raise _input_error("continue_final_message and add_generation_prompt exclude each other", self.origin,
                               "Pass add_generation_prompt=False to continue the last message.")
        source, compiled, origin = self.source, self._compiled, self.origin
        if tools is not None and self.tool_use is not None:
            source, origin = self.tool_use, f"{self.origin} (tool_use)"
            compiled = _compile_checked(source, origin)
        # transformers drops keys set to None: templates handle a missing key, not always a None one.
        chat = [{k: v for k, v in m.items() if v is not None} if isinstance(m, Mapping) else m for m in messages]
        try:
            plain_tools = _plain(_tool_schemas(tools, origin))
            plain_documents = _plain(_checked_documents(documents, origin))
            variables = _plain({**self.special_tokens, **kwargs})
            chat = _plain(chat)
        except RecursionError:
            raise _input_error("the inputs nest deeper than Python can copy", origin,
                               "Pass messages, tools and documents of reasonable depth.") from None
        for message in chat:
            if not isinstance(message, dict):
                raise _input_error(f"chat messages should be dicts, dataclasses or pydantic models, but got "
                                   f"{repr(message)[:80]}", origin, "Pass each message as a dict with a role.")
        chat = [_aliased(message) for message in chat]
        final = _mark_final(chat, continue_final_message, source, origin) if continue_final_message else None
        context = {"messages": chat, "tools": plain_tools, "documents": plain_documents,
                   "add_generation_prompt": generation, **variables}
        limits = _Limits(max_output_chars if max_output_chars is not None else self.max_output_chars,
                         time_limit if time_limit is not None else self.time_limit, now or self.now)
        rendered = _run(compiled, context, limits, origin)
        return rendered if final is None else _cut_final(rendered, final, origin)


def render_prompt(messages: Messages, template: ChatTemplate | str | os.PathLike[str] | Mapping[str, Any], *,
                  tools: Sequence[Mapping[str, Any]] | None = None, add_generation_prompt: bool | None = None,
                  **kwargs: Any) -> str:
    """The prompt a model's chat template renders for ``messages``.

    ``template`` is a :class:`ChatTemplate`, Jinja source text (it holds ``{{`` or ``{%``), a path
    (a template file, ``tokenizer_config.json``, ``chat_template.json`` or a model directory) or a
    tokenizer config dict: anything :func:`load_chat_template` loads.
    """
    if not isinstance(template, ChatTemplate):
        template = load_chat_template(template)
    return template.render(messages, tools=tools, add_generation_prompt=add_generation_prompt, **kwargs)


def load_chat_template(source: str | os.PathLike[str] | Mapping[str, Any], *, name: str | None = None) -> ChatTemplate:
    """A model's chat template, from a tokenizer config (a dict or ``tokenizer_config.json``), a
    ``chat_template.jinja`` or ``chat_template.json`` file, a model directory, or Jinja source text.

    A model directory is read as transformers reads it: ``chat_template.jinja`` (the "default") and
    ``additional_chat_templates/*.jinja`` (named by file) take priority over ``chat_template.json``,
    which takes priority over ``tokenizer_config.json``'s ``chat_template``. Of several templates,
    ``name`` picks one; without it the "default" is rendered, and the "tool_use" one when tools are
    given (as transformers does; with neither, name one). Special tokens come from the tokenizer config
    (and a legacy ``special_tokens_map.json``) found with the template.
    """
    if isinstance(source, Mapping):
        return _from_config(source, name, "the tokenizer config", _special_tokens(source))
    if not isinstance(source, (str, os.PathLike)):
        raise template_source_problem(source, "source")
    if isinstance(source, str) and ("{{" in source or "{%" in source):
        return _select("Jinja text", {"default": source}, name, {})
    path = Path(source)
    if path.is_dir():
        return _from_directory(path, name)
    if not path.is_file():
        raise ChatTemplateError(
            "no such file or directory", code="chat_template.file", origin=str(path),
            hint="Pass a model directory, a tokenizer_config.json, chat_template.jinja or chat_template.json, "
                 "or Jinja text (text is told from a path by holding '{{' or '{%').")
    if path.suffix == ".json":
        config = _read_json(path)
        tokens = _special_tokens(config) if path.name != "chat_template.json" else _directory_tokens(path.parent)
        return _from_config(config, name, str(path), tokens)
    return _select(str(path), {"default": _read_text(path)}, name, _directory_tokens(path.parent))


# --- loading ----------------------------------------------------------------------------------------------

def _from_directory(directory: Path, name: str | None) -> ChatTemplate:
    templates: dict[str, str] = {}
    if (directory / "chat_template.jinja").is_file():
        templates["default"] = _read_text(directory / "chat_template.jinja")
    extra = directory / "additional_chat_templates"
    if extra.is_dir():
        for file in sorted(extra.glob("*.jinja")):
            templates[file.name.removesuffix(".jinja")] = _read_text(file)
    tokens = _directory_tokens(directory)
    if templates:
        return _select(str(directory), templates, name, tokens)
    for file_name in ("chat_template.json", "tokenizer_config.json"):
        file = directory / file_name
        if file.is_file():
            config = _read_json(file)
            if config.get("chat_template") is not None:
                return _from_config(config, name, str(file), tokens)
    raise ChatTemplateError(
        "the model directory holds no chat template", code="chat_template.missing", origin=str(directory),
        hint="Add a chat_template.jinja file (or a \"chat_template\" entry in tokenizer_config.json).")


def _from_config(config: Mapping[str, Any], name: str | None, origin: str, tokens: Mapping[str, str]) -> ChatTemplate:
    value = config.get("chat_template")
    if value is None:
        raise ChatTemplateError(
            "there is no \"chat_template\" entry", code="chat_template.missing", origin=origin,
            hint="Add \"chat_template\": \"<Jinja source>\" to it, or load the model's chat_template.jinja.")
    if isinstance(value, str):
        return _select(origin, {"default": value}, name, tokens)
    if isinstance(value, list) and all(isinstance(entry, Mapping) and isinstance(entry.get("name"), str)
                                       and isinstance(entry.get("template"), str) for entry in value):
        return _select(origin, {entry["name"]: entry["template"] for entry in value}, name, tokens)
    raise ChatTemplateError(
        f"\"chat_template\" is a {type(value).__name__}", code="chat_template.config", origin=origin,
        hint="Make it the Jinja source text, or a list of {\"name\": ..., \"template\": ...} entries.")


def _select(origin: str, templates: Mapping[str, str], name: str | None, tokens: Mapping[str, str]) -> ChatTemplate:
    """transformers' ``get_chat_template``: the named template, else the default (tool_use with tools)."""
    names = ", ".join(repr(n) for n in sorted(templates))
    if name is not None:
        if name not in templates:
            raise ChatTemplateError(f"there is no chat template named {name!r} (there are: {names})",
                                    code="chat_template.name", origin=origin, hint="Pass one of these names.")
        return ChatTemplate(templates[name], special_tokens=tokens, origin=_named(origin, templates, name))
    if "default" not in templates:
        raise ChatTemplateError(f"there are several chat templates and none is the default (there are: {names})",
                                code="chat_template.name", origin=origin, hint="Pass name= one of these.")
    return ChatTemplate(templates["default"], special_tokens=tokens, origin=origin, tool_use=templates.get("tool_use"))


def _named(origin: str, templates: Mapping[str, str], name: str) -> str:
    return origin if len(templates) == 1 else f"{origin} (chat template {name!r})"


def _special_tokens(config: Mapping[str, Any]) -> dict[str, str]:
    """The tokens transformers' ``special_tokens_map`` holds for this config: the seven standard ones (a
    string, or an AddedToken dict's "content"), other ``*_token`` strings and a dict of
    ``extra_special_tokens`` (v5's model-specific tokens, which templates also see)."""
    def text(value: Any) -> str | None:
        if isinstance(value, str):
            return value
        if isinstance(value, Mapping) and isinstance(value.get("content"), str):
            return str(value["content"])
        return None

    tokens = {key: token for key in SPECIAL_TOKEN_KEYS if (token := text(config.get(key))) is not None}
    tokens.update({key: value for key, value in config.items()
                   if key.endswith("_token") and key not in tokens and isinstance(value, str)})
    extra = config.get("extra_special_tokens")
    if isinstance(extra, Mapping):
        tokens.update({str(key): token for key, value in extra.items() if (token := text(value)) is not None})
    return tokens


def _directory_tokens(directory: Path) -> dict[str, str]:
    config_file = directory / "tokenizer_config.json"
    config = _read_json(config_file) if config_file.is_file() else {}
    tokens = _special_tokens(config)
    legacy = directory / "special_tokens_map.json"
    # transformers reads the legacy map only for configs without added_tokens_decoder, and lets it win.
    if legacy.is_file() and "added_tokens_decoder" not in config:
        tokens.update(_special_tokens(_read_json(legacy)))
    return tokens


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ChatTemplateError(f"cannot be read: {exc}", code="chat_template.file", origin=str(path),
                                hint="Pass a readable UTF-8 file.") from None


def _read_json(path: Path) -> Mapping[str, Any]:
    try:
        value = load_user_json(_read_text(path))
    except json.JSONDecodeError as exc:
        raise ChatTemplateError(f"is not valid JSON: {exc}", code="chat_template.file", origin=str(path),
                                hint="Fix the JSON (or pass the template itself).") from None
    except JSONLimitError as exc:
        raise ChatTemplateError(f"cannot be read: {exc}", code="chat_template.file", origin=str(path),
                                hint="A tokenizer config nests a few levels; this file is not one.") from None
    if not isinstance(value, dict):
        raise ChatTemplateError(f"holds a JSON {type(value).__name__}, not an object", code="chat_template.file",
                                origin=str(path), hint="Pass a tokenizer_config.json or chat_template.json.")
    return value


# --- inputs, as render_jinja_template prepares them -------------------------------------------------------

def _tool_schemas(tools: Sequence[Any] | None, origin: str) -> list[Any] | None:
    if tools is None:
        return None
    for tool in tools:
        if not isinstance(tool, Mapping):
            raise _input_error(f"a tool is a {type(tool).__name__}, not a JSON schema", origin,
                               "Pass each tool as a JSON schema dict, {\"type\": \"function\", \"function\": "
                               "{\"name\": ..., \"parameters\": ...}} (transformers.utils.get_json_schema "
                               "turns a function into one).")
    return list(tools)


def _checked_documents(documents: Sequence[Any] | None, origin: str) -> list[Any] | None:
    if documents is None:
        return None
    if any(not isinstance(document, Mapping) for document in documents):
        raise _input_error("documents should be a list of dicts with 'title' and 'text' keys", origin,
                           "Pass each document as a dict.")
    return list(documents)


def _plain(value: Any) -> Any:
    """``value`` rebuilt from plain JSON types, as transformers' ``_plain_template_data``: rich objects
    have methods the sandbox does not know are dangerous, so the template never sees them (numpy scalars
    become Python ones, dataclasses and pydantic models dicts, anything else a "<TypeName>" string)."""
    kind = type(value)
    if value is None or kind is str or kind is int or kind is float or kind is bool:
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {_plain(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_plain(item) for item in value)
    numpy = sys.modules.get("numpy")  # only if the caller has it: a numpy value implies numpy is loaded
    if numpy is not None and isinstance(value, numpy.generic):
        return _plain(value.item())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: _plain(getattr(value, field.name)) for field in dataclasses.fields(value)}
    if callable(getattr(value, "model_dump", None)):
        return _plain(value.model_dump())
    return f"<{kind.__name__}>"


def _aliased(message: dict[str, Any]) -> dict[str, Any]:
    reasoning = next((message[key] for key in REASONING_KEYS if message.get(key) is not None), None)
    if reasoning is not None:
        message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
    return message


def _mark_final(chat: list[dict[str, Any]], continue_final_message: bool | str, source: str, origin: str) -> str:
    """Tag the text the last message ends with, so the rendering can be cut after it (transformers'
    continue_final_message); returns that text."""
    key = continue_final_message if isinstance(continue_final_message, str) else "content"
    last = chat[-1]
    final = last.get(key)
    if final is None:
        raise _input_error(f"continue_final_message is set but the last message has no {key!r} to continue",
                           origin, "Give the last message that field, or continue another one.")
    keys = [k for k in REASONING_KEYS if last.get(k) == final] if key in REASONING_KEYS else [key]
    if not any(k in source for k in keys):
        raise _input_error(f"continue_final_message is set to {key!r}, which the chat template never reads",
                           origin, "Continue a field the template renders (usually 'content').")
    if isinstance(final, (list, tuple)):
        for block in reversed(final):
            if isinstance(block, dict) and "text" in block:
                final = block["text"]
                block["text"] = block["text"] + _CONTINUE_TAG
                break
        else:
            raise _input_error("continue_final_message is set but the last message has no text block", origin,
                               "Give the last message's content a {\"type\": \"text\", \"text\": ...} block.")
    else:
        for k in keys:
            last[k] = last[k] + _CONTINUE_TAG
    if not isinstance(final, str):
        raise _input_error(f"continue_final_message cannot continue a {type(final).__name__}", origin,
                           "Continue a text field.")
    return final


def _cut_final(rendered: str, final: str, origin: str) -> str:
    tag = _CONTINUE_TAG.strip()
    if final.strip() not in rendered or tag not in rendered:
        raise _input_error("continue_final_message is set but the chat template does not render the last "
                           "message as it is (it cuts or changes it)", origin,
                           "Render without continue_final_message, or continue a message the template keeps.")
    at = rendered.rindex(tag)
    if rendered[at:at + len(_CONTINUE_TAG)] == _CONTINUE_TAG:
        return rendered[:at]
    return rendered[:at].rstrip()  # the template trimmed the message's trailing space, and the tag's


def _input_error(message: str, origin: str, hint: str) -> ChatTemplateError:
    return ChatTemplateError(message, code="chat_template.input", origin=origin, hint=hint)


# --- rendering under limits -------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class _Limits:
    max_chars: int
    seconds: float
    now: Now
    deadline: float = 0.0


# The limits of the render running in this thread (or task): read by the guards inside the environment,
# which one compiled template shares between all the threads rendering it.
_LIMITS: contextvars.ContextVar[_Limits | None] = contextvars.ContextVar("chat_template_limits", default=None)


class _TooLarge(Exception):
    def __init__(self, what: str, size: int, limit: int) -> None:
        super().__init__(f"{what} would be about {size:,} characters, above the limit of {limit:,}")


class _Timeout(Exception):
    pass


class _Raised(Exception):
    """The template's own raise_exception: raised as a subclass that is also the jinja2 TemplateError
    transformers raises."""


def _limit() -> int:
    limits = _LIMITS.get()
    return limits.max_chars if limits is not None else MAX_OUTPUT_CHARS


def _guard(size: int, what: str) -> None:
    limit = _limit()
    if size > limit:
        raise _TooLarge(what, size, limit)


def _check_clock() -> None:
    limits = _LIMITS.get()
    if limits is not None and time.monotonic() > limits.deadline:
        raise _Timeout()


def _run(compiled: jinja2.Template, context: dict[str, Any], limits: _Limits, origin: str) -> str:
    """Render, stopping at the time and size limits; jinja2 and Python errors become ChatTemplateErrors."""
    limits = dataclasses.replace(limits, deadline=time.monotonic() + limits.seconds)
    token = _LIMITS.set(limits)
    chunks: list[str] = []
    size = 0
    try:
        for chunk in compiled.generate(context):
            size += len(chunk)
            if size > limits.max_chars:
                raise _TooLarge("the output", size, limits.max_chars)
            chunks.append(chunk)
        if time.monotonic() > limits.deadline:
            raise _Timeout()
    except Exception as exc:  # noqa: BLE001 - every failure of untrusted code is reported as the template's
        raise _render_error(exc, origin, limits) from None
    finally:
        _LIMITS.reset(token)
    return "".join(chunks)


def _render_error(exc: BaseException, origin: str, limits: _Limits) -> ChatTemplateError:
    import jinja2

    line = _template_line(exc)
    if isinstance(exc, _Timeout):
        return ChatTemplateError(f"rendering ran past its time limit of {limits.seconds:g} s",
                                 code="chat_template.timeout", origin=origin, line=line,
                                 hint="The template loops for too long on these inputs; raise time_limit only "
                                      "for a template you trust.")
    if isinstance(exc, (_TooLarge, MemoryError)):
        return ChatTemplateError(str(exc) or "rendering ran out of memory", code="chat_template.too_large",
                                 origin=origin, line=line,
                                 hint="The template builds text too large for these inputs; raise "
                                      "max_output_chars only for a template you trust.")
    if isinstance(exc, _Raised):
        return ChatTemplateError(f"the template raised: {exc}", code="chat_template.raised", origin=origin,
                                 line=line, hint="The template refuses these messages or arguments: change them "
                                                 "as its message asks.")
    if isinstance(exc, jinja2.exceptions.SecurityError):
        return ChatTemplateError(f"the sandbox refused: {exc}", code="chat_template.security", origin=origin,
                                 line=line, hint="The template reaches for what a chat template may not; do not "
                                                 "use it.")
    if isinstance(exc, RecursionError):
        return ChatTemplateError("the template recursed deeper than Python allows", code="chat_template.recursion",
                                 origin=origin, line=line,
                                 hint="A macro calls itself without end on these inputs; fix the template.")
    return ChatTemplateError(f"rendering failed: {type(exc).__name__}: {exc}", code="chat_template.render",
                             origin=origin, line=line,
                             hint="The template cannot render these inputs (transformers fails the same way); "
                                  "check the messages' shape against what the template reads.")


def _template_line(exc: BaseException) -> int | None:
    """The template line where ``exc`` was raised: jinja2 rewrites template frames in the traceback to
    the template's file name and line."""
    line = None
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == _TEMPLATE_FILE:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


# --- size estimates for the guards ------------------------------------------------------------------------

_WALK_BUDGET = 10_000  # values a size estimate visits; the rest count one character each


def _digits(number: int) -> int:
    return abs(number).bit_length() * 30103 // 100000 + 1


def _measure(value: Any, limit: int) -> tuple[int, int, int]:
    """Roughly how many characters ``value`` prints as (str() or JSON), how many values it holds and how
    deep they nest. Cheap on any value: the walk stops past ``limit`` and after _WALK_BUDGET values."""
    size = depth = visited = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack and size <= limit:
        item, level = stack.pop()
        visited += 1
        depth = max(depth, level)
        if isinstance(item, (str, bytes)):
            size += len(item) + 2
        elif isinstance(item, bool) or item is None:
            size += 5
        elif isinstance(item, int):
            size += _digits(item)
        elif isinstance(item, (list, tuple, dict)):
            children = [x for pair in item.items() for x in pair] if isinstance(item, dict) else item
            size += 2 + 2 * len(children)
            room = max(_WALK_BUDGET - visited - len(stack), 0)
            size += max(len(children) - room, 0)
            stack.extend((child, level + 1) for child in children[:room])
        else:
            size += 24
    return size, visited, depth


def _size(value: Any) -> int:
    return len(value) if isinstance(value, (str, bytes)) else _measure(value, _limit())[0]


def _times(seq: Any, count: Any) -> int:
    if not isinstance(count, int) or count <= 1:
        return 0
    if isinstance(seq, int):
        return _digits(seq) + _digits(count)
    return _size(seq) * count if isinstance(seq, (str, bytes, list, tuple)) else 0


_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d*))?[hlL]?[a-zA-Z%]")
_FORMAT_SPEC = re.compile(r"(?:.?[<>=^])?[-+ ]?z?#?0?(\d*)[,_]?(?:\.(\d+))?[a-zA-Z%]?\Z", re.S)


def _percent_size(template: Any, values: Any) -> int:
    """The size of ``template % values``: its widths and precisions (``*`` ones read from ``values``)."""
    if isinstance(template, bytes):
        template = template.decode("latin-1")
    if not isinstance(template, str):
        return 0
    stars = [v for v in (values if isinstance(values, tuple) else (values,)) if isinstance(v, int)]
    size = len(template) + _size(values)
    for match in _PERCENT_SPEC.finditer(template):
        for field in match.groups():
            if field == "*":
                size += max((abs(v) for v in stars), default=0)
            elif field:
                size += int(field)
    return size


def _binop_size(operator: str, left: Any, right: Any) -> int:
    if operator == "*":
        return _times(left, right) or _times(right, left)
    if operator == "**":
        if isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1:
            return _digits(left) * right
        return 0
    if operator == "%":
        return _percent_size(left, right)
    if operator == "+" and isinstance(left, (str, bytes, list, tuple)) and type(left) is type(right):
        return _size(left) + _size(right)
    return 0


def _center_size(value: Any, width: int = 80) -> int:
    return max(len(str(value)), width)


def _indent_size(s: Any, width: int | str = 4, first: bool = False, blank: bool = False) -> int:
    text = str(s)
    return len(text) + (text.count("\n") + 1) * (len(width) if isinstance(width, str) else width)


def _wordwrap_size(s: Any, width: int = 79, break_long_words: bool = True, wrapstring: str | None = None,
                   break_on_hyphens: bool = True) -> int:
    return len(str(s)) * (1 + len(wrapstring if wrapstring is not None else "\n"))


def _format_filter_size(value: Any, *args: Any, **kwargs: Any) -> int:
    return _percent_size(str(value), kwargs or args)


def _join_size(value: Any, d: str = "", attribute: Any = None) -> int:
    items = list(value)
    return sum(_size(item) for item in items) + len(d) * len(items)


def _replace_size(s: Any, old: str, new: str, count: int | None = None) -> int:
    text = str(s)
    hits = text.count(old) if old else len(text) + 1
    if count is not None and count >= 0:
        hits = min(hits, count)
    return len(text) + hits * max(len(new) - len(old), 0)


def _batch_size(value: Any, linecount: int, fill_with: Any = None) -> int:
    return 0 if fill_with is None else linecount * (2 + _size(fill_with))


def _slice_size(value: Any, slices: int, fill_with: Any = None) -> int:
    return slices * 4


def _tojson_size(x: Any, ensure_ascii: bool = False, indent: int | str | None = None, separators: Any = None,
                 sort_keys: bool = False) -> int:
    size, values, depth = _measure(x, _limit())
    step = len(indent) if isinstance(indent, str) else indent or 0
    separator = sum(len(s) for s in separators) if isinstance(separators, (list, tuple)) else 2
    # each value: its text (\uXXXX escapes six times as long), a separator, and a line indented per level
    return size * (6 if ensure_ascii else 1) + values * (separator + step * min(depth, 64))


def _sum_size(iterable: Any, attribute: Any = None, start: Any = 0) -> int:
    if not isinstance(start, (list, tuple)):
        return 0
    items = list(iterable)
    # sum() of lists copies the total so far once per item: its work is ~count x size / 2, allowed up to
    # 8x the limit (sum(start=[]) over a few lists is nothing; over 100,000 it would run for minutes)
    return (_size(start) + sum(_size(item) for item in items)) * max(len(items) // 16, 1)


def _list_size(value: Any) -> int:
    return 5 * len(value) if isinstance(value, str) else 0


def _pprint_size(value: Any) -> int:
    return _measure(value, _limit())[0]


def _lipsum_size(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> int:  # noqa: A002 - jinja2's names
    return n * (min if min > max else max) * 12


#: The filters that can build text much larger than their input, each with an estimate of its output.
_GUARDED_FILTERS: dict[str, Callable[..., int]] = {
    "center": _center_size, "indent": _indent_size, "wordwrap": _wordwrap_size, "format": _format_filter_size,
    "join": _join_size, "replace": _replace_size, "batch": _batch_size, "slice": _slice_size,
    "tojson": _tojson_size, "sum": _sum_size, "list": _list_size, "pprint": _pprint_size,
}


def _str_pad(width: int, fillchar: str = " ") -> int:
    return width


def _str_method_size(text: str | bytes, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    if name in ("center", "ljust", "rjust", "zfill"):
        return _str_pad(*args, **kwargs)
    if name == "expandtabs":
        tabsize = args[0] if args else kwargs.get("tabsize", 8)
        tabs = text.count("\t") if isinstance(text, str) else text.count(b"\t")
        return len(text) + tabs * int(tabsize)
    if name == "replace":
        return _replace_size(text, *args, **kwargs) if isinstance(text, str) else 0
    if name == "join":
        return _join_size(args[0], text) if isinstance(text, str) else 0
    if name == "translate" and isinstance(text, str) and args and isinstance(args[0], Mapping):
        longest = max((len(v) for v in args[0].values() if isinstance(v, str)), default=1)
        return len(text) * longest
    return 0


_STR_METHODS = frozenset({"center", "ljust", "rjust", "zfill", "expandtabs", "replace", "join", "translate"})


#: The guarded filters that iterate over their value as a list would: an iterator (map(), select()) is read
#: into one first, so the estimate and the filter see the same items.
_ITERATING_FILTERS = frozenset({"join", "sum", "list", "batch", "slice"})


def _guarded_filter(original: Callable[..., Any], what: str, estimate: Callable[..., int],
                    iterates: bool = False) -> Callable[..., Any]:
    """``original`` checked against the size limit first (its estimate refused past the limit; an estimate
    that fails leaves the verdict to the filter)."""
    pass_arg = getattr(original, "jinja_pass_arg", None)
    skip = 0 if pass_arg is None else 1

    def guarded(*args: Any, **kwargs: Any) -> Any:
        if iterates and len(args) > skip and isinstance(args[skip], Iterator):
            args = (*args[:skip], list(args[skip]), *args[skip + 1:])
        try:
            size = estimate(*args[skip:], **kwargs)
        except Exception:  # noqa: BLE001 - bad arguments: the filter itself says so
            size = 0
        _guard(size, what)
        return original(*args, **kwargs)

    if pass_arg is not None:
        guarded.jinja_pass_arg = pass_arg  # type: ignore[attr-defined]
    return guarded


# --- the environment --------------------------------------------------------------------------------------

def _jinja() -> types.ModuleType:
    """jinja2, imported on first use (an optional dependency), checked to be a safe release."""
    try:
        import jinja2
    except ImportError:
        raise ChatTemplateError("chat templates need jinja2, which is not installed", code="chat_template.jinja",
                                hint=_INSTALL) from None
    version = tuple(int(part) for part in re.findall(r"\d+", jinja2.__version__)[:3])
    if version < _JINJA_MINIMUM:
        raise ChatTemplateError(f"jinja2 {jinja2.__version__} has known sandbox escapes; chat templates need "
                                f"3.1.6 or later", code="chat_template.jinja", hint=_INSTALL)
    return jinja2


@lru_cache(maxsize=1)
def _environment_class() -> type[_SizeGuards]:
    """transformers' environment, with guards on the operations that can allocate without bound.

    Built on first use, as jinja2 is imported only then: the classes that extend jinja2's own are made by
    the factories below, the guards themselves are :class:`_SizeGuards`."""
    _jinja()
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from jinja2.utils import generate_lorem_ipsum

    generation = _generation_extension()
    raise_exception, template_dict, template_namespace = _template_builtins()
    # a filter that takes the context is never folded away at compile time
    check_clock = jinja2.pass_context(_check_clock_filter)

    class GuardedEnvironment(_SizeGuards, ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"*", "**", "%", "+"})
        code_generator_class = _code_generator_class()
        formatter_classes = _formatter_classes()

        def __init__(self) -> None:
            super().__init__(trim_blocks=True, lstrip_blocks=True, extensions=[generation, jinja2.ext.loopcontrols])
            for name, estimate in _GUARDED_FILTERS.items():
                original = _tojson if name == "tojson" else self.filters[name]
                self.filters[name] = _guarded_filter(original, f"the {name} filter's result", estimate,
                                                     iterates=name in _ITERATING_FILTERS)
            self.globals["raise_exception"] = raise_exception
            self.globals["strftime_now"] = _strftime_now
            self.globals["dict"] = template_dict()
            self.globals["namespace"] = template_namespace
            self.globals["lipsum"] = _guarded_filter(generate_lorem_ipsum, "lipsum()", _lipsum_size)
            self.filters[_CLOCK_FILTER] = check_clock

        def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
            if isinstance(__obj, types.BuiltinMethodType) and isinstance(__obj.__self__, (str, bytes)) \
                    and __obj.__name__ in _STR_METHODS:
                if __obj.__name__ == "join" and args and isinstance(args[0], Iterator):
                    args = (list(args[0]), *args[1:])
                try:
                    size = _str_method_size(__obj.__self__, __obj.__name__, args, kwargs)
                except Exception:  # noqa: BLE001 - bad arguments: the method says so itself
                    size = 0
                _guard(size, f"str.{__obj.__name__}()")
            return super().call(__context, __obj, *args, **kwargs)

    return GuardedEnvironment


class _SizeGuards(_SandboxBase):
    """The environment's guards, mixed in before jinja2's ``ImmutableSandboxedEnvironment`` by
    :func:`_environment_class` (jinja2 is not imported before then). The ``call`` guard stays in that
    class: its ``__self``-style parameters are name-mangled with the class's own name, as jinja2's are."""

    formatter_classes: tuple[type[SandboxedFormatter], type[SandboxedEscapeFormatter]]

    def from_source(self, source: str) -> jinja2.Template:
        """``from_string``, with a clock check at the top of every loop body, macro, call block and block.

        A template repeats work only through these (jinja2 has no while; its sandbox caps ``range`` at
        100,000 items but not loops nested in loops), so a render that runs long passes a check often,
        even in loops that write nothing. Measured on the 70 vendored templates x 12 cases (840
        renders, best of 9, CPython 3.11): 150 ms with the checks, 145 ms without (transformers' own
        renderer: 120 ms; the rest is the size guards). A ``sys.settrace`` tracer that traces lines
        only in template frames, the other way to stop such loops, made it 370 ms: the trace function
        runs on every Python call in the thread, jinja2's runtime and filters included."""
        import jinja2.nodes

        tree = self.parse(source)
        for node in list(tree.find_all((jinja2.nodes.For, jinja2.nodes.Macro, jinja2.nodes.CallBlock,
                                        jinja2.nodes.Block))):
            check = jinja2.nodes.Filter(jinja2.nodes.Const(None), _CLOCK_FILTER, [], [], None, None)
            cast(Any, node).body.insert(0, jinja2.nodes.ExprStmt(check).set_lineno(node.lineno))
        template: jinja2.Template = self.template_class.from_code(self, self.compile(tree), self.make_globals(None),
                                                                  None)
        return template

    @staticmethod
    def concat(parts: Any) -> str:
        """Joins what a block, macro or ``{% set %}`` captures (the template's own output is checked
        as it is written)."""
        parts = parts if isinstance(parts, list) else list(parts)
        _guard(sum(map(len, parts)), "a captured block")
        return "".join(parts)

    @staticmethod
    def guarded_str_join(parts: tuple[Any, ...]) -> str:
        _guard(sum(_size(part) for part in parts), "a ~ concatenation")
        return "".join(map(str, parts))

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "+" and type(left) is str and type(right) is str:  # the common case, kept fast
            _guard(len(left) + len(right), "the result of +")
            return left + right
        try:
            size = _binop_size(operator, left, right)
        except Exception:  # noqa: BLE001 - operands the operator refuses: it says so itself
            size = 0
        _guard(size, f"the result of {operator}")
        return self.binop_table[operator](left, right)

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        """jinja2's sandboxed ``str.format`` / ``format_map``, with the field widths checked (asked of every
        attribute a template reads: the common answer, None, comes first)."""
        if not isinstance(value, (types.MethodType, types.BuiltinMethodType)) \
                or value.__name__ not in ("format", "format_map") or not isinstance(value.__self__, str):
            return None
        from markupsafe import Markup

        text: str = value.__self__
        plain, escaping = self.formatter_classes
        formatter = escaping(self, escape=text.escape) if isinstance(text, Markup) else plain(self)
        is_format_map = value.__name__ == "format_map"

        def wrapper(*args: Any, **kwargs: Any) -> str:
            if is_format_map:
                if kwargs:
                    raise TypeError("format_map() takes no keyword arguments")
                if len(args) != 1:
                    raise TypeError(f"format_map() takes exactly one argument ({len(args)} given)")
                kwargs, args = args[0], ()
            return type(text)(formatter.vformat(text, args, kwargs))

        return wrapper


def _tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    # transformers' own: jinja2's escapes HTML characters
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(format: str) -> str:  # noqa: A002 - transformers' name
    limits = _LIMITS.get()
    return (limits.now if limits is not None else datetime.now)().strftime(format)


def _check_clock_filter(context: Any, value: None) -> None:
    _check_clock()


def _check_name(name: Any) -> None:
    if isinstance(name, str) and name.startswith("_"):
        from jinja2.exceptions import SecurityError

        raise SecurityError(f"Chat templates cannot store underscore-prefixed attributes on a namespace, but got "
                            f"{name!r}. Please rename the attribute.")


def _generation_extension() -> type[jinja2.ext.Extension]:
    import jinja2.ext
    import jinja2.nodes
    import jinja2.parser

    class Generation(jinja2.ext.Extension):
        """The ``{% generation %}`` tag (transformers marks assistant text with it); renders its body."""

        tags = {"generation"}

        def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            node: jinja2.nodes.Node = jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [], body)
            return node.set_lineno(lineno)

        @jinja2.pass_eval_context
        def _generation_support(self, context: Any, caller: Callable[[], str]) -> str:
            return caller()

    return Generation


def _template_builtins() -> tuple[Callable[[str], NoReturn], type[Any], type[jinja2.utils.Namespace]]:
    """transformers' ``raise_exception``, the class of its ``dict`` and its ``namespace``."""
    import jinja2.utils

    class Raised(jinja2.exceptions.TemplateError, _Raised):
        pass

    def raise_exception(message: str) -> NoReturn:
        raise Raised(message)

    class TemplateDict:
        """``dict`` for templates: builds dicts, without exposing the type itself."""

        def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
            return dict(*args, **kwargs)

        def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
            return dict.fromkeys(*args, **kwargs)

    class TemplateNamespace(jinja2.utils.Namespace):
        """``namespace`` refusing underscore names, which could reach CPython internals."""

        def __init__(*args: Any, **kwargs: Any) -> None:  # noqa: N805 - jinja2's trick: namespace(self=...) works
            self, rest = args[0], args[1:]
            attrs = dict(*rest, **kwargs)
            for name in attrs:
                _check_name(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name: str, value: Any) -> None:
            _check_name(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

    return raise_exception, TemplateDict, TemplateNamespace


def _formatter_classes() -> tuple[type[SandboxedFormatter], type[SandboxedEscapeFormatter]]:
    """jinja2's sandboxed ``str.format`` formatters, with a field's width checked first."""
    from jinja2.sandbox import SandboxedEscapeFormatter, SandboxedFormatter

    class GuardedFormatter(SandboxedFormatter):
        def format_field(self, value: Any, format_spec: str) -> Any:
            spec = _FORMAT_SPEC.match(format_spec)
            try:
                width = max(int(spec.group(1) or 0), int(spec.group(2) or 0)) if spec else 0
            except ValueError:  # too many digits: format() refuses it itself
                width = 0
            _guard(width + _size(value), "a str.format() field")
            return super().format_field(value, format_spec)

    class GuardedEscapeFormatter(GuardedFormatter, SandboxedEscapeFormatter):
        pass

    return GuardedFormatter, GuardedEscapeFormatter


def _code_generator_class() -> type[CodeGenerator]:
    """jinja2's code generator, with ``~`` compiled to a size-checked join."""
    import jinja2.nodes
    from jinja2.compiler import CodeGenerator, Frame, optimizeconst

    class GuardedCodeGenerator(CodeGenerator):
        @optimizeconst
        def visit_Concat(self, node: jinja2.nodes.Concat, frame: Frame) -> None:
            if frame.eval_ctx.volatile or frame.eval_ctx.autoescape:
                super().visit_Concat(node, frame)
                return
            # jinja2's str_join((...)), after a size check: `x ~ x` in a loop doubles without end
            self.write("environment.guarded_str_join((")
            for arg in node.nodes:
                self.visit(arg, frame)
                self.write(", ")
            self.write("))")

    return GuardedCodeGenerator


@lru_cache(maxsize=32)
def _compile(source: str) -> jinja2.Template:
    # One environment per template, as transformers has it; compiled once per source (the server renders
    # the same template for every request).
    return _environment_class()().from_source(source)


def _compile_checked(source: str, origin: str) -> jinja2.Template:
    if not isinstance(source, str):
        raise ChatTemplateError(f"the template is a {type(source).__name__}, not text", code="chat_template.config",
                                origin=origin, hint="Pass the Jinja source as a string.")
    if len(source) > MAX_SOURCE_CHARS:
        raise ChatTemplateError(f"the template is {len(source):,} characters long, above the limit of "
                                f"{MAX_SOURCE_CHARS:,}", code="chat_template.too_large", origin=origin,
                                hint="This is not a chat template (real ones are a few KB).")
    _jinja()
    import jinja2

    try:
        return _compile(source)
    except jinja2.exceptions.TemplateSyntaxError as exc:
        raise ChatTemplateError(f"Jinja syntax error: {exc.message}", code="chat_template.syntax", origin=origin,
                                line=exc.lineno, hint="Fix the template at that line.") from None
    except RecursionError:
        raise ChatTemplateError("the template nests deeper than the Jinja compiler goes", code="chat_template.syntax",
                                origin=origin, hint="Fix the template: nothing real nests this deep.") from None


__all__ = [
    "MAX_OUTPUT_CHARS",
    "MAX_SOURCE_CHARS",
    "REASONING_KEYS",
    "SPECIAL_TOKEN_KEYS",
    "TIME_LIMIT",
    "ChatTemplate",
    "load_chat_template",
    "render_prompt",
]
