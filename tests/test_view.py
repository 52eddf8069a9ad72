"""The picture of a parse (grammar_parse.view): for every golden output, the page's highlighted spans are
the output character for character, each field's spans hold exactly the text the parser gave that field,
errors are shown with their codes, and the page needs nothing from outside itself."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable
from html.parser import HTMLParser

import pytest

import grammar_parse as gp
from goldens import all_goldens, goldens
from grammar_parse.batch import Columns, parse_many, result_row
from grammar_parse.view import FOLD_CHARS, row_html, to_html
from test_cli import assert_one_error_line


class Spans(HTMLParser):
    """The text of each data-kind span of the output (the innermost one holding it: a marked character is a
    span of its own inside its field's), with its attributes; and every outside reference the page makes (an
    in-page link, ``#...``, fetches nothing)."""

    def __init__(self, pre: str = "output") -> None:
        super().__init__(convert_charrefs=True)
        self.spans: list[tuple[dict[str, str], str]] = []
        self.pre = pre
        self.inside = False
        self.open: list[int | None] = []  # (the open elements inside the <pre>: a span's index, or None)
        self.external = []

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        for key in ("src", "href"):
            if key in attributes and not attributes[key].startswith("#"):
                self.external.append(attributes[key])
        if tag == "link" or (tag == "script" and "src" in attributes):
            self.external.append(tag)
        if tag == "pre" and attributes.get("id") == self.pre:
            self.inside, self.open = True, []
        elif self.inside and tag == "span" and "data-kind" in attributes:
            self.spans.append((attributes, ""))
            self.open.append(len(self.spans) - 1)
        elif self.inside:
            self.open.append(None)

    def handle_endtag(self, tag):
        if tag == "pre":
            self.inside = False
        elif self.inside and self.open:
            self.open.pop()

    def handle_data(self, data):
        held = [i for i in self.open if i is not None]
        if self.inside and held:
            attributes, text = self.spans[held[-1]]
            self.spans[held[-1]] = (attributes, text + data)


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
    from grammar_parse._cli import main

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
        found = Spans()
        found.feed(page)
        discarded = sum(len(t) for a, t in found.spans if a["data-kind"] == "discarded")
        assert result_row(_shown_message(page), row_id=record["rid"], discarded=discarded) == row
    assert "<title>qwen3: row 17, id r1</title>" in row_html({"rid": "r1", "completion": "Hi"}, "qwen3",
                                                             columns=Columns(id="rid"), row=17)
    # (the given prompt and tools stand in for a record's missing ones, as in a batch)
    plain = {"completion": LOG_GOLDENS[0].text}
    assert row_html(plain, LOG_GOLDENS[0].grammar, prefix=LOG_GOLDENS[0].prefix, tools=LOG_GOLDENS[0].tools) == \
        to_html(LOG_GOLDENS[0].text, LOG_GOLDENS[0].grammar, prefix=LOG_GOLDENS[0].prefix, tools=LOG_GOLDENS[0].tools)
    assert row_html("<think>a</think>b", "qwen3") == to_html("<think>a</think>b", "qwen3")  # (a JSONL of strings)


def _write_log(source, records) -> None:
    if source.suffix == ".parquet":
        pa = pytest.importorskip("pyarrow")
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(records), source)
    else:  # (a blank line is no row: the rows stay the batch's)
        lines = [json.dumps(r) for r in records]
        source.write_text("\n".join(lines[:2] + [""] + lines[2:]) + "\n", encoding="utf-8")


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_the_view_command_shows_a_row_of_a_batch_input(tmp_path, suffix):
    """--row N counts from 0, as pandas does (the batch's output row N answers it); --id VALUE finds the
    record whose id column holds VALUE: the same page, titled with both."""
    from grammar_parse._cli import main

    source = tmp_path / f"logs{suffix}"
    _write_log(source, LOG)
    options = ["--text", "response.choices[0].text", "--prompt", "prompt", "--tools", "tools", "--id-column", "rid",
               "--grammar-column", "meta.model"]
    for number, record in enumerate(LOG):
        expected = row_html(record, columns=LOG_COLUMNS, row=number)
        assert f"row {number}, id {record['rid']}</title>" in expected
        for pick in (["--row", str(number)], ["--id", record["rid"]]):
            target = tmp_path / f"{pick[0][2:]}{number}.html"
            assert main(["view", str(source), *pick, *options, "-o", str(target)]) == 0
            assert target.read_text(encoding="utf-8") == expected


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_the_view_command_finds_a_record_by_an_id_that_is_a_number(tmp_path, suffix):
    """--id VALUE matches the id column (by default ``id``) written as JSON writes it: 7 finds the number 7;
    the first record that has it wins."""
    from grammar_parse._cli import main

    records = [{"id": n, "completion": f"<think>r{n}</think>c{n}"} for n in (5, 7, 9, 7)]
    source = tmp_path / f"logs{suffix}"
    _write_log(source, records)
    assert main(["view", str(source), "-g", "qwen3", "--id", "7", "-o", str(tmp_path / "p.html")]) == 0
    assert (tmp_path / "p.html").read_text(encoding="utf-8") == row_html(records[1], "qwen3", columns=Columns(id="id"),
                                                                          row=1)


