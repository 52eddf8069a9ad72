"""Hugging Face tokenizers built here, for the decoding-constraint tests and benchmark (no model download).

A byte-level BPE vocabulary, so any text can be written, with a grammar's control-token-shaped delimiters
as added tokens, as a model's tokenizer holds them::

    from vocabularies import byte_level, delimiter_tokens

    tokenizer = byte_level(delimiter_tokens(grammar))             # token i < 256 is byte i, then <eos>, then those
    tokenizer = byte_level(tokens, corpus=texts, size=8000)       # merges learnt from texts, as a real vocabulary's
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from grammar_parse import Grammar
from grammar_parse._engine.delimiters import LiteralMatcher, RegexMatcher

#: Delimiter texts shaped like a model's control tokens: <|...|>, <｜...｜>, [UPPER], and the think and
#: tool_call tags that Qwen-style tokenizers add.
TOKEN_SHAPE = re.compile(r"<\|[^|<>\s]{1,60}\|>|<｜[^\s<>｜]{1,60}｜>|\[[A-Z_]{3,20}\]"
                         r"|</?[a-z_]*think>|</?[a-z_]*tool_call>")
EOS = "<eos>"


def delimiter_tokens(grammar: Grammar) -> list[str]:
    """The grammar's delimiter texts (literals, and regexes read without their escapes) that look like tokens."""
    texts: list[str] = []
    for terminal in grammar.terminals.values():
        if isinstance(terminal.matcher, LiteralMatcher):
            texts += terminal.matcher.literals
        elif isinstance(terminal.matcher, RegexMatcher):
            texts.append(terminal.matcher.pattern.replace("\\", ""))
    return sorted({m for text in texts for m in TOKEN_SHAPE.findall(text)})


def _byte_chars() -> dict[int, str]:
    """GPT-2's byte-to-character table, which a byte-level BPE vocabulary is written in."""
    shown = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = dict(zip(shown, map(chr, shown))), 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def byte_level(added: Iterable[str], *, corpus: Iterable[str] = (), size: int = 0) -> Any:
    """A ``tokenizers.Tokenizer``: the 256 bytes (token i is byte i), merges learnt from ``corpus`` up to
    ``size`` tokens (none when ``size`` is 0), then ``<eos>`` and the ``added`` tokens."""
    import tokenizers

    model = tokenizers.models.BPE() if size else \
        tokenizers.models.BPE(vocab={c: b for b, c in _byte_chars().items()}, merges=[])
    tokenizer = tokenizers.Tokenizer(model)
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=bool(size))
    tokenizer.decoder = tokenizers.decoders.ByteLevel()
    if size:
        trainer = tokenizers.trainers.BpeTrainer(vocab_size=size, show_progress=False,
                                                 initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
        tokenizer.train_from_iterator(list(corpus), trainer=trainer)
    tokenizer.add_special_tokens([tokenizers.AddedToken(EOS, special=True)])
    tokenizer.add_tokens([tokenizers.AddedToken(t, special=True) for t in added])
    return tokenizer
