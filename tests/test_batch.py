"""Parsing many outputs (grammar_parse.batch): one row per record in order, every bad row an error in its
row (never an exception), the same rows from worker processes as from one, and the goldens' messages."""

from __future__ import annotations

import pytest

import grammar_parse as gp
from goldens import all_goldens
from grammar_parse.batch import Columns, TableParser, parse_many, parse_table, result_row, result_schema
from grammar_parse.errors import ArgumentError

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}]


def test_rows_in_order_with_their_fields():
    rows = list(parse_many([
        "<think>hm</think>Hello.",
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>',
        "<tool_call>{broken</tool_call>",
    ], "qwen3"))
    assert rows == [
        {"id": None, "reasoning": "hm", "content": "Hello.", "tool_calls": None, "parse_errors": None,
         "discarded_chars": 0, "error": None},
        {"id": None, "reasoning": None, "content": None, "tool_calls": [{"name": "get_weather",
         "arguments": {"city": "Paris"}}], "parse_errors": None, "discarded_chars": 0, "error": None},
        {"id": None, "reasoning": None, "content": "<tool_call>{broken</tool_call>", "tool_calls": None,
         "parse_errors": ["parse.json"], "discarded_chars": 0, "error": None},
    ]


def test_records_carry_their_prompt_tools_and_id():
    columns = Columns(text="out", prompt="prompt", tools="tools", id="key")
    records = [
        {"key": "a", "out": "x</think>y", "prompt": "<|im_start|>assistant\n<think>\n"},  # pre-filled <think>
        {"key": "b", "out": "<tool_call>\n<function=get_weather>\n<parameter=days>\n3\n</parameter>\n</function>\n"
                            "</tool_call>", "tools": TOOLS},
        {"key": "c", "out": "<tool_call>\n<function=get_weather>\n<parameter=days>\n3\n</parameter>\n</function>\n"
                            "</tool_call>"},
    ]
    a, b, c = parse_many(records, "qwen3_coder", columns=columns)
    assert (a["id"], a["reasoning"], a["content"]) == ("a", "x", "y")
    assert b["tool_calls"] == [{"name": "get_weather", "arguments": {"days": 3}}]  # typed by the row's tools
    assert c["tool_calls"] == [{"name": "get_weather", "arguments": {"days": "3"}}]  # no tools: as written


def test_a_bad_row_is_an_error_in_its_row():
    columns = Columns(id="id")
    rows = list(parse_many([7, {"id": 1}, {"id": 2, "completion": ["a"]}, {"id": 3, "completion": "ok",
                            "tools": None}, "<tool_call>{bad}</tool_call>"], "qwen3", columns=columns))
    assert [r["error"] for r in rows[:3]] == ["usage.batch: a row is a int, not text or a record",
                                              "usage.batch: the row has no output at 'completion' (its keys: id)",
                                              "usage.batch: the row has a list at 'completion', not text"]
    assert [r["id"] for r in rows[:4]] == [None, 1, 2, 3] and rows[3]["content"] == "ok"
    strict = list(parse_many(["<tool_call>{bad}</tool_call>"], "qwen3", strict=True))
    assert strict[0]["error"].startswith("parse.json: ") and strict[0]["content"] is None


def test_every_golden_parses_in_a_batch_as_it_does_alone():
    goldens = [g for g in all_goldens() if "error" not in g.expected and g.grammar in gp.list_grammars()]
    by_grammar: dict[str, list] = {}
    for golden in goldens:
        by_grammar.setdefault(golden.grammar, []).append(golden)
    checked = 0
    for grammar, cases in by_grammar.items():
        records = [{"completion": g.text, "prompt": g.prefix, "tools": g.tools} for g in cases]
        rows = list(parse_many(records, grammar, columns=Columns(prompt="prompt", tools="tools")))
        for golden, row in zip(cases, rows, strict=True):
            parser = gp.ResponseParser(grammar, golden.prefix, tools=golden.tools, strict=False)
            parser.finalize(golden.text)  # (what the parser discarded: the row's count of it)
            discarded = None if parser.grammar.settle else sum(end - start for start, end in parser.discarded_spans)
            assert row == result_row(golden.expected, discarded=discarded), (grammar, golden.name)
            checked += 1
    assert checked > 500