#: (what, the input's lines, the arguments after `view FILE`, the error's code, a part of its line)
ROW_ERRORS = [
    ("a row past the end", ['{"completion": "a"}', "", '{"completion": "b"}'], ["--row", "2"], "usage.batch",
     "there is no row 2: the input has 2 rows (0 to 1)"),
    ("a negative row", ['{"completion": "a"}'], ["--row", "-1"], "usage.batch", "rows are counted from 0"),
    ("a line that is not JSON", ['{"completion": "a"}', "", "{oops"], ["--row", "1"], "usage.json",
     "row 1 (line 3) is not JSON"),
    ("a record without the output", ['{"id": 1, "text": "a"}'], ["--row", "0"], "usage.batch",
     "the row has no output at 'completion' (its keys: id, text)"),
    ("an output that is not text", ['{"completion": ["a"]}'], ["--row", "0"], "usage.batch",
     "the row has a list at 'completion', not text"),
    ("a row that is no record", ["[1, 2]"], ["--row", "0"], "usage.batch", "a row is a list, not text or a record"),
    ("tools that are not JSON", ['{"completion": "a", "t": "[{"}'], ["--row", "0", "--tools", "t"], "usage.json",
     "the row's tools 't' are text that is not JSON"),
    ("a record option without --row or --id", ['{"completion": "a"}'], ["--text", "completion"], "usage.batch",
     "--text reads a record of a batch input: it needs --row N or --id VALUE"),
    ("no grammar for the record", ['{"completion": "a"}'], ["--row", "0", "--grammar-column", "model", "-g", None],
     "usage.grammar", "the row names no grammar"),
    ("an unknown grammar in the record", ['{"completion": "a", "model": "nope"}'],
     ["--row", "0", "--grammar-column", "model"], "grammar.not_found", "nope"),
    ("an id no record has", ['{"id": 1, "completion": "a"}', "{oops", '"text"'], ["--id", "2"], "usage.batch",
     "no row has the id 2 at 'id' (3 rows)"),
    ("an id in another column", ['{"id": 1, "rid": "x", "completion": "a"}'], ["--id", "1", "--id-column", "rid"],
     "usage.batch", "no row has the id 1 at 'rid'"),
    ("--row and --id (--id was the id column)", ['{"id": 1, "completion": "a"}'], ["--row", "0", "--id", "id"],
     "usage.batch", "give --row N or --id VALUE, not both"),
]


@pytest.mark.parametrize(("lines", "arguments", "code", "said"), [c[1:] for c in ROW_ERRORS],
                         ids=[c[0] for c in ROW_ERRORS])
def test_a_row_that_cannot_be_shown_is_one_usage_error(tmp_path, capsys, lines, arguments, code, said):
    from grammar_parse._cli import main

    source = tmp_path / "logs.jsonl"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    grammar = [] if None in arguments else ["-g", "qwen3"]
    assert main(["view", str(source), *grammar, *[a for a in arguments if a not in ("-g", None)],
                 "-o", str(tmp_path / "row.html")]) == 2
    err = capsys.readouterr().err
    assert assert_one_error_line(err) == code and said in err
    assert not (tmp_path / "row.html").exists()


