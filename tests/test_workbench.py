"""The grammar workbench (grammar_parse.workbench) through its JSON API on a real server on 127.0.0.1, as the
page drives it: load errors with their line and column, samples that flip from differs to pass when the grammar
is fixed, the result pane, saving and golden files (atomic, inside the folders given), and the guards a hostile
web page or input meets (Host, Origin, token, sizes, catastrophic regexes, paths out of the working directory).
Every server here listens on 127.0.0.1 only and stops with its test."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from grammar_parse._cli import build_argparser
from grammar_parse.serving._server import lifespan
from grammar_parse.workbench import PROBLEM_CODES, SampleLimits, WorkbenchApp, WorkbenchLimits, open_workbench
from grammar_parse.workbench._source import SKELETON
from test_lmsp import Server

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden" / "qwen3"
QWEN3_TEMPLATE = ROOT / "tests" / "data" / "chat_templates" / "Qwen-Qwen3-0.6B.jinja"
TOKEN = "test-token-0123456789"
#: The skeleton without its end-of-turn delimiter: "<|im_end|>" then stays in the content.
NO_END = SKELETON.replace("start: reasoning_content? content? END_OF_TURN?", "start: reasoning_content? content?")
NO_END = NO_END.replace('END_OF_TURN: "<|im_end|>"\n', "")


class Client:
    """The workbench's API at ``base``, as the page calls it (token header, JSON bodies)."""

    def __init__(self, base: str, app: WorkbenchApp) -> None:
        self.base, self.app = base, app
        self.http = httpx.Client(timeout=20)

    def call(self, method: str, path: str, body: Any = None, *, status: int = 200, **headers: str) -> Any:
        sent = {"X-Workbench-Token": TOKEN, **({"Content-Type": "application/json"} if body is not None else {}),
                **headers}
        content = None if body is None else body if isinstance(body, bytes) else json.dumps(body)
        response = self.http.request(method, f"{self.base}/api/{path}", content=content, headers=sent)
        assert response.status_code == status, response.text
        if status >= 400:  # (a problem document with a code of the table, never a traceback)
            document = response.json()
            assert document["code"] in PROBLEM_CODES and PROBLEM_CODES[document["code"]][0] == status
            assert document["type"] == f"urn:grammar-parse:workbench:{document['code']}"
            assert "Traceback" not in response.text
        return response.json()


class _Mounted:
    """One loopback server for the module, answering with the workbench app a test mounted last (a server
    takes ~0.2 s to stop: one per test was half of this file's time)."""

    def __init__(self) -> None:
        self.app: WorkbenchApp | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        assert self.app is not None
        await self.app(scope, receive, send)


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, _Mounted]]:
    mounted = _Mounted()
    with Server(mounted) as base:  # type: ignore[arg-type]
        yield base, mounted


