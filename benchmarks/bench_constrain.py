"""Benchmark: the grammars as decoding constraints (grammar_parse.constrain): export, compile and mask cost.

    pip install 'grammar-parse[constrain]'          # llguidance and xgrammar
    python benchmarks/bench_constrain.py            # every grammar the exports take
    python benchmarks/bench_constrain.py --grammar qwen3 --grammar glm45 --tools 8

For each grammar, with ``--tools`` tools of the weather kind (a required string, an optional enum, an
optional integer) the constraint is exported (``to_llguidance`` / ``to_structural_tag``), compiled by each
engine over a byte-level vocabulary (256 byte tokens and an end token: no model needed, the same matchers
the tests use), and driven through the grammar's first golden output with a call, one byte at a time.
Each step computes the allowed-token mask, then takes the byte, as a server does for every token, so
``mask µs/byte`` is the per-token cost at a one-byte vocabulary (a real vocabulary has fewer, longer tokens
and a larger mask). Times are the median of ``--repeat`` runs; compile caches are off.
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

from goldens import goldens  # noqa: E402

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


def sample_text(name: str) -> str | None:
    """The grammar's first golden output with a call, or its first output."""
    samples = [s for s in goldens(name) if "error" not in s.expected and not s.name.startswith("truncated")]
    with_call = [s for s in samples if s.expected.get("tool_calls")]
    chosen = (with_call or samples or [None])[0]
    return None if chosen is None else chosen.text


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

    def llguidance(self, lark: str, data: bytes) -> tuple[float, float]:
        """(compile seconds, seconds per byte: a mask, then the byte, up to the end or the first refusal)."""
        t0 = time.perf_counter()
        matcher = self.llg.LLMatcher(self.llg_tokenizer, lark, log_level=0)
        t1 = time.perf_counter()
        steps = 0
        for byte in data:
            matcher.compute_bitmask()
            steps += 1
            if not matcher.consume_token(byte):
                break
        return t1 - t0, (time.perf_counter() - t1) / steps

    def xgrammar(self, tag: dict[str, Any], data: bytes) -> tuple[float, float]:
        text = json.dumps(tag)
        t0 = time.perf_counter()
        compiled = self.xgr_compiler.compile_structural_tag(text)
        t1 = time.perf_counter()
        matcher = self.xgr.GrammarMatcher(compiled)
        mask = self.xgr.allocate_token_bitmask(1, self.xgr_info.vocab_size)
        steps = 0
        for byte in data:
            matcher.fill_next_token_bitmask(mask)
            steps += 1
            if not matcher.accept_token(byte):
                break
        return t1 - t0, (time.perf_counter() - t1) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--grammar", action="append", help="a built-in grammar (repeatable; default: all)")
    parser.add_argument("--tools", type=int, default=4, help="tools in the request (default 4)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measure, the median kept (default 3)")
    args = parser.parse_args()
    try:
        engines = Engines()
    except ImportError:
        sys.exit("needs the constrain extra: pip install 'grammar-parse[constrain]'")
    request = tools(args.tools)
    names = args.grammar or sorted(gp.list_grammars())
    print(f"{len(request)} tools; byte-level vocabulary; median of {args.repeat}\n")
    print("| grammar | export ms | llguidance compile ms | llguidance mask µs/byte "
          "| xgrammar compile ms | xgrammar mask µs/byte |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    skipped = []
    for name in names:
        grammar = gp.load_grammar(name)
        text = sample_text(name)
        try:
            t0 = time.perf_counter()
            lark = constrain.to_llguidance(grammar, tools=request)
            tag = constrain.to_structural_tag(grammar, tools=request)
            export = (time.perf_counter() - t0) / 2
        except gp.GrammarParseError as e:
            skipped.append(f"{name} ({e.code})")
            continue
        if text is None:
            skipped.append(f"{name} (no golden output)")
            continue
        data = text.encode()
        llg = [engines.llguidance(lark, data) for _ in range(args.repeat)]
        xgr = [engines.xgrammar(tag, data) for _ in range(args.repeat)]
        row = [1e3 * export,
               1e3 * statistics.median(c for c, _ in llg), 1e6 * statistics.median(m for _, m in llg),
               1e3 * statistics.median(c for c, _ in xgr), 1e6 * statistics.median(m for _, m in xgr)]
        print(f"| {name} | " + " | ".join(f"{v:.1f}" for v in row) + " |", flush=True)
    if skipped:
        print("\nnot exported: " + ", ".join(skipped))


if __name__ == "__main__":
    main()
