"""A tokenizer for the engine tests that need one only to decode a prompt's ids."""

from __future__ import annotations


class CharTokenizer:
    """A tokenizer whose token ids are code points: what the plugins need of one (decoding the prompt's
    ids) with every text a token stream of its characters. Real vocabularies are in test_vllm's
    test_token_ids."""

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return "".join(map(chr, ids))

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(c) for c in text]

    def get_vocab(self) -> dict[str, int]:
        return {}