def test_a_bad_byte_is_its_rows_problem_only(tmp_path, capsys):
    """A JSONL line with a byte that is not UTF-8 (a Latin-1 é) is that row's problem: the other rows show,
    and that one is a usage error naming its line, as batch makes it that row's error."""
    from grammar_parse._cli import main

    source = tmp_path / "logs.jsonl"
    source.write_bytes(b'{"completion": "caf\xe9"}\n{"completion": "<think>a</think>b"}\n')
    assert main(["view", str(source), "--row", "1", "-g", "qwen3", "-o", str(tmp_path / "row.html")]) == 0
    assert (tmp_path / "row.html").read_text(encoding="utf-8") == row_html({"completion": "<think>a</think>b"},
                                                                           "qwen3", row=1)
    assert main(["view", str(source), "--row", "0", "-g", "qwen3", "-o", str(tmp_path / "bad.html")]) == 2
    err = capsys.readouterr().err
    assert assert_one_error_line(err) == "usage.json" and "row 0 (line 1) is not JSON" in err
    assert main(["view", str(source), "--id", "x", "-g", "qwen3", "-o", str(tmp_path / "bad.html")]) == 2
    assert "no row has the id x at 'id' (2 rows)" in capsys.readouterr().err


def test_a_parquet_row_past_the_end_is_one_usage_error(tmp_path, capsys):
    from grammar_parse._cli import main

    source = tmp_path / "logs.parquet"
    _write_log(source, LOG[:2])
    assert main(["view", str(source), "--row", "2", "--text", "response.choices[0].text", "-g", "qwen3",
                 "-o", str(tmp_path / "row.html")]) == 2
    err = capsys.readouterr().err
    assert assert_one_error_line(err) == "usage.batch" and "there is no row 2: the input has 2 rows (0 to 1)" in err


