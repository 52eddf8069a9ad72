"""Parsing a Daft DataFrame of generation logs (``pip install 'grammar-parse[daft]'``).

::

    import daft
    from grammar_parse.batch import Columns
    from grammar_parse.integrations.batch_daft import parse_dataframe

    logs = daft.read_parquet("rollouts/")           # columns: id, completion, prompt, ...
    parsed = parse_dataframe(logs, "qwen3", columns=Columns(id="id", prompt="prompt"))
    parsed.write_parquet("parsed/")

:class:`GrammarParser` is a Daft class (``@daft.cls``, with a ``daft.method.batch`` method: the class API
of recent Daft releases, which ``@daft.udf`` classes preceded): Daft builds each instance where it runs,
once, so the :class:`~grammar_parse.batch.TableParser` it holds (the grammar and the tools' schemas
compiled once) parses batch after batch. Its batch method ``parse`` takes the columns the rows are read
from as keyword arguments and gives the result's reasoning, content, tool_calls, parse_errors and error,
unnested into columns beside whatever else is selected; by hand::

    parser = GrammarParser("qwen3", columns=Columns(prompt="prompt"))
    logs.select("id", parser.parse(completion=logs["completion"], prompt=logs["prompt"]))

The id is the input's own column, selected beside the result (so it must be a column, not a JMESPath
expression). Without ``concurrency`` Daft runs the instances where it chooses, in this process or in
workers of its own (in this process, each of its threads may build one at the start: Daft makes the
instance lazily, without a lock); with it, in a pool of that many worker processes. The grammar travels
to them as a name, a path, a template dict or a Grammar (:func:`parse_dataframe` compiles it once and
sends the compiled Grammar, a plain picklable value).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import daft
import pyarrow as pa

from grammar_parse.batch import Columns, TableParser, portable_grammar, result_schema
from grammar_parse.errors import ArgumentError

#: What ``parse`` returns: the result row without its id (the id is the input's own column).
RESULT = pa.struct(list(result_schema())[1:])


@daft.cls
class GrammarParser:
    """The per-instance state of a Daft query: one TableParser, built where Daft runs the instance."""

    def __init__(self, grammar: Any, *, columns: Columns | None = None, prefix: str = "", tools: Any = None,
                 strict: bool = False) -> None:
        self.parser = TableParser(grammar, columns=dataclasses.replace(columns or Columns(), id=None),
                                  prefix=prefix, tools=tools, strict=strict)

    def parse(self, **inputs: daft.Series) -> pa.StructArray:
        """The result of a batch, given the columns its rows are read from by name."""
        batch = pa.RecordBatch.from_arrays([series.to_arrow() for series in inputs.values()], names=list(inputs))
        parsed = self.parser(batch)
        return pa.StructArray.from_arrays(parsed.columns[1:], fields=list(parsed.schema)[1:])

    # (daft.method.batch applied as a call, not with @: Daft is untyped, and mypy --strict refuses untyped
    # decorators, under an error code that differs between mypy releases)
    parse = daft.method.batch(parse, return_dtype=daft.DataType.from_arrow_type(RESULT), unnest=True)


def parse_dataframe(df: Any, grammar: Any, *, columns: Columns | None = None, prefix: str = "", tools: Any = None,
                    strict: bool = False, concurrency: int | None = None) -> Any:
    """``df`` (a ``daft.DataFrame``) parsed into result rows, one per row: the id column (null without one),
    then the result's columns. ``columns``, ``prefix``, ``tools`` and ``strict`` are
    :func:`~grammar_parse.batch.parse_table`'s; ``concurrency``: that many GrammarParser instances, each in
    its own process (None: Daft's choice). Lazy, as Daft is."""
    columns = columns or Columns()
    if columns.id is not None and columns.id not in df.column_names:
        raise ArgumentError(f"the DataFrame has no id column {columns.id!r}: Daft selects the id beside the "
                            "result, so it is a column (not a JMESPath expression)", code="usage.batch",
                            hint="Put the id in a column of its own (df.with_column).")
    parse: Any = GrammarParser(portable_grammar(grammar), columns=columns, prefix=prefix, tools=tools,
                               strict=strict).parse  # (a Daft function, as daft.cls makes it)
    if concurrency is not None:
        parse = parse.with_concurrency(concurrency)
    row_id = df[columns.id].alias("id") if columns.id is not None else daft.lit(None).alias("id")
    return df.select(row_id, parse(**{name: df[name] for name in columns.roots() if name != columns.id}))


__all__ = ["GrammarParser", "RESULT", "parse_dataframe"]
