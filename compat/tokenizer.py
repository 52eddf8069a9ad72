"""grammar_parse behind a transformers tokenizer: its template, token ids, batches, and token streams.

Drop-in for transformers' tokenizer-level API::

    from grammar_parse.compat.tokenizer import parse_response, get_response_parser
    message = parse_response(tokenizer, output_ids, prefix=prompt_ids, tools=tools)

Any object with ``decode(ids, skip_special_tokens=...)`` works (a transformers tokenizer, or a
``tokenizers.Tokenizer``); the grammar comes from its ``response_template`` (transformers >= 5.15),
else its legacy ``response_schema``, else the ones in its ``init_kwargs`` (its tokenizer_config.json), else
the grammar its ``chat_template`` reads back.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, overload

from grammar_parse import (
    ArgumentError,
    ChatTemplate,
    Event,
    Grammar,
    GrammarError,
    Message,
    ResponseParser,
    compile_template,
    load_model_grammar,
)

from .legacy import is_legacy_schema


def grammar_for(tokenizer: Any) -> Grammar:
    """The grammar a tokenizer carries: response_template, else legacy response_schema, else the grammar
    its chat template reads back (or one derived from it; grammar_parse.templates._detect), with the tokenizer's
    vocabulary and name to tell apart grammars that read it equally."""
    from . import legacy_grammar

    sources = [tokenizer, getattr(tokenizer, "init_kwargs", None) or {}]
    for key in ("response_template", "response_schema"):
        for source in sources:
            value = source.get(key) if isinstance(source, dict) else getattr(source, key, None)
            if value:
                return legacy_grammar(value) if key == "response_schema" or is_legacy_schema(value) \
                    else compile_template(value)
    chat_template = getattr(tokenizer, "chat_template", None)
    if isinstance(chat_template, dict):  # named templates: the default one (tool_use when it has tools)
        chat_template = chat_template.get("tool_use") or chat_template.get("default")
    if isinstance(chat_template, str) and chat_template:
        special = {key: str(getattr(tokenizer, key)) for key in ("bos_token", "eos_token", "unk_token", "pad_token")
                   if isinstance(getattr(tokenizer, key, None), str)}
        get_vocab = getattr(tokenizer, "get_vocab", None)
        vocab = set(get_vocab()) if callable(get_vocab) else None
        return load_model_grammar(ChatTemplate(chat_template, special_tokens=special, origin="the tokenizer's chat template"),
                                  vocab=vocab, hints=[str(getattr(tokenizer, "name_or_path", "") or "")])
    raise GrammarError(
        "the tokenizer carries no response_template, response_schema or chat_template",
        code="grammar.not_found", source=type(tokenizer).__name__,
        hint="Pass a template or a built-in grammar name (grammar-parse list) with template=...",
    )


def _ids(value: Any) -> list[int] | None:
    """Token ids as a flat list, from a list, numpy array or torch tensor of one sequence."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return value
    return None


def _text(tokenizer: Any, value: Any) -> str:
    if isinstance(value, str):
        return value
    ids = _ids(value)
    if ids is None:
        raise ArgumentError(f"expected text or token ids, got {type(value).__name__}", code="usage.batch")
    text: str = tokenizer.decode(ids, skip_special_tokens=False)
    return text


def _batch(value: Any) -> list[Any] | None:
    """The items of a batch (a list of texts, of id lists, or a 2-D array), or None for one item."""
    if hasattr(value, "tolist") and getattr(value, "ndim", 1) == 2:
        return list(value.tolist())
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) or _ids(v) is not None for v in value) \
            and _ids(value) is None:
        return list(value)
    return None


@overload
def parse_response(tokenizer: Any, response: str | list[int], *, prefix: Any = None,
                   tools: Iterable[Any] | None = None, template: Any = None) -> Message: ...


@overload
def parse_response(tokenizer: Any, response: list[str] | list[list[int]], *, prefix: Any = None,
                   tools: Iterable[Any] | None = None, template: Any = None) -> list[Message]: ...


@overload
def parse_response(tokenizer: Any, response: Any, *, prefix: Any = None, tools: Iterable[Any] | None = None,
                   template: Any = None) -> Message | list[Message]: ...


