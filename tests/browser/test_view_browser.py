"""The picture of a parse (grammar_parse.view) as a browser shows it: for golden outputs of differently shaped
formats, and broken ones, the page loads offline with nothing fetched and no console errors, every
highlighted region's rendered text is the text the parser gave that region, the parse errors' codes are
visible, and a screenshot is taken (look at it: pytest's tmp_path keeps it). A long output: the summary's
links, the folds and the pre-filled part, as a reader meets them.

Opt-in (``--browser``): it needs Playwright for Python and a Chromium from the system's packages (Playwright
is never asked to download a browser of its own).
"""

from __future__ import annotations

import shutil
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from goldens import Golden, goldens
from grammar_parse import ResponseParser
from grammar_parse.view import to_html

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


def _golden(grammar: str, name: str) -> Golden:
    return next(g for g in goldens(grammar) if g.name == name)


#: (grammar, golden sample, what the page must show besides text and delimiters): reasoning and calls, JSON
#: calls, tagged (XML) calls with typed arguments, a prompt replayed before the output, pythonic calls with
#: text between blocks, harmony channels, and broken outputs (a parse error, discarded text) or cut-off ones.
GOLDEN_CASES = [
    ("qwen3", "parallel_calls", ()),
    ("mistral", "parallel_calls", ()),
    ("glm45", "parallel_calls", ()),
    ("qwen3_coder", "one_call", ()),
    ("llama4_pythonic", "two_blocks", ("discarded",)),
    ("gpt_oss", "text_around_calls", ()),
    ("deepseek_v41", "json_body_broken", ("error", "discarded")),
    ("qwen3", "truncated", ("error",)),
]
#: Whitespace a browser would fold or read otherwise (a leading newline, \r\n, a tab), two calls (one broken)
#: and text after the end of the turn.
MADE_UP = ('\n<think>a\tb</think>\r\nHi <tool_call>{"name": "f", "arguments": {}}</tool_call>'
           ' x<tool_call>{bad</tool_call><|im_end|>junk')
CASES = [(_golden(g, n), shows) for g, n, shows in GOLDEN_CASES]
CASES.append((Golden("qwen3", Path("made_up.txt"), MADE_UP, "", None, None), ("error", "discarded")))


