"""Parsing a Ray Dataset of generation logs (``pip install 'grammar-parse[ray]'``).

::

    import ray
    from grammar_parse.batch import Columns
    from grammar_parse.integrations.batch_ray import parse_dataset

    logs = ray.data.read_parquet("rollouts/")       # columns: id, completion, prompt, ...
    parsed = parse_dataset(logs, "qwen3", columns=Columns(id="id", prompt="prompt"), actors=8)
    parsed.write_parquet("parsed/")

The per-actor state is :class:`~grammar_parse.batch.TableParser` itself, a callable class as
``Dataset.map_batches`` wants one: each actor of the pool builds it (the grammar and the tools' schemas
compiled once) and parses batch after batch with it. :func:`parse_dataset` is that call spelled out::

    logs.map_batches(TableParser, batch_format="pyarrow", compute=ray.data.ActorPoolStrategy(size=8),
                     fn_constructor_kwargs={"grammar": "qwen3", "columns": Columns(id="id")})

(``concurrency=8`` in place of ``compute`` still works; recent releases log that it is deprecated). The
grammar travels to the actors as a name, a path, a template dict or a Grammar
(:func:`parse_dataset` compiles it once with :func:`~grammar_parse.batch.portable_grammar` and sends
the compiled Grammar). The
result rows have :func:`~grammar_parse.batch.result_schema` (the id of the id column's type): join them
back on the id. Size a fixed pool below the CPUs when a stage before it needs CPUs too (a repartition):
the actors hold theirs for the whole job, and that stage would wait for them forever.
"""

from __future__ import annotations

from typing import Any

import ray.data

from grammar_parse.batch import Columns, TableParser, portable_grammar


def parse_dataset(ds: Any, grammar: Any, *, columns: Columns | None = None, prefix: str = "", tools: Any = None,
                  strict: bool = False, actors: int | None = None, **map_batches: Any) -> Any:
    """``ds`` (a ``ray.data.Dataset``) parsed into result rows, one per row, by a pool of ``actors`` actors
    (None: Ray's autoscaling pool), each holding one TableParser. ``columns``, ``prefix``,
    ``tools`` and ``strict`` are :func:`~grammar_parse.batch.parse_table`'s; ``map_batches`` goes to
    ``Dataset.map_batches`` as it is (``batch_size``, ``num_cpus``, ...). Lazy, as Ray Data is."""
    if actors is not None:
        map_batches.setdefault("compute", ray.data.ActorPoolStrategy(size=actors))
    settings = {"grammar": portable_grammar(grammar), "columns": columns or Columns(), "prefix": prefix,
                "tools": tools, "strict": strict}
    return ds.map_batches(TableParser, batch_format="pyarrow", fn_constructor_kwargs=settings, **map_batches)


__all__ = ["parse_dataset"]
