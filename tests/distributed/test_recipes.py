"""The distributed recipes (grammar_parse.integrations.batch_*) in each engine's local mode: the same rows
as parse_table gives in this process, and one TableParser per worker, however many batches it parses.

The rows mix eight grammars (named by a column, a few rows naming none, so the batch's Grammar applies,
or one that does not exist), prompts, tools as JSON text (some not JSON), malformed outputs and missing
ones, under ids in shuffled order. The construction count is real: the recipe module's ``TableParser`` is
replaced by a subclass that appends a line to a file (with its process id) per construction and per call,
and the engine ships it to its workers with the recipe's code (a class defined in a function pickles by
value; the Daft module, whose class Daft's worker processes would otherwise import by name, is pickled by
value too). A recipe that built a parser per batch, or reached its workers without the subclass, fails
the count.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import pytest

import grammar_parse as gp
from goldens import goldens
from grammar_parse.batch import Columns, TableParser, parse_table

pa = pytest.importorskip("pyarrow")

FAMILIES = ("qwen3", "qwen3_coder", "gpt_oss", "llama3_json", "kimi_k2", "deepseek_v31", "glm45", "mistral")
COLUMNS = Columns(text="completion", prompt="prompt", tools="tools", id="id", grammar="model")
ROWS = 200
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}]


def log_rows(count: int = ROWS, seed: int = 18) -> Any:
    """``count`` rows of mixed families as an Arrow table (id, model, completion, prompt, tools)."""
    rng = random.Random(seed)
    samples = {f: [g for g in goldens(f) if "error" not in g.expected] for f in FAMILIES}
    rows = []
    for i in range(count):
        family = FAMILIES[i % len(FAMILIES)]
        golden = rng.choice(samples[family])
        text: str | None = golden.text
        if i % 9 == 4:  # malformed: cut off, or a brace gone
            text = golden.text[: rng.randrange(max(len(golden.text), 1))] if i % 2 else golden.text.replace("{", "", 1)
        if i % 23 == 5:
            text = None  # no output at all
        tools = golden.tools or (TOOLS if i % 4 == 1 else None)
        model: str | None = family
        if i % 10 == 3 and family == "qwen3":
            model = None  # the batch's grammar
        if i % 61 == 7:
            model = "no_such_grammar"
        rows.append({"id": i * 37 % count, "model": model, "completion": text, "prompt": golden.prefix,
                     "tools": "{not json" if i % 67 == 11 else json.dumps(tools) if tools else None})
    return pa.Table.from_pylist(rows, schema=pa.schema([("id", pa.int64()), ("model", pa.string()),
                                                        ("completion", pa.string()), ("prompt", pa.string()),
                                                        ("tools", pa.string())]))


@pytest.fixture(scope="module")
def logs() -> Any:
    return log_rows()


@pytest.fixture(scope="module")
def expected(logs: Any) -> list[dict[str, Any]]:
    """What parse_table gives in this process, ordered by id."""
    return by_id(parse_table(logs, gp.load_grammar("qwen3"), columns=COLUMNS).to_pylist())


def by_id(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda row: row["id"])


def test_the_rows_cover_what_the_recipes_must_carry(logs: Any, expected: list[dict[str, Any]]) -> None:
    assert sorted(logs.column("id").to_pylist()) == list(range(ROWS))
    assert logs.column("id").to_pylist() != list(range(ROWS))  # (shuffled: the engines' order is not checked)
    errors = [row["error"] or "" for row in expected]
    assert any(e.startswith("usage.batch") for e in errors) and any(e.startswith("usage.json") for e in errors)
    assert any(e.startswith("grammar.not_found") for e in errors)
    assert sum(row["tool_calls"] is not None for row in expected) > 40
    assert any(row["parse_errors"] for row in expected)
    assert any(call.get("errors") for row in expected for call in row["tool_calls"] or [])
    assert sum(row["error"] is None for row in expected) > 150


# ---------------------------------------------------------------------------- the construction count
def counting(log: Path) -> type[TableParser]:
    """A TableParser that appends ``init PID`` to ``log`` when built and ``call PID`` when it parses."""

    class CountedTableParser(TableParser):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            with open(log, "a", encoding="utf-8") as out:
                out.write(f"init {os.getpid()}\n")
            super().__init__(*args, **kwargs)

        def __call__(self, table: Any) -> Any:
            with open(log, "a", encoding="utf-8") as out:
                out.write(f"call {os.getpid()}\n")
            return super().__call__(table)

    return CountedTableParser


def events(log: Path) -> tuple[list[int], list[int]]:
    """The process ids of the constructions and of the calls the log holds."""
    lines = [line.split() for line in log.read_text(encoding="utf-8").splitlines()] if log.exists() else []
    return [int(pid) for kind, pid in lines if kind == "init"], [int(pid) for kind, pid in lines if kind == "call"]


def assert_one_parser_per_process(log: Path, *, processes: int, calls: int) -> None:
    """No process built more than one parser, at most ``processes`` built one, every batch was parsed by a
    process that built its parser first, and they parsed ``calls`` batches between them (more than there
    were parsers, or the count would prove nothing).

    A process may build its parser and parse nothing: an engine's pool starts all its workers, and which
    of them gets the batches is its scheduler's choice (Ray Data may queue several tasks on one actor,
    ``max_tasks_in_flight_per_actor``, so with four blocks the first actor ready may take them all).
    Asking every builder to have parsed made the Ray test fail once in two runs (reasoned from the
    failure, builders [a, b] and parsers [a]; Ray is not installed where this was changed); what the
    recipe promises is one parser per worker, reused."""
    inits, made = events(log)
    assert 1 <= len(inits) <= processes < calls
    assert sorted(inits) == sorted(set(inits)), f"a process built more than one parser: {inits}"
    assert set(made) <= set(inits), f"a process parsed without building its parser: {sorted(set(made))}, {inits}"
    assert len(made) == calls


POOL_LOGS = {  # a log of constructions and calls -> whether the one-parser-per-process check holds (2 workers, 6 calls)
    "each of two workers built once and parsed": ("init 1\ninit 2\n" + "call 1\ncall 2\n" * 3, True),
    "one worker took every batch, the other built and idled": ("init 1\ninit 2\n" + "call 1\n" * 6, True),
    "a parser per batch": ("init 1\ncall 1\n" * 6, False),
    "a worker parsed without building (the recipe's own class reached it)": ("init 1\n" + "call 1\ncall 2\n" * 3,
                                                                               False),
    "more workers built than the pool has": ("init 1\ninit 2\ninit 3\n" + "call 1\ncall 2\n" * 3, False),
    "a batch parsed twice": ("init 1\ninit 2\n" + "call 1\n" * 7, False),
}


@pytest.mark.parametrize("case", POOL_LOGS)
def test_the_parser_count_holds_whichever_worker_the_engine_feeds(case: str, tmp_path: Path) -> None:
    """The check the engine tests share, on logs of each kind: the scheduler's choice of worker (an actor
    that built its parser and got no batch) passes, a recipe that builds per batch or misses its workers
    fails. Runs without any engine."""
    text, holds = POOL_LOGS[case]
    log = tmp_path / "parsers.log"
    log.write_text(text, encoding="utf-8")
    if holds:
        assert_one_parser_per_process(log, processes=2, calls=6)
    else:
        with pytest.raises(AssertionError):
            assert_one_parser_per_process(log, processes=2, calls=6)


# ---------------------------------------------------------------------------- Ray Data
@pytest.fixture(scope="module")
def ray_local() -> Any:
    ray = pytest.importorskip("ray")
    pytest.importorskip("ray.data")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


# Ray Data's own DataContext sets options it deprecates (its warnings, not ours).
@pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context")
def test_ray(ray_local: Any, logs: Any, expected: list[dict[str, Any]], tmp_path: Path,
             monkeypatch: pytest.MonkeyPatch) -> None:
    from grammar_parse.integrations import batch_ray

    log = tmp_path / "parsers.log"
    monkeypatch.setattr(batch_ray, "TableParser", counting(log))
    # (blocks made in this process: no stage before the actors needs one of the two CPUs they hold)
    blocks = [logs.slice(start, 50) for start in range(0, ROWS, 50)]
    parsed = batch_ray.parse_dataset(ray_local.data.from_arrow(blocks), gp.load_grammar("qwen3"), columns=COLUMNS,
                                     actors=2, batch_size=20)
    tables = ray_local.get(parsed.to_arrow_refs())
    assert by_id(pa.concat_tables(tables).to_pylist()) == expected
    assert_one_parser_per_process(log, processes=2, calls=len(blocks) * -(-50 // 20))  # (a batch stays in its block)


# ---------------------------------------------------------------------------- Spark
@pytest.fixture(scope="module")
def spark() -> Any:
    pytest.importorskip("pyspark")
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2]").appName("grammar_parse recipes")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.sql.execution.arrow.maxRecordsPerBatch", "10").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def spark_rows(frame: Any) -> list[dict[str, Any]]:
    """A Spark DataFrame's rows as plain dicts (collect, not toArrow: Spark 3.5 has no toArrow)."""
    return [row.asDict(recursive=True) for row in frame.collect()]