def parse_response(tokenizer: Any, response: Any, *, prefix: Any = None, tools: Iterable[Any] | None = None,
                   template: Any = None) -> Message | list[Message]:
    """Parse model output given as text or token ids (or a batch of them) with the tokenizer's grammar
    (or ``template``). ``prefix`` is the prompt as text or ids, one for all or one per batch item.

    The result is a message for one output (text or a list of ids) and a list of messages for a batch
    (a list of texts or of id lists); for an array or tensor that depends on its shape, so its type is
    the union."""
    import grammar_parse

    grammar = template if template is not None else grammar_for(tokenizer)
    items = _batch(response)
    if items is None:
        text = _text(tokenizer, response)
        return grammar_parse.parse_response(text, grammar, prefix=None if prefix is None else _text(tokenizer, prefix),
                                            tools=tools)
    prefixes = _batch(prefix) if prefix is not None else None
    if prefixes is not None and len(prefixes) != len(items):
        raise ArgumentError(f"got {len(items)} outputs but {len(prefixes)} prefixes", code="usage.batch")
    shared = None if prefix is None or prefixes is not None else _text(tokenizer, prefix)  # decoded once
    return [
        grammar_parse.parse_response(_text(tokenizer, item), grammar, tools=tools,
                                     prefix=_text(tokenizer, prefixes[i]) if prefixes is not None else shared)
        for i, item in enumerate(items)
    ]


def get_response_parser(tokenizer: Any, prefix: Any = None, *, tools: Iterable[Any] | None = None,
                        template: Any = None) -> ResponseParser:
    """A streaming ResponseParser with the tokenizer's grammar; ``prefix`` may be token ids."""
    grammar = template if template is not None else grammar_for(tokenizer)
    return ResponseParser(grammar, None if prefix is None else _text(tokenizer, prefix), tools=tools)


class TokenStream:
    """Feed token ids as they are generated; text is decoded incrementally (only complete characters
    are passed on, so a multi-byte character split across tokens is never broken), at a cost per token
    that does not grow with the output.

    A byte that can no longer start or continue a valid UTF-8 sequence becomes U+FFFD, as a decoder with
    ``errors="replace"`` makes it, once the tokens after it rule out a character still arriving: a run of
    invalid byte tokens streams with a lag of :data:`PENDING_TOKENS` tokens instead of being withheld.
    """

    #: Tokens a character still arriving can span after its first byte (UTF-8 takes at most four bytes,
    #: and a token carries at least one): a U+FFFD this many tokens old is final.
    PENDING_TOKENS = 3

    def __init__(self, tokenizer: Any, prefix: Any = None, *, tools: Iterable[Any] | None = None,
                 template: Any = None) -> None:
        self.tokenizer = tokenizer
        self.parser = get_response_parser(tokenizer, prefix, tools=tools, template=template)
        self.ids: list[int] = []
        self.prefix_offset = 0  # ids before this were fully turned into text
        self.read_offset = 0

    @property
    def initial_events(self) -> list[Event]:
        return self.parser.initial_events

    def _decode(self, start: int, end: int | None = None) -> str:
        text: str = self.tokenizer.decode(self.ids[start:end], skip_special_tokens=False)
        return text

    def _advance(self, before: str, text: str, end: int) -> str:
        """Text newly final up to token ``end`` (decoded with context: ``before`` was already passed on)."""
        self.prefix_offset, self.read_offset = self.read_offset, end
        return text[len(before):]

    def _new_text(self) -> str:
        # Decode only the tokens since the last emitted text, with the ones before them as context, so a
        # tokenizer that merges across tokens (spaces, byte fallback) still gives the right characters.
        before = self._decode(self.prefix_offset, self.read_offset)
        after = self._decode(self.prefix_offset)
        if not after.startswith(before) or len(after) <= len(before):
            return ""
        if not after.endswith("\ufffd"):
            return self._advance(before, after, len(self.ids))
        # The last U+FFFD may be a character still arriving: the text up to the tokens it could span is
        # final when the whole decode agrees with it (an incomplete character there would have become a
        # real one in ``after``).
        # A cut inside another character fails the test; one of four consecutive cuts is at a boundary.
        last = len(self.ids) - self.PENDING_TOKENS
        for cut in range(last, max(self.read_offset, last - 4), -1):
            settled = self._decode(self.prefix_offset, cut)
            if len(settled) > len(before) and settled.startswith(before) and after.startswith(settled):
                return self._advance(before, settled, cut)
        return ""

    def feed_ids(self, ids: Iterable[int]) -> list[Event]:
        """The events these new token ids complete."""
        new = _ids(ids if hasattr(ids, "tolist") else list(ids))  # arrays and tensors give ints via tolist()
        if new is None:
            raise ArgumentError(f"feed_ids takes token ids (ints), got {type(ids).__name__}", code="usage.batch")
        self.ids.extend(new)
        return self.parser.feed(self._new_text())

    def finalize(self) -> tuple[Message, list[Event]]:
        """End of generation: any text still undecoded, then the parser's final message and events."""
        events: list[Event] = []
        before = self._decode(self.prefix_offset, self.read_offset)
        after = self._decode(self.prefix_offset)
        if len(after) > len(before) and after.startswith(before):
            events += self.parser.feed(after[len(before):])
        message, final = self.parser.finalize()
        return message, events + final


__all__ = ["TokenStream", "get_response_parser", "grammar_for", "parse_response"]
