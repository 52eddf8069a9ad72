"""Rebuild expected.json: every vendored chat template rendered by transformers itself, for each case below.

    pip install 'transformers==5.23.0' 'jinja2>=3.1.6'
    python tests/data/chat_templates/build.py

The oracle is transformers' ``render_jinja_template``, called as ``apply_chat_template(..., tokenize=False)``
calls it: keys set to None dropped from the messages, the special tokens passed as template variables
under the call's own kwargs. ``strftime_now`` reads a clock frozen at DATE, so the file does not change with
the day it is built (tests/test_chat_template.py freezes grammar_parse's clock the same way). A case
transformers raises on is recorded with the exception's type (the test expects a ChatTemplateError there),
and a rendering equal to an earlier case's as {"same_as": that case}.
The cases are written into expected.json, so the test needs nothing from this script.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DATE = datetime(2025, 3, 14, 9, 26, 53)
SPECIAL_TOKENS = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}

USER = {"role": "user", "content": "What is the weather in Paris?"}
SYSTEM = {"role": "system", "content": "You are a terse assistant."}
ANSWER = {"role": "assistant", "content": "It is sunny in Paris today."}
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Get the weather forecast for a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "The city name."},
            "days": {"type": "integer", "description": "How many days to forecast."},
        }, "required": ["city"]}}},
]
ARGUMENTS = {"city": "Paris", "days": 2}
CALL = {"role": "assistant", "content": "", "tool_calls": [
    {"type": "function", "id": "call00001", "function": {"name": "get_weather", "arguments": ARGUMENTS}}]}
# as OpenAI clients send it: no content (None, which apply_chat_template drops), arguments as JSON text
CALL_AS_SENT = {"role": "assistant", "content": None, "tool_calls": [
    {"type": "function", "id": "call00001", "function": {"name": "get_weather", "arguments": json.dumps(ARGUMENTS)}}]}
RESULT = {"role": "tool", "tool_call_id": "call00001", "name": "get_weather", "content": "{\"forecast\": \"sunny\"}"}
REASONED = {"role": "assistant", "reasoning_content": "The user asks about Paris; it is sunny there.",
            "content": "It is sunny in Paris today."}
DOCUMENTS = [{"title": "Paris weather", "text": "Sunny all week."}]

#: name -> the arguments of one render: messages, and optionally tools, documents and template kwargs.
CASES: dict[str, dict[str, Any]] = {
    "chat": {"messages": [USER], "add_generation_prompt": True},
    "no_generation_prompt": {"messages": [USER, ANSWER], "add_generation_prompt": False},
    "system": {"messages": [SYSTEM, USER, ANSWER, USER], "add_generation_prompt": True},
    "tools": {"messages": [SYSTEM, USER], "tools": TOOLS, "add_generation_prompt": True},
    "tool_call": {"messages": [USER, CALL, RESULT], "tools": TOOLS, "add_generation_prompt": True},
    "tool_call_as_sent": {"messages": [USER, CALL_AS_SENT, RESULT], "tools": TOOLS, "add_generation_prompt": True},
    "reasoning": {"messages": [USER, REASONED, USER], "add_generation_prompt": True},
    "reasoning_last": {"messages": [USER, REASONED], "add_generation_prompt": False},
    "thinking_on": {"messages": [USER], "add_generation_prompt": True, "kwargs": {"enable_thinking": True}},
    "thinking_off": {"messages": [USER], "add_generation_prompt": True, "kwargs": {"enable_thinking": False}},
    "documents": {"messages": [USER], "documents": DOCUMENTS, "add_generation_prompt": True},
    "continue": {"messages": [USER, {"role": "assistant", "content": "It is sunny"}], "add_generation_prompt": False,
                 "continue_final_message": True},
}


def render(source: str, case: dict[str, Any]) -> str:
    from transformers.utils.chat_template_utils import render_jinja_template

    messages = [{k: v for k, v in m.items() if v is not None} for m in case["messages"]]
    rendered, _ = render_jinja_template(
        conversations=[messages], tools=case.get("tools"), documents=case.get("documents"), chat_template=source,
        add_generation_prompt=case["add_generation_prompt"],
        continue_final_message=case.get("continue_final_message", False),
        **{**SPECIAL_TOKENS, **case.get("kwargs", {})})
    return str(rendered[0])


def main() -> None:
    import transformers
    import transformers.utils.chat_template_utils as utils

    class Frozen(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> datetime:
            return DATE

    utils.datetime = Frozen  # type: ignore[misc]  # strftime_now reads the module's datetime
    renders: dict[str, dict[str, Any]] = {}
    for file in sorted(HERE.glob("*.jinja")):
        source = file.read_text(encoding="utf-8")
        renders[file.stem] = {}
        for name, case in CASES.items():
            try:
                text = render(source, case)
            except Exception as exc:  # noqa: BLE001 - recorded: the test expects a ChatTemplateError there
                renders[file.stem][name] = {"error": type(exc).__name__, "message": str(exc)[:200]}
                continue
            # many templates ignore a case's difference (enable_thinking, say): name the earlier twin
            twin = next((earlier for earlier, value in renders[file.stem].items() if value == text), None)
            renders[file.stem][name] = text if twin is None else {"same_as": twin}
    document = {"transformers": transformers.__version__, "date": DATE.isoformat(), "special_tokens": SPECIAL_TOKENS,
                "cases": CASES, "renders": renders}
    # one template per line: a rebuild's diff shows which templates changed
    lines = [f"  {json.dumps(key)}: {json.dumps(value, ensure_ascii=False)}" for key, value in document.items()
             if key != "renders"]
    body = ",\n".join(f"    {json.dumps(name)}: {json.dumps(cases, ensure_ascii=False)}"
                       for name, cases in renders.items())
    (HERE / "expected.json").write_text("{\n" + ",\n".join(lines) + ",\n  \"renders\": {\n" + body + "\n  }\n}\n",
                                        encoding="utf-8")
    errors = sum(isinstance(v, dict) and "error" in v for cases in renders.values() for v in cases.values())
    print(f"{len(renders)} templates x {len(CASES)} cases, {errors} raised", file=sys.stderr)


if __name__ == "__main__":
    main()
