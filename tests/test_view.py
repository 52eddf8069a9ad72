"""The picture of a parse (grammar_parse.view): for every golden output, the page's highlighted spans are
the output character for character, each field's spans hold exactly the text the parser gave that field,
errors are shown with their codes, and the page needs nothing from outside itself."""

from __future__ import annotations

import html
import json
import re
from html.parser import HTMLParser

import pytest

import grammar_parse as gp
from goldens import all_goldens, goldens
from grammar_parse.batch import Columns, parse_many, result_row
from grammar_parse.view import row_html, to_html
from test_cli import assert_one_error_line


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


#: (grammar, golden sample, the text of each tool-call region as the page colours it, the legend's name for
#: them): a call's arguments' markup is inside it, markup between calls (a separator, a section) is not, and
#: a region that holds several calls (a JSON list) is named a region, not a call.
CALL_REGIONS = [
    ("glm45", "parallel_calls", ["<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
                                 "</tool_call>", "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Oslo"
                                 "</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>"],
     "tool call"),
    ("qwen3_coder", "one_call", ["<tool_call>\n<function=list_directory>\n<parameter=path>\nsrc\n</parameter>\n"
                                 "</function>\n</tool_call>"], "tool call"),
    ("llama3_json", "parallel_calls", ['{"name": "get_weather", "parameters": {"city": "Paris"}}',
                                       '{"name": "get_weather", "parameters": {"city": "Oslo", "days": 3}}'],
     "tool call"),
    ("kimi_k2", "parallel_calls", ['<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>'
                                   '{"city": "Paris"}<|tool_call_end|>', '<|tool_call_begin|>functions.get_weather:1'
                                   '<|tool_call_argument_begin|>{"city": "Oslo", "days": 3}<|tool_call_end|>'],
     "tool call"),
    ("mistral", "parallel_calls", ['[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": '
                                   '"Xk3pQ9zLm"}, {"name": "get_weather", "arguments": {"city": "Oslo", "days": 3}, '
                                   '"id": "bT7wR2nVc"}]'], "tool-call region"),
]


@pytest.mark.parametrize(("grammar", "name", "regions", "label"), CALL_REGIONS, ids=[c[0] for c in CALL_REGIONS])
def test_each_call_region_is_coloured_as_one(grammar, name, regions, label):
    golden = next(g for g in goldens(grammar) if g.name == name)
    page = to_html(golden.text, grammar, prefix=golden.prefix, tools=golden.tools)
    found = Spans()
    found.feed(page)
    shown: dict[str, str] = {}
    for attributes, text in found.spans:
        if attributes.get("data-call") is not None:
            shown[attributes["data-call"]] = shown.get(attributes["data-call"], "") + text
    assert list(shown.values()) == regions
    assert re.findall(r">(tool[- ]call[a-z ]*) (\d+)<", page) == [(label, str(i + 1)) for i in range(len(regions))]


def test_the_view_command_writes_the_page(tmp_path):
    from grammar_parse.cli import main

    output = tmp_path / "out.txt"
    output.write_text("<think>a</think>b", encoding="utf-8")
    assert main(["view", str(output), "-g", "qwen3", "-o", str(tmp_path / "parse.html")]) == 0
    found = Spans()
    found.feed((tmp_path / "parse.html").read_text(encoding="utf-8"))
    assert [(a["data-kind"], t) for a, t in found.spans] == [
        ("delimiter", "<think>"), ("text", "a"), ("delimiter", "</think>"), ("text", "b")]


# ---------------------------------------------------------------------------- one row of a batch input
#: A log of several models as batch reads it: the output nested in the response, the grammar per record,
#: the tools as JSON text (or none), the prompt when there is one. Built from golden samples (with a prompt,
#: with tools, a broken one).
LOG_COLUMNS = Columns(text="response.choices[0].text", prompt="prompt", tools="tools", id="rid", grammar="meta.model")
LOG_GOLDENS = [next(g for g in goldens(grammar) if g.name == name) for grammar, name in [
    ("qwen3_coder", "one_call"), ("glm45", "parallel_calls"), ("qwen3", "parallel_calls"),
    ("gpt_oss", "text_around_calls"), ("mistral", "parallel_calls"), ("qwen3", "truncated")]]


def _log_record(number: int, golden) -> dict:
    return {"rid": f"r{number}", "meta": {"model": golden.grammar}, "response": {"choices": [{"text": golden.text}]},
            "prompt": golden.prefix or None, "tools": json.dumps(golden.tools) if golden.tools else None}


LOG = [_log_record(n, g) for n, g in enumerate(LOG_GOLDENS, 1)]


def _shown_message(page: str) -> dict:
    return json.loads(html.unescape(re.search(r'<pre id="message">(.*?)</pre>', page, re.DOTALL).group(1)))