@pytest.fixture()
def serve(server: tuple[str, _Mounted], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """``serve(grammar, samples=..., ...)``: a workbench on 127.0.0.1 with ``tmp_path`` as its working directory
    (the module's server, answering with it from now on)."""
    monkeypatch.chdir(tmp_path)
    base, mounted = server
    with contextlib.ExitStack() as running:
        def start(grammar: Any = None, **kwargs: Any) -> Client:
            mounted.app = app = WorkbenchApp(open_workbench(grammar, root=tmp_path, **kwargs), token=TOKEN)
            client = Client(base, app)
            running.callback(client.http.close)
            return client

        yield start


def _samples(tmp_path: Path, names: tuple[str, ...] = ("plain", "one_call", "prefilled")) -> Path:
    folder = tmp_path / "samples"
    folder.mkdir()
    for name in names:
        for path in GOLDEN.glob(f"{name}.*"):
            shutil.copy(path, folder / path.name)
    return folder


def _end_of_turn_sample(folder: Path) -> None:
    (folder / "turn.txt").write_text("<think>Plan.</think>Hello<|im_end|>", encoding="utf-8")
    (folder / "turn.json").write_text(json.dumps({"role": "assistant", "reasoning_content": "Plan.",
                                                  "content": "Hello"}), encoding="utf-8")


def _status(client: Client, name: str) -> str:
    items = client.call("GET", "state")["samples"]["items"]
    return next(s["status"] for s in items if s["name"] == name)


# ---------------------------------------------------------------------------- the grammar and the samples
def test_state_shows_the_grammar_and_each_samples_status(serve, tmp_path):
    folder = _samples(tmp_path)
    expected = json.loads((folder / "plain.json").read_text(encoding="utf-8"))
    (folder / "plain.json").write_text(json.dumps({**expected, "content": "something else"}), encoding="utf-8")
    (folder / "bare.txt").write_text("just text", encoding="utf-8")
    client = serve("qwen3", samples=folder)
    state = client.call("GET", "state")
    assert state["grammar"]["builtin"] == "qwen3" and state["grammar"]["read_only"] and state["grammar"]["compiled"]
    assert "tool_calls" in state["grammar"]["fields"] and state["grammar"]["source"].startswith("// Qwen")
    statuses = {s["name"]: s["status"] for s in state["samples"]["items"]}
    assert statuses == {"bare": "no_expected", "one_call": "pass", "plain": "differs", "prefilled": "pass"}
    assert state["samples"]["counts"] == {"pass": 2, "differs": 1, "error": 0, "no_expected": 1, "unchecked": 0}


def test_load_errors_carry_code_line_column_and_hint(serve, tmp_path):
    client = serve(str(tmp_path / "mine.lark"))
    broken = SKELETON.replace('TOOL_CALLS_CLOSE: "</tool_call>"', 'TOOL_CALLS_CLOSE: "</tool_call>')
    errors = client.call("POST", "grammar", {"source": broken, "kind": "lark"})["grammar"]["errors"]
    line = broken.splitlines().index('TOOL_CALLS_CLOSE: "</tool_call>') + 1
    assert [(e["code"], e["line"]) for e in errors] == [("grammar.syntax", line)] and errors[0]["column"] >= 1
    directive = SKELETON.replace('{"content": "text"}', '{"content": "txt"}', 1)
    errors = client.call("POST", "grammar", {"source": directive, "kind": "lark"})["grammar"]["errors"]
    assert [(e["code"], e["line"]) for e in errors] == [("grammar.directive", 6)]
    undefined = SKELETON.replace("TOOL_CALLS_TEXT* TOOL_CALLS_CLOSE", "TOOL_CALLS_TEXT* TOOL_CALLS_CLSE")
    errors = client.call("POST", "grammar", {"source": undefined, "kind": "lark"})["grammar"]["errors"]
    rule = "tool_calls: TOOL_CALLS_OPEN TOOL_CALLS_TEXT* TOOL_CALLS_CLSE"
    line, column = undefined.splitlines().index(rule) + 1, rule.index("TOOL_CALLS_CLSE") + 1
    assert [(e["line"], e["column"], e.get("guessed")) for e in errors] == [(line, column, True)]  # (Lark: no line)
    errors = client.call("POST", "grammar", {"source": '{\n  "fields": [\n', "kind": "json"})["grammar"]["errors"]
    assert [(e["code"], e["line"], e["column"]) for e in errors] == [("grammar.syntax", 3, 1)]
    errors = client.call("POST", "grammar", {"source": '{"fields": {}}', "kind": "json"})["grammar"]["errors"]
    assert errors[0]["code"] == "template.fields" and errors[0]["path"] == "fields"


def test_a_sample_flips_from_differs_to_pass_when_the_grammar_is_fixed(serve, tmp_path):
    folder = tmp_path / "samples"
    folder.mkdir()
    _end_of_turn_sample(folder)
    client = serve(str(tmp_path / "mine.lark"), samples=folder)
    state = client.call("POST", "grammar", {"source": NO_END, "kind": "lark"})
    assert state["grammar"]["errors"] == [] and _status(client, "turn") == "differs"
    result = client.call("GET", "result/0")
    assert result["message"]["content"] == "Hello<|im_end|>" and result["expected_difference"]["path"] == "$.content"
    client.call("POST", "grammar", {"source": "start: broken", "kind": "lark"})
    assert _status(client, "turn") == "unchecked"
    client.call("GET", "result/0", status=409)  # (no_grammar: nothing to parse with)
    client.call("POST", "grammar", {"source": SKELETON, "kind": "lark"})
    assert _status(client, "turn") == "pass"


def test_editing_and_pasting_samples_checks_them_again(serve, tmp_path):
    folder = tmp_path / "samples"
    folder.mkdir()
    _end_of_turn_sample(folder)
    client = serve("qwen3", samples=folder)
    assert client.call("GET", "samples/0")["status"] == "pass"
    edited = client.call("PUT", "samples/0", {"text": "<think>Plan.</think>Bye<|im_end|>"})
    assert edited["status"] == "differs" and edited["edited"] and edited["prefix"] == ""
    pasted = client.call("POST", "samples", {"text": "<tool_call>{bad</tool_call>", "name": "broken"})
    assert pasted["id"] == 1 and pasted["status"] == "error" and pasted["origin"] == "pasted"
    client.call("GET", "samples/7", status=404)
    client.call("PUT", "samples/0", {"tools": {"not": "a list"}}, status=400)
    client.call("DELETE", "samples/0", status=405)


def test_the_result_pane_of_a_sample(serve, tmp_path):
    client = serve("qwen3", samples=_samples(tmp_path, ("one_call",)))
    result = client.call("GET", "result/0?chunk=3")
    assert result["status"] == "pass" and result["message"] == result["expected"] and result["failure"] is None
    assert result["html"].startswith("<!DOCTYPE html>") and 'id="output"' in result["html"]
    assert result["stream"] == {**result["stream"], "chunk": 3, "same": True, "difference": None}
    assert result["events"][0]["type"] == "region_open" and result["event_count"] == len(result["events"])
    calls = [d for d in result["deltas"] if "tool_calls" in d]
    assert calls[0]["tool_calls"][0]["function"]["name"] == "get_weather" and result["finish_reason"] == "tool_calls"
    assert result["exports"]["llguidance"]["ok"] and result["exports"]["xgrammar"]["ok"]
    assert result["lenient"]["errors"] == []
    broken = client.call("POST", "samples", {"text": '<tool_call>{"name": "f", "arguments": {"a": </tool_call>'})
    result = client.call("GET", f"result/{broken['id']}?chunk=1")
    assert result["message"] == {"error": {"type": "ParseError", "code": "parse.json"}}
    assert result["failure"]["code"] == "parse.json" and result["failure"]["field"] == "tool_calls"
    assert [(e["code"], e["span"]) for e in result["lenient"]["errors"]] == [("parse.json", [0, 56])]


def test_exports_say_why_a_grammar_does_not_export(serve, tmp_path):
    client = serve(str(tmp_path / "plain.lark"))
    plain = '//@ region content {"content": "text"}\nstart: content\ncontent: CONTENT_TEXT+\n%declare CONTENT_TEXT\n'
    client.call("POST", "grammar", {"source": plain, "kind": "lark"})
    client.call("POST", "samples", {"text": "hello"})
    exports = client.call("GET", "result/0")["exports"]
    assert exports["tools"] == "a placeholder tool"
    assert exports["llguidance"]["code"] == exports["xgrammar"]["code"] == "constrain.unsupported"


# ---------------------------------------------------------------------------- starting points, registration
def test_starting_points(serve, tmp_path):
    client = serve(str(tmp_path / "new.lark"), model_dir=QWEN3_TEMPLATE)
    state = client.call("GET", "state")  # (a new file starts from the model's chat template)
    assert state["grammar"]["path"] == str(tmp_path / "new.lark") and not state["grammar"]["read_only"]
    assert "qwen3" in state["grammar"]["note"] and state["grammar"]["compiled"]
    state = client.call("POST", "start", {"from": "builtin", "name": "glm45"})
    assert state["grammar"]["read_only"] and state["grammar"]["name"] == "glm45"
    assert client.call("POST", "start", {"from": "skeleton"})["grammar"]["source"] == SKELETON
    client.call("POST", "start", {"from": "builtin", "name": "no-such-grammar"}, status=404)
    (tmp_path / "secret.lark").write_text("start: TOP_SECRET", encoding="utf-8")  # (a built-in's name: no file read)
    refused = client.call("POST", "start", {"from": "builtin", "name": "./secret.lark"}, status=404)
    assert "TOP_SECRET" not in refused["detail"] and refused["type"] == "urn:grammar-parse:workbench:not_found"
    client.call("POST", "start", {"from": "elsewhere"}, status=400)
    other = serve("qwen3")
    other.call("POST", "start", {"from": "chat_template"}, status=409)


def test_registration_snippets_use_the_engines_real_flags(serve, tmp_path):
    client = serve("qwen3")
    found = client.call("GET", "register")
    assert found["parser"] == "gp_qwen3"
    assert "--tool-parser-plugin grammar_parse.integrations.vllm --tool-call-parser gp_qwen3" in found["vllm"]["command"]
    assert found["sglang"]["command"].endswith("--tool-call-parser gp_qwen3 --reasoning-parser gp_qwen3")
    client.call("POST", "grammar", {"source": client.call("GET", "state")["grammar"]["source"] + "\n// mine"})
    edited = client.call("GET", "register")  # (a built-in edited is no longer the one the engines ship)
    assert "plugin" in edited["vllm"] and not edited["saved"] and "/path/to/qwen3.lark" in edited["vllm"]["plugin"]
    assert "replaces the built-in" in edited["note"]
    client.call("POST", "save", {"path": "house.lark"})
    found = client.call("GET", "register")
    assert found["parser"] == "gp_house" and found["saved"]
    assert f"register('house', {str(tmp_path / 'house.lark')!r})" in found["vllm"]["plugin"]
    assert "from grammar_parse.integrations.vllm import register" in found["vllm"]["plugin"]
    assert "install_grammar_parse()" in found["sglang"]["plugin"] and "sglang.srt.plugins" in found["sglang"]["entry_point"]


# ---------------------------------------------------------------------------- writing files
def test_save_writes_the_grammar_atomically_inside_the_working_directory(serve, tmp_path):
    client = serve("qwen3")
    client.call("POST", "save", {}, status=409)  # (a built-in is read-only: save as)
    saved = client.call("POST", "save", {"path": "grammars/mine.lark"})
    target = tmp_path / "grammars" / "mine.lark"
    assert saved["path"] == str(target) and target.read_text(encoding="utf-8").startswith("// Qwen")
    client.call("POST", "grammar", {"source": SKELETON, "kind": "lark"})
    client.call("POST", "save", {})  # (now the grammar's own file)
    assert target.read_text(encoding="utf-8") == SKELETON
    assert [p.name for p in target.parent.iterdir()] == ["mine.lark"]  # (no temporary file left)
    (tmp_path.parent / "outside").mkdir(exist_ok=True)
    for path in ("../outside/x.lark", str(tmp_path.parent / "outside" / "x.lark"), "mine.json", "grammars", "",
                 "a\x00b.lark"):
        assert client.call("POST", "save", {"path": path}, status=400)["code"] in ("path_refused", "invalid_request")
    (tmp_path / "link").symlink_to(tmp_path.parent / "outside")
    assert client.call("POST", "save", {"path": "link/x.lark"}, status=400)["code"] == "path_refused"
    assert not (tmp_path.parent / "outside" / "x.lark").exists()


def test_golden_write_makes_the_sample_pass(serve, tmp_path):
    folder = tmp_path / "samples"
    folder.mkdir()
    (folder / "new_case.txt").write_text("<think>Plan.</think>Hello<|im_end|>", encoding="utf-8")
    client = serve("qwen3", samples=folder)
    assert _status(client, "new_case") == "no_expected"
    done = client.call("POST", "golden/0", {})
    assert done["written"] == [str(folder / "new_case.json")] and done["status"] == "pass"
    written = (folder / "new_case.json").read_text(encoding="utf-8")
    assert json.loads(written) == {"role": "assistant", "reasoning_content": "Plan.", "content": "Hello"}
    assert written.endswith("}\n") and "\n  " in written  # (as pytest --update-golden writes goldens)
    pasted = client.call("POST", "samples", {"text": "Hi<|im_end|>", "prefix": "<|im_start|>assistant\n",
                                             "name": "../../evil"})
    client.call("POST", f"golden/{pasted['id']}", {"folder": "../elsewhere"}, status=400)
    done = client.call("POST", f"golden/{pasted['id']}", {"folder": "more"})
    assert sorted(Path(p).name for p in done["written"]) == ["evil.json", "evil.prefix.txt", "evil.txt"]
    assert all(Path(p).parent == tmp_path / "more" for p in done["written"])


def test_a_pass_needs_the_same_types_as_the_golden(tmp_path):
    """1 is not 1.0 and True is not 1 for a pass, as the golden tests compare (a golden that says 1.0 fails
    them against a parse that gives 1)."""
    folder = tmp_path / "samples"
    folder.mkdir()
    call = '<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call><|im_end|>'
    expected = {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f",
                                                                                      "arguments": {"a": 1}}}]}
    for name, value in (("same", 1), ("float", 1.0), ("bool", True)):
        (folder / f"{name}.txt").write_text(call, encoding="utf-8")
        expected["tool_calls"][0]["function"]["arguments"]["a"] = value
        (folder / f"{name}.json").write_text(json.dumps(expected), encoding="utf-8")
    bench = open_workbench("qwen3", samples=folder, root=tmp_path)
    assert {s["name"]: s["status"] for s in bench.state()["samples"]["items"]} == \
        {"bool": "differs", "float": "differs", "same": "pass"}
    assert bench.result(0, 8)["expected_difference"] == {"path": "$.tool_calls[0].function.arguments.a",
                                                          "expected": True, "parsed": 1}


