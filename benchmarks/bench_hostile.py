"""Benchmark: hostile model outputs, time per MB from 100 KB to 10 MB, one-shot and streamed.

    python benchmarks/bench_hostile.py                       # 0.1, 1 and 10 MB
    python benchmarks/bench_hostile.py --quick               # 0.1 and 1 MB
    python benchmarks/bench_hostile.py --grammars            # every built-in grammar: 10 KB, 100 KB, 1 MB
    python benchmarks/bench_hostile.py --grammars --quick -g qwen3 -g glm45   # 10 and 100 KB, two grammars

Each workload is a Qwen3 output built to hurt a parser: megabytes of near-delimiters, a region that
never closes, JSON nested far past the depth limit, lone surrogates and NUL bytes, a closer that almost
matches again and again. Parsing is lenient (``strict=False``), so every run ends in a message, with
``parse_errors`` where the output is broken. Linear parsing shows as a flat "s per MB" column; the last
column is the ratio of the 10 MB (or 1 MB) cost per MB to the 100 KB one. Streamed runs feed 16-char
chunks. With transformers 5.23 installed, its one-shot cost per MB on the 100 KB input is shown, with
how many times slower it is than ours on the same input.

``--grammars`` runs the same question over every built-in grammar: each grammar's golden sample with
the most delimiters gets a flood (spaces, newlines, or its neighbouring delimiter without its last
character, repeated) inserted before and after every delimiter, the output going on after it or cut off
in it (as a truncated generation is); the floods are screened at 10 KB and the
three costliest per mode are measured at every size. The row shows the worst cost per MB at each size
and the ratio of the largest size's cost per MB to the smallest's (1.0 is linear).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

from pathlib import Path

from bench import TEMPLATE, TEMPLATE_DICT, best_of, transformers_parser

import grammar_parse

ROOT = Path(__file__).resolve().parents[1]


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


# ---------------------------------------------------------------------------- every grammar
def flood_cases(name: str) -> tuple[object, list[tuple[str, Callable[[int], str]]]]:
    """The golden sample with the most delimiters, and a builder per (place, flood) for it."""
    sys.path.insert(0, str(ROOT / "tests"))
    from goldens import goldens  # the golden samples live with the tests

    grammar = grammar_parse.load_grammar(name)

    def places(case) -> list[tuple[int, str]]:
        parser = grammar_parse.ResponseParser(grammar, case.prefix, trace=True, strict=False)
        parser.finalize(case.text)
        out = set()
        for span in parser.spans:
            if span["kind"] == "delimiter" and span["start"] >= 0:
                delim = case.text[span["start"]:span["end"]]
                out |= {(span["start"], delim), (span["end"], delim)}
        return sorted(out)

    cases = [c for c in goldens(name) if "error" not in c.expected]
    sample = max(cases, key=lambda c: len(places(c)))
    builders: list[tuple[str, Callable[[int], str]]] = []
    for at, delim in places(sample):
        floods = {"spaces": " ", "newlines": "\n"}
        if len(delim.strip()) >= 2:
            floods[f"{delim[:-1][:20]!r} repeated"] = delim[:-1]
        for label, unit in floods.items():
            for rest in (True, False):  # (the output goes on after the flood, or is cut off in it)
                def build(n: int, at: int = at, unit: str = unit, rest: bool = rest) -> str:
                    return sample.text[:at] + (unit * (n // len(unit) + 1))[:n] + (sample.text[at:] if rest else "")
                builders.append((f"{label} at {at}{'' if rest else ', cut off'}", build))
    return sample, builders


#: The grammar rows compare costs across sizes measured minutes apart: CPU time keeps other processes out.
CPU = time.process_time


def grammar_rows(names: list[str], sizes: list[int]) -> None:
    print(f"grammar_parse {grammar_parse.__version__}, Python {sys.version.split()[0]}; lenient mode, "
          "streamed in 16-char chunks; CPU seconds of this process (other load on the machine does not "
          "change the ratios)")
    print()
    head = " | ".join(f"{s / 1e3:g} KB" for s in sizes)
    print(f"| grammar | mode | {head} (worst s per MB) | largest / smallest | worst flood |")
    print("| --- | --- |" + " ---: |" * len(sizes) + " ---: | --- |")
    worst_ratio = 0.0
    for name in names:
        sample, builders = flood_cases(name)
        for mode in ("one-shot", "streamed"):
            def run(text: str) -> object:
                if mode == "one-shot":
                    return grammar_parse.parse_response(text, name, prefix=sample.prefix, strict=False)
                parser = grammar_parse.ResponseParser(name, sample.prefix, strict=False)
                for i in range(0, len(text), 16):
                    parser.feed(text[i:i + 16])
                return parser.finalize()[0]
            screened = sorted(builders, key=lambda b: -best_of(lambda: run(b[1](sizes[0])), 1, CPU))[:3]
            costs, label = [0.0] * len(sizes), ""
            for flood, build in screened:
                for k, size in enumerate(sizes):
                    text = build(size)
                    per_mb = best_of(lambda: run(text), 1 if size >= 1_000_000 else 3, CPU) / (len(text.encode()) / 1e6)
                    if per_mb > costs[k]:
                        costs[k] = per_mb
                        if k == len(sizes) - 1:
                            label = flood
            ratio = costs[-1] / costs[0]
            worst_ratio = max(worst_ratio, ratio)
            cells = " | ".join(f"{c:.3f}" for c in costs)
            print(f"| {name} | {mode} | {cells} | {ratio:.2f} | {label} |", flush=True)
    print()
    print(f"largest / smallest cost per MB, worst over all grammars and modes: {worst_ratio:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--grammars", action="store_true", help="floods at every delimiter of every built-in grammar")
    ap.add_argument("-g", "--grammar", action="append", help="with --grammars: only these (repeatable)")
    args = ap.parse_args()
    if args.grammars:
        names = args.grammar or sorted(grammar_parse.list_grammars())
        grammar_rows(names, [10_000, 100_000] if args.quick else [10_000, 100_000, 1_000_000])
        return
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
                # (one-shot twice even at the large sizes, it is cheap: the specialised parser's walk is compiled
                # inside whichever parse reaches its build, a one-off cost that is no part of a cost per MB)
                repeat = 3 if size < 1_000_000 else 2 if mode == "one-shot" else 1
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