def test_worker_processes_give_the_same_rows_and_progress_counts_them():
    records = [{"id": i, "completion": f"<think>r{i}</think>answer {i}" if i % 7 else "<tool_call>{bad"}
               for i in range(3000)]
    done: list[int] = []
    alone = list(parse_many(records, "qwen3", columns=Columns(id="id"), chunk_rows=500))
    spread = list(parse_many(records, gp.load_grammar("qwen3"), columns=Columns(id="id"), workers=2,
                             chunk_rows=500, progress=done.append))
    assert spread == alone and [r["id"] for r in spread] == list(range(3000))
    assert sum(done) == 3000 and len(done) == 6


def test_jsonl_in_and_out_with_a_summary_and_resume():
    import io
    import json

    from grammar_parse.batch import run_jsonl

    lines = [json.dumps({"id": 1, "r": {"text": "<think>a</think>b"}}), "", "{not json",
             json.dumps({"id": 3, "r": {"text": '<tool_call>{"name": "f", "arguments": {}}</tool_call>'}}),
             json.dumps({"id": 4, "r": {"text": "<tool_call>{bad</tool_call>"}})]
    columns = Columns(text="r.text", id="id")  # (a JMESPath into nested records)
    out = io.StringIO()
    summary = run_jsonl(io.StringIO("\n".join(lines) + "\n"), out, "qwen3", columns=columns)
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [r["id"] for r in rows] == [1, None, 3, 4]
    assert rows[1]["error"].startswith("usage.json: line 3 is not JSON: ")
    assert (summary.rows, summary.calls, summary.rows_with_errors) == (4, 1, 2)
    assert dict(summary.codes) == {"usage.json": 1, "parse.json": 1}
    assert summary.text().startswith("4 rows, 1 tool calls, 2 rows with errors (")
    resumed = io.StringIO()
    again = run_jsonl(io.StringIO("\n".join(lines) + "\n"), resumed, "qwen3", columns=columns, skip=2)
    assert again.rows == 2 and resumed.getvalue().splitlines() == out.getvalue().splitlines()[2:]


def test_progress_shows_rate_and_eta_a_few_times_a_second():
    import io

    from grammar_parse.batch import Progress

    now = [0.0]
    out = io.StringIO()
    progress = Progress(out, 1000, clock=lambda: now[0])
    for step in range(10):
        now[0] = 0.1 * (step + 1)
        progress(100)
    progress.close()
    shown = [part.strip() for part in out.getvalue().split("\r") if part.strip()]
    assert shown[-1] == "1,000/1,000 rows (100%), 1,000 rows/s, ETA 0 s"
    assert len(shown) == 5  # every 0.2 s, and the last


def test_the_batch_command(tmp_path, capsys):
    import json

    from grammar_parse._cli import main

    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"id": i, "completion": "<think>t</think>a" if i % 3 else "<tool_call>{bad"})
                              + "\n" for i in range(30)), encoding="utf-8")
    target = tmp_path / "out.jsonl"
    assert main(["batch", str(source), "-o", str(target), "-g", "qwen3", "--id", "id", "-j", "1"]) == 0
    rows = [json.loads(line) for line in target.read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in rows] == list(range(30)) and rows[1]["reasoning"] == "t"
    err = capsys.readouterr().err  # (not a terminal: no progress line, only the summary)
    assert err.startswith("30 rows, 0 tool calls, 10 rows with errors (") and err.endswith("\n  parse.json: 10 rows\n")
    assert main(["batch", str(source), "-o", str(target), "-g", "qwen3", "--fail-on-error", "--quiet", "-j", "1"]) == 1
    lines = target.read_text(encoding="utf-8").splitlines()
    target.write_text("\n".join(lines[:12]) + "\n", encoding="utf-8")  # an interrupted run
    assert main(["batch", str(source), "-o", str(target), "-g", "qwen3", "--resume", "--quiet", "-j", "1"]) == 0
    assert target.read_text(encoding="utf-8").splitlines() == lines
    assert main(["batch", str(source), "-g", "qwen3", "--resume"]) == 2
    assert "[usage.file]: --resume needs an output file" in capsys.readouterr().err