# PySpark warns that it does not yet fully support pandas 3 (it imports pandas, and mapInArrow checks it).
@pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")
def test_spark(spark: Any, logs: Any, expected: list[dict[str, Any]], tmp_path: Path,
               monkeypatch: pytest.MonkeyPatch) -> None:
    from pyspark.sql.types import LongType

    from grammar_parse.integrations import batch_spark

    log = tmp_path / "parsers.log"
    monkeypatch.setattr(batch_spark, "TableParser", counting(log))
    frame = spark.createDataFrame(logs).repartition(4)
    parsed = batch_spark.parse_dataframe(frame, gp.load_grammar("qwen3"), columns=COLUMNS)
    assert parsed.schema == batch_spark.result_struct(LongType())
    assert by_id(spark_rows(parsed)) == expected
    # (one parser per task, that is per partition: Spark's reused Python workers run several tasks each)
    inits, calls = events(log)
    assert len(inits) == frame.rdd.getNumPartitions() == 4
    assert len(calls) >= ROWS // 10 > len(inits)


@pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")
def test_spark_without_an_id_and_with_an_id_read_by_jmespath(spark: Any, logs: Any) -> None:
    from pyspark.sql import functions as F
    from pyspark.sql.types import NullType, StringType

    from grammar_parse.integrations.batch_spark import parse_dataframe

    frame = spark.createDataFrame(logs.slice(0, 40))
    bare = parse_dataframe(frame, "qwen3", columns=Columns(text="completion"))
    assert bare.schema["id"].dataType == NullType()
    want = parse_table(logs.slice(0, 40), "qwen3", columns=Columns(text="completion")).to_pylist()
    assert sorted(spark_rows(bare), key=repr) == sorted(want, key=repr)
    nested = frame.select(F.struct("id", "completion").alias("record"))
    keyed = parse_dataframe(nested, "qwen3", columns=Columns(text="record.completion", id="record.id"))
    assert keyed.schema["id"].dataType == StringType()  # (typed by the values: cast to the declared string)
    assert sorted(row["id"] for row in spark_rows(keyed)) == sorted(str(i) for i in logs.column("id")[:40].to_pylist())


