"""User code that builds an OpenAI Chat Completions message and reads its streamed deltas (checked as
read_message.py is)."""

from __future__ import annotations

import json

from grammar_parse.adapters.chat_completions import ChatCompletionsStream, chat_message

OUTPUT = '<think>hm</think>Hi <tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>'

message, finish_reason = chat_message(OUTPUT, "qwen3", prefix="")
arguments = json.loads(message["tool_calls"][0]["function"]["arguments"])
assert (finish_reason, message["content"], arguments) == ("tool_calls", "Hi", {"a": 1})
for call in message["tool_calls"]:
    print(call["id"], call["function"]["name"])

stream = ChatCompletionsStream("qwen3", prefix="")
fragments = [call["function"].get("arguments", "") for delta in stream.feed(OUTPUT) + stream.finish()
             for call in delta.get("tool_calls", [])]
assert json.loads("".join(fragments)) == {"a": 1}, fragments
print(stream.message["tool_calls"][0]["function"]["arguments"])
