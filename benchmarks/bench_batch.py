"""Benchmark: parsing generation logs with grammar_parse.batch (rows per second, per worker count).

    python benchmarks/bench_batch.py                  # 100,000 rows of each workload, -j 1 and -j 2
    python benchmarks/bench_batch.py --rows 20000 --jobs 1 --jobs 4 --workload short

The rows are synthetic rollouts: the golden outputs of several families (qwen3, qwen3_coder, gpt_oss,
llama3_json, kimi_k2, deepseek_v31, glm45, mistral), each row one family's output with its prompt and
tools, and one row in ten malformed (cut at a random point, or with its JSON broken). The short workload
is what the issue's target names: one-sentence qwen3 answers with a short reasoning (about 45 characters). Each worker count
parses the same rows through ``parse_many`` (each row naming its grammar, built once per worker), and
the table reports rows/s, the speed-up over one worker and the mean cost per row. The
per-message fixed cost is the cost of the shortest output (one word) parsed one-shot.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from goldens import goldens  # noqa: E402

import grammar_parse  # noqa: E402
from grammar_parse.batch import Columns, parse_many  # noqa: E402

FAMILIES = ("qwen3", "qwen3_coder", "gpt_oss", "llama3_json", "kimi_k2", "deepseek_v31", "glm45", "mistral")
COLUMNS = Columns(text="completion", prompt="prompt", tools="tools", id="id", grammar="model")


def rollouts(count: int, seed: int = 7) -> list[dict]:
    """``count`` rows of mixed families, each naming its model's grammar."""
    rng = random.Random(seed)
    samples = {f: [g for g in goldens(f) if "error" not in g.expected] for f in FAMILIES}
    out: list[dict] = []
    for i in range(count):
        family = FAMILIES[i % len(FAMILIES)]
        golden = rng.choice(samples[family])
        text = golden.text
        if rng.random() < 0.1:  # malformed: cut off, or a brace gone
            text = text[: rng.randrange(max(len(text), 1))] if rng.random() < 0.5 else text.replace("{", "", 1)
        out.append({"id": i, "model": family, "completion": text, "prompt": golden.prefix, "tools": golden.tools})
    return out


def short_rows(count: int) -> list[dict]:
    """``count`` short outputs: a few words of reasoning and a one-sentence answer."""
    return [{"id": i, "model": "qwen3", "completion": f"<think>Step {i}.</think>The answer is {i % 97}.",
             "prompt": "", "tools": None} for i in range(count)]


def run(rows: list[dict], jobs: int) -> float:
    """Seconds to parse every row with ``jobs`` workers (the workers' start included)."""
    started = time.perf_counter()
    for _ in parse_many(rows, None, columns=COLUMNS, workers=jobs):
        pass
    return time.perf_counter() - started


def fixed_cost(repeats: int = 2000) -> float:
    """Microseconds per one-word output parsed one-shot (the per-message floor)."""
    grammar = grammar_parse.load_grammar("qwen3")
    grammar_parse.parse_response("Hi", grammar, prefix="")
    started = time.perf_counter()
    for _ in range(repeats):
        grammar_parse.parse_response("Hi", grammar, prefix="")
    return (time.perf_counter() - started) / repeats * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--jobs", type=int, action="append", help="worker counts (default 1 and 2)")
    parser.add_argument("--workload", choices=["mixed", "short", "both"], default="both")
    args = parser.parse_args()
    print(f"fixed cost per message {fixed_cost():.0f} µs (a one-word output, one-shot)\n")
    workloads = {"mixed": lambda: rollouts(args.rows), "short": lambda: short_rows(args.rows)}
    print("| workload | workers | seconds | rows/s | vs 1 worker | µs per row per worker |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name in ("mixed", "short") if args.workload == "both" else (args.workload,):
        rows = workloads[name]()
        total = len(rows)
        base = None
        for jobs in args.jobs or [1, 2]:
            seconds = run(rows, jobs)
            base = base or seconds
            print(f"| {name} | {jobs} | {seconds:.1f} | {total / seconds:,.0f} | {base / seconds:.2f}× | "
                  f"{seconds / total * 1e6 * jobs:.0f} |", flush=True)
    print(f"\n(mixed: {len(FAMILIES)} families, 10% malformed; short: qwen3, about 45 characters a row)")


if __name__ == "__main__":
    main()