def test_a_golden_written_elsewhere_or_after_an_edit_keeps_its_files_in_agreement(tmp_path):
    """A folder sample's golden written to another folder takes its output and prompt along; a prompt the
    sample no longer has is removed, so the files of one sample always parse as its .json says."""
    folder = tmp_path / "samples"
    folder.mkdir()
    (folder / "case.txt").write_text("Hi<|im_end|>", encoding="utf-8")
    (folder / "case.prefix.txt").write_text("<|im_start|>assistant\n<think>", encoding="utf-8")
    bench = open_workbench("qwen3", samples=folder, root=tmp_path)
    done = bench.golden(0, {"folder": "more"})
    assert sorted(Path(p).name for p in done["written"]) == ["case.json", "case.prefix.txt", "case.txt"]
    bench.put_sample(0, {"prefix": ""})
    done = bench.golden(0, {})
    assert not (folder / "case.prefix.txt").exists() and done["status"] == "pass"
    assert json.loads((folder / "case.json").read_text(encoding="utf-8")) == {"role": "assistant", "content": "Hi"}


def test_a_model_given_as_the_grammar_starts_from_what_load_grammar_reads(tmp_path):
    """A chat template or a model folder named as the grammar is a model to start from (not Lark text to be
    saved over the template); a folder whose tokenizer_config.json carries a response_template starts from it."""
    bench = open_workbench(str(QWEN3_TEMPLATE), root=tmp_path)
    grammar = bench.state()["grammar"]
    assert grammar["compiled"] and grammar["path"] is None and grammar["name"] == "qwen3_edit"
    model = tmp_path / "model"
    model.mkdir()
    shutil.copy(QWEN3_TEMPLATE, model / "chat_template.jinja")
    assert open_workbench(model, root=tmp_path).state()["grammar"]["name"] == "qwen3_edit"
    template = {"start_anchor": "<|im_start|>assistant\n", "fields": {"content": {}}}
    (model / "tokenizer_config.json").write_text(json.dumps({"response_template": template}), encoding="utf-8")
    grammar = open_workbench(model, root=tmp_path).state()["grammar"]
    assert grammar["kind"] == "json" and grammar["compiled"] and json.loads(grammar["source"]) == \
        {"response_template": template}