#: The output's spans as the page shows them: kind, field, offsets, and the text as rendered.
_SHOWN = """els => els.map(e => ({kind: e.dataset.kind, field: e.dataset.field ?? null,
                              start: Number(e.dataset.start), end: Number(e.dataset.end), text: e.innerText}))"""


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("the browser test needs Playwright for Python: pip install '.[test,browser]'")
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.fail("the browser test needs Chromium from the system's packages (apt-get install chromium)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


def _regions(golden: Golden) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The output's spans and the parse errors with a span, from the parser itself (not from the page)."""
    parser = ResponseParser(golden.grammar, golden.prefix, tools=golden.tools, strict=False, trace=True)
    parser.feed(golden.text)
    message, _ = parser.finalize()
    spans = []
    for span in parser.spans:  # (a replayed prompt's spans reach back before the output: cut at 0)
        if span["end"] > 0:
            start = max(span["start"], 0)
            spans.append({"kind": span["kind"], "field": span.get("field"), "start": start, "end": span["end"],
                          "text": golden.text[start:span["end"]]})
    errors = [e for e in message.get("parse_errors") or [] if e.get("span")]
    return spans, errors


def _png_size(data: bytes) -> tuple[int, int]:
    """The width and height of a PNG, after checking it is one and that its pixels are not all alike."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    pixels, at = b"", 8
    while at < len(data):  # the IDAT chunks, concatenated, are one zlib stream
        length, kind = struct.unpack(">I4s", data[at:at + 8])
        if kind == b"IDAT":
            pixels += data[at + 8:at + 8 + length]
        at += 12 + length
    assert len(set(zlib.decompress(pixels))) > 16, "the screenshot is blank"
    return width, height


def opened(browser: Any, url: str, width: int = 1280, height: int = 800) -> tuple[Any, list[str], list[str]]:
    """The page at ``url`` loaded in a new tab, with the URLs it requests and the errors it logs (the tests
    check both)."""
    page = browser.new_page(viewport={"width": width, "height": height})
    requested: list[str] = []
    console: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    page.on("console", lambda message: console.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: console.append(str(error)))
    page.goto(url, wait_until="load")
    return page, requested, console


@pytest.mark.parametrize(("golden", "shows"), CASES, ids=[f"{g.grammar}/{g.name}" for g, _ in CASES])
def test_the_page_in_a_browser(browser: Any, tmp_path: Path, golden: Golden, shows: tuple[str, ...]) -> None:
    spans, errors = _regions(golden)
    kinds = {s["kind"] for s in spans} | ({"error"} if errors else set())
    assert kinds >= {"text", "delimiter", *shows}  # (else the checks below would check less than they say)
    page_file = tmp_path / "parse.html"
    page_file.write_text(to_html(golden.text, golden.grammar, prefix=golden.prefix, tools=golden.tools),
                         encoding="utf-8")
    page, requested, console = opened(browser, page_file.as_uri())

    shown = page.eval_on_selector_all('#output [data-kind]:not([data-kind="error"])', _SHOWN)
    assert shown == spans
    assert "".join(s["text"] for s in shown) == golden.text
    codes = page.locator('#output [data-kind="error"]')
    assert codes.count() == len(errors)
    for i, error in enumerate(errors):
        assert codes.nth(i).is_visible()
        assert codes.nth(i).inner_text() == error["code"]
        assert [int(codes.nth(i).get_attribute(k)) for k in ("data-start", "data-end")] == error["span"]
    # (every region that holds text takes room on the page: none is hidden)
    assert page.eval_on_selector_all("#output [data-kind]", "els => els.filter(e => e.textContent && "
                                     "!e.getClientRects().length).length") == 0
    assert ('"parse_errors"' in page.inner_text("#message")) == bool(errors)

    screenshot = tmp_path / f"{golden.grammar}-{golden.name}.png"
    page.screenshot(path=str(screenshot), full_page=True)
    page.close()
    assert [url for url in requested if not url.startswith("file:")] == []
    assert console == []
    width, height = _png_size(screenshot.read_bytes())
    assert width == 1280 and height >= 200


#: A long, broken output after a pre-filled <think>: 56 KB of reasoning, long content around a broken call,
#: a call to a tool the request does not offer, and text after the end of the turn.
LONG_PREFIX = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n"
LONG = ("Let me think. " * 4000 + "</think>" + "An answer line.\n" * 300 + "<tool_call>{bad</tool_call>"
        + "More answer.\n" * 300 + '<tool_call>{"name": "nope", "arguments": {}}</tool_call><|im_end|>' + "junk " * 50)
LONG_TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]


def test_a_long_output_in_a_browser(browser: Any, tmp_path: Path) -> None:
    """The summary is at the top and each of its links brings its problem's span into view; folded regions
    show their head and tail and, opened, the whole output; the pre-filled part shows above the output,
    labelled; nothing is fetched and nothing is logged."""
    page_file = tmp_path / "long.html"
    page_file.write_text(to_html(LONG, "qwen3", prefix=LONG_PREFIX, tools=LONG_TOOLS), encoding="utf-8")
    page, requested, console = opened(browser, page_file.as_uri())

    summary, prefill, output = (page.locator(s).bounding_box() for s in ("#summary", "#prefill", "#output"))
    assert summary["y"] < prefill["y"] < output["y"] < 800  # (all on the first screen)
    assert "not written by the model" in page.inner_text(".prefill h3")
    assert page.inner_text("#prefill") == "<think>\n"
    # (folded: what shows is far shorter than the output, and opening every fold shows all of it)
    assert len(page.inner_text("#output")) < len(LONG) // 5
    folds = page.locator("#output details.fold")
    assert folds.count() >= 2 and not folds.first.evaluate("d => d.open")
    links = page.locator("#summary a")
    assert [links.nth(i).get_attribute("data-kind") for i in range(links.count())] == ["error", "call", "discarded"]
    for i in range(links.count()):
        links.nth(i).click()
        target = links.nth(i).get_attribute("href")
        following = page.locator(f"{target} + span").first
        assert following.is_visible() and following.evaluate(
            "e => { const r = e.getBoundingClientRect(); return r.bottom > 0 && r.top < innerHeight; }")
    page.evaluate("() => document.querySelectorAll('#output details').forEach(d => d.open = true)")
    shown = page.eval_on_selector_all('#output [data-kind]:not([data-kind="error"])', _SHOWN)
    assert "".join(s["text"] for s in shown) == LONG
    page.screenshot(path=str(tmp_path / "long.png"), full_page=False)
    page.close()
    assert [url for url in requested if not url.startswith("file:")] == []
    assert console == []
