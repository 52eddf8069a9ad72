"""Checks of what the public entry points are given: an argument of the wrong type is an ArgumentError
(``usage.argument``) that says what was expected and, for the mistakes new users make (bytes, a chat
message, a whole conversation, a number as a grammar), what to pass instead, rather than a bare TypeError
or AttributeError from deep inside the parser. A warning about them names the user's line
(:func:`caller_stacklevel`), and prints as one line with its code on a command line (:func:`warning_line`).

>>> expect_text(b"Hello", "text")
Traceback (most recent call last):
...
grammar_parse.errors.ArgumentError: `text` should be a str, but got a bytes (b'Hello'). Decode it first: text.decode("utf-8").
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from ..errors import ArgumentError


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _a(value: Any) -> str:
    """``value``'s type with its article and a short repr: "an int (5)"."""
    kind = type(value).__name__
    return f"{'an' if kind[:1] in 'aeiou' else 'a'} {kind} ({_shown(value)})"


def _is_message(value: Any) -> bool:
    return isinstance(value, Mapping) and ("role" in value or "content" in value)


def _is_conversation(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and bool(value) and all(_is_message(m) for m in value)


def text_problem(value: Any, name: str) -> ArgumentError:
    """The ArgumentError for ``value`` given as the text argument ``name`` (a str was expected)."""
    got = f"`{name}` should be a str, but got {_a(value)}."
    if isinstance(value, (bytes, bytearray)):
        hint = f'Decode it first: {name}.decode("utf-8").'
    elif _is_message(value):
        got = f"`{name}` should be a str, but got a chat message (a {type(value).__name__} with a role)."
        hint = (f"Pass the message's text, {name}[\"content\"]." if name != "prefix" else
                "Pass the prompt the model continued as text, not a message or its content: the conversation "
                "rendered with the model's chat template, grammar_parse.render_prompt(messages, template).")
    elif _is_conversation(value):
        got = f"`{name}` should be a str, but got a list of chat messages."
        hint = ("Render the conversation with the model's chat template first: "
                "grammar_parse.render_prompt(messages, template) gives the prompt text.")
    elif value is None:
        got = f"`{name}` is required (a str), but got None."
        hint = 'Pass the text ("" for none).'
    else:
        hint = f"Pass {name} as a str."
    return ArgumentError(got, code="usage.argument", hint=hint)


def expect_text(value: Any, name: str, *, optional: bool = False) -> Any:
    """``value`` itself when it is a str (or None, when ``optional``); else an ArgumentError naming ``name``,
    what it got, and what to pass instead."""
    if isinstance(value, str) or (optional and value is None):
        return value
    raise text_problem(value, name)


def grammar_problem(value: Any, name: str = "grammar") -> ArgumentError:
    """The ArgumentError for a grammar argument of a type no API takes."""
    hint = ('Decode it first: .decode("utf-8").' if isinstance(value, (bytes, bytearray)) else
            'Pass a built-in name ("qwen3", see list_grammars()), a path to a .lark/.json/.jinja file or a model '
            "directory, a response_template dict, or a Grammar (load_grammar(...)).")
    got = "None" if value is None else _a(value)
    return ArgumentError(f"`{name}` should be a grammar's name, a path, a template dict or a Grammar, but got {got}.",
                         code="usage.argument", hint=hint)


def template_source_problem(value: Any, name: str = "template") -> ArgumentError:
    """The ArgumentError for a chat-template source of a type no loader takes."""
    hint = ("Pass a model directory, a tokenizer_config.json, chat_template.jinja or chat_template.json path, Jinja "
            "text, a tokenizer config dict, or a ChatTemplate.")
    got = "None" if value is None else _a(value)
    if isinstance(value, (bytes, bytearray)):
        hint = 'Decode it first: .decode("utf-8").'
    elif _is_conversation(value):
        got, hint = "a list of chat messages", ("The messages are not the template: render_prompt(messages, "
                                                "template) takes both.")
    return ArgumentError(f"`{name}` should be a chat template: a path (a str or Path), Jinja text (a str), a "
                         f"tokenizer config dict or a ChatTemplate, but got {got}.", code="usage.argument", hint=hint)


def messages_problem(value: Any, name: str = "messages") -> ArgumentError:
    """The ArgumentError for a conversation that is not a list of messages."""
    hint = ("Wrap the message in a list: [message]." if _is_message(value) else
            'Pass a list of messages: [{"role": "user", "content": "..."}].')
    return ArgumentError(f"`{name}` should be a list of chat messages ({{role, content}} dicts), but got {_a(value)}.",
                         code="usage.argument", hint=hint)


def caller_stacklevel() -> int:
    """The ``stacklevel`` that makes a warning name the first line outside grammar_parse, the user's call
    however deep inside the package it was raised (Python 3.12's ``skip_file_prefixes``, for 3.10)."""
    package = str(Path(__file__).resolve().parents[1])
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and str(Path(frame.f_code.co_filename).resolve()).startswith(package):
        frame, level = frame.f_back, level + 1
    return level


#: Characters of a warning's text printed on a command line (a warning may quote a long prompt).
MAX_WARNING_CHARS = 600


def warning_line(message: Warning | str, category: type[Warning]) -> str:
    """A warning as one line, as the command line prints errors: its code (grammar_parse warnings carry one,
    as errors do; another's is its class name), then its text with newlines folded."""
    code = getattr(message, "code", None) or getattr(category, "code", None) or category.__name__
    text = re.sub(r"\s*\n\s*", " ", str(message)).strip()
    if len(text) > MAX_WARNING_CHARS:
        text = text[:MAX_WARNING_CHARS] + f"... ({len(text) - MAX_WARNING_CHARS} more characters)"
    return f"grammar-parse: warning [{code}]: {text}"


def print_warning_line(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                       file: TextIO | None = None, line: str | None = None) -> None:
    """A ``warnings.showwarning`` that prints :func:`warning_line` on stderr: the command line's (Python's
    own format names a source line, such as ``sys.exit(main())``, which tells a user nothing), and its
    worker processes' too."""
    try:
        (file or sys.stderr).write(warning_line(message, category) + "\n")
    except OSError:  # (stderr gone: nothing to tell)
        pass


def is_pathlike(value: Any) -> bool:
    """A str or an ``os.PathLike`` (what a path argument may be)."""
    return isinstance(value, (str, os.PathLike))


__all__ = ["MAX_WARNING_CHARS", "caller_stacklevel", "expect_text", "grammar_problem", "is_pathlike",
           "messages_problem", "print_warning_line", "template_source_problem", "text_problem", "warning_line"]
