"""Real token-id streams, and the detokenization a server does on them, for tests.

The fixtures in ``tests/data/token_streams/<vocabulary>.json`` (built by build.py there, see its
README) hold model outputs tokenized by real vocabularies, with the bytes of only the ids they use.

API::

    from token_streams import fixture_names, load_fixture, IncrementalDetokenizer, chunked, text_deltas

    fixture = load_fixture("qwen3")          # fixture_names() lists them: qwen3, llama3, gemma4, tekken
    fixture.decoder.decode(ids, skip_special_tokens=False)   # TableDecoder: a tokenizer's decode()
    for output in fixture.outputs:           # Output: name, grammar, prefix, text, ids, split_characters
        chunks = chunked(output.ids, 3)      # ids in steps of 3 tokens (or a list of step sizes)
        deltas = text_deltas(fixture.decoder, chunks)   # the text a server streams after each step
        assert "".join(deltas) == output.text

    detok = IncrementalDetokenizer(fixture.decoder, prompt_ids=[])
    detok.step(token_id) -> str              # the text this token makes final ("" while it is held back)
    detok.feed(ids) -> str                   # the same for several tokens of one engine step
    detok.flush() -> str                     # end of generation: what is still held back
    detok.text                               # everything emitted so far

The rule is vLLM's incremental detokenization (``detokenize_incrementally`` and, in v1, the
``tokenizers`` ``DecodeStream`` it steps once per token; SGLang's detokenizer manager does the same with
its ``surr_offset`` / ``read_offset``): keep two offsets into the ids, decode the ids from the first
one (the context, which lets a tokenizer that merges across tokens spell the new ones right) without and
with the new tokens, and emit the difference only when the decode grew and does not end in U+FFFD: a
character still arriving (a multi-byte UTF-8 sequence split across tokens) is held back until its last
byte comes. Then the context moves up to the text just emitted. The prompt primes the context with its
last few ids, as vLLM does (they are never emitted).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parent / "data" / "token_streams"

#: Prompt ids vLLM keeps as context before the first generated token (INITIAL_INCREMENTAL_DETOKENIZATION_OFFSET).
PROMPT_CONTEXT = 5


class TableDecoder:
    """A tokenizer's ``decode()`` from a table of token bytes, as a byte-level tokenizer decodes: the
    tokens' bytes joined, read as UTF-8 with invalid sequences as U+FFFD (errors="replace")."""

    def __init__(self, tokens: dict[int, bytes], special: Iterable[int] = ()) -> None:
        self.tokens = tokens
        self.special = frozenset(special)

    def token_bytes(self, token_id: int) -> bytes:
        return self.tokens[token_id]

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        data = b"".join(self.tokens[i] for i in ids if not (skip_special_tokens and i in self.special))
        return data.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class Output:
    """One model output of a fixture: the grammar that reads it, the prompt tail it continues, its text
    and its token ids; ``split_characters`` counts token boundaries inside a multi-byte character."""

    name: str
    grammar: str
    prefix: str
    text: str
    ids: tuple[int, ...]
    split_characters: int


@dataclass(frozen=True)
class Fixture:
    vocabulary: str
    source: dict[str, str]
    decoder: TableDecoder
    markers: dict[str, int]  # marker text -> its single id
    outputs: tuple[Output, ...]
    skipped: tuple[dict[str, str], ...]  # outputs left out, with the reason


def fixture_names() -> list[str]:
    return sorted(p.stem for p in FIXTURES.glob("*.json"))


@cache
def load_fixture(name: str) -> Fixture:
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    tokens = {int(k): base64.b64decode(v) for k, v in data["tokens"].items()}
    outputs = tuple(Output(o["name"], o["grammar"], o["prefix"], o["text"], tuple(o["ids"]), o["split_characters"])
                    for o in data["outputs"])
    return Fixture(data["vocabulary"], data["source"], TableDecoder(tokens, data["special"]), data["markers"],
                   outputs, tuple(data["skipped"]))


class IncrementalDetokenizer:
    """Text from token ids as a server streams it (the rule is in the module doc)."""

    def __init__(self, decoder: Any, prompt_ids: Sequence[int] = (), *, skip_special_tokens: bool = False) -> None:
        self.decoder = decoder
        self.skip_special_tokens = skip_special_tokens
        self.ids: list[int] = list(prompt_ids[-PROMPT_CONTEXT:]) if prompt_ids else []
        self.prefix_offset = 0
        self.read_offset = len(self.ids)
        self.text = ""

    def _decode(self, ids: Sequence[int]) -> str:
        text: str = self.decoder.decode(ids, skip_special_tokens=self.skip_special_tokens)
        return text

    def step(self, token_id: int) -> str:
        """The text this token makes final ("" while a character is still arriving)."""
        self.ids.append(token_id)
        before = self._decode(self.ids[self.prefix_offset:self.read_offset])
        after = self._decode(self.ids[self.prefix_offset:])
        if len(after) <= len(before) or after.endswith("\ufffd"):
            return ""
        self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
        new = after[len(before):]
        self.text += new
        return new

    def feed(self, ids: Iterable[int]) -> str:
        """The text of one engine step that produced several tokens (each is stepped in turn)."""
        return "".join(self.step(i) for i in ids)

    def flush(self) -> str:
        """End of generation: the text still held back (U+FFFD for bytes that never became a character)."""
        before = self._decode(self.ids[self.prefix_offset:self.read_offset])
        after = self._decode(self.ids[self.prefix_offset:])
        self.prefix_offset = self.read_offset = len(self.ids)
        new = after[len(before):] if after.startswith(before) else ""
        self.text += new
        return new


def chunked(ids: Sequence[int], sizes: int | Sequence[int]) -> list[list[int]]:
    """``ids`` cut into steps of ``sizes`` tokens (one size for all, or one per step, repeated)."""
    steps = [sizes] if isinstance(sizes, int) else list(sizes)
    if not steps or min(steps) < 1:
        raise ValueError("step sizes must be positive")
    out, start, k = [], 0, 0
    while start < len(ids):
        out.append(list(ids[start:start + steps[k % len(steps)]]))
        start += steps[k % len(steps)]
        k += 1
    return out


def text_deltas(decoder: Any, chunks: Iterable[Sequence[int]], prompt_ids: Sequence[int] = ()) -> list[str]:
    """The text streamed after each step (one string per chunk, "" when all of it is held back), and a last
    one from flush() when something was still held back at the end."""
    detok = IncrementalDetokenizer(decoder, prompt_ids)
    deltas = [detok.feed(chunk) for chunk in chunks]
    if tail := detok.flush():
        deltas.append(tail)
    return deltas


def split_character_count(decoder: TableDecoder, ids: Sequence[int]) -> int:
    """How many token boundaries in ``ids`` fall inside a multi-byte UTF-8 character."""
    count, offset = 0, 0
    data = b"".join(decoder.token_bytes(i) for i in ids)
    for i in ids[:-1]:
        offset += len(decoder.token_bytes(i))
        count += offset < len(data) and 0x80 <= data[offset] < 0xC0  # the next token continues a character
    return count


__all__ = ["FIXTURES", "Fixture", "IncrementalDetokenizer", "Output", "TableDecoder", "chunked",
           "fixture_names", "load_fixture", "split_character_count", "text_deltas"]
