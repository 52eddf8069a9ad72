"""Parsing many outputs (grammar_parse.batch): one row per record in order, every bad row an error in its
row (never an exception), the same rows from worker processes as from one, and the goldens' messages."""

from __future__ import annotations

import pytest

import grammar_parse as gp
from goldens import all_goldens
from grammar_parse.batch import Columns, TableParser, parse_many, parse_table, result_row, result_schema

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}]


def test_rows_in_order_with_their_fields():
    rows = list(parse_many([
        "<think>hm</think>Hello.",
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>',
        "<tool_call>{broken</tool_call>",
    ], "qwen3"))
    assert rows == [
        {"id": None, "reasoning": "hm", "content": "Hello.", "tool_calls": None, "parse_errors": None, "error": None},
        {"id": None, "reasoning": None, "content": None, "tool_calls": [{"name": "get_weather",
         "arguments": {"city": "Paris"}}], "parse_errors": None, "error": None},
        {"id": None, "reasoning": None, "content": "<tool_call>{broken</tool_call>", "tool_calls": None,
         "parse_errors": ["parse.json"], "error": None},
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
            assert row == result_row(golden.expected), (grammar, golden.name)
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

    from grammar_parse.cli import main

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
    assert list(result.columns) == ["id", "reasoning", "content", "tool_calls", "parse_errors", "error"]
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

    from grammar_parse.cli import main

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