# ---------------------------------------------------------------------------- a lone surrogate (issue 32, 1)
class Marks(HTMLParser):
    """Where U+FFFD shows in the page's text, and whether each is a marked lone surrogate (inside a
    ``span.surrogate`` whose title names it); the page's text outside tags, per <pre>."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.open: list[tuple[str, dict[str, str]]] = []
        self.marked = self.unmarked = 0
        self.titles: list[str] = []
        self.text: dict[str, str] = {}

    def handle_starttag(self, tag, attrs):
        self.open.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        while self.open and self.open.pop()[0] != tag:
            pass

    def handle_data(self, data):
        if any(t == "title" for t, _ in self.open):  # (text only: it cannot be marked, and is U+FFFD)
            return
        pre = next((a.get("id") for t, a in reversed(self.open) if t == "pre"), None)
        if pre is not None:
            self.text[pre] = self.text.get(pre, "") + data
        if "\ufffd" not in data:
            return
        tag, attributes = self.open[-1] if self.open else ("", {})
        if tag == "span" and "surrogate" in attributes.get("class", "").split() and data == "\ufffd":
            self.marked += 1
            self.titles.append(attributes.get("title", ""))
        else:
            self.unmarked += data.count("\ufffd")


_TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
                                                                         "properties": {"x": {"type": "string"}}}}}]
#: (what, the page, how many lone surrogates its output pane shows, its message pane, its pre-filled part, and
#: the rest of the page, the heading): text given to the API, a tool argument's JSON escape (ASCII text, the
#: message holds the surrogate), the title, the prompt's pre-filled part, a record's output and id.
SURROGATE_PAGES = [
    ("text", lambda: to_html("<think>a\ud800</think>b\udfff", "qwen3"), 2, 2, 0, 0),
    ("tool argument escape", lambda: to_html('<tool_call>{"name": "f", "arguments": {"x": "\\ud800"}}</tool_call>',
                                             "qwen3", tools=_TOOLS), 0, 1, 0, 0),
    ("title", lambda: to_html("b", "qwen3", title="t\udc00"), 0, 0, 0, 1),
    ("prefill", lambda: to_html("a</think>b", "qwen3", prefix="<|im_start|>assistant\n<think>\ud800"), 0, 1, 1, 0),
    ("record", lambda: row_html({"completion": "<think>\ud800</think>", "rid": "r\ud800"}, "qwen3",
                                columns=Columns(id="rid"), row=0), 1, 1, 0, 1),
]


@pytest.mark.parametrize(("make", "output", "message", "prefill", "heading"), [c[1:] for c in SURROGATE_PAGES],
                         ids=[c[0] for c in SURROGATE_PAGES])
def test_a_lone_surrogate_is_shown_marked_on_every_path(make, output, message, prefill, heading):
    page = make()
    page.encode("utf-8")  # (a lone surrogate left in would raise here)
    found = Marks()
    found.feed(page)
    assert found.unmarked == 0  # (in the <title> and attributes it is a plain U+FFFD: no markup there)
    assert [found.text.get(k, "").count("\ufffd") for k in ("output", "message", "prefill")] == [output, message,
                                                                                                  prefill]
    assert found.marked == output + message + prefill + heading
    assert all(re.search(r"lone surrogate U\+D[89A-F][0-9A-F]{2}", t) for t in found.titles)


def test_a_replacement_character_the_model_wrote_is_not_marked():
    found = Marks()
    found.feed(to_html("<think>a\ufffd</think>b", "qwen3"))
    assert found.marked == 0 and found.text["output"].count("\ufffd") == 1


@pytest.mark.parametrize("where", ["file", "stdout"])
@pytest.mark.parametrize("record", ['{"completion": "<think>a\\ud800</think>b"}',
                                    '{"completion": "<tool_call>{\\"name\\": \\"f\\", \\"arguments\\": '
                                    '{\\"x\\": \\"\\\\ud800\\"}}</tool_call>"}'], ids=["text", "argument"])
def test_the_view_command_writes_a_page_with_a_lone_surrogate(tmp_path, where, record):
    """From a JSONL log (JSON can say it, UTF-8 cannot), to a file or to a standard output whose encoding
    is not UTF-8: the page is written as UTF-8, its <meta charset>, and the surrogate marked."""
    import io

    from grammar_parse._cli import main

    source = tmp_path / "logs.jsonl"
    source.write_text(record + "\n", encoding="ascii")
    target = tmp_path / "row.html"
    out = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
    assert main(["view", str(source), "--row", "0", "-g", "qwen3", *(["-o", str(target)] if where == "file" else [])],
                out=out) == 0
    out.flush()
    page = target.read_text(encoding="utf-8") if where == "file" else out.buffer.getvalue().decode("utf-8")
    found = Marks()
    found.feed(page)
    assert found.unmarked == 0 and found.marked >= 1


def test_the_view_command_writes_non_ascii_to_a_narrow_stdout(tmp_path):
    import io

    from grammar_parse._cli import main

    output = tmp_path / "out.txt"
    output.write_text("<think>é\n</think>b", encoding="utf-8")
    out = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
    assert main(["view", str(output), "-g", "qwen3"], out=out) == 0
    out.flush()
    found = Spans()
    found.feed(out.buffer.getvalue().decode("utf-8"))
    assert "".join(t for _, t in found.spans) == "<think>é\n</think>b"


# ---------------------------------------------------------------------------- a long output (issue 32)
class Page(HTMLParser):
    """The page in order: each <pre>'s spans (kind, attributes, text), in-page anchors and folds; the
    summary's links (their kind and target); every id."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.items: list[tuple[str, str | None, dict[str, str]]] = []  # (what, its <pre>, attributes)
        self.texts: list[str] = []
        self.ids: list[str] = []
        self.links: list[dict[str, str]] = []
        self.pre: str | None = None
        self.open: list[int | None] = []
        self.folded = 0  # (how deep in open folds)
        self.in_summary = False
        self.summary_before_output = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.append(a["id"])
        if tag == "nav" and a.get("id") == "summary":
            self.in_summary = True
            self.summary_before_output = "output" not in self.ids
        if tag == "a" and self.in_summary and "href" in a:
            self.links.append(a)
        if tag == "pre":
            self.pre, self.open = a.get("id"), []
            return
        if self.pre is None:
            return
        if tag == "span" and "data-kind" in a and a["data-kind"] != "error":
            self.items.append(("span", self.pre, {**a, "folded": str(self.folded)}))
            self.texts.append("")
            self.open.append(len(self.items) - 1)
            return
        if tag == "a" and "id" in a:
            self.items.append(("anchor", self.pre, a))
            self.texts.append("")
        if tag == "details":
            self.folded += 1
            self.items.append(("fold", self.pre, a))
            self.texts.append("")
        self.open.append(None)

    def handle_endtag(self, tag):
        if tag == "nav":
            self.in_summary = False
        if tag == "pre":
            self.pre = None
        elif self.pre is not None and self.open:
            if tag == "details":
                self.folded -= 1
            self.open.pop()

    def handle_data(self, data):
        held = [i for i in self.open if i is not None]
        if self.pre is not None and held:
            self.texts[held[-1]] += data

    def spans(self, pre: str) -> list[tuple[dict[str, str], str]]:
        return [(a, t) for (what, p, a), t in zip(self.items, self.texts) if what == "span" and p == pre]

    def after(self, anchor: str) -> dict[str, str] | None:
        """The first output span after an anchor (None: the anchor is the page's last)."""
        at = next(i for i, (what, _, a) in enumerate(self.items) if what == "anchor" and a["id"] == anchor)
        return next((a for what, _, a in self.items[at:] if what == "span"), None)