def test_rows_may_name_their_grammar():
    records = [{"model": "qwen3", "completion": "<think>a</think>b"},
               {"model": "gpt_oss", "completion": "<|channel|>analysis<|message|>a<|end|><|start|>assistant"
                                                  "<|channel|>final<|message|>b<|return|>"},
               {"model": "no_such_grammar", "completion": "x"}, {"completion": "y"}]
    columns = Columns(grammar="model")
    rows = list(parse_many(records, None, columns=columns))
    assert [(r["reasoning"], r["content"]) for r in rows[:2]] == [("a", "b"), ("a", "b")]
    assert rows[2]["error"].startswith("grammar.not_found: ")
    assert rows[3]["error"] == "usage.grammar: the row names no grammar, and none was given"


# ---------------------------------------------------------------------------- Arrow, pandas, Parquet
MIXED = [{"rid": i, "completion": text, "prompt": "<|im_start|>assistant\n<think>\n" if i % 5 == 4 else None}
         for i, text in enumerate([
             "<think>hm</think>Hello.", '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>',
             "<tool_call>{broken</tool_call>", None, "thought</think>answer", "plain",
             '<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>\n<tool_call>{"name": "g", "arguments": '
             '{"b": [1, 2]}}</tool_call>'] * 3)]
MIXED_COLUMNS = Columns(id="rid", prompt="prompt")


def arrow_row(row: dict) -> dict:
    """A parse_many row as its Arrow row: arguments as JSON text (as written when broken), errors None."""
    import json

    calls = None if row["tool_calls"] is None else [
        {"name": c["name"], "errors": c.get("errors"),
         "arguments": c["arguments"] if isinstance(c["arguments"], str) else json.dumps(c["arguments"])}
        for c in row["tool_calls"]]
    return {**row, "tool_calls": calls}


def test_parse_table_gives_parse_many_s_rows_as_arrow_columns():
    import json

    pa = pytest.importorskip("pyarrow")
    table = pa.Table.from_pylist(MIXED)
    result = parse_table(table, "qwen3", columns=MIXED_COLUMNS)
    expected = [arrow_row(r) for r in parse_many(MIXED, "qwen3", columns=MIXED_COLUMNS)]
    assert result.to_pylist() == expected and result.schema == result_schema(pa.int64())
    calls = [c for row in result.to_pylist() for c in row["tool_calls"] or []]
    assert {c["name"] for c in calls} == {"get_weather", "f", "g"}
    assert json.loads(calls[-1]["arguments"]) == {"b": [1, 2]}  # (JSON text in an Arrow string)
    assert result.column("error").to_pylist()[3] == "usage.batch: the row has no output at 'completion'"
    batch = parse_table(table.to_batches()[0], "qwen3", columns=MIXED_COLUMNS)
    assert isinstance(batch, pa.RecordBatch) and batch.to_pylist() == expected


def test_parse_table_on_a_dataframe_keeps_its_index():
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame(MIXED, index=[100 + 2 * i for i in range(len(MIXED))])
    result = parse_table(frame, "qwen3", columns=MIXED_COLUMNS)
    assert list(result.index) == list(frame.index) and list(result["id"]) == list(frame["rid"])
    assert list(result.columns) == ["id", "reasoning", "content", "tool_calls", "parse_errors", "discarded_chars",
                                    "error"]
    assert result.loc[108, "reasoning"] == "thought" and result.loc[108, "content"] == "answer"  # (the row's prompt)
    joined = frame.join(result[["content"]])  # (joins back on the index)
    assert joined.loc[110, "content"] == "plain"


