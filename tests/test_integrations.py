"""What the engine plugins share, without any engine installed: the parser names, the grammar each
stands for, registering one's own, tools as plain dicts; and the plugin's refusal when its engine is
missing (the engine tests, in tests/engines, run inside the engines)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

import grammar_parse
from grammar_parse import GrammarError, TemplateError
from grammar_parse.integrations import grammar_for, parser_name, parser_names, register, tool_dicts


def test_every_builtin_name_and_alias_is_a_parser_name():
    names = parser_names()
    for canonical, aliases in grammar_parse.list_grammars().items():
        for spelled in [canonical, *aliases]:
            assert names[parser_name(spelled)] == canonical
    assert parser_name("Qwen3.5") == "gp_qwen3_5" and names["gp_qwen3_5"] == "qwen3_5"


def test_grammar_for_a_name_and_for_the_tokenizers_template():
    assert grammar_for("gp_qwen3").name == "qwen3"

    class Bare:  # a tokenizer with no response_template or response_schema
        init_kwargs: dict = {}

    with pytest.raises(GrammarError, match="no response_template, response_schema or chat_template"):
        grammar_for("gp", Bare())
    with pytest.raises(GrammarError, match="no grammar is served"):
        grammar_for("gp_no_such_family")

    class WithChatTemplate:  # only a chat template: gp serves the grammar it reads back
        init_kwargs: dict = {}
        chat_template = (Path(__file__).parent / "data" / "chat_templates" / "Qwen3.5-4B.jinja").read_text(encoding="utf-8")
        name_or_path = "Qwen/Qwen3.5-4B"

    assert grammar_for("gp", WithChatTemplate()).name == "qwen3_5"  # (jinja2: in the test extra)
    with pytest.raises(GrammarError, match="tokenizer"):
        grammar_for("gp")


def test_register_serves_a_grammar_and_tells_the_engine_modules(tmp_path):
    from grammar_parse.integrations import on_register

    seen = []
    on_register(seen.append)
    text = (grammar_parse.load_grammar("qwen3").lark_source or "")
    assert text  # (the built-in's Lark text, written out as a user's own file)
    path = tmp_path / "house.lark"
    path.write_text(text, encoding="utf-8")
    assert register("house", str(path)) == "gp_house" and seen[-1] == "gp_house"
    assert parser_names()["gp_house"] == "gp_house"
    message = grammar_parse.parse_response("<think>a</think>b", grammar_for("gp_house"), prefix="")
    assert (message["reasoning_content"], message["content"]) == ("a", "b")


def test_a_bad_template_fails_at_register_time():
    with pytest.raises(TemplateError):
        register("broken", {"fields": {"content": {"open": 5}}})


def test_tools_become_plain_dicts():
    class Model:
        def model_dump(self, exclude_none=False):
            return {"type": "function", "function": {"name": "f", "parameters": {}}}

    responses_tool = {"type": "function", "name": "g", "parameters": {"type": "object"}}
    assert tool_dicts([Model(), responses_tool, "junk"]) == [
        {"type": "function", "function": {"name": "f", "parameters": {}}},
        {"type": "function", "function": {"name": "g", "parameters": {"type": "object"}}},
    ]
    assert tool_dicts(None) is None and tool_dicts([]) is None


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_the_vllm_plugin_says_how_to_install_vllm():
    with pytest.raises(ImportError, match=r"grammar-parse\[vllm\]"):
        importlib.import_module("grammar_parse.integrations.vllm")


@pytest.mark.skipif(importlib.util.find_spec("sglang") is not None, reason="SGLang is installed here")
def test_the_sglang_plugin_says_how_to_install_sglang():
    with pytest.raises(ImportError, match=r"grammar-parse\[sglang\]"):
        importlib.import_module("grammar_parse.integrations.sglang")


REASONING_GRAMMARS = sorted(n for n in grammar_parse.list_grammars()
                            if any(r.is_reasoning for r in grammar_parse.load_grammar(n).regions.values()))
#: Reasoning delimiters with no fixed text to give: apriel's reasoning has no delimiters of its own (it
#: starts the output), muse's opener starts with a class of blanks (anchored where the header ends).
NO_FIXED_OPENER = {"apriel", "muse", "muse_glimmer"}
NO_FIXED_CLOSER = {"apriel"}


@pytest.mark.parametrize("name", REASONING_GRAMMARS)
def test_reasoning_delimiters_are_the_reasoning_regions_whatever_its_field(name):
    """What the engines read to find where reasoning ends (SGLang's think_end_token): the reasoning region's
    own delimiters, written as the grammar's delimiters match them, also where the field is `thinking`
    (empty for 7 grammars before, gpt-oss among them)."""
    from grammar_parse._engine.delimiters import LiteralMatcher

    grammar = grammar_parse.load_grammar(name)
    exempts = (NO_FIXED_OPENER, NO_FIXED_CLOSER)
    for role, text, exempt in zip(("open", "close"), grammar.format.reasoning_delimiters, exempts):
        assert bool(text) == (name not in exempt), (role, text)
        if text:
            own = [t.matcher for t in grammar.terminals.values()
                   if t.region is not None and t.region.is_reasoning and t.role == role]
            assert any(text in m.literals if isinstance(m, LiteralMatcher) else m.compiled.fullmatch(text)
                       for m in own), (role, text)


@pytest.mark.parametrize("name, expected", [("gpt_oss", ("<|channel|>analysis<|message|>", "<|end|>")),
                                            ("smollm3", ("<think>", "</think>")), ("qwen3", ("<think>", "</think>")),
                                            ("cohere2", ("<|START_THINKING|>", "<|END_THINKING|>")),
                                            ("hunyuan_v3", ("<think>", "</think>"))])
def test_reasoning_delimiters_of_known_formats(name, expected):

    assert grammar_parse.load_grammar(name).format.reasoning_delimiters == expected


def test_a_shared_parse_is_one_parse_for_both_parsers_of_a_request() -> None:
    """SharedParse (what vLLM's and SGLang's parser pairs read): the prompt tail and tools are taken until the
    output streams, the last deltas come once, and one-shot the message is parsed once, each caller getting
    its own copy."""
    from grammar_parse.integrations import SharedParse

    shared = SharedParse(grammar_parse.load_grammar("qwen3"))
    shared.start("<|im_start|>assistant\n<think>\n", [{"type": "function", "function": {"name": "f"}}])
    deltas = shared.feed("hm</think>Hi <tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>")
    shared.start("ignored", None)  # (the stream has started: the request's prompt is known)
    assert shared.prefix.endswith("<think>\n")
    deltas += shared.finish()
    assert shared.finish() == []
    assert "".join(d.get("reasoning_content", "") for d in deltas) == "hm"
    assert [c["function"]["name"] for d in deltas for c in d.get("tool_calls", []) if "name" in c["function"]] == ["f"]
    first = shared.message("<think>a</think>b")
    first.pop("content")
    assert shared.message("<think>a</think>b")["content"] == "b"
