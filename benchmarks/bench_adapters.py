"""Benchmark: what the wire adapters cost beside the parser, streamed and one-shot, on tool-heavy output.

    python benchmarks/bench_adapters.py

Qwen3 (Hermes JSON) outputs with reasoning, prose and tool calls (each with a few hundred bytes of
arguments), with and without tools given. Streamed in 4-char chunks: the parser with call events (the tool
calls come out of the parser itself) against ChatCompletionsStream, which frames those events as deltas;
one-shot: parse_response against chat_message (the Chat Completions message: arguments as the model's own
text, checked against the tools). CPU time, best of 7, in one process.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grammar_parse as gp  # noqa: E402
from grammar_parse.adapters.chat_completions import ChatCompletionsStream, chat_message  # noqa: E402

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}, "notes": {"type": "string"}}}}}]
PREFIX = "<|im_start|>assistant\n"


def output(calls: int) -> str:
    call = lambda i: '<tool_call>\n' + json.dumps(  # noqa: E731
        {"name": "get_weather", "arguments": {"city": f"Paris {i}", "days": i, "notes": "x" * 300}}) + "\n</tool_call>\n"
    return ("<think>\n" + "Let me think about it. " * 60 + "\n</think>\n\n" + "Sure, here you go. " * 40
            + "".join(call(i) for i in range(calls)) + "<|im_end|>")


def best(run: Callable[[], object], repeats: int = 7) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.process_time()
        run()
        times.append(time.process_time() - t0)
    return min(times)


def main() -> None:
    print("| output | tools | events µs/chunk | deltas µs/chunk | deltas / events | parse_response ms "
          "| chat_message ms | chat_message / parse_response |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for calls in (4, 30):
        text = output(calls)
        chunks = [text[i:i + 4] for i in range(0, len(text), 4)]
        for tools in (None, TOOLS):
            def events() -> None:
                parser = gp.ResponseParser("qwen3", PREFIX, tools=tools, extended_events=True, call_events=True)
                for chunk in chunks:
                    parser.feed(chunk)
                parser.finalize()

            def deltas() -> None:
                stream = ChatCompletionsStream("qwen3", PREFIX, tools=tools, ids=lambda kind: kind)
                for chunk in chunks:
                    stream.feed(chunk)
                stream.finish()

            e, d = best(events), best(deltas)
            p = best(lambda: gp.parse_response(text, "qwen3", prefix=PREFIX, tools=tools))
            m = best(lambda: chat_message(text, "qwen3", prefix=PREFIX, tools=tools, ids=lambda kind: kind))
            print(f"| {len(text) / 1000:.1f} kB, {calls} calls | {'yes' if tools else 'no'} | "
                  f"{e * 1e6 / len(chunks):.2f} | {d * 1e6 / len(chunks):.2f} | {d / e:.2f}x | {p * 1e3:.2f} | "
                  f"{m * 1e3:.2f} | {m / p:.2f}x |")


def hostile() -> None:
    """Arguments made of the longest integers Python converts (4,300 digits): the one-shot message's cost per MB
    stays flat as the output grows (a check that scanned each run of digits from every digit would grow with
    the runs' length squared: 9 s for 0.9 MB)."""
    print()
    print("| hostile arguments | 0.1 MB | 1 MB | s per MB, 1 MB / 0.1 MB |")
    print("| --- | ---: | ---: | ---: |")
    costs = []
    for count in (23, 230):
        number = "9" * 4300
        text = '<tool_call>\n{"name": "f", "arguments": {"n": [' + ",".join([number] * count) + "]}}\n</tool_call>"
        seconds = best(lambda: chat_message(text, "qwen3", prefix="", ids=lambda kind: kind), 3)
        costs.append(seconds / (len(text) / 1e6))
    print(f"| 4,300-digit integers, chat_message one-shot (s per MB) | {costs[0]:.3f} | {costs[1]:.3f} | "
          f"{costs[1] / costs[0]:.2f} |")


if __name__ == "__main__":
    main()
    hostile()
