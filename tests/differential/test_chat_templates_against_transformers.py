"""The probe conversations (grammar_parse.templates._probes) rendered by transformers itself and by render_prompt, for
every vendored chat template: the prompts and the history renderings must be equal, or both must refuse.
(tests/test_chat_template.py checks other conversations against renderings transformers made once; this
runs it live, on the conversations detect and derive depend on.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import grammar_parse as gp
from grammar_parse.templates._probes import PROBES, TOOLS, USER

pytest.importorskip("jinja2")
chat_template_utils = pytest.importorskip("transformers.utils.chat_template_utils")

TEMPLATES = sorted((Path(__file__).resolve().parents[1] / "data" / "chat_templates").glob("*.jinja"))
TOKENS = {"bos_token": "<s>", "eos_token": "</s>"}


def theirs(source: str, messages: list[dict[str, Any]], generation: bool) -> str:
    try:
        rendered, _ = chat_template_utils.render_jinja_template(
            conversations=[messages], tools=TOOLS, chat_template=source, add_generation_prompt=generation, **TOKENS)
    except Exception as e:  # noqa: BLE001 - a refusal is compared as a refusal
        return f"refused: {type(e).__name__}"
    return str(rendered[0])


def ours(template: gp.ChatTemplate, messages: list[dict[str, Any]], generation: bool) -> str:
    try:
        return template.render(messages, tools=TOOLS, add_generation_prompt=generation)
    except gp.ChatTemplateError as e:
        return f"refused: {e.code}"


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: p.stem)
def test_probe_renderings_equal_transformers(path):
    source = path.read_text(encoding="utf-8")
    template = gp.ChatTemplate(source, special_tokens=TOKENS)
    user = {"role": "user", "content": USER}
    conversations = [([user], True)] + [([user, probe.message(arguments_as_text=text)], False)
                                        for probe in PROBES for text in (False, True)]
    for messages, generation in conversations:
        mine, reference = ours(template, messages, generation), theirs(source, messages, generation)
        if reference.startswith("refused: "):
            assert mine.startswith("refused: chat_template."), (messages, mine)
        else:
            assert mine == reference, messages