# ---------------------------------------------------------------------------- Dask
@pytest.mark.parametrize("scheduler", ["synchronous", "threads"])
def test_dask(scheduler: str, logs: Any, expected: list[dict[str, Any]], tmp_path: Path,
              monkeypatch: pytest.MonkeyPatch) -> None:
    dask = pytest.importorskip("dask")
    dd = pytest.importorskip("dask.dataframe")
    from grammar_parse.batch import result_schema
    from grammar_parse.integrations import batch_dask

    log = tmp_path / "parsers.log"
    monkeypatch.setattr(batch_dask, "TableParser", counting(log))
    monkeypatch.setattr(batch_dask, "_built", {})  # (this process may have built one in an earlier test)
    frame = dd.from_pandas(logs.to_pandas(), npartitions=5)
    parsed = batch_dask.parse_dataframe(frame, gp.load_grammar("qwen3"), columns=COLUMNS)
    assert list(parsed.columns) == result_schema().names
    with dask.config.set(scheduler=scheduler, num_workers=2):
        result = parsed.compute()
    rows = pa.Table.from_pandas(result, schema=result_schema(pa.int64()), preserve_index=False).to_pylist()
    assert by_id(rows) == expected
    assert list(result.index) == list(logs.to_pandas().index)  # (each partition keeps its input's index)
    assert_one_parser_per_process(log, processes=1, calls=5)


# ---------------------------------------------------------------------------- Daft
@pytest.mark.parametrize("concurrency", [None, 2])
def test_daft(concurrency: int | None, logs: Any, expected: list[dict[str, Any]], tmp_path: Path,
              monkeypatch: pytest.MonkeyPatch) -> None:
    daft = pytest.importorskip("daft")
    from daft.pickle import cloudpickle

    from grammar_parse.integrations import batch_daft

    log = tmp_path / "parsers.log"
    monkeypatch.setattr(batch_daft, "TableParser", counting(log))
    # (Daft's worker processes would import the recipe by name, without the subclass)
    cloudpickle.register_pickle_by_value(batch_daft)
    try:
        with daft.execution_config_ctx(default_morsel_size=20):
            parsed = batch_daft.parse_dataframe(daft.from_arrow(logs), gp.load_grammar("qwen3"), columns=COLUMNS,
                                                concurrency=concurrency).to_arrow()
    finally:
        cloudpickle.unregister_pickle_by_value(batch_daft)
    assert by_id(parsed.to_pylist()) == expected
    inits, calls = events(log)
    assert len(calls) >= ROWS // 20
    if concurrency is None:
        # Daft's choice, in this process or in workers of its own; where its threads share an instance, the
        # instance is made lazily without a lock, and each thread may build one at the start.
        assert set(calls) <= set(inits) and len(inits) <= (os.cpu_count() or 1) < len(calls)
    else:
        assert_one_parser_per_process(log, processes=concurrency, calls=len(calls))
        assert os.getpid() not in inits


def test_daft_takes_an_id_column_not_an_expression() -> None:
    daft = pytest.importorskip("daft")
    from grammar_parse.errors import ArgumentError
    from grammar_parse.integrations.batch_daft import parse_dataframe

    frame = daft.from_pydict({"record": [{"id": 1, "completion": "hi"}]})
    with pytest.raises(ArgumentError, match="no id column 'record.id'"):
        parse_dataframe(frame, "qwen3", columns=Columns(text="record.completion", id="record.id"))