def test_golden_write_needs_a_folder_for_pasted_samples(serve):
    client = serve("qwen3")
    client.call("POST", "samples", {"text": "hello"})
    assert client.call("POST", "golden/0", {}, status=409)["code"] == "no_folder"


# ---------------------------------------------------------------------------- guards
def test_foreign_host_origin_and_missing_token_are_refused(serve):
    client = serve("qwen3")
    port = client.base.rsplit(":", 1)[1]
    for headers in ({"Host": "evil.example"}, {"Host": f"evil.example:{port}"}, {"Host": "127.0.0.1:1"},
                    {"Origin": "http://evil.example"}, {"Origin": "null"}, {"Sec-Fetch-Site": "cross-site"},
                    {"X-Workbench-Token": "wrong"}, {"X-Workbench-Token": ""}):
        assert client.call("GET", "state", status=403, **headers)["code"] == "forbidden", headers
    client.call("GET", "state", Host=f"localhost:{port}", Origin=f"http://localhost:{port}")
    page = client.http.get(f"{client.base}/")
    assert page.status_code == 403
    page = client.http.get(client.app.url(client.base))
    assert page.status_code == 200 and f'content="{TOKEN}"' in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert "http" not in page.text.replace("http-equiv", "")  # (nothing fetched from elsewhere)
    script = client.http.get(f"{client.base}/static/workbench.js")
    assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript")
    assert client.http.get(f"{client.base}/static/../_api.py").status_code == 404
    assert client.http.get(f"{client.base}/elsewhere").status_code == 404


