"""The grammar workbench (grammar_parse.workbench) as an author uses it in a browser: the page loads from the
local server with nothing fetched elsewhere and no console errors; a broken grammar shows its error at its
line; editing the grammar makes a sample flip from differs to pass; the result pane shows the view's page,
the message and one-shot vs streamed; saving writes the file. With ``WORKBENCH_SCREENSHOT=path`` set, the
page's screenshot is written there (the README's docs/images/workbench.png), else into pytest's tmp_path.

Opt-in (``--browser``), as tests/browser/test_view_browser.py: Playwright for Python driving the system's
Chromium (Playwright is never asked to download a browser of its own).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from grammar_parse.workbench import WorkbenchApp, open_workbench
from grammar_parse.workbench._source import SKELETON
import test_view_browser
from test_lmsp import Server
from test_workbench import NO_END  # (the skeleton less its end of turn: "turn" differs)

browser = test_view_browser.browser  # (the fixture: the system's Chromium driven offline, as the view's test)
opened = test_view_browser.opened

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "qwen3"
#: A chat template no built-in grammar reads back: the workbench derives one from it.
REKA = Path(__file__).resolve().parents[1] / "data" / "chat_templates" / "Reka-Edge.jinja"
REKA_CALL = 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><sep>'


@contextlib.contextmanager
def _served(bench: Any) -> Iterator[str]:
    """The workbench on 127.0.0.1 and a free port: the page's URL, token included."""
    app = WorkbenchApp(bench)
    with Server(app) as base:
        yield app.url(base)


@pytest.fixture()
def workbench(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A workbench over mine.lark (the skeleton less its end of turn) and qwen3's golden samples plus one,
    "turn", that needs the end of turn; yields the page's URL and the grammar file."""
    samples = tmp_path / "samples"
    shutil.copytree(GOLDEN, samples)
    (samples / "turn.txt").write_text("<think>Plan.</think>Hello<|im_end|>", encoding="utf-8")
    (samples / "turn.json").write_text(json.dumps({"role": "assistant", "reasoning_content": "Plan.",
                                                   "content": "Hello"}), encoding="utf-8")
    grammar = tmp_path / "mine.lark"
    grammar.write_text(NO_END, encoding="utf-8")
    with _served(open_workbench(grammar, samples=samples, root=tmp_path)) as url:
        yield url, grammar


def _only_local(requested: list[str], url: str) -> list[str]:
    base = url.split("/?")[0]
    return [u for u in requested if not (u.startswith(base + "/") or u.startswith("about:"))]


def _expect() -> Any:
    # (the page's policy forbids eval, so waits are Playwright's assertions, not wait_for_function)
    from playwright.sync_api import expect

    return expect


def _status(page: Any, name: str) -> str:
    return str(page.locator("#samples li", has_text=name).first.get_attribute("data-status"))


def test_edit_a_grammar_until_a_sample_passes_then_save(browser: Any, workbench: tuple[str, Path], tmp_path: Path
                                                         ) -> None:
    url, grammar_file = workbench
    expect = _expect()
    page, requested, console = opened(browser, url, 1600, 900)
    page.wait_for_selector('#samples li[data-status="differs"]')
    assert _status(page, "turn") == "differs"
    assert page.input_value("#source") == NO_END
    assert page.inner_text("#compile-status").startswith("compiles")

    # (a broken grammar: its error shows at its line, with its code; the samples are unchecked)
    broken = NO_END.replace('TOOL_CALLS_CLOSE: "</tool_call>"', 'TOOL_CALLS_CLOSE: "</tool_call>')
    page.fill("#source", broken)
    page.wait_for_selector("#errors li")
    line = broken.splitlines().index('TOOL_CALLS_CLOSE: "</tool_call>') + 1
    assert page.get_attribute("#errors li", "data-line") == str(line)
    assert "grammar.syntax" in page.inner_text("#errors li")
    assert page.locator("#gutter .err").inner_text().strip() == str(line)
    page.wait_for_selector('#samples li[data-status="unchecked"]')

    # (the fix: the end of turn is a delimiter; "turn" passes)
    page.fill("#source", SKELETON)
    page.wait_for_selector('#samples li:has-text("turn")[data-status="pass"]')
    assert page.locator("#errors li").count() == 0

    # (the result pane of the sample: the view's page in its frame, the message, one-shot vs streamed)
    page.locator("#samples li", has_text="turn").click()
    expect(page.locator("#result-name")).to_have_text("turn")
    frame = page.frame_locator("#view")
    assert frame.locator("#output").inner_text() == "<think>Plan.</think>Hello<|im_end|>"
    page.click('#tabs button[data-tab="message"]')
    assert json.loads(page.inner_text("#message"))["content"] == "Hello"
    assert "equals the expected message" in page.inner_text("#expected-diff")
    page.click('#tabs button[data-tab="stream"]')
    page.fill("#chunk", "3")
    expect(page.locator("#stream-same")).to_contain_text("chunks of 3")
    assert "the same message as one-shot" in page.inner_text("#stream-same")

    page.click("#save")
    expect(page.locator("#status")).to_contain_text("saved")
    assert grammar_file.read_text(encoding="utf-8") == SKELETON

    page.locator("#samples li", has_text="one_call").click()
    expect(page.locator("#result-name")).to_have_text("one_call")
    page.click('#tabs button[data-tab="view"]')
    frame.locator("#output").wait_for()
    shot = Path(os.environ.get("WORKBENCH_SCREENSHOT") or tmp_path / "workbench.png")
    shot.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shot))
    page.close()
    assert shot.stat().st_size > 10_000
    assert _only_local(requested, url) == []
    assert console == []


