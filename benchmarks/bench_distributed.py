"""Benchmark: the distributed recipes (grammar_parse.integrations.batch_*) in local mode, against
parse_table in this process on the same rows.

    python benchmarks/bench_distributed.py                  # 20,000 rows of each workload, every installed engine
    python benchmarks/bench_distributed.py --rows 5000 --engine dask --workers 2 --workload short

The rows are bench_batch's workloads (mixed: eight families, one in ten malformed; short: one-sentence
qwen3 answers), each row naming its grammar, the tools as JSON text, in an Arrow table. Each engine starts
once (its start-up reported apart: ``ray.init``, the SparkSession, the import), takes the rows in memory
before the clock starts, and parses them ``--repeat`` times with each worker count (Ray actors, Spark
tasks, Dask processes of one pool, Daft processes; one Dask worker is its synchronous scheduler, one Daft
worker its default, which may be this process), the result collected here as Arrow. The first run of a worker count includes starting its workers and is its
own column; rows/s is the best run's, and the ratio is against parse_table in this process (one core).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import multiprocessing
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import pyarrow as pa

from bench_batch import COLUMNS, rollouts, short_rows

from grammar_parse.batch import parse_table

ENGINES = ("ray", "spark", "dask", "daft")
WORKLOADS = {"mixed": rollouts, "short": short_rows}
#: Dask's worker processes start from a clean server process, not a fork of this one (which holds the
#: threads of the engines before it).
FORKSERVER = multiprocessing.get_context("forkserver")
#: Rows per input block (Ray, Daft) and per Ray batch; Spark has a partition per worker, Dask four.
BLOCK_ROWS = 1000
#: A started engine's loader ((rows, workers) -> a job that parses the rows and returns the result's row
#: count) and its stop.
Engine = tuple[Callable[[Any, int], Callable[[], int]], Callable[[], None]]


def blocks(table: Any) -> list[Any]:
    """The table as BLOCK_ROWS-row tables: an in-memory stand-in for a source of many files."""
    return [table.slice(start, BLOCK_ROWS) for start in range(0, table.num_rows, BLOCK_ROWS)]


def log_table(workload: str, rows: int) -> Any:
    """A workload's rows as an Arrow table, tools as JSON text (one Arrow type for every tool schema)."""
    return pa.Table.from_pylist([{**r, "tools": json.dumps(r["tools"]) if r["tools"] else None}
                                 for r in WORKLOADS[workload](rows)])


def start_ray(cores: int) -> Engine:
    import ray

    from grammar_parse.integrations.batch_ray import parse_dataset

    ray.init(num_cpus=cores, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False

    def load(table: Any, workers: int) -> Callable[[], int]:
        dataset = ray.data.from_arrow(blocks(table)).materialize()
        return lambda: sum(t.num_rows for t in ray.get(
            parse_dataset(dataset, None, columns=COLUMNS, actors=workers, batch_size=BLOCK_ROWS).to_arrow_refs()))

    return load, ray.shutdown


def start_spark(cores: int) -> Engine:
    from pyspark.sql import SparkSession

    from grammar_parse.integrations.batch_spark import parse_dataframe

    spark = (SparkSession.builder.master(f"local[{cores}]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")

    def load(table: Any, workers: int) -> Callable[[], int]:
        frame = spark.createDataFrame(table).repartition(workers).cache()
        frame.count()
        return lambda: int(parse_dataframe(frame, None, columns=COLUMNS).toArrow().num_rows)

    return load, spark.stop


def start_dask(cores: int) -> Engine:
    import dask
    import dask.dataframe as dd

    from grammar_parse.integrations.batch_dask import parse_dataframe

    pools: dict[int, ProcessPoolExecutor] = {}  # (one per worker count, kept: its processes keep their parser)

    def load(table: Any, workers: int) -> Callable[[], int]:
        frame = dd.from_pandas(table.to_pandas(), npartitions=workers * 4)
        if workers == 1:
            settings: dict[str, Any] = {"scheduler": "synchronous"}
        else:
            if workers not in pools:
                pools[workers] = ProcessPoolExecutor(workers, mp_context=FORKSERVER)
            settings = {"scheduler": "processes", "pool": pools[workers]}

        def run() -> int:
            with dask.config.set(settings):
                return len(parse_dataframe(frame, None, columns=COLUMNS).compute())

        return run

    def stop() -> None:
        for pool in pools.values():
            pool.shutdown()

    return load, stop


def start_daft(cores: int) -> Engine:
    import daft

    from grammar_parse.integrations.batch_daft import parse_dataframe

    def load(table: Any, workers: int) -> Callable[[], int]:
        frame = daft.from_arrow(blocks(table))
        concurrency = None if workers == 1 else workers
        return lambda: int(parse_dataframe(frame, None, columns=COLUMNS, concurrency=concurrency).to_arrow().num_rows)

    return load, lambda: None


STARTS: dict[str, Callable[[int], Engine]] = {"ray": start_ray, "spark": start_spark, "dask": start_dask, "daft": start_daft}


def timed(job: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = job()
    return time.perf_counter() - started, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--engine", action="append", choices=ENGINES, help="engines (default: every one installed)")
    parser.add_argument("--workers", type=int, action="append", help="worker counts (default 1 and 2)")
    parser.add_argument("--workload", choices=[*WORKLOADS, "both"], default="both")
    parser.add_argument("--repeat", type=int, default=2, help="runs per worker count (the best is reported)")
    args = parser.parse_args()
    workers = args.workers or [1, 2]
    engines = [e for e in args.engine or ENGINES if importlib.util.find_spec(e.replace("spark", "pyspark"))]
    tables = {w: log_table(w, args.rows) for w in (WORKLOADS if args.workload == "both" else [args.workload])}

    local = {}
    for workload, table in tables.items():
        parse_table(table.slice(0, 100), None, columns=COLUMNS)  # (the grammars built, as in a worker)
        local[workload] = min(timed(lambda: parse_table(table, None, columns=COLUMNS))[0] for _ in range(args.repeat))
        print(f"{workload}: {table.num_rows:,} rows; parse_table in this process {local[workload]:.2f} s, "
              f"{table.num_rows / local[workload]:,.0f} rows/s")
    print("\n| engine | start-up s | workload | workers | first run s | best run s | rows/s | vs parse_table |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    for engine in engines:
        startup, (load, stop) = timed(lambda: STARTS[engine](max(workers)))
        for workload, table in tables.items():
            for count in workers:
                job = load(table, count)
                runs = [timed(job) for _ in range(args.repeat)]
                assert all(rows == table.num_rows for _, rows in runs), (engine, runs)
                best = min(seconds for seconds, _ in runs)
                print(f"| {engine} | {startup:.1f} | {workload} | {count} | {runs[0][0]:.2f} | {best:.2f} | "
                      f"{table.num_rows / best:,.0f} | {local[workload] / best:.2f}× |", flush=True)
        stop()


if __name__ == "__main__":
    main()