def test_table_parser_builds_its_grammar_once_and_checks_columns(monkeypatch):
    pa = pytest.importorskip("pyarrow")
    import grammar_parse.batch as batch

    built: list[object] = []
    real = batch.resolve_grammar
    monkeypatch.setattr(batch, "resolve_grammar", lambda g: built.append(g) or real(g))
    parser = TableParser("qwen3", columns=MIXED_COLUMNS)
    table = pa.Table.from_pylist(MIXED)
    first, second = parser(table), parser(table.slice(3))
    assert len(built) == 1 and second.to_pylist() == first.to_pylist()[3:]
    with pytest.raises(gp.ArgumentError, match="no column 'completion'"):
        parser(table.rename_columns(["rid", "output", "prompt"]))
    with pytest.raises(gp.ArgumentError, match="not list"):
        parse_table([1, 2], "qwen3")


def test_the_batch_command_reads_and_writes_parquet_and_resumes(tmp_path, capsys):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from grammar_parse._cli import main

    source, target = tmp_path / "in.parquet", tmp_path / "out.parquet"
    pq.write_table(pa.Table.from_pylist(MIXED), source)
    base = ["batch", str(source), "-g", "qwen3", "--id", "rid", "--prompt", "prompt", "-j", "1", "--quiet"]
    assert main([*base, "-o", str(target)]) == 0
    written = pq.read_table(target)
    assert written.to_pylist() == parse_table(pa.Table.from_pylist(MIXED), "qwen3", columns=MIXED_COLUMNS).to_pylist()
    pq.write_table(written.slice(0, 8), target)  # (a run that stopped after 8 rows)
    assert main([*base, "-o", str(target), "--resume"]) == 0
    assert pq.read_table(target).equals(written)
    jsonl = tmp_path / "out.jsonl"
    assert main([*base, "-o", str(jsonl)]) == 0
    assert len(jsonl.read_text(encoding="utf-8").splitlines()) == len(MIXED)
    capsys.readouterr()
    assert main([*base[:-1], "--text", "output", "-o", str(target)]) == 2
    assert "[usage.file]: the table has no column 'output'" in capsys.readouterr().err
    assert main(["batch", str(source), "-g", "qwen3", "--quiet"]) == 0  # (Parquet in, JSONL on stdout)
    assert len(capsys.readouterr().out.splitlines()) == len(MIXED)
    assert main(["batch", str(jsonl), "-g", "qwen3", "--input-format", "parquet", "-o", str(target)]) == 2
    assert "is not Parquet" in capsys.readouterr().err


# ---------------------------------------------------------------------------- issue 32: one bad row never stops a run
# A lone surrogate reaches a row from a JSON escape in the model's text (an argument, a tool's name) or from the
# record itself (a JSON log decodes "\ud800" in its text, its id or its keys). Each case: the record, and the
# (field, value) its parse_many row holds.
SURROGATE_CASES = {
    "arguments": ({"id": "arguments", "completion": '<tool_call>{"name": "f", "arguments": {"x": "\\ud800"}}'
                                                    '</tool_call>'}, "arguments", {"x": "\ud800"}),
    "name": ({"id": "name", "completion": '<tool_call>{"name": "\\ud800", "arguments": {}}</tool_call>'},
             "name", "\ud800"),
    "content": ({"id": "content", "completion": "a\ud800b"}, "content", "a\ud800b"),
    "reasoning": ({"id": "reasoning", "completion": "<think>\ud800</think>b"}, "reasoning", "\ud800"),
    "id": ({"id": "\ud800", "completion": "ok"}, "id", "\ud800"),
    "error": ({"id": "error", "\ud800": "x"}, "error",
              "usage.batch: the row has no output at 'completion' (its keys: id, \ud800)"),
}
#: Cases whose input has no lone surrogate itself (an Arrow table cannot hold one): the escape is in the text.
ESCAPED_CASES = ("arguments", "name")


