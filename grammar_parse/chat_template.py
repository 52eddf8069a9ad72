"""A model's chat template: loaded from the model's files and rendered exactly as transformers renders it.

The renderer is transformers 5.23's ``render_jinja_template`` (``ImmutableSandboxedEnvironment`` with
``trim_blocks`` / ``lstrip_blocks``, its ``tojson``, ``raise_exception``, ``strftime_now``, ``dict`` and
``namespace``, the ``{% generation %}`` tag, reasoning aliased under ``reasoning_content`` and
``thinking``), so a prompt rendered here is the prompt the model was trained on.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

# Names a message's reasoning is passed under; templates read one of them (transformers fills both).
REASONING_KEYS = ("reasoning_content", "thinking", "reasoning")


class ChatTemplate:
    """A compiled chat template and the special tokens it is rendered with (``bos_token``, ...)."""

    def __init__(self, source: str, *, special_tokens: Mapping[str, str] | None = None, origin: str = "the chat template") -> None:
        self.source = source
        self.special_tokens = dict(special_tokens or {})
        self.origin = origin
        self._compiled = _compile(source)

    def render(self, messages: Sequence[Mapping[str, Any]], *, tools: Sequence[Mapping[str, Any]] | None = None,
               add_generation_prompt: bool = True, **kwargs: Any) -> str:
        """The prompt for ``messages`` (and ``tools``), as ``tokenizer.apply_chat_template(..., tokenize=False)``."""
        chat = [_aliased(dict(m)) for m in messages]
        context = {**self.special_tokens, **kwargs}
        rendered: str = self._compiled.render(messages=chat, tools=list(tools) if tools is not None else None,
                                              documents=None, add_generation_prompt=add_generation_prompt, **context)
        return rendered


def _aliased(message: dict[str, Any]) -> dict[str, Any]:
    reasoning = next((message[key] for key in REASONING_KEYS if message.get(key) is not None), None)
    if reasoning is not None:
        message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
    return message


def _compile(source: str) -> Any:
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(jinja2.ext.Extension):
        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller: Any) -> str:
            return str(caller())

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format: str) -> str:
        return datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(source)


def render_prompt(messages: Sequence[Mapping[str, Any]], template: ChatTemplate | str, *,
                  tools: Sequence[Mapping[str, Any]] | None = None, add_generation_prompt: bool = True, **kwargs: Any) -> str:
    """The prompt a model's chat template renders for ``messages``."""
    if isinstance(template, str):
        template = ChatTemplate(template)
    return template.render(messages, tools=tools, add_generation_prompt=add_generation_prompt, **kwargs)
