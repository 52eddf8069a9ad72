"""The picture of a parse (grammar_parse.view): for every golden output, the page's highlighted spans are
the output character for character, each field's spans hold exactly the text the parser gave that field,
errors are shown with their codes, and the page needs nothing from outside itself."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest

import grammar_parse as gp
from goldens import all_goldens
from grammar_parse.view import to_html


class Spans(HTMLParser):
    """The text of each data-kind span of the output, with its attributes."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.spans: list[tuple[dict[str, str], str]] = []
        self.depth = 0
        self.inside = False
        self.external = []

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        for key in ("src", "href"):
            if key in attributes:
                self.external.append(attributes[key])
        if tag == "link" or (tag == "script" and "src" in attributes):
            self.external.append(tag)
        if tag == "pre" and attributes.get("id") == "output":
            self.inside = True
        elif self.inside and tag == "span":
            self.spans.append((attributes, ""))

    def handle_endtag(self, tag):
        if tag == "pre":
            self.inside = False

    def handle_data(self, data):
        if self.inside and self.spans:
            attributes, text = self.spans[-1]
            self.spans[-1] = (attributes, text + data)


GOLDENS = [g for g in all_goldens() if g.grammar in gp.list_grammars() and "error" not in g.expected]


@pytest.mark.parametrize("golden", GOLDENS[::7], ids=lambda g: f"{g.grammar}/{g.name}")  # (one in 7: ~60 pages)
def test_the_page_shows_every_character_in_its_field(golden):
    page = to_html(golden.text, golden.grammar, prefix=golden.prefix, tools=golden.tools)
    found = Spans()
    found.feed(page)
    assert found.external == []
    shown = [(a, t) for a, t in found.spans if a.get("data-kind") != "error"]
    assert "".join(t for _, t in shown) == golden.text
    parser = gp.ResponseParser(golden.grammar, golden.prefix, tools=golden.tools, strict=False, trace=True)
    parser.feed(golden.text)
    parser.finalize()
    by_field: dict[str, str] = {}
    for span in parser.spans:  # (a replayed prompt's spans have offsets before 0: not the output's)
        if span["kind"] == "text" and span["end"] > 0:
            piece = golden.text[max(span["start"], 0):span["end"]]
            by_field[span["field"]] = by_field.get(span["field"], "") + piece
    on_page: dict[str, str] = {}
    for attributes, text in shown:
        if attributes.get("data-kind") == "text":
            on_page[attributes["data-field"]] = on_page.get(attributes["data-field"], "") + text
    assert on_page == by_field


def test_errors_discarded_text_and_calls_are_marked():
    text = ('<think>hm</think>Hi <tool_call>{"name": "f", "arguments": {}}</tool_call>'
            '<tool_call>{"name": "g", "arguments": {}}</tool_call> x<tool_call>{bad</tool_call><|im_end|>junk')
    found = Spans()
    found.feed(to_html(text, "qwen3", title="A <parse>"))
    kinds = [(a.get("data-kind"), t) for a, t in found.spans]
    assert ("discarded", "junk") in kinds and ("error", "parse.json") in kinds
    calls = {(a.get("data-call"), t) for a, t in found.spans if a.get("data-call") is not None}
    assert ("0", '{"name": "f", "arguments": {}}') in calls and ("1", '{"name": "g", "arguments": {}}') in calls
    assert ("0", "<tool_call>") in calls  # (a call's delimiters take its colour)
    page = to_html(text, "qwen3", title="A <parse>")
    assert "<title>A &lt;parse&gt;</title>" in page and "&quot;name&quot;" in page


def test_the_view_command_writes_the_page(tmp_path):
    from grammar_parse.cli import main

    output = tmp_path / "out.txt"
    output.write_text("<think>a</think>b", encoding="utf-8")
    assert main(["view", str(output), "-g", "qwen3", "-o", str(tmp_path / "parse.html")]) == 0
    found = Spans()
    found.feed((tmp_path / "parse.html").read_text(encoding="utf-8"))
    assert [(a["data-kind"], t) for a, t in found.spans] == [
        ("delimiter", "<think>"), ("text", "a"), ("delimiter", "</think>"), ("text", "b")]