def test_bodies_and_sizes_are_bounded(serve, tmp_path):
    client = serve("qwen3")
    big = b'{"source": "' + b"x" * (5 * 1024 * 1024) + b'"}'
    assert client.call("POST", "grammar", big, status=413)["code"] == "request_too_large"
    long = "x" * (WorkbenchLimits().max_source_chars + 1)
    assert client.call("POST", "grammar", {"source": long}, status=400)["code"] == "invalid_request"
    sample = "x" * (WorkbenchLimits().samples.max_chars + 1)
    client.call("POST", "samples", {"text": sample}, status=400)
    client.call("POST", "grammar", b"not json", status=400)
    client.call("POST", "grammar", b"[1, 2]", status=400)
    client.call("POST", "grammar", b"[" * 100 + b"]" * 100, status=400)  # (nesting past the limit)
    client.call("POST", "grammar", {"source": "x"}, status=415, **{"Content-Type": "text/plain"})
    client.call("GET", "state?offset=-1", status=400)


def test_a_catastrophic_regex_is_refused_with_the_librarys_own_error(serve, tmp_path):
    client = serve(str(tmp_path / "mine.lark"))
    hostile = SKELETON.replace('TOOL_CALLS_OPEN.1: "<tool_call>"', "TOOL_CALLS_OPEN.1: /<tool_call(a+)+b>/")
    state = client.call("POST", "grammar", {"source": hostile, "kind": "lark"})
    errors = state["grammar"]["errors"]
    assert [e["code"] for e in errors] == ["grammar.regex_backtracking"] and not state["grammar"]["compiled"]
    assert errors[0]["hint"]


