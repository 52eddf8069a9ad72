"""llguidance's and xgrammar's matchers over a byte-level vocabulary (256 byte tokens and a stop token: no model
needed), for the tests that check what a constraint export accepts. Import it after ``pytest.importorskip`` of
both engines."""

from __future__ import annotations

import json
from typing import Any

import llguidance
import xgrammar

EOS = 256


# ---------------------------------------------------------------------------- byte-level matchers
class ByteTokenizer:
    """256 byte tokens and an end-of-sequence token, for llguidance's TokenizerWrapper."""

    def __init__(self) -> None:
        self.tokens = [bytes([i]) for i in range(256)] + [b"<eos>"]
        self.eos_token_id = EOS
        self.bos_token_id = None
        self.special_token_ids = [EOS]

    def __call__(self, text: Any) -> list[int]:
        return list(text.encode() if isinstance(text, str) else text)


LLG_TOKENIZER = llguidance.LLTokenizer(llguidance.TokenizerWrapper(ByteTokenizer()))
XGR_INFO = xgrammar.TokenizerInfo([bytes([i]) for i in range(256)] + [b"<eos>"],
                                   vocab_type=xgrammar.VocabType.RAW, stop_token_ids=[EOS])
XGR_COMPILER = xgrammar.GrammarCompiler(XGR_INFO, cache_enabled=False)


def drive_llguidance(tokenizer: Any, grammar: str, ids: list[int]) -> str:
    """'accept' (complete: the stop token is allowed), 'prefix' (live, not complete) or 'reject@N', for the
    token ids fed one by one to llguidance's matcher over ``tokenizer``."""
    matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
    assert not matcher.is_error(), matcher.get_error()
    for i, token in enumerate(ids):
        if not matcher.consume_token(token):
            return f"reject@{i}"
    return "accept" if matcher.is_accepting() else "prefix"


def drive_xgrammar(compiler: Any, tag: dict[str, Any], ids: list[int], eos: int) -> str:
    """The same for xgrammar's matcher of a structural tag (complete: it takes the stop token ``eos``)."""
    matcher = xgrammar.GrammarMatcher(compiler.compile_structural_tag(json.dumps(tag)),
                                      terminate_without_stop_token=False)
    for i, token in enumerate(ids):
        if not matcher.accept_token(token):
            return f"reject@{i}"
    return "accept" if matcher.accept_token(eos) else "prefix"


def run_llguidance(grammar: str, text: str) -> str:
    return drive_llguidance(LLG_TOKENIZER, grammar, list(text.encode()))


def run_xgrammar(tag: dict[str, Any], text: str) -> str:
    return drive_xgrammar(XGR_COMPILER, tag, list(text.encode()), EOS)
