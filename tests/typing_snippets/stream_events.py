"""User code that streams output through a ResponseParser, reads its events, then the final message
(checked as read_message.py is)."""

from __future__ import annotations

from grammar_parse import Event, ResponseParser

parser = ResponseParser("qwen3", prefix="")
events: list[Event] = []
pieces = ["<think>h", "m</think>Hi ", "<tool_call>\n", '{"name": "f", "arguments": {"a": 1}}\n</tool_call>']
for piece in pieces:
    for event in parser.feed(piece):
        events.append(event)
        if event["type"] == "region_chunk":
            print(event["field"], event["text"])
        elif event["type"] == "region_close":
            print(event["field"], event["value"])
        elif event["type"] == "parse_error":
            print(event["code"], event["span"])
        elif event["type"] == "correction":
            print(event["message"].get("content"), event["fields"])

so_far = parser.message.get("tool_calls") or []
message, last_events = parser.finalize()
names = [call["function"]["name"] for call in message.get("tool_calls") or []]
arguments = message["tool_calls"][0]["function"]["arguments"]
assert (len(so_far), names, arguments, message.get("reasoning_content")) == (1, ["f"], {"a": 1}, "hm")
print(len(events), len(last_events))