def _problems(golden) -> tuple[list[dict], list[dict], list[dict], list[dict]]:
    """What the summary must list, from the parser itself: parse errors, discarded spans, calls with errors."""
    parser = gp.ResponseParser(golden.grammar, golden.prefix, tools=golden.tools, strict=False, trace=True)
    parser.feed(golden.text)
    message, _ = parser.finalize()
    failed = [c for c in message.get("tool_calls") or [] if c.get("errors")]
    discarded = [s for s in parser.spans if s["kind"] == "discarded"]
    return list(message.get("parse_errors") or []), discarded, failed, list(parser.spans)


with __import__("warnings").catch_warnings():
    __import__("warnings").simplefilter("ignore")  # (a golden prompt without an anchor warns: not this test's)
    PROBLEM_GOLDENS = [g for g in all_goldens() if g.grammar in gp.list_grammars() and any(_problems(g)[:3])]


@pytest.mark.filterwarnings("ignore::grammar_parse.AnchorWarning")
@pytest.mark.parametrize("golden", PROBLEM_GOLDENS[::2], ids=lambda g: f"{g.grammar}/{g.name}")
def test_the_summary_links_every_problem_to_its_place(golden):
    """Every parse error, discarded span and failed call is listed at the top, each linking to an anchor
    right before the span where it starts (a failed call: its call's colour); the rest of the page is as
    before."""
    errors, discarded, failed, spans = _problems(golden)
    page = Page()
    page.feed(to_html(golden.text, golden.grammar, prefix=golden.prefix, tools=golden.tools))
    assert page.summary_before_output
    assert len(page.ids) == len(set(page.ids))
    kinds = [link["data-kind"] for link in page.links]
    assert (kinds.count("error"), kinds.count("discarded"), kinds.count("call")) == (
        len(errors), len(discarded), len(failed))
    linked = {"error": [], "discarded": [], "call": []}
    for link in page.links:
        target = link["href"].removeprefix("#")
        assert target in page.ids
        linked[link["data-kind"]].append((link, page.after(target)))
    for (link, span), error in zip(linked["error"], errors):
        assert link["title"] == error["code"]
        if error.get("span"):
            start = error["span"][0]
            assert span is None and start >= len(golden.text) or \
                int(span["data-start"]) <= start < int(span["data-end"]) or \
                start == int(span["data-start"]) == int(span["data-end"])
    for (_, span), piece in zip(linked["discarded"], discarded):
        assert int(span["data-start"]) == max(piece["start"], -len(golden.prefix))
    for _, span in linked["call"]:
        assert span is not None and span.get("data-call") is not None


