"""Benchmark: grammar_parse against transformers' ResponseParser and a hand-written parser, in one run.

    python benchmarks/bench.py            # full table (needs `pip install transformers==5.23.0` for the
                                          # transformers column; without it that column is skipped)
    python benchmarks/bench.py --quick    # smaller sizes, for a smoke run

All three parse the same Qwen3 output (transformers 5.23's serve template: <think>, Hermes JSON
<tool_call>, content up to <|im_end|>). The hand-written parser knows only this one format
(str.find, slicing, json.loads): the floor any general engine is measured against.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grammar_parse  # noqa: E402

TEMPLATE = grammar_parse.load_grammar("qwen3")
TEMPLATE_DICT = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "reasoning_content": {"open": "<think>", "close": "</think>", "content": "text"},
        "tool_calls": {"open_pattern": r"\s*<tool_call>", "close": "</tool_call>", "repeats": True,
                       "content": "json", "transform": {"type": "function", "function": "{content}"}},
        "content": {"close_pattern": r"\s*(?:<\|im_end\|>|<\|endoftext\|>|<\|eot_id\|>)", "content": "text"},
    },
}
WORDS = ("the user wants to know about weather in paris so I should think about which tool to call and "
         "what arguments it takes, then answer briefly with the result; numbers like 42 and 3.14 appear "
         "too, along with punctuation: commas, periods. and (parentheses)").split()


def prose(rng: random.Random, n: int) -> str:
    out: list[str] = []
    size = 0
    while size < n:
        w = rng.choice(WORDS)
        out.append(w)
        size += len(w) + 1
    return " ".join(out)[:n]


def output_text(n: int, tool_calls: int = 1, seed: int = 0) -> str:
    """A Qwen3 output of about n characters: reasoning, content, and tool calls."""
    rng = random.Random(seed)
    calls = []
    for i in range(tool_calls):
        args = {"city": rng.choice(["Paris", "Tokyo", "Lima"]), "days": i % 7, "note": prose(rng, 40)}
        calls.append(f'\n<tool_call>\n{json.dumps({"name": f"tool_{i % 5}", "arguments": args})}\n</tool_call>')
    fixed = sum(map(len, calls)) + 40
    body = max(n - fixed, 20)
    text = f"<think>\n{prose(rng, body // 2)}\n</think>\n\n{prose(rng, body - body // 2)}"
    return text + "".join(calls) + "<|im_end|>"


# ---------------------------------------------------------------------------- the hand-written floor
class HandWritten:
    """A streaming parser for exactly this format, as simple and fast as Python allows."""

    def __init__(self) -> None:
        self.held = ""
        self.mode = "content"  # content | think | tool
        self.body: list[str] = []
        self.message: dict[str, Any] = {"role": "assistant"}
        self.content: list[str] = []

    def feed(self, chunk: str) -> list[dict[str, Any]]:
        buf = self.held + chunk
        events: list[dict[str, Any]] = []
        while True:
            if self.mode == "think":
                i = buf.find("</think>")
                if i < 0:
                    break
                self.body.append(buf[:i])
                self.message["reasoning_content"] = "".join(self.body).strip()
                self.body = []
                buf = buf[i + 8:]
                self.mode = "content"
            elif self.mode == "tool":
                i = buf.find("</tool_call>")
                if i < 0:
                    break
                self.body.append(buf[:i])
                self.message.setdefault("tool_calls", []).append(
                    {"type": "function", "function": json.loads("".join(self.body))})
                self.body = []
                buf = buf[i + 12:]
                self.mode = "content"
            else:
                i = buf.find("<")
                if i < 0:
                    break
                if buf.startswith("<think>", i):
                    self.content.append(buf[:i])
                    buf, self.mode = buf[i + 7:], "think"
                elif buf.startswith("<tool_call>", i):
                    self.content.append(buf[:i])
                    buf, self.mode = buf[i + 11:], "tool"
                elif buf.startswith("<|im_end|>", i):
                    self.content.append(buf[:i])
                    buf = buf[i + 10:]
                elif len(buf) - i < 11:
                    break  # maybe a partial delimiter: hold it
                else:
                    self.content.append(buf[: i + 1])
                    buf = buf[i + 1:]
        # emit what cannot start a delimiter
        cut = buf.rfind("<")
        keep = buf[cut:] if cut >= 0 and len(buf) - cut < 12 else ""
        text = buf[: len(buf) - len(keep)]
        if text:
            (self.body if self.mode != "content" else self.content).append(text)
            events.append({"type": "region_chunk", "field": self.mode, "text": text, "dirty": self.mode == "tool"})
        self.held = keep
        return events

    def finalize(self) -> dict[str, Any]:
        content = "".join(self.content) + self.held
        if content.strip():
            self.message["content"] = content.strip()
        return self.message


# ---------------------------------------------------------------------------- harnesses
def transformers_parser() -> tuple[type, Callable[..., Any]] | None:
    try:
        from transformers.utils.chat_parsing import ResponseParser, parse_response
    except Exception:  # noqa: BLE001 - not installed
        return None
    return ResponseParser, parse_response


def best_of(fn: Callable[[], Any], repeat: int, clock: Callable[[], float] = time.perf_counter) -> float:
    """The fastest of ``repeat`` runs, in seconds of ``clock`` (wall time unless told otherwise)."""
    times = []
    for _ in range(repeat):
        gc.collect()
        t0 = clock()
        fn()
        times.append(clock() - t0)
    return min(times)


def stream_cost(make: Callable[[], Any], chunks: list[str], finalize: Callable[[Any], Any], repeat: int) -> float:
    """µs per chunk of feeding ``chunks`` into a fresh parser."""
    def run() -> None:
        p = make()
        for c in chunks:
            p.feed(c)
        finalize(p)
    return best_of(run, repeat) / len(chunks) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    tf = transformers_parser()
    repeat = 3
    rows: list[tuple[str, float | None, float, float]] = []

    # streaming: 4-character chunks
    chunk_counts = [1000, 8000] if args.quick else [1000, 8000, 32000, 128000]
    for n in chunk_counts:
        text = output_text(n * 4)
        chunks = [text[i:i + 4] for i in range(0, len(text), 4)]
        ours = stream_cost(lambda: grammar_parse.ResponseParser(TEMPLATE, prefix=""), chunks,
                           lambda p: p.finalize(), repeat)
        floor = stream_cost(HandWritten, chunks, lambda p: p.finalize(), repeat)
        theirs = None
        if tf is not None:
            reps = 1 if n > 32000 else repeat
            theirs = stream_cost(lambda: tf[0](TEMPLATE_DICT, prefix=""), chunks, lambda p: p.finalize(), reps)
        rows.append((f"stream, 4-char chunks, {n // 1000}k chunks (µs/chunk)", theirs, ours, floor))

    def one_shot(label: str, text: str, their_repeat: int) -> None:
        # Each timing runs a call ``loops`` times (about 2 MB in all): one 40 µs call timed alone right after a
        # garbage collection measures cold caches more than the parser.
        loops = max(1, 2_000_000 // len(text))
        mb = len(text.encode()) / 1e6 * loops

        def ours_loop() -> None:
            for _ in range(loops):
                grammar_parse.parse_response(text, TEMPLATE, prefix="")

        def hand() -> None:
            for _ in range(loops):
                p = HandWritten()
                p.feed(text)
                p.finalize()

        def theirs_loop() -> None:
            for _ in range(loops if their_repeat > 1 else 1):
                tf[1](text, TEMPLATE_DICT, prefix="")

        ours = mb / best_of(ours_loop, repeat)
        floor = mb / best_of(hand, repeat)
        theirs = (mb if their_repeat > 1 else mb / loops) / best_of(theirs_loop, their_repeat) if tf else None
        rows.append((label, theirs, ours, floor))

    # one-shot throughput
    for size in [4_000, 64_000] if args.quick else [4_000, 64_000, 500_000]:
        one_shot(f"one-shot, {size // 1000} KB (MB/s)", output_text(size), repeat)
    calls = 200 if args.quick else 2000
    text = output_text(50_000 if args.quick else 500_000, tool_calls=calls)
    one_shot(f"one-shot, {len(text) // 1000} KB with {calls:,} tool calls (MB/s)", text, 1)

    check = output_text(20_000, tool_calls=20)
    hw = HandWritten()
    hw.feed(check)
    assert grammar_parse.parse_response(check, TEMPLATE, prefix="") == hw.finalize(), "floor parser disagrees"
    if tf is not None:
        assert grammar_parse.parse_response(check, TEMPLATE, prefix="") == tf[1](check, TEMPLATE_DICT, prefix="")

    print(f"grammar_parse {grammar_parse.__version__}, Python {sys.version.split()[0]}"
          + ("" if tf else "; transformers not installed: its column is empty"))
    print()
    print("| workload | transformers | grammar_parse | hand-written floor | vs transformers | % of floor |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, theirs, ours, floor in rows:
        per_chunk = "µs" in name
        ratio = (theirs / ours if per_chunk else ours / theirs) if theirs else None
        of_floor = (floor / ours if per_chunk else ours / floor) * 100
        fmt = "{:.2f}" if per_chunk else "{:.1f}"
        print(f"| {name} | {fmt.format(theirs) if theirs else '-'} | {fmt.format(ours)} | {fmt.format(floor)} | "
              f"{f'{ratio:.1f}x' if ratio else '-'} | {of_floor:.0f}% |")


if __name__ == "__main__":
    main()
