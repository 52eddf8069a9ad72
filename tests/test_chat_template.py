"""Chat templates: 70 real ones render exactly as transformers renders them (tests/data/chat_templates/
expected.json, built by transformers itself), every source form loads, every error has its code, and hostile
templates stop fast with the right one."""

from __future__ import annotations

import dataclasses
import enum
import json
import subprocess
import sys
import threading
from datetime import datetime
from pathlib import Path

import pytest

from grammar_parse.templates._chat_template import (MAX_SOURCE_CHARS, REASONING_KEYS, ChatTemplate, load_chat_template,
                                         render_prompt)
from grammar_parse.errors import ERROR_CODES, ChatTemplateError

DATA = Path(__file__).resolve().parent / "data" / "chat_templates"
EXPECTED = json.loads((DATA / "expected.json").read_text(encoding="utf-8"))
DATE = datetime.fromisoformat(EXPECTED["date"])
USER = [{"role": "user", "content": "Hi"}]
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}


def _frozen() -> datetime:
    return DATE


# --- 70 real templates x the cases, against transformers' own renderings ---------------------------------

_LOADED: dict[str, ChatTemplate] = {}


def _template(name: str) -> ChatTemplate:
    if name not in _LOADED:
        _LOADED[name] = ChatTemplate((DATA / f"{name}.jinja").read_text(encoding="utf-8"),
                                     special_tokens=EXPECTED["special_tokens"], origin=name, now=_frozen)
    return _LOADED[name]


def _expected(template: str, case: str) -> str | dict[str, str]:
    value = EXPECTED["renders"][template][case]
    while isinstance(value, dict) and "same_as" in value:
        value = EXPECTED["renders"][template][value["same_as"]]
    return value


RENDERS = [(template, case) for template in EXPECTED["renders"] for case in EXPECTED["cases"]]


def test_every_vendored_template_has_its_expected_renderings():
    assert sorted(EXPECTED["renders"]) == sorted(f.stem for f in DATA.glob("*.jinja"))
    assert all(set(cases) == set(EXPECTED["cases"]) for cases in EXPECTED["renders"].values())


@pytest.mark.parametrize(("template", "case"), RENDERS, ids=[f"{t}-{c}" for t, c in RENDERS])
def test_renders_exactly_as_transformers(template, case):
    spec = EXPECTED["cases"][case]
    expected = _expected(template, case)
    arguments = {"tools": spec.get("tools"), "documents": spec.get("documents"),
                 "add_generation_prompt": spec["add_generation_prompt"],
                 "continue_final_message": spec.get("continue_final_message", False), **spec.get("kwargs", {})}
    if isinstance(expected, dict):  # transformers raised
        with pytest.raises(ChatTemplateError) as raised:
            _template(template).render(spec["messages"], **arguments)
        assert raised.value.code in ERROR_CODES, raised.value
    else:
        assert _template(template).render(spec["messages"], **arguments) == expected


# --- what a template sees: transformers' environment and inputs -------------------------------------------

