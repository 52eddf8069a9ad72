"""The command line and the names it takes: every user error is one line on stderr with a stable code and the
documented exit status (2 usage, 1 parse failure), built-in names resolve however they are spelled (and as
vLLM / SGLang call them), and a file in the working directory never shadows a built-in."""

from __future__ import annotations

import io
import json
import re
import select
import signal
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

import grammar_parse as gp
from grammar_parse._cli import main
from grammar_parse.errors import ERROR_CODES
from test_session import CALL, XML_TEMPLATE, lambda_free_schema

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "examples" / "qwen3_tool_call.txt"
DIRECTORY = object()  # in a files table: make a directory
BAD_TEMPLATE = json.dumps({**XML_TEMPLATE, "fields": {"x": {"open": "<x>", "join": ""}}})
TOKENIZER_CONFIG = json.dumps({"tokenizer_class": "Qwen2Tokenizer", "eos_token": "<|im_end|>", "model_max_length": 9})
BAD_JSON_CALL = '<tool_call>{"name": x}</tool_call>'


def run_cli(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(args), out=out), out.getvalue()


def make_files(root: Path, files: dict[str, object]) -> None:
    for name, content in files.items():
        path = root / name
        if content is DIRECTORY:
            path.mkdir(parents=True)
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(str(content), encoding="utf-8")


def assert_one_error_line(err: str) -> str:
    """stderr holds exactly one error line with a listed code, and no traceback; returns the code."""
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in err
    match = re.match(r"grammar-parse: error \[([a-z_.]+)\]: \S", err)
    assert match, err
    assert match.group(1) in ERROR_CODES
    return match.group(1)