def test_parses_are_bounded_in_time(serve, tmp_path):
    folder = tmp_path / "samples"
    folder.mkdir()
    for i in range(3):
        (folder / f"s{i}.txt").write_text("<think>a</think>b", encoding="utf-8")
    client = serve("qwen3", samples=folder, limits=WorkbenchLimits(check_seconds=0))
    assert client.call("GET", "state")["samples"]["counts"]["unchecked"] == 3  # (checking stops at its deadline)
    client = serve("qwen3", limits=WorkbenchLimits(parse_seconds=0.05))
    client.call("POST", "samples", {"text": "<think>" + "word " * 100_000}, status=200)
    assert client.call("GET", "result/0?chunk=1", status=503)["code"] == "busy"
    for _ in range(200):  # (the parse past the bound finishes in its thread; then the workbench answers again)
        if client.http.get(f"{client.base}/api/samples/0", headers={"X-Workbench-Token": TOKEN}).status_code == 200:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the workbench stayed busy")


def test_hostile_samples_stay_within_the_limits(serve, tmp_path):
    folder = tmp_path / "samples"
    folder.mkdir()
    (folder / "flood.txt").write_text("<tool_call>" * 20_000, encoding="utf-8")
    (folder / "huge.txt").write_text("x" * 1_000_001, encoding="utf-8")
    (folder / "bytes.txt").write_bytes(b"\xff\xfe not utf-8")
    (folder / "bytes.tools.json").write_text("[" * 10_000, encoding="utf-8")
    started = time.monotonic()
    client = serve("qwen3", samples=folder)
    items = {s["name"]: s for s in client.call("GET", "state")["samples"]["items"]}
    assert items["huge"]["status"] == "error" and "not read" in items["huge"]["problem"]
    assert items["bytes"]["status"] == "error" and items["flood"]["status"] in ("no_expected", "error")
    client.call("GET", f"result/{items['flood']['id']}?chunk=1")
    assert time.monotonic() - started < 5


