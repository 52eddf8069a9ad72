"""Benchmark: streaming one tool call's arguments as OpenAI deltas, per chunk, as the arguments grow.

    python benchmarks/bench_tools.py

A Qwen3 (Hermes JSON) tool call whose arguments hold a long string (source code, say) is fed in 4-char
chunks through ChatCompletionsStream; the cost per chunk should not depend on how long the arguments
already are (re-parsing partial JSON on every token would make it grow linearly).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grammar_parse.adapters.chat_completions import ChatCompletionsStream  # noqa: E402

TOOLS = [{"type": "function", "function": {"name": "write_file", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}, "mode": {"type": "integer"}}}}}]


def output(size: int) -> str:
    body = ("def f(x):\n    return x * 2  # \"quoted\" \\ and é\n" * (size // 40 + 1))[:size]
    args = json.dumps({"path": "a.py", "content": body, "mode": "644"})
    return f'<tool_call>\n{{"name": "write_file", "arguments": {args}}}\n</tool_call><|im_end|>'


def main() -> None:
    print("| arguments | chunks | µs per chunk | typed + validated |")
    print("| ---: | ---: | ---: | --- |")
    for size in (1_000, 20_000, 200_000):
        text = output(size)
        chunks = [text[i:i + 4] for i in range(0, len(text), 4)]
        best = float("inf")
        for _ in range(3):
            stream = ChatCompletionsStream("qwen3", "", tools=TOOLS, ids=lambda kind: kind)
            t0 = time.perf_counter()
            for c in chunks:
                stream.feed(c)
            stream.finish()
            best = min(best, time.perf_counter() - t0)
        arguments = json.loads(stream.message["tool_calls"][0]["function"]["arguments"])
        assert len(arguments["content"]) == size and arguments["mode"] == 644
        print(f"| {size // 1000} KB | {len(chunks):,} | {best / len(chunks) * 1e6:.2f} | yes |")


if __name__ == "__main__":
    main()