@pytest.mark.parametrize("golden", GOLDENS[::7], ids=lambda g: f"{g.grammar}/{g.name}")
def test_long_regions_are_folded_keeping_every_character(golden):
    """With fold=F, a region (adjacent spans of one kind, field, call and error state) longer than F
    characters or VIEW_FOLD_LINES lines shows its first and last F//4 characters (at most
    VIEW_KEEP_LINES lines each) and folds the rest in one <details>; a shorter region is not folded; the
    page still holds every character, in order."""
    from grammar_parse.view import FOLD_LINES, KEEP_LINES

    fold = 16
    page = Page()
    page.feed(to_html(golden.text, golden.grammar, prefix=golden.prefix, tools=golden.tools, fold=fold))
    shown = page.spans("output")
    assert "".join(t for _, t in shown) == golden.text
    groups: list[list[tuple[dict[str, str], str]]] = []
    key = None
    for attributes, text in shown:
        this = (*(attributes.get(k) for k in ("data-kind", "data-field", "data-call")),
                "error" in attributes.get("class", "").split())  # (not "blank": a piece of a region can be)
        if this != key:
            groups.append([])
        key = this
        groups[-1].append((attributes, text))
    folds = sum(1 for what, pre, _ in page.items if what == "fold" and pre == "output")
    expected_folds = 0
    for group in groups:
        whole = "".join(t for _, t in group)
        middle_at = int(group[0][0]["data-start"]) + len(whole) // 2
        head = "".join(t for a, t in group if a["folded"] == "0" and int(a["data-start"]) < middle_at)
        middle = "".join(t for a, t in group if a["folded"] != "0")
        tail = whole[len(head) + len(middle):]
        if len(whole) > fold or whole.count("\n") + 1 > FOLD_LINES:
            expected_folds += 1
            assert middle and head + middle + tail == whole
            for kept in (head, tail):
                assert len(kept) <= fold // 4 and kept.count("\n") <= KEEP_LINES
            assert len(head) == fold // 4 or head.count("\n") == KEEP_LINES
        else:
            assert middle == ""
    assert folds == expected_folds


def test_a_long_output_is_short_to_read_and_whole():
    """200 KB of reasoning, 200 KB of content, a broken call and 20 KB after the end of the turn: what shows
    unfolded is a few thousand characters, the folds hold the rest, and the message's long strings fold
    too, its JSON whole."""
    reasoning, content, junk = "think " * 34_000, "<b>x</b>\n" * 22_000, "junk " * 4_000
    text = f"<think>{reasoning}</think>{content}<tool_call>{{bad</tool_call><|im_end|>{junk}"
    page_html = to_html(text, "qwen3")
    page = Page()
    page.feed(page_html)
    shown = page.spans("output")
    assert "".join(t for _, t in shown) == text
    visible = sum(len(t) for a, t in shown if a["folded"] == "0")
    assert visible < 5_000
    assert [link["data-kind"] for link in page.links] == ["error", "discarded"]
    message_pre = re.search(r'<pre id="message">(.*?)</pre>', page_html, re.DOTALL).group(1)
    assert json.loads(html.unescape(re.sub(r"<[^>]*>", "", message_pre))) == gp.parse_response(text, "qwen3", prefix="",
                                                                                               strict=False)
    unfolded = re.sub(r"<details.*?</details>", "", message_pre, flags=re.DOTALL)
    assert len(html.unescape(re.sub(r"<[^>]*>", "", unfolded))) < 5_000


PREFILLED = [g for g in GOLDENS if g.prefix][::5]


@pytest.mark.filterwarnings("ignore::grammar_parse.AnchorWarning")
@pytest.mark.parametrize("golden", PREFILLED, ids=lambda g: f"{g.grammar}/{g.name}")
def test_the_prompts_prefilled_part_is_shown_apart_and_labelled(golden):
    """The prompt's tail after the grammar's start anchor (what the parser replays: a pre-filled <think>,
    a channel header) shows in its own labelled block before the output, by field, with offsets before 0;
    the output's spans are unchanged."""
    grammar = gp.load_grammar(golden.grammar)
    anchor = grammar.start_anchor
    end = anchor.last_end(golden.prefix, None) if anchor is not None else None
    tail = golden.prefix[end:] if end is not None else golden.prefix
    page_html = to_html(golden.text, golden.grammar, prefix=golden.prefix, tools=golden.tools)
    page = Page()
    page.feed(page_html)
    prefilled = page.spans("prefill")
    assert "".join(t for _, t in prefilled) == tail
    assert all(int(a["data-end"]) <= 0 for a, _ in prefilled)
    if tail:
        assert page.ids.index("prefill") < page.ids.index("output")
        label = re.search(r'<section class="prefill".*?</h3>', page_html, re.DOTALL)
        assert label and "pre-filled" in label.group(0).lower() and "not written by the model" in label.group(0)
    else:
        assert "prefill" not in page.ids
    assert "".join(t for _, t in page.spans("output")) == golden.text


