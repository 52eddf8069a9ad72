"""User code that reads a parsed message: reasoning, content, each tool call's name and arguments, the
problems of a lenient parse, a key of another grammar's; run by tests/test_typing.py under mypy --strict
and pyright strict (both must be clean) and as a program (the reads are right at run time)."""

from __future__ import annotations

import json
from typing import Any

from grammar_parse import Message, parse_response

OUTPUT = '<think>Plan.</think>Checking. <tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'

msg = parse_response(OUTPUT, "qwen3", prefix="")
reasoning: str = msg.get("reasoning_content", "")
content: str | None = msg.get("content")
calls = msg.get("tool_calls") or []
names = [call["function"]["name"] for call in calls]
arguments = msg["tool_calls"][0]["function"]["arguments"]
city = arguments["city"]
assert (reasoning, content, names, city) == ("Plan.", "Checking.", ["get_weather"], "Paris")
print(json.dumps(arguments), [call.get("id") for call in calls])

broken = parse_response(OUTPUT[:-30], "qwen3", prefix="", strict=False)
problems = [(problem["code"], problem["field"], problem["span"]) for problem in broken.get("parse_errors") or []]
call_problems = [(error["path"], error["code"]) for call in broken["tool_calls"] for error in call.get("errors", [])]
assert problems and call_problems == [("$.function.arguments", "parse.json")], (problems, call_problems)

other = parse_response("<|channel|>analysis<|message|>hm<|end|>", "gpt_oss", prefix="")
thinking = other.get("thinking")
assert thinking == "hm" and "content" not in other
plain: dict[str, Any] = other  # still a plain dict for code that takes one
kept: list[Message] = [msg, other]
print(plain == kept[1])

for item in parse_response([OUTPUT, "Yo"], "qwen3", prefix=""):
    print(item["role"], item.get("content"), len(item.get("tool_calls", [])))
