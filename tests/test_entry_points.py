"""What a new user meets at the public entry points (issue 32): a wrong argument is an ArgumentError that
says what was expected, never a silent failure or a bare TypeError from deep inside.

- tools= in a wrong shape is refused with the tool and the key at fault, and the real OpenAI, Anthropic and
  bare-function shapes keep working (Anthropic's input_schema now types arguments too);
- text, prefixes, grammars and chat templates of the wrong type are refused at every entry point;
- JSON a user hands in (tokenizer configs, tools files, grammar templates) is read with a bounded depth;
- the command line prints warnings as it prints errors: one line, with a code.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

import grammar_parse as gp
from grammar_parse import batch, view
from grammar_parse.adapters import chat_completions
from grammar_parse.adapters import lmsp
from grammar_parse._cli import main
from grammar_parse.errors import ERROR_CODES, ArgumentError, ChatTemplateError, GrammarParseError
from grammar_parse._engine.tools import CallValidator, ToolTypes, validate_call

IDS = "{}_1".format
CALL = "<tool_call>\n<function=get_weather>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"
DAYS = {"type": "object", "properties": {"days": {"type": "integer"}}}


def get_weather(days: int) -> str:
    """A tool as a Python function: its hints are its schema."""
    return str(days)


# ------------------------------------------------------------------ a. tools= shapes

#: (id, tools, words the error must name). Each is a shape a user writes by mistake; each was ignored before.
BAD_TOOLS: list[tuple[str, Any, tuple[str, ...]]] = [
    ("name_to_schema_dict", {"get_weather": DAYS}, ("dict", "get_weather", "list")),
    ("single_tool_not_in_a_list", {"type": "function", "function": {"name": "get_weather", "parameters": DAYS}},
     ("a single tool", "list")),
    ("a_string", "get_weather", ("str", "list")),
    ("bytes", b"[]", ("bytes", "list")),
    ("list_of_names", ["get_weather"], ("tools[0]", "str", "get_weather")),
    ("a_number_in_the_list", [7], ("tools[0]", "int")),
    ("misspelled_parameters", [{"type": "function", "function": {"name": "get_weather", "paramters": DAYS}}],
     ("get_weather", "'paramters'", "'parameters'")),
    ("misspelled_description", [{"name": "get_weather", "descripton": "x", "parameters": DAYS}],
     ("'descripton'", "'description'")),
    ("misspelled_function_wrapper", [{"type": "function", "fucntion": {"name": "get_weather", "parameters": DAYS}}],
     ("tools[0]", "'fucntion'", "'function'")),
    ("misspelled_input_schema", [{"name": "get_weather", "input_shema": DAYS}], ("'input_shema'", "'input_schema'")),
    ("function_without_a_name", [{"type": "function", "function": {"parameters": DAYS}}], ("tools[0]", "name")),
    ("empty_name", [{"type": "function", "function": {"name": "", "parameters": DAYS}}], ("tools[0]", "name")),
    ("name_not_a_string", [{"name": 3, "parameters": DAYS}], ("tools[0]", "name", "int")),
    ("function_not_an_object", [{"type": "function", "function": "get_weather"}], ("tools[0]", "function", "str")),
    ("parameters_as_json_text", [{"name": "get_weather", "parameters": json.dumps(DAYS)}],
     ("get_weather", "parameters", "str")),
    ("parameters_are_the_properties", [{"name": "get_weather", "parameters": {"days": {"type": "integer"}}}],
     ("get_weather", "properties")),
    ("properties_not_an_object", [{"name": "get_weather", "parameters": {"type": "object", "properties": ["days"]}}],
     ("get_weather", "properties", "list")),
    ("schema_under_arguments", [{"name": "get_weather", "arguments": DAYS}], ("get_weather", "'arguments'",
                                                                              "parameters")),
    ("properties_beside_the_name", [{"name": "get_weather", "properties": DAYS["properties"]}],
     ("get_weather", "'properties'", "parameters")),
    ("a_lambda", [lambda days: days], ("tools[0]", "lambda")),
    ("a_partial", [functools.partial(get_weather, 3)], ("tools[0]", "name")),
]

#: Every entry point that takes tools=, as a function of the tools.
TOOL_ENTRY_POINTS = {
    "parse_response": lambda tools: gp.parse_response(CALL, "qwen3_coder", prefix="", tools=tools),
    "ResponseParser": lambda tools: gp.ResponseParser("qwen3_coder", "", tools=tools),
    "ToolTypes.from_tools": ToolTypes.from_tools,
    "CallValidator": CallValidator,
    "validate_call": lambda tools: validate_call({"function": {"name": "get_weather", "arguments": {}}}, tools),
    "chat_message": lambda tools: chat_completions.chat_message(CALL, "qwen3_coder", prefix="", tools=tools),
    "ChatCompletionsStream": lambda tools: chat_completions.ChatCompletionsStream("qwen3_coder", "", tools=tools),
    "lmsp.ResponseStream": lambda tools: lmsp.ResponseStream("qwen3_coder", "", tools=tools, ids=IDS),
    "view.to_html": lambda tools: view.to_html(CALL, "qwen3_coder", tools=tools),
}
@pytest.mark.parametrize("entry", sorted(TOOL_ENTRY_POINTS))
@pytest.mark.parametrize(("case", "tools", "words"), [pytest.param(i, t, w, id=i) for i, t, w in BAD_TOOLS])
def test_tools_in_a_wrong_shape_are_refused(entry, case, tools, words):
    with pytest.raises(ArgumentError) as info:
        TOOL_ENTRY_POINTS[entry](tools)
    error = info.value
    assert error.code == "usage.tools" and error.code in ERROR_CODES
    for word in words:
        assert word in str(error), (word, str(error))
    assert error.hint  # what to write instead


#: Shapes accepted today (and by transformers, the OpenAI and Anthropic APIs): each types `days` as integer.
GOOD_TOOLS: list[tuple[str, Any]] = [
    ("openai_chat_completions", [{"type": "function", "function": {"name": "get_weather", "description": "Weather.",
                                                                    "parameters": DAYS, "strict": True}}]),
    ("openai_responses_flat", [{"type": "function", "name": "get_weather", "parameters": DAYS, "strict": False}]),
    ("bare_function_spec", [{"name": "get_weather", "parameters": DAYS}]),
    ("anthropic", [{"name": "get_weather", "description": "Weather.", "input_schema": DAYS,
                    "cache_control": {"type": "ephemeral"}}]),
    ("mcp", [{"name": "get_weather", "title": "Weather", "description": "Weather.", "inputSchema": DAYS,
              "outputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}}]),
    ("python_function", [get_weather]),
    ("a_tuple", ({"name": "get_weather", "parameters": DAYS},)),
    ("a_generator", (t for t in [{"name": "get_weather", "parameters": DAYS}])),
    ("with_a_hosted_tool", [{"type": "code_interpreter"}, {"name": "get_weather", "parameters": DAYS}]),
    ("a_key_that_is_no_string", [{"name": "get_weather", "parameters": DAYS, 1: "x"}]),
]


@pytest.mark.parametrize("tools", [pytest.param(t, id=i) for i, t in GOOD_TOOLS])
def test_real_tool_shapes_type_the_arguments(tools):
    message = gp.parse_response(CALL, "qwen3_coder", prefix="", tools=tools)
    # (days is written as the text "3"; the schema says integer, so the typed value is 3)
    assert message["tool_calls"][0]["function"]["arguments"] == {"days": 3}


@pytest.mark.parametrize("tools", [None, [], ()])
def test_no_tools_is_fine(tools):
    assert gp.parse_response(CALL, "qwen3_coder", prefix="", tools=tools)["tool_calls"][0]["function"] == \
        {"name": "get_weather", "arguments": {"days": "3"}}


# ------------------------------------------------------------------ b. wrong argument types

MESSAGE = {"role": "assistant", "content": "Hello!"}
CONVERSATION = [{"role": "user", "content": "Hi"}]

#: (id, value, words the error names: what it got and what to do instead), for a text argument.
BAD_TEXT: list[tuple[str, Any, tuple[str, ...]]] = [
    ("bytes", b"<think>hm</think>Hello!", ("bytes", "decode")),
    ("a_message", MESSAGE, ("chat message", "content")),
    ("a_conversation", CONVERSATION, ("chat messages", "render_prompt")),
    ("a_number", 42, ("int", "str")),
]


def _chat_template() -> gp.ChatTemplate:
    pytest.importorskip("jinja2")
    return gp.ChatTemplate("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}"
                           "{% if add_generation_prompt %}<|assistant|>{% endif %}")


#: Entry points in the modules that check their own text arguments (the parser's own, see the next table).
TEXT_ENTRY_POINTS = {
    "build_grammar": lambda v: __import__("grammar_parse._engine.grammar", fromlist=["build_grammar"]).build_grammar(v),
    "ChatTemplate(source)": lambda v: gp.ChatTemplate(v),
    "load_chat_template": gp.load_chat_template,
    "render_prompt(messages)": lambda v: gp.render_prompt(v, _chat_template()),
    "ChatTemplate.render(messages)": lambda v: _chat_template().render(v),
    "detect": gp.detect,
    "load_model_grammar": gp.load_model_grammar,
    "derive_grammar": lambda v: __import__("grammar_parse.templates._derive", fromlist=["derive_grammar"]).derive_grammar(v),
}

#: Entry points whose text and prefix are checked by the parser's constructor and feed() (session.py): they
#: use grammar_parse._engine.arguments.expect_text, the helper tested just below.
PARSER_TEXT_ENTRY_POINTS = {
    "parse_response(text)": lambda v: gp.parse_response(v, "qwen3", prefix=""),
    "parse_response(prefix)": lambda v: gp.parse_response("Hello!", "qwen3", prefix=v),
    "ResponseParser(prefix)": lambda v: gp.ResponseParser("qwen3", v),
    "ResponseParser.feed": lambda v: gp.ResponseParser("qwen3", "").feed(v),
    "view.to_html(text)": lambda v: view.to_html(v, "qwen3"),
}


def _messages_case(entry: str, value: Any) -> bool:
    """render_prompt and ChatTemplate.render take a conversation: a list of messages is right there."""
    return "(messages)" in entry and value is CONVERSATION


@pytest.mark.parametrize("entry", sorted(TEXT_ENTRY_POINTS))
@pytest.mark.parametrize(("value", "words"), [pytest.param(v, w, id=i) for i, v, w in BAD_TEXT])
def test_wrong_types_are_argument_errors_naming_what_was_expected(entry, value, words):
    if _messages_case(entry, value):
        pytest.skip("a conversation is what these take")
    if "(messages)" in entry:
        words = (type(value).__name__, "list")  # a conversation is expected: say so
    if entry in ("detect", "load_model_grammar", "load_chat_template", "derive_grammar") and isinstance(value, dict):
        pytest.skip("a dict is a tokenizer config there (its missing chat_template is a ChatTemplateError)")
    with pytest.raises(ArgumentError) as info:
        TEXT_ENTRY_POINTS[entry](value)
    error = info.value
    assert error.code == "usage.argument"
    for word in words:
        assert word in str(error), (word, str(error))


@pytest.mark.parametrize("name", ["text", "prefix"])
@pytest.mark.parametrize(("value", "words"), [pytest.param(v, w, id=i) for i, v, w in BAD_TEXT])
def test_expect_text_says_what_a_text_argument_got(name, value, words):
    from grammar_parse._engine.arguments import expect_text

    with pytest.raises(ArgumentError) as info:
        expect_text(value, name)
    assert info.value.code == "usage.argument" and f"`{name}`" in str(info.value)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_expect_text_passes_text_through():
    from grammar_parse._engine.arguments import expect_text

    assert expect_text("hi", "text") == "hi"
    assert expect_text(None, "prefix", optional=True) is None
    with pytest.raises(ArgumentError):
        expect_text(None, "text")


@pytest.mark.parametrize("entry", sorted(PARSER_TEXT_ENTRY_POINTS))
@pytest.mark.parametrize(("value", "words"), [pytest.param(v, w, id=i) for i, v, w in BAD_TEXT])
def test_the_parser_entry_points_refuse_wrong_text(entry, value, words):
    with pytest.raises(ArgumentError) as info:
        PARSER_TEXT_ENTRY_POINTS[entry](value)
    assert info.value.code == "usage.argument", info.value
    for word in words:
        assert word in str(info.value), (word, str(info.value))


#: A grammar argument of the wrong type (every API takes a name, a path, a template dict or a Grammar).
BAD_GRAMMARS: list[tuple[str, Any, tuple[str, ...]]] = [
    ("a_number", 5, ("int", "name", "Grammar")),
    ("bytes", b"qwen3", ("bytes", "decode")),
    ("a_list", ["qwen3"], ("list", "name")),
    ("none", None, ("None", "name")),
]

GRAMMAR_ENTRY_POINTS = {
    "load_grammar": gp.load_grammar,
    "parse_response": lambda g: gp.parse_response("Hello!", g, prefix=""),
    "ResponseParser": lambda g: gp.ResponseParser(g, ""),
    "chat_message": lambda g: chat_completions.chat_message("Hello!", g, prefix=""),
    "lmsp.ResponseStream": lambda g: lmsp.ResponseStream(g, "", ids=IDS),
    "batch.parse_many": lambda g: list(batch.parse_many([{"completion": "Hello!"}], g)),
    "view.to_html": lambda g: view.to_html("Hello!", g),
}


@pytest.mark.parametrize("entry", sorted(GRAMMAR_ENTRY_POINTS))
@pytest.mark.parametrize(("grammar", "words"), [pytest.param(g, w, id=i) for i, g, w in BAD_GRAMMARS])
def test_a_grammar_of_the_wrong_type_is_an_argument_error(entry, grammar, words):
    if entry == "batch.parse_many" and grammar is None:
        pytest.skip("None there means: each row names its own grammar")
    with pytest.raises(ArgumentError) as info:
        GRAMMAR_ENTRY_POINTS[entry](grammar)
    assert info.value.code == "usage.argument"
    for word in words:
        assert word in str(info.value), (word, str(info.value))


@pytest.mark.parametrize("how", ["name", "dict", "Grammar", "Path"])
def test_load_grammar_takes_every_way_to_name_a_grammar(how, tmp_path):
    qwen3 = gp.load_grammar("qwen3")
    file = tmp_path / "qwen3.lark"
    file.write_text(qwen3.lark_source, encoding="utf-8")
    given = {"name": "qwen3", "Grammar": qwen3, "Path": file,
             "dict": {"start_anchor": "<|assistant|>", "fields": {"content": {}}}}[how]
    grammar = gp.load_grammar(given)
    assert isinstance(grammar, gp.Grammar)
    assert gp.parse_response("Hello!", grammar, prefix="")["content"] == "Hello!"


# ------------------------------------------------------------------ e. JSON nested too deep

DEPTH = 200_000


def _deep(key: str = "a") -> str:
    return '{"chat_template": "{{ messages }}", "%s": %s%s}' % (key, "[" * DEPTH, "]" * DEPTH)


@pytest.fixture
def deep_model(tmp_path: Path) -> Path:
    (tmp_path / "tokenizer_config.json").write_text(_deep(), encoding="utf-8")
    return tmp_path


#: Every loader of a user's JSON file: what it raises for one nested DEPTH deep.
DEEP_LOADERS = {
    "load_chat_template(tokenizer_config.json)": (lambda d: gp.load_chat_template(d / "tokenizer_config.json"),
                                                  ChatTemplateError),
    "load_chat_template(model dir)": (gp.load_chat_template, ChatTemplateError),
    "detect(model dir)": (gp.detect, ChatTemplateError),
    "load_grammar(model dir)": (gp.load_grammar, GrammarParseError),
    "load_grammar(tokenizer_config.json)": (lambda d: gp.load_grammar(d / "tokenizer_config.json"), GrammarParseError),
}


@pytest.mark.parametrize("loader", sorted(DEEP_LOADERS))
def test_a_deeply_nested_json_file_is_a_clean_error(loader, deep_model):
    load, error_class = DEEP_LOADERS[loader]
    with pytest.raises(error_class) as info:
        load(deep_model)
    assert "deep" in str(info.value) and info.value.code in ERROR_CODES


@pytest.mark.parametrize("beside", ["config.json", "special_tokens_map.json"])
def test_a_deep_json_file_beside_the_template_is_a_clean_error(beside, tmp_path):
    pytest.importorskip("jinja2")
    (tmp_path / "chat_template.jinja").write_text("{{ messages }}", encoding="utf-8")
    (tmp_path / beside).write_text(_deep(), encoding="utf-8")
    try:
        gp.detect(tmp_path)
    except GrammarParseError as e:
        assert "deep" in str(e)


def test_file_json_depth_is_bounded_below_the_recursion_limit(tmp_path):
    from grammar_parse._engine.json_input import MAX_FILE_JSON_DEPTH

    # One level past the bound, far below where Python's parser fails: the bound itself refuses it.
    text = '{"chat_template": "x", "a": %s%s}' % ("[" * MAX_FILE_JSON_DEPTH, "]" * MAX_FILE_JSON_DEPTH)
    (tmp_path / "tokenizer_config.json").write_text(text, encoding="utf-8")
    with pytest.raises(ChatTemplateError) as info:
        gp.load_chat_template(tmp_path / "tokenizer_config.json")
    assert info.value.code == "chat_template.file" and str(MAX_FILE_JSON_DEPTH) in str(info.value)
    shallow = '{"chat_template": "x", "a": %s%s}' % ("[" * 20, "]" * 20)
    (tmp_path / "tokenizer_config.json").write_text(shallow, encoding="utf-8")
    assert gp.load_chat_template(tmp_path / "tokenizer_config.json").source == "x"


@pytest.mark.parametrize("option", ["--tools-file", "--template-kwargs"])
def test_the_cli_refuses_deep_json_with_a_usage_error(option, tmp_path, capsys):
    deep = "[" * DEPTH + "]" * DEPTH
    (tmp_path / "tools.json").write_text(deep, encoding="utf-8")
    (tmp_path / "out.txt").write_text("Hello!", encoding="utf-8")
    if option == "--tools-file":
        args = ["parse", "-g", "qwen3", option, str(tmp_path / "tools.json"), str(tmp_path / "out.txt")]
    else:
        args = ["detect", str(tmp_path), option, deep]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("grammar-parse: error [usage.json]:") and "deep" in err and err.count("\n") == 1


# ------------------------------------------------------------------ f. CLI warnings

def _anchorless(tmp_path: Path) -> list[str]:
    (tmp_path / "prefix.txt").write_text("You are a bot.\nUser: hi\n", encoding="utf-8")
    (tmp_path / "out.txt").write_text("<think>x</think>hi", encoding="utf-8")
    return ["parse", "-g", "qwen3", "--prefix-file", str(tmp_path / "prefix.txt"), str(tmp_path / "out.txt")]


def test_cli_prints_a_warning_as_one_line_with_its_code(tmp_path, capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("default")  # (the suite makes warnings errors; the command leaves filters be)
        assert main(_anchorless(tmp_path)) == 0
    err = capsys.readouterr().err
    assert err.startswith("grammar-parse: warning [usage.anchor]: the prefix holds no start anchor"), err
    assert err.count("\n") == 1 and "sys.exit" not in err and ".py" not in err


def test_cli_warning_from_the_installed_command(tmp_path):
    done = subprocess.run([sys.executable, "-m", "grammar_parse", *_anchorless(tmp_path)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0
    assert done.stderr.startswith("grammar-parse: warning [usage.anchor]: "), done.stderr
    assert done.stderr.count("\n") == 1 and "runpy" not in done.stderr


def test_a_warning_without_a_code_is_one_line_named_by_its_class(capsys, monkeypatch):
    from grammar_parse import _cli as cli

    def warn(args: Any, out: Any) -> int:
        warnings.warn("something\nodd", DeprecationWarning, stacklevel=1)
        return 0

    monkeypatch.setattr(cli, "_COMMANDS", tuple((name, summary, arguments, warn if name == "compile" else run)
                                                for name, summary, arguments, run in cli._COMMANDS))
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        assert main(["compile", "qwen3"]) == 0
    assert capsys.readouterr().err == "grammar-parse: warning [DeprecationWarning]: something odd\n"


def test_serve_without_a_token_warns_in_one_line_with_its_code(capsys, monkeypatch):
    pytest.importorskip("httpx")
    from grammar_parse.serving import _server as server

    served = []
    monkeypatch.setattr(server, "serve", lambda app, host, port, **kwargs: served.append((host, port)))
    monkeypatch.delenv("GRAMMAR_PARSE_TOKEN", raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        assert main(["serve", "-g", "qwen3", "--host", "0.0.0.0", "--port", "0"]) == 0
    assert served == [("0.0.0.0", 0)]
    err = capsys.readouterr().err
    assert err.startswith("grammar-parse: warning [serve.no_token]: serving 0.0.0.0 without a bearer token"), err
    assert ERROR_CODES["serve.no_token"]