# (what, argv with {tmp} for the directory, files to create there, exit status, a part of the error line)
ERROR_CASES = [
    ("missing input file", ["parse", "-g", "qwen3", "{tmp}/nope.txt"], {}, 2,
     "[usage.file]: cannot read the model output file {tmp}/nope.txt: No such file or directory."),
    ("input is a directory", ["parse", "-g", "qwen3", "{tmp}/d"], {"d": DIRECTORY}, 2, "Is a directory"),
    ("binary input", ["parse", "-g", "qwen3", "{tmp}/b.txt"], {"b.txt": b"\xff\xfe\x00"}, 2,
     "[usage.file]: the model output file {tmp}/b.txt is not UTF-8 text."),
    ("stream: missing input", ["stream", "-g", "qwen3", "{tmp}/nope.txt"], {}, 2, "[usage.file]: cannot read"),
    ("stream: input is a directory", ["stream", "-g", "qwen3", "{tmp}/d"], {"d": DIRECTORY}, 2, "Is a directory"),
    ("missing prefix file", ["parse", "-g", "qwen3", "--prefix-file", "{tmp}/p.txt", "{tmp}/o.txt"],
     {"o.txt": "hi"}, 2, "cannot read the prefix file {tmp}/p.txt"),
    ("binary prefix file", ["parse", "-g", "qwen3", "--prefix-file", "{tmp}/p.txt", "{tmp}/o.txt"],
     {"o.txt": "hi", "p.txt": b"\x80"}, 2, "the prefix file {tmp}/p.txt is not UTF-8 text"),
    ("missing tools file", ["parse", "-g", "qwen3", "--tools-file", "{tmp}/t.json", "{tmp}/o.txt"],
     {"o.txt": "hi"}, 2, "cannot read the tools file {tmp}/t.json"),
    ("tools file is a directory", ["parse", "-g", "qwen3", "--tools-file", "{tmp}/t", "{tmp}/o.txt"],
     {"o.txt": "hi", "t": DIRECTORY}, 2, "Is a directory"),
    ("tools file not JSON", ["parse", "-g", "qwen3", "--tools-file", "{tmp}/t.json", "{tmp}/o.txt"],
     {"o.txt": "hi", "t.json": "[{"}, 2, "[usage.json]: the tools file {tmp}/t.json is not valid JSON"),
    ("tools file not a list", ["parse", "-g", "qwen3", "--tools-file", "{tmp}/t.json", "{tmp}/o.txt"],
     {"o.txt": "hi", "t.json": '{"a": 1}'}, 2, "holds a JSON dict, not a list"),
    ("misspelled grammar", ["parse", "-g", "qwen4", "{tmp}/o.txt"], {"o.txt": "hi"}, 2,
     "[grammar.not_found]: qwen4: no built-in grammar has that name. Did you mean 'qwen3'"),
    ("misspelled alias", ["parse", "-g", "hermess", "{tmp}/o.txt"], {"o.txt": "hi"}, 2,
     "Did you mean 'hermes (qwen3)'"),
    ("unknown grammar, nothing close", ["parse", "-g", "zzzz", "{tmp}/o.txt"], {"o.txt": "hi"}, 2,
     "no built-in grammar has that name. See list_grammars() or `grammar-parse list`"),
    ("missing grammar file", ["parse", "-g", "{tmp}/g.lark", "{tmp}/o.txt"], {"o.txt": "hi"}, 2,
     "[grammar.not_found]: {tmp}/g.lark: cannot read grammar file: No such file or directory."),
    ("grammar path is a directory", ["parse", "-g", "{tmp}/g.lark", "{tmp}/o.txt"],
     {"o.txt": "hi", "g.lark": DIRECTORY}, 2, "[grammar.not_found]: {tmp}/g.lark: cannot read grammar file: Is a"),
    ("binary grammar file", ["parse", "-g", "{tmp}/g.lark", "{tmp}/o.txt"], {"o.txt": "hi", "g.lark": b"\xc3("}, 2,
     "[grammar.encoding]: {tmp}/g.lark: not UTF-8 text"),
    ("bad .lark grammar", ["parse", "-g", "{tmp}/g.lark", "{tmp}/o.txt"], {"o.txt": "hi", "g.lark": "start: x\n"}, 2,
     "[grammar.syntax]: {tmp}/g.lark"),
    ("bad template", ["parse", "-g", "{tmp}/t.json", "{tmp}/o.txt"], {"o.txt": "hi", "t.json": BAD_TEMPLATE}, 2,
     "[template.join]"),
    ("template not JSON", ["parse", "-g", "{tmp}/t.json", "{tmp}/o.txt"], {"o.txt": "hi", "t.json": "{"}, 2,
     "[grammar.syntax]: {tmp}/t.json:1:2: not valid JSON"),
    ("tokenizer config without a template", ["parse", "-g", "{tmp}/tokenizer_config.json", "{tmp}/o.txt"],
     {"o.txt": "hi", "tokenizer_config.json": TOKENIZER_CONFIG}, 2,
     "[template.tokenizer_config]: {tmp}/tokenizer_config.json carries no response_template or response_schema."),
    ("compile: misspelled name", ["compile", "gpt-os"], {}, 2, "Did you mean 'gpt_oss'"),
    ("compile: tokenizer config", ["compile", "{tmp}/tokenizer_config.json"],
     {"tokenizer_config.json": TOKENIZER_CONFIG}, 2, "carries no response_template or response_schema"),
    ("convert: not a legacy schema", ["convert", "{tmp}/a.json"], {"a.json": '{"a": 1}'}, 2,
     "[usage.not_legacy]: {tmp}/a.json is not a legacy response_schema."),
    ("convert: a v1 template", ["convert", "{tmp}/a.json"], {"a.json": json.dumps(XML_TEMPLATE)}, 2,
     "is not a legacy response_schema. It is a response_template: `grammar-parse compile` prints its grammar."),
    ("convert: missing file", ["convert", "{tmp}/a.json"], {}, 2, "[usage.file]: cannot read the schema"),
    ("check: invalid template", ["check", "{tmp}/t.json"], {"t.json": BAD_TEMPLATE}, 1, "[template.join]"),
    ("check: missing file", ["check", "{tmp}/t.json"], {}, 2, "[grammar.not_found]"),
    ("check: unknown name", ["check", "qwen-9"], {}, 2, "[grammar.not_found]: qwen-9"),
    ("output does not parse", ["parse", "-g", "qwen3", "{tmp}/o.txt"], {"o.txt": BAD_JSON_CALL}, 1,
     "[parse.json]: field 'tool_calls' (region at offset 0): could not parse region as JSON"),
    ("stream: output does not parse", ["stream", "-g", "qwen3", "{tmp}/o.txt"], {"o.txt": BAD_JSON_CALL}, 1,
     "[parse.json]"),
    ("a parse failure points to --lenient", ["parse", "-g", "qwen3", "{tmp}/o.txt"], {"o.txt": BAD_JSON_CALL}, 1,
     "Or pass --lenient to keep the text and report the problem under parse_errors."),
    ("a huge failing region is cut", ["parse", "-g", "qwen3", "{tmp}/o.txt"],
     {"o.txt": '<tool_call>{"name": ' + "x" * 100_000 + "}</tool_call>"}, 1, "more characters) Set content_args"),
]