def surrogate_records(cases: tuple[str, ...]) -> list[dict]:
    """The cases' records, each between two good rows."""
    records: list[dict] = []
    for n, case in enumerate(cases):
        records += [{"id": f"good{n}", "completion": "<think>t</think>a"}, SURROGATE_CASES[case][0]]
    return [*records, {"id": "last", "completion": "<think>t</think>a"}]


def value_of(row: dict, field: str):
    if field in ("arguments", "name"):
        return row["tool_calls"][0][field]
    return row[field]


def test_a_lone_surrogate_round_trips_through_jsonl(tmp_path):
    """JSONL keeps the value exactly (a lone surrogate is written as its \\uXXXX escape, which JSON allows)."""
    import io
    import json

    from grammar_parse.batch import run_jsonl

    records = surrogate_records(tuple(SURROGATE_CASES))
    source = io.BytesIO("".join(json.dumps(r) + "\n" for r in records).encode("ascii"))
    target = tmp_path / "rows.jsonl"
    with open(target, "w", encoding="utf-8") as sink:  # (a real UTF-8 file: a raw surrogate cannot be written)
        summary = run_jsonl(source, sink, "qwen3", columns=Columns(id="id"))
    rows = [json.loads(line) for line in target.read_text(encoding="utf-8").splitlines()]
    assert summary.rows == len(rows) == len(records)
    assert rows == list(parse_many(records, "qwen3", columns=Columns(id="id")))
    for (record, field, value), row in zip(SURROGATE_CASES.values(), rows[1::2], strict=False):
        assert value_of(row, field) == value, field
    # (the command, interrupted after the first surrogate's row and resumed: before, it died on that row again)
    from grammar_parse._cli import main

    source_file = tmp_path / "in.jsonl"
    source_file.write_bytes(source.getvalue())
    target.write_text("".join(target.read_text(encoding="utf-8").splitlines(keepends=True)[:2]), encoding="utf-8")
    assert main(["batch", str(source_file), "-o", str(target), "-g", "qwen3", "--id", "id", "-j", "1", "--resume",
                 "--quiet"]) == 0
    assert [json.loads(line) for line in target.read_text(encoding="utf-8").splitlines()] == rows


@pytest.mark.parametrize("writer", ["arrow", "pandas", "parquet"])
def test_a_lone_surrogate_in_a_table_is_replaced_and_said_in_its_row(writer, tmp_path):
    """Arrow strings are UTF-8: a lone surrogate becomes U+FFFD and the row's parse_errors say
    batch.surrogate; an argument keeps its escape in the arguments' JSON text (no loss, nothing to say)."""
    import json

    pa = pytest.importorskip("pyarrow")
    # (an Arrow table cannot hold a lone surrogate; a DataFrame can, in its cells but not as a key its
    # records lack: every record of a frame has every column)
    cases = {"arrow": ESCAPED_CASES, "pandas": tuple(c for c in SURROGATE_CASES if c != "error")}.get(
        writer, tuple(SURROGATE_CASES))
    records = surrogate_records(cases)
    if writer == "arrow":
        rows = parse_table(pa.Table.from_pylist(records), "qwen3", columns=Columns(id="id")).to_pylist()
    elif writer == "pandas":
        pd = pytest.importorskip("pandas")
        frame = pd.DataFrame(records, dtype=object)  # (pandas 3's own str columns are Arrow: no surrogate)
        rows = parse_table(frame, "qwen3", columns=Columns(id="id")).to_dict("records")
    else:
        import pyarrow.parquet as pq

        from grammar_parse._cli import main

        source = tmp_path / "in.jsonl"
        source.write_bytes("".join(json.dumps(r) + "\n" for r in records).encode("ascii"))
        assert main(["batch", str(source), "-o", str(tmp_path / "out.parquet"), "-g", "qwen3", "--id", "id",
                     "-j", "1", "--quiet"]) == 0
        rows = pq.read_table(tmp_path / "out.parquet").to_pylist()
        assert not (tmp_path / "out.parquet.partial").exists()
    assert len(rows) == len(records)
    for n, case in enumerate(cases):
        good, bad = rows[2 * n], rows[2 * n + 1]
        assert (good["id"], good["content"], good["parse_errors"]) == (f"good{n}", "a", None)
        _, field, value = SURROGATE_CASES[case]
        if field == "arguments":
            assert json.loads(value_of(bad, field)) == value and bad["parse_errors"] is None
        else:
            assert value_of(bad, field) == value.replace("\ud800", "\ufffd"), case
            assert bad["parse_errors"] == ["batch.surrogate"], case
    assert rows[-1]["id"] == "last"



