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


if __name__ == "__main__":
    main()