class Colour(str, enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


@dataclasses.dataclass
class Point:
    x: int
    y: int


ENVIRONMENT = [
    # (id, template, messages, render kwargs, expected)
    ("tojson-keeps-html", "{{ messages[0].content|tojson }}", [{"role": "user", "content": "<b>&</b>"}], {},
     '"<b>&</b>"'),
    ("tojson-kwargs", "{{ {'b': 1, 'a': [1, 2]}|tojson(indent=1, sort_keys=True, separators=(',', ':')) }}", USER, {},
     '{\n "a":[\n  1,\n  2\n ],\n "b":1\n}'),
    ("tojson-non-ascii", "{{ 'é'|tojson }}|{{ 'é'|tojson(ensure_ascii=True) }}", USER, {}, '"é"|"\\u00e9"'),
    ("trim-and-lstrip-blocks", "  {% if true %}\nx\n  {% endif %}\ny", USER, {}, "x\ny"),
    ("loopcontrols", "{% for i in range(9) %}{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}", USER, {},
     "012"),
    ("generation-tag", "{% generation %}{{ messages[0].content }}{% endgeneration %}!", USER, {}, "Hi!"),
    ("dict-global", "{{ dict(a=1)['a'] }}{{ dict.fromkeys(['k'], 2)['k'] }}", USER, {}, "12"),
    ("namespace", "{% set ns = namespace(n=1) %}{% set ns.n = ns.n + 1 %}{{ ns.n }}", USER, {}, "2"),
    ("strftime-now-frozen", "{{ strftime_now('%d %b %Y') }}", USER, {"now": _frozen}, DATE.strftime("%d %b %Y")),
    ("generation-prompt-default", "{{ add_generation_prompt }}", USER, {}, "True"),
    ("tools-none", "{{ tools is none }}{{ documents is none }}", USER, {}, "TrueTrue"),
    ("special-token", "{{ bos_token }}", USER, {}, "<s>"),
    ("kwargs-over-special-tokens", "{{ bos_token }}", USER, {"bos_token": "<B>"}, "<B>"),
    ("kwargs-reach-the-template", "{{ enable_thinking }}", USER, {"enable_thinking": False}, "False"),
    ("none-keys-dropped", "{{ messages[0].content is defined }}", [{"role": "user", "content": None}], {}, "False"),
    ("reasoning-aliased", "{{ messages[0].reasoning_content }}|{{ messages[0].thinking }}",
     [{"role": "assistant", "reasoning": "R", "content": ""}], {}, "R|R"),
    ("reasoning-content-wins", "{{ messages[0].thinking }}",
     [{"role": "assistant", "reasoning_content": "A", "thinking": "B"}], {}, "B"),
    ("plain-data", "{{ messages[0].c }} {{ messages[0].l }} {{ messages[0].p.x }} {{ messages[0].o }}",
     [{"role": "user", "c": Colour.RED, "l": Level.HIGH, "p": Point(1, 2), "o": object()}], {}, "red 3 1 <object>"),
    ("dataclass-message", "{{ messages[0].x }}", [Point(5, 6)], {}, "5"),
    ("tuple-stays-tuple", "{{ messages[0].t is sequence }}{{ messages[0].t[1] }}", [{"role": "u", "t": (1, 2)}], {},
     "True2"),
    ("continue-final-message", "{% for m in messages %}[{{ m.content }}]{% endfor %}",
     [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hel"}], {"continue_final_message": True},
     "[Hi][Hel"),
    ("str-format-guarded-still-formats", "{{ '{:>5}|{}'.format('a', 7) }}{{ '%-3s|' % 'b' }}", USER, {}, "    a|7b  |"),
    ("concat", "{{ 'a' ~ 1 ~ none }}", USER, {}, "a1None"),
    ("captured-block", "{% set x %}{{ 'ab' * 2 }}{% endset %}{{ x|center(8) }}", USER, {}, "  abab  "),
    ("macro", "{% macro m(s) %}<{{ s }}>{% endmacro %}{{ m('a') ~ m('b') }}", USER, {}, "<a><b>"),
    ("guarded-filters-still-work", "{{ [1, 2]|join(',') }} {{ 'a-b'|replace('-', '+') }} {{ 'x\ny'|indent(2, true) }} "
     "{{ [[1], [2]]|sum(start=[]) }} {{ range(3)|batch(2, 0)|list }} {{ '%d'|format(4) }}", USER, {},
     "1,2 a+b   x\n  y [1, 2] [[0, 1], [2, 0]] 4"),
]


@pytest.mark.parametrize(("source", "messages", "kwargs", "expected"), [e[1:] for e in ENVIRONMENT],
                         ids=[e[0] for e in ENVIRONMENT])
def test_the_environment_is_transformers(source, messages, kwargs, expected):
    template = ChatTemplate(source, special_tokens={"bos_token": "<s>"})
    assert template.render(messages, **kwargs) == expected


def test_tools_tool_use_template_and_reasoning_keys():
    config = {"chat_template": [{"name": "default", "template": "plain"},
                                {"name": "tool_use", "template": "{{ tools|length }} tools"}]}
    template = load_chat_template(config)
    assert template.render(USER) == "plain"
    assert template.render(USER, tools=[TOOL]) == "1 tools"
    assert load_chat_template(config, name="default").render(USER, tools=[TOOL]) == "plain"
    assert REASONING_KEYS[0] == "reasoning_content"


# --- loading from every source form ----------------------------------------------------------------------

SOURCE = "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}"
TOKENS = {"bos_token": {"__type": "AddedToken", "content": "<B>", "lstrip": False}, "eos_token": "<E>",
          "pad_token": None, "image_token": "<img>", "add_bos_token": True}


def _write(path: Path, value: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(value if isinstance(value, str) else json.dumps(value), encoding="utf-8")
    return path


def test_tokenizer_config_dict_with_a_string():
    template = load_chat_template({"chat_template": SOURCE, **TOKENS})
    assert template.special_tokens == {"bos_token": "<B>", "eos_token": "<E>", "image_token": "<img>"}
    assert template.render(USER) == "<B>Hi<E>"


def test_tokenizer_config_dict_with_named_templates():
    config = {"chat_template": [{"name": "default", "template": "D"}, {"name": "rag", "template": "R"}]}
    assert load_chat_template(config).render(USER) == "D"
    assert load_chat_template(config, name="rag").render(USER) == "R"


def test_tokenizer_config_file_and_chat_template_json(tmp_path):
    config = _write(tmp_path / "tokenizer_config.json", {"chat_template": SOURCE, **TOKENS})
    assert load_chat_template(config).render(USER) == "<B>Hi<E>"
    # chat_template.json carries no tokens: they come from the tokenizer config beside it
    legacy = _write(tmp_path / "chat_template.json", {"chat_template": "J" + SOURCE})
    assert load_chat_template(legacy).render(USER) == "J<B>Hi<E>"


def test_chat_template_jinja_file(tmp_path):
    jinja = _write(tmp_path / "chat_template.jinja", SOURCE)
    assert load_chat_template(jinja).render(USER) == "Hi"
    _write(tmp_path / "tokenizer_config.json", TOKENS)
    assert load_chat_template(jinja).render(USER) == "<B>Hi<E>"
    assert load_chat_template(str(jinja)).origin == str(jinja)


MODEL_DIRECTORIES = [
    # (id, files, name, expected rendering)
    ("jinja-first", {"chat_template.jinja": "jinja", "chat_template.json": {"chat_template": "json"},
                     "tokenizer_config.json": {"chat_template": "config"}}, None, "jinja"),
    ("json-next", {"chat_template.json": {"chat_template": "json"},
                   "tokenizer_config.json": {"chat_template": "config"}}, None, "json"),
    ("config-last", {"tokenizer_config.json": {"chat_template": "config", "bos_token": "<s>"}}, None, "config"),
    ("additional-templates", {"chat_template.jinja": "jinja", "additional_chat_templates/rag.jinja": "rag"}, "rag",
     "rag"),
    ("additional-default", {"chat_template.jinja": "jinja", "additional_chat_templates/rag.jinja": "rag"}, None,
     "jinja"),
    ("special-tokens-map", {"chat_template.jinja": "{{ bos_token }}", "tokenizer_config.json": {"bos_token": "<s>"},
                            "special_tokens_map.json": {"bos_token": {"content": "<legacy>"}}}, None, "<legacy>"),
    ("added-tokens-decoder-ignores-map", {"chat_template.jinja": "{{ bos_token }}",
                                          "tokenizer_config.json": {"bos_token": "<s>", "added_tokens_decoder": {}},
                                          "special_tokens_map.json": {"bos_token": "<legacy>"}}, None, "<s>"),
]


@pytest.mark.parametrize(("files", "name", "expected"), [d[1:] for d in MODEL_DIRECTORIES],
                         ids=[d[0] for d in MODEL_DIRECTORIES])
def test_model_directory(tmp_path, files, name, expected):
    for relative, content in files.items():
        _write(tmp_path / relative, content)
    assert load_chat_template(tmp_path, name=name).render(USER) == expected


def test_jinja_text_and_render_prompt_forms(tmp_path):
    file = _write(tmp_path / "chat_template.jinja", SOURCE)
    forms = [ChatTemplate(SOURCE), SOURCE, str(file), file, {"chat_template": SOURCE}]
    assert {render_prompt(USER, form) for form in forms} == {"Hi"}
    assert load_chat_template("{% if true %}x{% endif %}").origin == "Jinja text"


# --- every error code ------------------------------------------------------------------------------------

def _no_jinja(monkeypatch):
    monkeypatch.setitem(sys.modules, "jinja2", None)
    return ChatTemplate("{{ x }}")


def _not_utf8(directory: Path) -> ChatTemplate:
    (directory / "t.jinja").write_bytes(b"\xff{{ x }}")
    return load_chat_template(directory / "t.jinja")


ERRORS = [
    # (id, what raises (given tmp_path and monkeypatch), code, line)
    ("missing-in-config", lambda d, m: load_chat_template({"bos_token": "<s>"}), "chat_template.missing", None),
    ("missing-in-directory", lambda d, m: load_chat_template(_write(d / "x" / "tokenizer_config.json", {}).parent),
     "chat_template.missing", None),
    ("unknown-name", lambda d, m: load_chat_template({"chat_template": "x"}, name="rag"), "chat_template.name", None),
    ("no-default", lambda d, m: load_chat_template({"chat_template": [{"name": "rag", "template": "x"}]}),
     "chat_template.name", None),
    ("no-such-file", lambda d, m: load_chat_template(d / "nothing.jinja"), "chat_template.file", None),
    ("bad-json", lambda d, m: load_chat_template(_write(d / "tokenizer_config.json", "{")), "chat_template.file", None),
    ("json-not-an-object", lambda d, m: load_chat_template(_write(d / "tokenizer_config.json", "[]")),
     "chat_template.file", None),
    ("not-utf8", lambda d, m: _not_utf8(d), "chat_template.file", None),
    ("config-shape", lambda d, m: load_chat_template({"chat_template": 5}), "chat_template.config", None),
    ("config-list-shape", lambda d, m: load_chat_template({"chat_template": [{"name": "default"}]}),
     "chat_template.config", None),
    ("syntax", lambda d, m: ChatTemplate("a\nb\n{% for x in %}\n"), "chat_template.syntax", 3),
    ("syntax-unknown-tag", lambda d, m: ChatTemplate("a\n{{ x }}\n{% endfor %}"), "chat_template.syntax", 3),
    ("tool-not-a-schema", lambda d, m: ChatTemplate("x").render(USER, tools=[print]), "chat_template.input", None),
    ("message-not-a-dict", lambda d, m: ChatTemplate("x").render(["hi"]), "chat_template.input", None),
    ("empty-conversation", lambda d, m: ChatTemplate("x").render([]), "chat_template.input", None),
    ("document-not-a-dict", lambda d, m: ChatTemplate("x").render(USER, documents=["d"]), "chat_template.input", None),
    ("continue-with-generation-prompt", lambda d, m: ChatTemplate("{{ messages }}").render(
        USER, continue_final_message=True, add_generation_prompt=True), "chat_template.input", None),
    ("continue-unread-field", lambda d, m: ChatTemplate("x").render(USER, continue_final_message=True),
     "chat_template.input", None),
    ("raised", lambda d, m: ChatTemplate("\n{{ raise_exception('System role not supported') }}").render(USER),
     "chat_template.raised", 2),
    ("undefined-attribute", lambda d, m: ChatTemplate("\n\n{{ messages[0].content.x.y }}").render(USER),
     "chat_template.render", 3),
    ("type-error", lambda d, m: ChatTemplate("{{ messages[0].content + 1 }}").render(USER), "chat_template.render", 1),
    ("recursion", lambda d, m: ChatTemplate("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").render(USER),
     "chat_template.recursion", 1),
    ("security", lambda d, m: ChatTemplate("{{ ''.__class__.__mro__ }}").render(USER), "chat_template.security", 1),
    ("timeout", lambda d, m: ChatTemplate("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}"
                                          "{% endfor %}").render(USER, time_limit=0.2), "chat_template.timeout", 1),
    ("source-too-large", lambda d, m: ChatTemplate("x" * (MAX_SOURCE_CHARS + 1)), "chat_template.too_large", None),
    ("output-too-large", lambda d, m: ChatTemplate("{% for i in range(1000) %}{{ 'x' * 10 }}{% endfor %}").render(
        USER, max_output_chars=5000), "chat_template.too_large", None),
    ("jinja-missing", lambda d, m: _no_jinja(m), "chat_template.jinja", None),
]


@pytest.mark.parametrize(("case", "code", "line"), [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_errors(tmp_path, monkeypatch, case, code, line):
    with pytest.raises(ChatTemplateError) as raised:
        case(tmp_path, monkeypatch)
    error = raised.value
    assert (error.code, error.line) == (code, line), error
    assert code in ERROR_CODES and error.hint and isinstance(error, ValueError)
    if code == "chat_template.jinja":
        assert "pip install 'grammar-parse[chat-templates]'" in str(error)


def test_every_chat_template_code_is_raised_by_the_table():
    assert {e[2] for e in ERRORS} == {code for code in ERROR_CODES if code.startswith("chat_template.")}


def test_the_raised_message_is_the_templates():
    with pytest.raises(ChatTemplateError, match="System role not supported"):
        ChatTemplate("{{ raise_exception('System role not supported') }}").render(USER)


def test_import_grammar_parse_without_jinja2():
    code = ("import sys; sys.modules['jinja2'] = None; import grammar_parse, grammar_parse.templates._chat_template as c\n"
            "try:\n    c.ChatTemplate('{{ x }}')\nexcept c.ChatTemplateError as e:\n    print(e.code)")
    run = subprocess.run([sys.executable, "-c", code.replace("c.ChatTemplateError", "Exception")],
                         capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "chat_template.jinja"


# --- hostile templates -----------------------------------------------------------------------------------

DOUBLING = "{% set ns = namespace(x='ab') %}{% for i in range(64) %}"
HOSTILE = [
    # (id, template, code): each stops at once (the time-limit cases within the 0.2 s set for them)
    ("repeat-string", "{{ 'a' * 10**9 }}", "chat_template.too_large"),
    ("repeat-list", "{{ [0] * 10**9 }}", "chat_template.too_large"),
    ("repeat-list-of-big-strings", "{{ ['a' * 10**6] * 100 }}", "chat_template.too_large"),
    ("repeat-nested", "{{ [[('a' * 1000)]] * 100000 }}", "chat_template.too_large"),
    ("power", "{{ 2 ** (10**8) }}", "chat_template.too_large"),
    ("power-of-ten", "{{ 10 ** (10 ** 9) }}", "chat_template.too_large"),
    ("percent-width", "{{ '%1000000000s' % 'x' }}", "chat_template.too_large"),
    ("percent-star-width", "{{ '%*s' % (10**9, 'x') }}", "chat_template.too_large"),
    ("percent-precision", "{{ '%.1000000000f' % 1.0 }}", "chat_template.too_large"),
    ("format-width", "{{ '{:>1000000000}'.format('x') }}", "chat_template.too_large"),
    ("format-nested-width", "{{ '{:>{}}'.format('x', 10**9) }}", "chat_template.too_large"),
    ("format-map", "{{ '{a:>1000000000}'.format_map({'a': 1}) }}", "chat_template.too_large"),
    ("format-filter", "{{ '%1000000000s'|format('x') }}", "chat_template.too_large"),
    ("center-filter", "{{ 'x'|center(10**9) }}", "chat_template.too_large"),
    ("indent-filter", "{{ 'x\ny'|indent(10**9) }}", "chat_template.too_large"),
    ("wordwrap-filter", "{{ ('a ' * 100000)|wordwrap(1, wrapstring='b' * 1000) }}", "chat_template.too_large"),
    ("join-filter", "{{ (['a' * 10**6] * 10)|join('b' * 10**7) }}", "chat_template.too_large"),
    ("replace-filter", "{{ ('a' * 10**6)|replace('a', 'b' * 100) }}", "chat_template.too_large"),
    ("batch-filter", "{{ range(3)|batch(10**9, 'x')|list }}", "chat_template.too_large"),
    ("slice-filter", "{{ range(3)|slice(10**9)|list }}", "chat_template.too_large"),
    ("tojson-indent", "{{ messages|tojson(indent=10**9) }}", "chat_template.too_large"),
    ("sum-of-lists", "{{ range(20000)|map('string')|map('list')|sum(start=[]) }}", "chat_template.too_large"),
    ("lipsum", "{{ lipsum(10**6) }}", "chat_template.too_large"),
    ("str-ljust", "{{ 'x'.ljust(10**9) }}", "chat_template.too_large"),
    ("str-zfill", "{{ '1'.zfill(10**9) }}", "chat_template.too_large"),
    ("str-expandtabs", "{{ '\t\t'.expandtabs(10**9) }}", "chat_template.too_large"),
    ("str-join", "{{ ('b' * 10**7).join(['a', 'a', 'a']) }}", "chat_template.too_large"),
    ("str-replace", "{{ ('a' * 10**6).replace('a', 'b' * 100) }}", "chat_template.too_large"),
    ("str-translate", "{{ ('a' * 10**6).translate({97: 'b' * 100}) }}", "chat_template.too_large"),
    ("double-with-plus", DOUBLING + "{% set ns.x = ns.x + ns.x %}{% endfor %}", "chat_template.too_large"),
    ("double-with-tilde", DOUBLING + "{% set ns.x = ns.x ~ ns.x %}{% endfor %}", "chat_template.too_large"),
    ("double-with-set-block", DOUBLING + "{% set ns.x %}{{ ns.x }}{{ ns.x }}{% endset %}{% endfor %}",
     "chat_template.too_large"),
    ("double-with-macro", "{% macro d(s) %}{{ s }}{{ s }}{% endmacro %}" + DOUBLING + "{% set ns.x = d(ns.x) %}"
     "{% endfor %}", "chat_template.too_large"),
    ("double-with-filter-block", DOUBLING + "{% set ns.x %}{% filter upper %}{{ ns.x }}{{ ns.x }}{% endfilter %}"
     "{% endset %}{% endfor %}", "chat_template.too_large"),
    ("output-flood", "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", "chat_template.too_large"),
    ("nested-loops-writing-nothing", "{% for i in range(100000) %}{% for j in range(100000) %}{% for k in "
     "range(100000) %}{% endfor %}{% endfor %}{% endfor %}", "chat_template.timeout"),
    ("loop-in-macro", "{% macro spin() %}{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}"
     "{% endfor %}{% endmacro %}{{ spin() }}", "chat_template.timeout"),
    ("recursive-macro", "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "chat_template.recursion"),
    ("recursive-loop", "{% for x in [[[]]] recursive %}{{ loop([x]) }}{% endfor %}", "chat_template.recursion"),
    ("class-walk", "{{ ''.__class__.__mro__[1].__subclasses__() }}", "chat_template.security"),
    ("function-globals", "{{ cycler.__init__.__globals__ }}", "chat_template.security"),
    ("list-append", "{{ messages.append(1) }}", "chat_template.security"),
    ("dict-update", "{{ messages[0].update({'role': 'system'}) }}", "chat_template.security"),
    ("namespace-underscore", "{{ namespace(_secret=1) }}", "chat_template.security"),
    ("namespace-set-underscore", "{% set ns = namespace() %}{% set ns._x = 1 %}", "chat_template.security"),
    ("huge-range", "{{ range(10**9)|list }}", "chat_template.render"),
]


@pytest.mark.parametrize(("source", "code"), [h[1:] for h in HOSTILE], ids=[h[0] for h in HOSTILE])
def test_hostile_templates_stop_with_their_code(source, code):
    # (a short clock only where the clock is what must stop it: on a busy machine it would beat a size guard)
    with pytest.raises(ChatTemplateError) as raised:
        ChatTemplate(source).render(USER, time_limit=0.2 if code == "chat_template.timeout" else 30.0)
    assert raised.value.code == code, raised.value


def test_the_tracer_is_restored_and_others_are_kept():
    def tracer(frame, event, arg):
        return None

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        ChatTemplate("{{ messages[0].content }}").render(USER)
        with pytest.raises(ChatTemplateError):
            ChatTemplate("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}").render(
                USER, time_limit=0.05)
        assert sys.gettrace() is tracer
    finally:
        sys.settrace(previous)


def test_threads_render_with_their_own_limits():
    template = _template("Qwen-Qwen3-0.6B")
    spec = EXPECTED["cases"]["tools"]
    expected = _expected("Qwen-Qwen3-0.6B", "tools")
    spin = ChatTemplate("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}")
    results: list[object] = []

    def render() -> None:
        for _ in range(20):
            results.append(template.render(spec["messages"], tools=spec["tools"], add_generation_prompt=True))

    def stall() -> None:
        try:
            spin.render(USER, time_limit=0.3)
        except ChatTemplateError as error:
            results.append(error.code)

    threads = [threading.Thread(target=render) for _ in range(4)] + [threading.Thread(target=stall)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results.count(expected) == 80 and results.count("chat_template.timeout") == 1