@pytest.mark.parametrize("bad, first_bad", [(b"caf\xe9", 3), (b"\x80", 0), (b"\xe2\x82", 0), (b"\xed\xa0\x80", 0),
                                            (b"ok \xff\xfe", 3)],
                         ids=["latin1", "continuation", "cut", "cesu_surrogate", "ff"])
@pytest.mark.parametrize("last", [False, True], ids=["middle", "last_line_no_newline"])
def test_bad_bytes_make_their_row_an_error_and_the_rows_around_it_parse(bad, first_bad, last, tmp_path):
    """Rows are decoded line by line: bad UTF-8 in a line is that row's error (with its line number), and the
    rows before it in the same read block (more than 8 KB of them here) and after it are parsed."""
    import json

    from grammar_parse._cli import main

    count = 400  # (about 24 KB: several 8 KB blocks)
    lines = [json.dumps({"id": i, "completion": f"<think>t</think>answer {i:04d}"}).encode() for i in range(count)]
    where = count - 1 if last else 200
    opening = b'{"id": %d, "completion": "' % where
    lines[where] = opening + bad + b'"}'
    source = tmp_path / "in.jsonl"
    source.write_bytes(b"\n".join(lines) + (b"" if last else b"\n"))
    target = tmp_path / "out.jsonl"
    assert main(["batch", str(source), "-o", str(target), "-g", "qwen3", "--id", "id", "-j", "1", "--quiet"]) == 0
    rows = [json.loads(line) for line in target.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == count
    assert rows[where]["error"] == (f"usage.json: line {where + 1} is not UTF-8 text: byte 0x{bad[first_bad]:02x} "
                                    f"at byte {len(opening) + first_bad + 1} of the line")
    assert [r["content"] for r in rows[:where]] == [f"answer {i:04d}" for i in range(where)]
    assert [r["content"] for r in rows[where + 1:]] == [f"answer {i:04d}" for i in range(where + 1, count)]


# Characters str.splitlines (and a text file's universal newlines) end a line at, which JSONL does not: only
# \n ends a JSONL line. The control characters are not allowed raw in a JSON string, but a careless writer
# leaves them: the batch reads them as the writer meant (lenient); the others are valid raw.
SEPARATORS = ["\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


@pytest.mark.parametrize("separator", SEPARATORS, ids=[f"U+{ord(s):04X}" for s in SEPARATORS])
@pytest.mark.parametrize("how", ["cli", "run_jsonl_text_file", "run_jsonl_bytes"])
def test_only_a_newline_ends_a_jsonl_row(separator, how, tmp_path):
    import io
    import json

    from grammar_parse.batch import run_jsonl
    from grammar_parse._cli import main

    texts = ["one", f"two{separator}half", "three"]
    body = "".join('{"id": %d, "completion": "%s"}\n' % (i, t) for i, t in enumerate(texts))
    source = tmp_path / "in.jsonl"
    source.write_bytes(body.encode("utf-8"))
    target = tmp_path / "out.jsonl"
    if how == "cli":
        assert main(["batch", str(source), "-o", str(target), "-g", "qwen3", "--id", "id", "-j", "1",
                     "--quiet"]) == 0
    else:
        with open(target, "w", encoding="utf-8") as sink, (
                open(source, encoding="utf-8") if how == "run_jsonl_text_file" else
                io.BytesIO(source.read_bytes())) as inputs:
            run_jsonl(inputs, sink, "qwen3", columns=Columns(id="id"))
    rows = [json.loads(line) for line in target.read_text(encoding="utf-8").split("\n") if line]
    assert [(r["id"], r["content"], r["error"]) for r in rows] == [(i, t, None) for i, t in enumerate(texts)]
    # (written escaped: a reader that splits where str.splitlines does finds the same rows)
    assert [json.loads(line) for line in target.read_bytes().decode("utf-8").splitlines()] == rows


@pytest.mark.parametrize("ids", [
    pytest.param([3, 1, 2], id="int"),
    pytest.param(["a", "b", "c"], id="str"),
    pytest.param([1.5, 2.0, -3.25], id="float"),
    pytest.param([True, False, True], id="bool"),
    pytest.param([None, 7, 8], id="first_missing"),
])
def test_jsonl_to_parquet_keeps_the_ids(ids, tmp_path):
    """`batch x.jsonl -o y.parquet --id id`: the id column takes the type of the first id (before: the
    writer's schema had a null id and the first row group crashed it, leaving a .partial file)."""
    import json

    pq = pytest.importorskip("pyarrow.parquet")
    from grammar_parse._cli import main

    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"id": i, "completion": "x"}) + "\n" for i in ids), encoding="utf-8")
    target = tmp_path / "out.parquet"
    assert main(["batch", str(source), "-o", str(target), "-g", "qwen3", "--id", "id", "-j", "1", "--quiet"]) == 0
    assert not (tmp_path / "out.parquet.partial").exists()
    table = pq.read_table(target)
    assert table.column("id").to_pylist() == ids
    assert [r["parse_errors"] for r in table.to_pylist()] == [None] * len(ids)