def test_a_hostile_output_with_thousands_of_problems_costs_about_its_parse():
    """2,500 broken calls: 2,500 parse errors and 7,500 spans. The page costs a small multiple of the parse
    itself, about 2 (each span was checked against every error: 4.3 s of view over a 0.3 s parse), and
    the summary lists MAX_SUMMARY of them, then counts the rest."""
    import time

    from grammar_parse.view import MAX_SUMMARY

    text = "<tool_call>{bad</tool_call>x" * 2500 + "<|im_end|>junk"

    def cost(run: Callable[[], object]) -> float:  # (CPU time, best of 3: another process's load or a collection moves one run)
        best = float("inf")
        for _ in range(3):
            started = time.process_time()
            run()
            best = min(best, time.process_time() - started)
        return best

    def parse_it() -> None:
        parser = gp.ResponseParser("qwen3", "", strict=False, trace=True)
        parser.feed(text)
        parser.finalize()
    parse = cost(parse_it)
    view = cost(lambda: to_html(text, "qwen3"))
    page_html = to_html(text, "qwen3")
    assert view < 4 * parse + 0.2
    page = Page()
    page.feed(page_html)
    assert len(page.links) == MAX_SUMMARY and "2,301 more, marked in the output" in page_html  # (2,500 + junk)
    assert "".join(t for _, t in page.spans("output")) == text


class Tags(HTMLParser):
    """Every element and attribute the page holds."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: set[str] = set()
        self.attributes: set[str] = set()

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        self.attributes.update(k for k, _ in attrs)


HOSTILE = '</pre></nav><script>alert(1)</script><img src=x onerror="alert(2)"><!-- \'"&amp;'


@pytest.mark.parametrize("fold", [0, 7, FOLD_CHARS])
def test_hostile_text_in_the_new_parts_stays_text(fold):
    """Hostile text where the page now quotes the output or the prompt: a parse error's message in the
    summary, a failed call's name, the pre-filled part, a folded region cut anywhere. No element or
    attribute comes from it, and the output is whole."""
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]
    text = (f"{HOSTILE}</think>{HOSTILE}<tool_call>{{\"name\": {json.dumps(HOSTILE)}, \"arguments\": {{}}}}"
            f"</tool_call><tool_call>{{{HOSTILE}</tool_call><|im_end|>{HOSTILE}")
    page_html = to_html(text, "qwen3", prefix=f"<|im_start|>assistant\n<think>{HOSTILE}", tools=tools, fold=fold)
    found = Tags()
    found.feed(page_html)
    assert found.tags <= {"html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "nav", "p", "b", "ol",
                          "li", "a", "span", "div", "pre", "section", "details", "summary"}
    assert not {a for a in found.attributes if a.startswith("on")} and "src" not in found.attributes
    page = Page()
    page.feed(page_html)
    assert "".join(t for _, t in page.spans("output")) == text
    assert [link["data-kind"] for link in page.links] == ["call", "error", "discarded"]
    assert "".join(t for _, t in page.spans("prefill")) == f"<think>{HOSTILE}"


def test_an_output_file_with_a_byte_that_is_not_utf8_is_shown(tmp_path):
    """A model output file with a Latin-1 é (byte 0xE9) is shown, not refused: the byte is a marked U+FFFD
    whose title names it, every other character as written."""
    from grammar_parse._cli import main

    output = tmp_path / "out.txt"
    output.write_bytes(b"<think>caf\xe9</think>ok")
    assert main(["view", str(output), "-g", "qwen3", "-o", str(tmp_path / "p.html")]) == 0
    found = Marks()
    found.feed((tmp_path / "p.html").read_text(encoding="utf-8"))
    assert found.text["output"] == "<think>caf\ufffd</think>ok" and found.unmarked == 0
    assert found.marked == 2 and all("the byte 0xE9" in t for t in found.titles)  # (the output and the message)