def test_from_a_chat_template_to_golden_files_and_the_engines(browser: Any, tmp_path: Path) -> None:
    """A model whose chat template no built-in reads: the grammar is derived on the page, a sample with an
    expected message passes, another's parse is written as its golden file, the grammar is saved, and the
    registration snippet names it."""
    samples = tmp_path / "samples"
    samples.mkdir()
    (samples / "call.txt").write_text(REKA_CALL, encoding="utf-8")
    (samples / "plain.txt").write_text("Hello there.<sep>", encoding="utf-8")
    (samples / "plain.json").write_text('{"role": "assistant", "content": "Hello there."}', encoding="utf-8")
    expect = _expect()
    grammar = tmp_path / "reka.lark"
    with _served(open_workbench(grammar, samples=samples, model_dir=REKA, root=tmp_path)) as url:
        page, requested, console = opened(browser, url, 1600, 900)
        page.wait_for_selector("#samples li[data-status]")
        assert "no built-in grammar reads" in page.inner_text("#note")
        assert page.inner_text("#compile-status").startswith("compiles")
        assert "start_anchor: 'assistant:'" in page.input_value("#source")
        assert (_status(page, "plain"), _status(page, "call")) == ("pass", "no_expected")

        page.locator("#samples li", has_text="call").click()
        expect(page.locator("#result-name")).to_have_text("call")
        page.click('#tabs button[data-tab="message"]')
        assert json.loads(page.inner_text("#message"))["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"}
        page.click("#golden")
        expect(page.locator('#samples li:has-text("call")')).to_have_attribute("data-status", "pass")
        assert json.loads((samples / "call.json").read_text(encoding="utf-8"))["content"] == "Let me check."

        page.click("#save")
        expect(page.locator("#status")).to_contain_text("saved")
        assert grammar.read_text(encoding="utf-8") == page.input_value("#source")
        page.click("#register")
        expect(page.locator("#register-dialog")).to_be_visible()
        snippets = page.inner_text("#register-body")
        assert "gp_reka" in snippets and f"register('reka', {str(grammar)!r})" in snippets
        page.close()
        assert _only_local(requested, url) == []
        assert console == []