def test_ids_that_do_not_fit_the_first_ids_type():
    """Later ids of another type: text in a string column (their JSON text), otherwise null and
    batch.id_type in the row's parse_errors; never an exception. Row groups of 2 rows, so the type is chosen
    from the first id and held across groups."""
    import os
    import tempfile

    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from grammar_parse.batch import ParquetSink

    def written(ids: list) -> list[tuple]:
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "rows.parquet")
            sink = ParquetSink(path, group_rows=2)
            for i in ids:
                sink.write(result_row({"content": "x"}, row_id=i))
            sink.close()
            table = pq.read_table(path)
            return list(zip(table.column("id").to_pylist(), table.column("parse_errors").to_pylist())), \
                table.schema.field("id").type

    rows, kind = written([None, None, 5, "x", 2 ** 70, 6])
    assert kind == pa.int64()
    assert rows == [(None, None), (None, None), (5, None), (None, ["batch.id_type"]), (None, ["batch.id_type"]),
                    (6, None)]
    rows, kind = written(["a", 5, {"k": [1]}, None])
    assert kind == pa.string() and rows == [("a", None), ("5", None), ('{"k": [1]}', None), (None, None)]
    rows, kind = written([None, None, None])  # (no id at all: the null type, as without --id)
    assert kind == pa.null() and rows == [(None, None)] * 3


DISCARD = {  # output -> characters the parser discards (the text after qwen3's end of turn, the marker kept)
    "<think>a</think>b<|im_end|>" + "z" * 1000: 1000,
    "hello<|im_end|>\nzz": 3,
    "<think>a</think>b<|im_end|>": 0,
    "plain": 0,
}


