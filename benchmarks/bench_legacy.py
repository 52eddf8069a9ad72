"""Benchmark: legacy response_schema parsing against transformers 5.13's recursive_parse, in one run.

    python benchmarks/bench_legacy.py     # the transformers column needs `pip install transformers==5.13.0`

Parses Qwen3 outputs of 4 KB to 500 KB with TRL's legacy Qwen3 schema (the regex below). grammar_parse
runs the schema with a time limit by default (on the `regex` module, which can stop a runaway search)
and, with timeout=None, on the standard library's `re` exactly as transformers does.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import grammar_parse  # noqa: E402
from bench import best_of, output_text  # noqa: E402
from grammar_parse.compat import legacy_grammar  # noqa: E402

QWEN3_SCHEMA: dict[str, Any] = {
    "x-regex": r"^(?:<think>\n?(?:(?P<reasoning_content>.*?\S.*?)\n?|[\s]*)</think>\s*)?(?P<content>(?:(?!<tool_call>)[\s\S])*?)(?:\n(?=<tool_call>))?(?=(?:<tool_call>|<\|im_end\|>|$))(?P<tool_calls>(?:<tool_call>(?:(?!</tool_call>)[\s\S])+</tool_call>\s*)+)?\s*(?:<\|im_end\|>|$)",
    "type": "object",
    "properties": {
        "role": {"const": "assistant"},
        "content": {"type": "string"},
        "reasoning_content": {"type": "string"},
        "tool_calls": {
            "type": "array",
            "x-regex-iterator": r"<tool_call>\s*(.+?)\s*</tool_call>",
            "items": {
                "x-parser": "json",
                "x-parser-args": {"transform": "{type: 'function', function: @}"},
                "type": "object",
                "properties": {"type": {"const": "function"}, "function": {"type": "object", "properties": {
                    "name": {"type": "string"}, "arguments": {"type": "object", "additionalProperties": {}}}}},
            },
        },
    },
}


def main() -> None:
    try:
        from transformers.utils.chat_parsing_utils import recursive_parse as theirs
    except Exception:  # noqa: BLE001 - transformers 5.13 not installed
        theirs = None
    bounded, unbounded = legacy_grammar(QWEN3_SCHEMA), legacy_grammar(QWEN3_SCHEMA, timeout=None)
    print("| output | transformers 5.13 (MB/s) | grammar_parse, time limit (MB/s) | grammar_parse, timeout=None (MB/s) |")
    print("| --- | ---: | ---: | ---: |")
    for size, calls in ((4_000, 1), (64_000, 3), (500_000, 3), (500_000, 2000)):
        text = output_text(size, tool_calls=calls)
        mb = len(text.encode()) / 1e6
        expected = grammar_parse.parse_response(text, unbounded)
        assert grammar_parse.parse_response(text, bounded) == expected
        cells = []
        if theirs is not None:
            assert theirs(text, QWEN3_SCHEMA) == expected
            cells.append(f"{mb / best_of(lambda: theirs(text, QWEN3_SCHEMA), 3):.1f}")
        else:
            cells.append("-")
        for grammar in (bounded, unbounded):
            cells.append(f"{mb / best_of(lambda: grammar_parse.parse_response(text, grammar), 3):.1f}")
        print(f"| {len(text) // 1000} KB, {calls} tool call{'s' if calls > 1 else ''} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