def test_a_jsonl_log_is_paged(serve, tmp_path):
    log = tmp_path / "log.jsonl"
    rows = [json.dumps({"rid": i, "out": {"text": f"<think>r{i}</think>answer {i}"}}) for i in range(250)]
    rows[7] = "{not json"
    log.write_text("\n".join(rows[:100]) + "\n\n" + "\n".join(rows[100:]) + "\n", encoding="utf-8")
    from grammar_parse.batch import Columns

    client = serve("qwen3", samples=log, columns=Columns(text="out.text", id="rid"))
    state = client.call("GET", "state?offset=200&limit=30")
    page = state["samples"]
    assert page["total"] == 250 and [s["id"] for s in page["items"]] == list(range(200, 230))
    assert page["items"][0]["name"] == "row 200 (id 200)" and page["counts"]["no_expected"] == 249
    errors = client.call("GET", "state?status=error")["samples"]
    assert [(s["name"], s["status"]) for s in errors["items"]] == [("row 7", "error")]
    assert "line 8 is not JSON" in errors["items"][0]["problem"]
    assert client.call("GET", "state?limit=100000")["samples"]["limit"] == WorkbenchLimits().max_page
    assert client.call("GET", "samples/201")["text"] == "<think>r201</think>answer 201"


def test_a_log_past_the_sample_limit_is_cut(serve, tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps({"completion": f"a{i}"}) + "\n" for i in range(30)) +
                   json.dumps({"completion": "x" * 10_000}) + "\n", encoding="utf-8")
    client = serve("qwen3", samples=log, limits=WorkbenchLimits(samples=SampleLimits(max_chars=1000, max_samples=31)))
    state = client.call("GET", "state?offset=30")["samples"]
    assert state["items"][0]["problem"].startswith("line 31 is longer than the limit")
    client = serve("qwen3", samples=log, limits=WorkbenchLimits(samples=SampleLimits(max_samples=10)))
    assert client.call("GET", "state")["samples"]["total"] == 10 and client.call("GET", "state")["samples"]["truncated"]


# ---------------------------------------------------------------------------- the command
def test_the_command_prints_the_url_and_serves_the_page(tmp_path):
    assert build_argparser().parse_args(["workbench", "mine.lark", "--samples", "d", "--port", "0"]).command == "workbench"
    command = [sys.executable, "-m", "grammar_parse", "workbench", str(tmp_path / "mine.lark"), "--samples", str(GOLDEN)]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=tmp_path) as process:
        try:
            assert process.stdout is not None
            url = process.stdout.readline().split(" at ", 1)[1].split(" ", 1)[0]
            assert url.startswith("http://127.0.0.1:") and "/?token=" in url
            assert "grammar workbench" in httpx.get(url, timeout=10).text
            token = url.split("token=", 1)[1]
            state = httpx.get(url.split("/?")[0] + "/api/state", headers={"X-Workbench-Token": token}, timeout=10).json()
            outputs = [p for p in GOLDEN.glob("*.txt") if not p.name.endswith(".prefix.txt")]
            assert state["samples"]["total"] == len(outputs) and state["grammar"]["path"] == str(tmp_path / "mine.lark")
        finally:
            process.terminate()


def test_the_command_refuses_what_it_cannot_read(tmp_path, capsys):
    from grammar_parse._cli import main

    assert main(["workbench", "qwen3", "--samples", str(tmp_path / "missing")]) == 2
    assert "[usage.file]" in capsys.readouterr().err
    assert main(["workbench", "no-such-grammar"]) == 2
    assert "[grammar.not_found]" in capsys.readouterr().err


def test_a_bug_is_a_problem_document_without_a_traceback(serve, caplog):
    client = serve("qwen3")

    def broken(*args: Any) -> Any:
        raise ZeroDivisionError("a bug")

    client.app.workbench.state = broken  # type: ignore[method-assign]
    document = client.call("GET", "state", status=500)
    assert document["code"] == "internal_error" and "a bug" not in document["detail"]
    assert "ZeroDivisionError" in caplog.text  # (the log has it in full)