@pytest.mark.parametrize("writer", ["rows", "jsonl", "arrow", "parquet"])
def test_discarded_text_is_counted_in_each_row_and_the_summary(writer, tmp_path):
    import io
    import json

    from grammar_parse.batch import run_jsonl

    records = [{"id": n, "completion": text} for n, text in enumerate(DISCARD)] + [{"id": 9}]  # (+ a row error)
    want = [*DISCARD.values(), None]
    if writer == "rows":
        got = [r["discarded_chars"] for r in parse_many(records, "qwen3", columns=Columns(id="id"))]
    elif writer == "jsonl":
        out = io.StringIO()
        summary = run_jsonl(io.StringIO("".join(json.dumps(r) + "\n" for r in records)), out, "qwen3",
                            columns=Columns(id="id"))
        got = [json.loads(line)["discarded_chars"] for line in out.getvalue().splitlines()]
        assert (summary.rows_discarding, summary.discarded_chars) == (2, 1003)
        assert "2 rows with discarded text (1,003 characters)" in summary.text()
    elif writer == "arrow":
        pa = pytest.importorskip("pyarrow")
        got = parse_table(pa.Table.from_pylist(records), "qwen3", columns=Columns(id="id")).column(
            "discarded_chars").to_pylist()
    else:
        pq = pytest.importorskip("pyarrow.parquet")
        from grammar_parse._cli import main

        source = tmp_path / "in.jsonl"
        source.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
        assert main(["batch", str(source), "-o", str(tmp_path / "o.parquet"), "-g", "qwen3", "-j", "1"]) == 0
        got = pq.read_table(tmp_path / "o.parquet").column("discarded_chars").to_pylist()
    assert got == want


@pytest.mark.parametrize("text, first", [
    ("output", {"id": 1, "completion": "x"}),
    ("response.text", {"id": 1, "r": {"text": "x"}}),
    ('"the output"', {"id": 1, "completion": "x"}),
])
def test_a_wrong_text_key_stops_a_jsonl_run_before_any_row(text, first, tmp_path, capsys):
    import json

    from grammar_parse._cli import main

    source = tmp_path / "in.jsonl"
    source.write_text("\n" + "".join(json.dumps(first) + "\n" for _ in range(5)), encoding="utf-8")
    target = tmp_path / "out.jsonl"
    assert main(["batch", str(source), "-o", str(target), "-g", "qwen3", "--text", text, "-j", "1"]) == 2
    keys = ", ".join(sorted(first))
    assert f"the first record (line 2) has no {text!r}: its keys are {keys}" in capsys.readouterr().err
    assert not target.exists() or target.read_text(encoding="utf-8") == ""


@pytest.mark.parametrize("first", ['"an output as a JSON string"', "{not json", '{"completion": "x", "id": 0}'])
def test_a_first_record_without_keys_to_check_runs_the_file(first, tmp_path):
    import json

    from grammar_parse._cli import main

    source = tmp_path / "in.jsonl"
    source.write_text(first + "\n" + json.dumps({"completion": "y"}) + "\n", encoding="utf-8")
    target = tmp_path / "out.jsonl"
    assert main(["batch", str(source), "-o", str(target), "-g", "qwen3", "-j", "1", "--quiet"]) == 0
    assert len(target.read_text(encoding="utf-8").splitlines()) == 2


@pytest.mark.parametrize("tools", [{"get_weather": {"type": "object"}}, [{"name": "f", "paramters": {}}]],
                         ids=["name_to_schema_dict", "misspelled_key"])
def test_tools_in_a_wrong_shape_stop_the_run_before_any_row(tools):
    """Every row would carry the same usage.tools error: it is the run's mistake, said once up front."""
    rows = parse_many(iter(["Hi.<|im_end|>"] * 3), "qwen3", tools=tools)
    with pytest.raises(ArgumentError) as info:
        next(rows)
    assert info.value.code == "usage.tools"


def test_the_codes_a_batch_writes_into_rows_are_stable_error_codes():
    """parse_errors holds codes a reader can look up, the batch's own (lone surrogate, id type) included."""
    from grammar_parse import batch
    from grammar_parse.errors import ERROR_CODES
    assert {batch.SURROGATE_CODE, batch.ID_TYPE_CODE} <= set(ERROR_CODES)