def test_a_rows_page_is_its_outputs_page_and_shows_the_batchs_row():
    assert LOG_GOLDENS[0].prefix and LOG_GOLDENS[1].tools
    rows = list(parse_many(LOG, None, columns=LOG_COLUMNS))
    for record, golden, row in zip(LOG, LOG_GOLDENS, rows):
        page = row_html(record, columns=LOG_COLUMNS, title="t")
        assert page == to_html(golden.text, golden.grammar, prefix=golden.prefix, tools=golden.tools, title="t")
        assert result_row(_shown_message(page), row_id=record["rid"]) == row
    assert "<title>qwen3: row 17, id r1</title>" in row_html({"rid": "r1", "completion": "Hi"}, "qwen3",
                                                             columns=Columns(id="rid"), row=17)
    # (the given prompt and tools stand in for a record's missing ones, as in a batch)
    plain = {"completion": LOG_GOLDENS[0].text}
    assert row_html(plain, LOG_GOLDENS[0].grammar, prefix=LOG_GOLDENS[0].prefix, tools=LOG_GOLDENS[0].tools) == \
        to_html(LOG_GOLDENS[0].text, LOG_GOLDENS[0].grammar, prefix=LOG_GOLDENS[0].prefix, tools=LOG_GOLDENS[0].tools)
    assert row_html("<think>a</think>b", "qwen3") == to_html("<think>a</think>b", "qwen3")  # (a JSONL of strings)


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_the_view_command_shows_a_row_of_a_batch_input(tmp_path, suffix):
    from grammar_parse.cli import main

    source = tmp_path / f"logs{suffix}"
    if suffix == ".parquet":
        pa = pytest.importorskip("pyarrow")
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(LOG), source)
    else:  # (a blank line is no row: the rows stay the batch's)
        lines = [json.dumps(r) for r in LOG]
        source.write_text("\n".join(lines[:2] + [""] + lines[2:]) + "\n", encoding="utf-8")
    options = ["--text", "response.choices[0].text", "--prompt", "prompt", "--tools", "tools", "--id", "rid",
               "--grammar-column", "meta.model"]
    for number, record in enumerate(LOG, 1):
        target = tmp_path / f"row{number}.html"
        assert main(["view", str(source), "--row", str(number), *options, "-o", str(target)]) == 0
        assert target.read_text(encoding="utf-8") == row_html(record, columns=LOG_COLUMNS, row=number)


#: (what, the input's lines, the arguments after `view FILE`, the error's code, a part of its line)
ROW_ERRORS = [
    ("a row past the end", ['{"completion": "a"}', "", '{"completion": "b"}'], ["--row", "3"], "usage.batch",
     "there is no row 3: the input has 2 rows"),
    ("a line that is not JSON", ['{"completion": "a"}', "", "{oops"], ["--row", "2"], "usage.json",
     "row 2 (line 3) is not JSON"),
    ("a record without the output", ['{"id": 1, "text": "a"}'], ["--row", "1"], "usage.batch",
     "the row has no output at 'completion' (its keys: id, text)"),
    ("an output that is not text", ['{"completion": ["a"]}'], ["--row", "1"], "usage.batch",
     "the row has a list at 'completion', not text"),
    ("a row that is no record", ["[1, 2]"], ["--row", "1"], "usage.batch", "a row is a list, not text or a record"),
    ("tools that are not JSON", ['{"completion": "a", "t": "[{"}'], ["--row", "1", "--tools", "t"], "usage.json",
     "the row's tools 't' are text that is not JSON"),
    ("row 0", ['{"completion": "a"}'], ["--row", "0"], "usage.batch", "rows are counted from 1"),
    ("a record option without --row", ['{"completion": "a"}'], ["--text", "completion"], "usage.batch",
     "--text reads a record of a batch input: it needs --row N"),
    ("no grammar for the record", ['{"completion": "a"}'], ["--row", "1", "--grammar-column", "model", "-g", None],
     "usage.grammar", "the row names no grammar"),
    ("an unknown grammar in the record", ['{"completion": "a", "model": "nope"}'],
     ["--row", "1", "--grammar-column", "model"], "grammar.not_found", "nope"),
]


@pytest.mark.parametrize(("lines", "arguments", "code", "said"), [c[1:] for c in ROW_ERRORS],
                         ids=[c[0] for c in ROW_ERRORS])
def test_a_row_that_cannot_be_shown_is_one_usage_error(tmp_path, capsys, lines, arguments, code, said):
    from grammar_parse.cli import main

    source = tmp_path / "logs.jsonl"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    grammar = [] if None in arguments else ["-g", "qwen3"]
    assert main(["view", str(source), *grammar, *[a for a in arguments if a not in ("-g", None)],
                 "-o", str(tmp_path / "row.html")]) == 2
    err = capsys.readouterr().err
    assert assert_one_error_line(err) == code and said in err
    assert not (tmp_path / "row.html").exists()


def test_a_lone_surrogate_from_a_json_log_is_shown_replaced(tmp_path):
    from grammar_parse.cli import main

    source = tmp_path / "logs.jsonl"
    source.write_text('{"completion": "<think>a\\ud800</think>b"}\n', encoding="utf-8")  # (JSON can say it, UTF-8 not)
    assert main(["view", str(source), "--row", "1", "-g", "qwen3", "-o", str(tmp_path / "row.html")]) == 0
    found = Spans()
    found.feed((tmp_path / "row.html").read_text(encoding="utf-8"))
    assert [t for _, t in found.spans] == ["<think>", "a\ufffd", "</think>", "b"]
