"""Benchmark: the grammars as decoding constraints (grammar_parse.constrain): export, compile and mask cost.

    pip install 'grammar-parse[constrain]'          # llguidance and xgrammar
    python benchmarks/bench_constrain.py            # every grammar the exports take
    python benchmarks/bench_constrain.py --grammar qwen3 --grammar glm45 --tools 8
    python benchmarks/bench_constrain.py --vocab 8000   # a trained vocabulary (needs tokenizers, transformers)

For each grammar, the constraint is exported (``to_llguidance`` / ``to_structural_tag``), compiled by each
engine over a byte-level vocabulary (256 byte tokens and an end token: no model needed, the same matchers
the tests use), and driven one byte at a time through the grammar's first golden output with calls that
it takes whole (cut at the end of turn); the request's tools are the ones that output calls, typed from
its arguments, then tools of the weather kind (a required string, an optional enum, an optional integer)
up to ``--tools``. A mask marked ``*`` was driven only up to a refusal (no golden output was taken whole).
Each step computes the allowed-token mask, then takes the byte, as a server does for every token, so
``mask µs/byte`` is the per-token cost at a one-byte vocabulary (a real vocabulary has fewer, longer tokens
and a larger mask). Times are the median of ``--repeat`` runs; compile caches are off.

With ``--vocab N``, the vocabulary is a byte-level BPE of N tokens trained here on every grammar's golden
outputs (a real vocabulary's algorithm on a small corpus), with each grammar's control-token-shaped
delimiters added as tokens, loaded by both engines from the Hugging Face tokenizer; llguidance's export
gets the tokens (``tokens=``), and the golden output is driven one token at a time (``µs/token``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from goldens import all_goldens, called_tools, goldens  # noqa: E402
from vocabularies import EOS as EOS_TEXT, byte_level, delimiter_tokens  # noqa: E402

import grammar_parse as gp  # noqa: E402
from grammar_parse import constrain  # noqa: E402

EOS = 256


def tools(count: int) -> list[dict[str, Any]]:
    out = []
    for i in range(count):
        name = "get_weather" if i == 0 else f"tool_{i}"
        out.append({"type": "function", "function": {"name": name, "parameters": {
            "type": "object", "required": ["city"], "properties": {
                "city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer"}}}}})
    return out


def samples_of(name: str) -> list[Any]:
    return [s for s in goldens(name) if "error" not in s.expected and not s.name.startswith("truncated")]


def workload(engines: "Engines", grammar: gp.Grammar, count: int, encode: Any,
             tokens: dict[str, int] | None) -> tuple[Any, list[dict[str, Any]], list[int]] | None:
    """The golden output to drive, the request's tools and the output's tokens: the grammar's first golden
    output with calls that the constraint takes whole over the engines' vocabulary (cut at its end of turn,
    which the server's stop token ends), with the tools it calls and weather-kind tools up to ``count``;
    else its first output, with the weather tools. None when the grammar does not export."""
    assert grammar.name is not None
    samples = samples_of(grammar.name)
    ends = constrain.end_of_turn(grammar)
    for sample in [s for s in samples if s.expected.get("tool_calls")]:
        text = min((sample.text.split(end)[0] for end in ends), key=len, default=sample.text)
        request = called_tools(sample)
        request += tools(count)[len(request):]
        try:
            lark = constrain.to_llguidance(grammar, tools=request, prefix=sample.prefix, tokens=tokens)
        except gp.GrammarParseError:
            return None
        if engines.llguidance(lark, encode(text))[2]:
            return sample, request, encode(text)
    return (samples[0], tools(count), encode(samples[0].text)) if samples else None


class Engines:
    def __init__(self) -> None:
        import llguidance
        import xgrammar

        class Bytes:
            tokens = [bytes([i]) for i in range(256)] + [b"<eos>"]
            eos_token_id, bos_token_id, special_token_ids = EOS, None, [EOS]

            def __call__(self, text: Any) -> list[int]:
                return list(text.encode() if isinstance(text, str) else text)

        self.llg, self.xgr = llguidance, xgrammar
        self.llg_tokenizer = llguidance.LLTokenizer(llguidance.TokenizerWrapper(Bytes()))
        self.xgr_info = xgrammar.TokenizerInfo([bytes([i]) for i in range(256)] + [b"<eos>"],
                                               vocab_type=xgrammar.VocabType.RAW, stop_token_ids=[EOS])
        self.xgr_compiler = xgrammar.GrammarCompiler(self.xgr_info, cache_enabled=False)
        self.bytes = (self.llg_tokenizer, self.xgr_info, self.xgr_compiler)

    def vocabulary(self, tokenizer: Any) -> None:
        """Use a Hugging Face tokenizer (a ``tokenizers.Tokenizer``), or the bytes again (None)."""
        if tokenizer is None:
            self.llg_tokenizer, self.xgr_info, self.xgr_compiler = self.bytes
            return
        import transformers

        hf = transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=EOS_TEXT)
        self.llg_tokenizer = self.llg.LLTokenizer(tokenizer.to_str(), eos_token=hf.eos_token_id)
        self.xgr_info = self.xgr.TokenizerInfo.from_huggingface(hf)
        self.xgr_compiler = self.xgr.GrammarCompiler(self.xgr_info, cache_enabled=False)

    def llguidance(self, lark: str, ids: list[int]) -> tuple[float, float, bool]:
        """(compile seconds, seconds per token: a mask, then the token, up to the end or the first refusal,
        and whether every token was taken)."""
        t0 = time.perf_counter()
        matcher = self.llg.LLMatcher(self.llg_tokenizer, lark, log_level=0)
        t1 = time.perf_counter()
        steps, taken = 0, True
        for token in ids:
            matcher.compute_bitmask()
            steps += 1
            if not matcher.consume_token(token):
                taken = False
                break
        return t1 - t0, (time.perf_counter() - t1) / steps, taken

    def xgrammar(self, tag: dict[str, Any], ids: list[int]) -> tuple[float, float, bool]:
        text = json.dumps(tag)
        t0 = time.perf_counter()
        compiled = self.xgr_compiler.compile_structural_tag(text)
        t1 = time.perf_counter()
        matcher = self.xgr.GrammarMatcher(compiled)
        mask = self.xgr.allocate_token_bitmask(1, self.xgr_info.vocab_size)
        steps, taken = 0, True
        for token in ids:
            matcher.fill_next_token_bitmask(mask)
            steps += 1
            if not matcher.accept_token(token):
                taken = False
                break
        return t1 - t0, (time.perf_counter() - t1) / steps, taken


def trained(size: int) -> Any:
    """A byte-level BPE of ``size`` tokens trained on every grammar's golden outputs (no added tokens)."""
    return byte_level([], corpus=[g.text for g in all_goldens()], size=size)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--grammar", action="append", help="a built-in grammar (repeatable; default: all)")
    parser.add_argument("--tools", type=int, default=4, help="tools in the request (default 4)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measure, the median kept (default 3)")
    parser.add_argument("--vocab", type=int, default=0,
                        help="a trained byte-level BPE of this many tokens instead of the bytes (default: bytes)")
    args = parser.parse_args()
    try:
        engines = Engines()
    except ImportError:
        sys.exit("needs the constrain extra: pip install 'grammar-parse[constrain]'")
    base = trained(args.vocab) if args.vocab else None
    names = args.grammar or sorted(gp.list_grammars())
    unit = "token" if base is not None else "byte"
    vocabulary = f"a {args.vocab}-token trained vocabulary" if base is not None else "byte-level vocabulary"
    print(f"{args.tools} tools; {vocabulary}; median of {args.repeat}; * a refusal before the output's end\n")
    print(f"| grammar | export ms | llguidance compile ms | llguidance mask µs/{unit} "
          f"| xgrammar compile ms | xgrammar mask µs/{unit} |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    skipped = []
    for name in names:
        grammar = gp.load_grammar(name)
        tokens: dict[str, int] | None = None
        encode: Any = lambda text: list(text.encode())  # noqa: E731
        if base is not None:
            import tokenizers

            vocab = tokenizers.Tokenizer.from_str(base.to_str())
            vocab.add_special_tokens([tokenizers.AddedToken(EOS_TEXT, special=True)])
            vocab.add_tokens([tokenizers.AddedToken(t, special=True) for t in delimiter_tokens(grammar)])
            engines.vocabulary(vocab)
            tokens = {t: i for t, i in constrain.added_tokens(vocab).items() if t != EOS_TEXT}
            encode = lambda text: vocab.encode(text).ids  # noqa: E731
        chosen = workload(engines, grammar, args.tools, encode, tokens)
        if chosen is None:
            skipped.append(f"{name} (constrain.unsupported)" if samples_of(name) else f"{name} (no golden output)")
            continue
        sample, request, ids = chosen
        try:
            t0 = time.perf_counter()
            lark = constrain.to_llguidance(grammar, tools=request, prefix=sample.prefix, tokens=tokens)
            tag = constrain.to_structural_tag(grammar, tools=request, prefix=sample.prefix)
            export = (time.perf_counter() - t0) / 2
        except gp.GrammarParseError as e:
            skipped.append(f"{name} ({e.code})")
            continue
        llg = [engines.llguidance(lark, ids) for _ in range(args.repeat)]
        xgr = [engines.xgrammar(tag, ids) for _ in range(args.repeat)]
        cells = [f"{1e3 * export:.1f}"]
        for runs in (llg, xgr):
            cells.append(f"{1e3 * statistics.median(r[0] for r in runs):.1f}")
            cells.append(f"{1e6 * statistics.median(r[1] for r in runs):.1f}" + ("" if runs[0][2] else "*"))
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)
    if skipped:
        print("\nnot exported: " + ", ".join(skipped))


if __name__ == "__main__":
    main()