@pytest.mark.parametrize("argv, files, status, expected", [c[1:] for c in ERROR_CASES], ids=[c[0] for c in ERROR_CASES])
def test_user_errors_are_one_line_with_the_documented_status(tmp_path, capsys, argv, files, status, expected):
    make_files(tmp_path, files)
    rc, _ = run_cli(*[a.format(tmp=tmp_path) for a in argv])
    err = capsys.readouterr().err
    assert rc == status
    assert_one_error_line(err)
    assert expected.format(tmp=tmp_path) in err
    assert len(err) < 1000  # no dumped lists or megabyte regions


def test_a_not_found_error_suggests_rather_than_lists(capsys):
    assert run_cli("compile", "qwen4")[0] == 2
    err = capsys.readouterr().err
    assert "xlam" not in err and "apertus" not in err  # not the list of all built-ins


def run_module(*args: str, stdin: bytes = b"", cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "grammar_parse", *args], input=stdin, capture_output=True,
                          cwd=cwd or ROOT, timeout=120)


@pytest.mark.parametrize("args, stdin, status, expected", [
    (["parse", "--grammar", "qwen3", "/nonexistent/out.txt"], b"", 2,
     b"grammar-parse: error [usage.file]: cannot read the model output file /nonexistent/out.txt"),
    (["parse", "-g", "qwen3"], b"\xff\xfe not text", 2, b"grammar-parse: error [usage.file]: standard input is not"),
    (["parse", "-g", "qwen3"], BAD_JSON_CALL.encode(), 1, b"grammar-parse: error [parse.json]: "),
    (["parse", "-g", "Qwen3.5"], b"hi<|im_end|>", 0, b""),
])
def test_the_real_command_exits_without_a_traceback(args, stdin, status, expected):
    done = run_module(*args, stdin=stdin)
    assert done.returncode == status, done.stderr
    if status:
        assert_one_error_line(done.stderr.decode())
        assert done.stderr.startswith(expected)
    else:
        assert done.stderr == b"" and json.loads(done.stdout) == {"role": "assistant", "content": "hi"}


def test_argparse_usage_errors_keep_status_2(capsys):
    assert main(["parse", "input.txt"]) == 2  # no --grammar, and no model to detect it from
    assert "error [usage.grammar]: no grammar: give --grammar NAME, or the model" in capsys.readouterr().err
    assert main(["frobnicate"]) == 2
    assert run_module("parse").returncode == 2


