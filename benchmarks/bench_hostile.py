"""Benchmark: hostile model outputs, time per MB from 100 KB to 10 MB, one-shot and streamed.

    python benchmarks/bench_hostile.py            # 0.1, 1 and 10 MB
    python benchmarks/bench_hostile.py --quick    # 0.1 and 1 MB

Each workload is a Qwen3 output built to hurt a parser: megabytes of near-delimiters, a region that
never closes, JSON nested far past the depth limit, lone surrogates and NUL bytes, a closer that almost
matches again and again. Parsing is lenient (``strict=False``), so every run ends in a message, with
``parse_errors`` where the output is broken. Linear parsing shows as a flat "s per MB" column; the last
column is the ratio of the 10 MB (or 1 MB) cost per MB to the 100 KB one. Streamed runs feed 16-char
chunks. With transformers 5.23 installed, its one-shot cost per MB on the 100 KB input is shown, with
how many times slower it is than ours on the same input.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from bench import TEMPLATE, TEMPLATE_DICT, best_of, transformers_parser

import grammar_parse


def near_delimiters(n: int) -> str:
    return ("<tool_cal " * (n // 10 + 1))[:n] + "<|im_end|>"


def unterminated(n: int) -> str:
    return "<think>" + ("a long thought that never ends " * (n // 31 + 1))[:n]


def deep_json(n: int) -> str:
    return "<tool_call>" + "[" * n + "</tool_call><|im_end|>"


def surrogates_and_nul(n: int) -> str:
    piece = 'bad \ud800 and \udfff, nul \x00; escaped "\\ud800" '
    body = (piece * (n // len(piece) + 1))[:n]
    return f"<think>{body}</think>{body}" + '<tool_call>{"name": "f", "arguments": {"s": "\\udc00\\u0000"}}</tool_call>'


def near_closers(n: int) -> str:
    body = ("</tool_cal" * (n // 10 + 1))[:n]
    return '<tool_call>{"name": "f", "arguments": {"s": "' + body + '"}}</tool_call><|im_end|>'


WORKLOADS: dict[str, Callable[[int], str]] = {
    "near-delimiters (`<tool_cal` repeated)": near_delimiters,
    "unterminated `<think>`": unterminated,
    "deep JSON (`[[[[...`)": deep_json,
    "lone surrogates and NUL bytes": surrogates_and_nul,
    "near-closers inside a tool call": near_closers,
}


def one_shot(text: str) -> dict:
    return grammar_parse.parse_response(text, TEMPLATE, prefix="", strict=False)


def streamed(text: str) -> dict:
    parser = grammar_parse.ResponseParser(TEMPLATE, "", strict=False)
    for i in range(0, len(text), 16):
        parser.feed(text[i:i + 16])
    return parser.finalize()[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    sizes = [100_000, 1_000_000] if args.quick else [100_000, 1_000_000, 10_000_000]
    tf = transformers_parser()
    print(f"grammar_parse {grammar_parse.__version__}, Python {sys.version.split()[0]}; lenient mode")
    print()
    head = " | ".join(f"{s / 1e6:g} MB" for s in sizes)
    print(f"| workload | mode | {head} (s per MB) | largest / smallest | outcome | transformers one-shot, 0.1 MB |")
    print("| --- | --- |" + " ---: |" * len(sizes) + " ---: | --- | ---: |")
    for name, build in WORKLOADS.items():
        for mode, run in (("one-shot", one_shot), ("streamed", streamed)):
            costs = []
            message: dict = {}
            for size in sizes:
                text = build(size)
                mb = len(text.encode("utf-8", "surrogatepass")) / 1e6
                repeat = 1 if size >= 1_000_000 else 3
                costs.append(best_of(lambda: run(text), repeat) / mb)
                message = run(text)
            if mode == "streamed":
                small = build(sizes[0])
                assert streamed(small) == one_shot(small), "streaming disagrees with one-shot"
            codes = sorted({e["code"] for e in message.get("parse_errors", [])})
            outcome = ", ".join(codes) if codes else "parsed"
            theirs = "-"
            if tf is not None and mode == "one-shot":
                text = build(sizes[0])
                try:
                    mb = len(text.encode("utf-8", "surrogatepass")) / 1e6
                    per_mb = best_of(lambda: tf[1](text, TEMPLATE_DICT, prefix=""), 1) / mb
                    theirs = f"{per_mb:.3f} s per MB ({per_mb / costs[0]:.0f}x)"
                except Exception as e:  # noqa: BLE001 - the point is to show what happens
                    theirs = f"raises {type(e).__name__}"
            cells = " | ".join(f"{c:.3f}" for c in costs)
            print(f"| {name} | {mode} | {cells} | {costs[-1] / costs[0]:.2f} | {outcome} | {theirs} |")


if __name__ == "__main__":
    main()