def test_version_and_help_with_exit_statuses(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"grammar-parse {gp.__version__}\n"
    assert run_module("--version").stdout == f"grammar-parse {gp.__version__}\n".encode()
    for argv in (["--help"], ["parse", "--help"]):
        assert main(argv) == 0
        text = capsys.readouterr().out
        assert "exit status:" in text
        assert re.search(r"^  1 +the model output did not parse", text, re.M)
        assert re.search(r"^  2 +usage error", text, re.M)
        assert re.search(r"^  130 +interrupted", text, re.M)


def test_ctrl_c_exits_130_without_a_traceback():
    proc = subprocess.Popen([sys.executable, "-m", "grammar_parse", "stream", "-g", "qwen3"], cwd=ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(b"<think>hm")
        proc.stdin.flush()
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready and json.loads(proc.stdout.readline())["type"] == "region_open"  # it is in its read loop
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert b"Traceback" not in err and b"KeyboardInterrupt" not in err


def test_a_closed_pipe_ends_quietly(tmp_path):
    # Thousands of event lines, written one by one: the reader closes after the first (as `| head -1` does).
    (tmp_path / "o.txt").write_text('<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>\n' * 3000)
    proc = subprocess.Popen([sys.executable, "-m", "grammar_parse", "stream", "-g", "qwen3", str(tmp_path / "o.txt")],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    assert json.loads(proc.stdout.readline())["type"] == "region_open"
    proc.stdout.close()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and err == b""


# ---- built-in names ----

def test_no_two_builtins_share_a_name_ignoring_case_and_separators():
    owners: dict[str, set[str]] = {}
    for name, aliases in gp.list_grammars().items():
        for spelling in [name, *aliases]:
            owners.setdefault(re.sub(r"[-_.]", "", spelling.lower()), set()).add(name)
    assert {key: names for key, names in owners.items() if len(names) > 1} == {}


@pytest.mark.parametrize("spelling, name", [
    ("Qwen3", "qwen3"), ("QWEN3", "qwen3"), ("qwen3.5", "qwen3_5"), ("Qwen3.5", "qwen3_5"), ("qwen35", "qwen3_5"),
    ("deepseek-r1", "deepseek_r1"), ("DeepSeek.R1", "deepseek_r1"), ("GPT-OSS", "gpt_oss"), ("gptoss", "gpt_oss"),
    ("Kimi-K2.5", "kimi_k2"), ("granite_20b-fc", "granite_20b_fc"), ("ernie-4.5", "ernie4_5"),
])
def test_names_match_ignoring_case_and_separators(spelling, name):
    assert gp.load_grammar(spelling) is gp.load_grammar(name)


_VLLM_TOOLS = "vllm/tool_parsers/__init__.py (_TOOL_PARSERS_TO_REGISTER)"
_VLLM_REASONING = "vllm/reasoning/__init__.py (_REASONING_PARSERS_TO_REGISTER)"
_SGLANG_TOOLS = "python/sglang/srt/function_call/function_call_parser.py (FunctionCallParser.ToolCallParserEnum)"
_SGLANG_REASONING = "python/sglang/srt/parser/reasoning_parser.py (ReasoningParser.DetectorMap)"

#: Each server's parser names that are not the name of the grammar they read: name -> our grammar.
RENAMED = {
    "vllm": {
        "cohere_command3": "cohere2", "cohere_command4": "cohere2", "ernie45": "ernie4_5",
        "functiongemma": "function_gemma", "granite-20b-fc": "granite_20b_fc",
        "granite_thinking_parser": "qwen3_coder", "hermes": "qwen3", "holo2": "qwen3", "hy_v3": "hunyuan_v3",
        "hy_v4": "hunyuan_v3", "internlm": "internlm2", "minicpmv": "qwen3_coder", "minimax": "minimax_m1",
        "minimax_m2_append_think": "minimax_m2", "musespark1x": "muse", "nemotron_v3": "qwen3_coder",
        "openai": "gpt_oss", "openai_gptoss": "gpt_oss", "phi4_mini_json": "phi4_mini",
        "pythonic": "llama3_pythonic", "qwen3_xml": "qwen3_coder", "step3p5": "qwen3_coder", "step5": "qwen3_coder",
    },
    "sglang": {
        "apertus2509": "apertus", "cohere_command4": "cohere2", "deepseek-r1": "deepseek_r1",
        "deepseek-v4": "deepseek_v4", "deepseek-v41": "deepseek_v41", "deepseekv3": "deepseek_v3",
        "deepseekv31": "deepseek_v31", "deepseekv32": "deepseek_v32", "deepseekv4": "deepseek_v4",
        "deepseekv41": "deepseek_v41", "glm": "glm45", "gpt-oss": "gpt_oss",
        "granite_thinking_parser": "qwen3_coder", "hermes": "qwen3", "hunyuan": "hunyuan_v3",
        "interns1": "internlm2", "llama3": "llama3_json", "minimax-append-think": "minimax_m2",
        "minimax-m2": "minimax_m2", "minimax-m3": "minimax_m3", "nanbeige": "qwen3_coder",
        "nemotron_3": "qwen3_coder", "pythonic": "llama3_pythonic", "qwen": "qwen3", "qwen25": "qwen3",
        "qwen3-thinking": "qwen3", "spark25": "glm45", "step3p5": "qwen3_coder", "trinity": "qwen3",
    },
}

#: The parser names each registry (named above) lists that resolve here.
REGISTERED = {
    ("vllm", "--tool-call-parser"): (  # _VLLM_TOOLS
        "apertus beam cohere_command3 cohere_command4 deepseek_v3 deepseek_v31 deepseek_v32 deepseek_v4 "
        "deepseek_v41 dots ernie45 functiongemma gemma4 gigachat3 glm45 glm47 granite granite-20b-fc granite4 "
        "hermes hunyuan_a13b hy_v3 hy_v4 inkling internlm jamba k2_horizon kimi_k2 kimi_k3 lfm2 ling3 "
        "llama3_json llama4_pythonic longcat mimo minicpm5 minimax minimax_m2 minimax_m3 mistral muse muse_glimmer "
        "musespark1x olmo3 openai phi4_mini_json plamo3 poolside_v1 pythonic qwen3_coder qwen3_xml seed_oss "
        "step3 step3p5 step5 xlam "
    ).split(),
    ("vllm", "--reasoning-parser"): (  # _VLLM_REASONING
        "beam cohere_command3 cohere_command4 deepseek_r1 deepseek_v4 deepseek_v41 ernie45 gemma4 glm45 glm47 "
        "granite granite_thinking_parser holo2 hunyuan_a13b hy_v3 hy_v4 inkling k2_horizon kimi_k2 kimi_k3 "
        "ling3 mimo minicpmv minimax_m2 minimax_m2_append_think minimax_m3 muse muse_glimmer musespark1x "
        "nemotron_v3 olmo3 openai_gptoss plamo3 poolside_v1 qwen3 seed_oss step3 step3p5 step5 "
    ).split(),
    ("sglang", "--tool-call-parser"): (  # _SGLANG_TOOLS
        "apertus2509 beam cohere_command4 deepseekv3 deepseekv31 deepseekv32 deepseekv4 deepseekv41 dots "
        "gemma4 gigachat3 gigachat35 glm glm45 glm47 gpt-oss hermes hunyuan inkling interns1 iquest_q1 "
        "k2_horizon kimi_k2 kimi_k3 lfm2 ling3 llama3 mimo minicpm5 minimax-m2 minimax-m3 mistral nanbeige "
        "poolside_v1 pythonic qwen qwen25 qwen3_coder spark25 step3 step3p5 trinity "
    ).split(),
    ("sglang", "--reasoning-parser"): (  # _SGLANG_REASONING
        "apertus2509 beam cohere_command4 deepseek-r1 deepseek-v4 deepseek-v41 dots gemma4 gigachat35 glm45 "
        "gpt-oss granite_thinking_parser hunyuan inkling interns1 iquest_q1 k2_horizon kimi_k2 kimi_k3 ling3 "
        "mimo minimax-append-think minimax-m3 nanbeige nemotron_3 poolside_v1 qwen3 qwen3-thinking step3 step3p5 "
    ).split(),
}

#: (server, flag, the server's parser name, our grammar)
SERVER_NAMES = [(server, flag, name, RENAMED[server].get(name, name))
                for (server, flag), names in REGISTERED.items() for name in names]

#: Server names deliberately not mapped: no grammar of ours has their format (or, for llama4_json, the
#: parser is shared but Llama 4's tokens are not in llama3_json). Names that equal one of ours but mean
#: another format on a server (vLLM `deepseek_v3` / `mistral` reasoning, SGLang `minimax` reasoning) are
#: explained in those grammars' headers.
UNMAPPED = [
    ("vllm", "--tool-call-parser", "llama4_json"), ("sglang", "--reasoning-parser", "kimi"),
    ("sglang", "--reasoning-parser", "telechat4"),
]


@pytest.mark.parametrize("server, flag, name, grammar", SERVER_NAMES, ids=[f"{s}{f}={n}" for s, f, n, _ in SERVER_NAMES])
def test_server_parser_names_resolve(server, flag, name, grammar):
    assert grammar in gp.list_grammars(), f"{name} reads {grammar}: list it in RENAMED under our name"
    assert gp.load_grammar(name) is gp.load_grammar(grammar)


@pytest.mark.parametrize("server, flag, name", UNMAPPED, ids=[f"{s}{f}={n}" for s, f, n in UNMAPPED])
def test_server_names_without_a_format_here_are_not_guessed(server, flag, name):
    with pytest.raises(gp.GrammarError) as info:
        gp.load_grammar(name)
    assert info.value.code == "grammar.not_found"


def test_the_cli_takes_server_names(capsys):
    assert run_cli("compile", "openai") == run_cli("compile", "gpt_oss")
    rc, out = run_cli("parse", "-g", "hermes", "--compact", str(SAMPLE))
    assert rc == 0 and out == run_cli("parse", "-g", "qwen3", "--compact", str(SAMPLE))[1]


# ---- names versus paths ----

def test_a_directory_in_the_working_directory_does_not_shadow_a_builtin(tmp_path, monkeypatch, capsys):
    (tmp_path / "qwen3").mkdir()
    (tmp_path / "qwen3.5").write_text("not a grammar")
    (tmp_path / "out.txt").write_text("<think>a</think>b")
    monkeypatch.chdir(tmp_path)
    assert gp.load_grammar("qwen3") is gp.load_grammar("hermes")
    assert gp.load_grammar("qwen3.5").name == "qwen3_5"
    rc, out = run_cli("parse", "-g", "qwen3", "--compact", "out.txt")
    assert rc == 0 and json.loads(out) == {"role": "assistant", "reasoning_content": "a", "content": "b"}
    rc, _ = run_cli("parse", "-g", "./qwen3", "out.txt")  # a path: the directory, read as a model directory
    assert rc == 2 and "[chat_template.missing]: qwen3: the model directory holds no chat template" in \
        capsys.readouterr().err


def test_paths_need_a_separator_or_a_grammar_suffix(tmp_path, monkeypatch):
    source = gp.load_grammar("smollm3").lark_source
    (tmp_path / "mine.lark").write_text(source)
    (tmp_path / "mine").write_text(source)
    (tmp_path / "tpl").write_text(json.dumps(XML_TEMPLATE))
    monkeypatch.chdir(tmp_path)
    assert gp.load_grammar("mine.lark").name == "mine"
    assert gp.load_grammar("./mine").name == "mine" and gp.load_grammar(Path("mine")).name == "mine"
    assert gp.load_grammar("./tpl").fields == gp.compile_template(XML_TEMPLATE).fields  # JSON by its content
    with pytest.raises(gp.GrammarError) as info:
        gp.load_grammar("mine")
    assert info.value.code == "grammar.not_found" and "write it as a path (./mine)" in str(info.value)


def test_a_tokenizer_config_without_a_template_says_so(tmp_path):
    from grammar_parse._engine.library import grammar_from_json

    with pytest.raises(gp.TemplateError) as info:
        grammar_from_json(json.loads(TOKENIZER_CONFIG))
    assert info.value.code == "template.tokenizer_config"
    assert "the document carries no response_template or response_schema." in str(info.value)
    assert "Unknown keys" not in str(info.value)
    path = tmp_path / "tokenizer_config.json"
    path.write_text(json.dumps({**json.loads(TOKENIZER_CONFIG), "response_template": XML_TEMPLATE}))
    assert gp.load_grammar(path) is gp.compile_template(XML_TEMPLATE)  # one that carries a template loads


# ---- commands ----

def test_compile_prints_any_grammar_argument(tmp_path):
    shipped = resources.files("grammar_parse.grammars").joinpath("qwen3.lark").read_text(encoding="utf-8")
    assert run_cli("compile", "qwen3") == (0, shipped)
    assert run_cli("compile", "Hermes") == (0, shipped)
    (tmp_path / "g.lark").write_text(shipped)
    assert run_cli("compile", str(tmp_path / "g.lark")) == (0, shipped)
    (tmp_path / "t.json").write_text(json.dumps(XML_TEMPLATE))
    assert run_cli("compile", str(tmp_path / "t.json")) == (0, gp.compile_template(XML_TEMPLATE).lark_source)


def test_list_shows_aliases():
    rc, out = run_cli("list")
    assert rc == 0
    assert "gpt_oss (also: gpt-oss, harmony, openai, openai_gptoss)\n    fields: thinking, content, tool_calls\n" in out
    assert len(re.findall(r"^\S", out, re.M)) == len(gp.list_grammars())


def test_cli_parse_stream_compile_check_list(tmp_path: Path, capsys):
    rc, out = run_cli("parse", "--grammar", "qwen3", str(SAMPLE))
    assert rc == 0 and json.loads(out)["tool_calls"][0]["function"]["name"] == "get_weather"

    rc, out = run_cli("stream", "--grammar", "qwen3", str(SAMPLE))
    lines = [json.loads(line) for line in out.splitlines()]
    assert rc == 0 and lines[0] == {"type": "region_open", "field": "reasoning_content"}
    assert lines[-1]["type"] == "message" and lines[-1]["message"] == json.loads(run_cli("parse", "-g", "qwen3", str(SAMPLE))[1])

    template = tmp_path / "t.json"
    template.write_text(json.dumps(XML_TEMPLATE))
    rc, out = run_cli("compile", str(template))
    assert rc == 0 and out == gp.compile_template(XML_TEMPLATE).lark_source
    rc, out = run_cli("check", str(template))
    assert rc == 0 and out.startswith("ok:")

    bad = tmp_path / "bad.json"
    bad.write_text(BAD_TEMPLATE)
    rc, out = run_cli("check", str(bad))
    assert rc == 1 and "template.join" in capsys.readouterr().err

    rc, out = run_cli("list")
    assert rc == 0 and "qwen3 (also: qwen2" in out

    prefix = tmp_path / "prefix.txt"
    prefix.write_text("<|im_start|>assistant\n<think>")
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([lambda_free_schema()]))
    text = tmp_path / "out.txt"
    text.write_text("x</think>" + CALL)
    rc, out = run_cli("parse", "-g", str(template), "--prefix-file", str(prefix), "--tools-file", str(tools), str(text))
    assert json.loads(out) == {"role": "assistant", "thinking": "x", "tool_calls": [
        {"type": "function", "function": {"name": "set_alarm", "arguments": {"hour": 7, "loud": "true"}}}]}


def test_serve_refuses_an_unknown_store_as_a_usage_error(capsys):
    """--store takes 'memory' or a redis:// URL; anything else is the command's usage error (status 2),
    said on one line before any port is bound."""
    assert main(["serve", "--port", "0", "--store", "ftp://127.0.0.1/x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("grammar-parse: error [usage.argument]") and "redis://" in err and err.count("\n") == 1


def test_stream_says_when_it_read_bytes_that_are_not_utf8(tmp_path, capsys):
    """parse refuses such a file; stream has written events before the bad byte, so it reads it as U+FFFD
    and says so in one warning line with its code (a U+FFFD the model really wrote is not counted)."""
    import warnings

    source = tmp_path / "out.txt"
    source.write_bytes(b"hi \xe9 there \xef\xbf\xbd ok \xff")
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        assert main(["stream", "--grammar", "qwen3", str(source)]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out.splitlines()[-1])["message"]["content"] == "hi \ufffd there \ufffd ok \ufffd"
    assert captured.err == ("grammar-parse: warning [usage.not_utf8]: the model output held 2 byte sequence(s) "
                            "that are not UTF-8, read as U+FFFD\n")
