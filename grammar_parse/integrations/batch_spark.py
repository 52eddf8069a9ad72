"""Parsing a Spark DataFrame of generation logs (``pip install 'grammar-parse[spark]'``).

::

    from grammar_parse.batch import Columns
    from grammar_parse.integrations.batch_spark import parse_dataframe

    logs = spark.read.parquet("rollouts/")          # columns: id, completion, prompt, ...
    parsed = parse_dataframe(logs, "qwen3", columns=Columns(id="id", prompt="prompt"))
    parsed.write.parquet("parsed/")

:func:`parse_dataframe` selects the columns the rows are read from and runs ``mapInArrow`` with
:func:`partition_parser`: each task builds one :class:`~grammar_parse.batch.TableParser` (the grammar and
the tools' schemas compiled once) and parses its partition's Arrow batches with it
(``spark.sql.execution.arrow.maxRecordsPerBatch`` rows each). The result has :func:`result_struct`'s
schema: the id, reasoning, content, tool_calls (an array of ``{name, arguments, errors}`` structs, the
arguments JSON text), parse_errors and error. Join it back on the id. By hand::

    logs.mapInArrow(partition_parser("qwen3", columns=Columns(id="id")), result_struct(LongType()))
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import DataType, NullType, StringType, StructField, StructType

from grammar_parse.batch import Columns, TableParser, portable_grammar, result_schema


def result_struct(id_type: DataType | None = None) -> StructType:
    """The Spark schema of result rows (:func:`~grammar_parse.batch.result_schema` in Spark's types), the id
    of ``id_type`` (NullType without one: the rows had no id column)."""
    fields = from_arrow_schema(result_schema()).fields[1:]
    return StructType([StructField("id", id_type or NullType(), True), *fields])


def partition_parser(grammar: Any, *, columns: Columns | None = None, prefix: str = "", tools: Any = None,
                     strict: bool = False, id_type: pa.DataType | None = None
                     ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function ``mapInArrow`` runs on each partition: one TableParser per task, built before the first
    batch, parses every batch of the partition. ``id_type``: the Arrow type of the ids Spark expects back,
    which a batch's ids are cast to when they differ (ids read by a JMESPath expression are typed by their
    values, batch by batch; a batch of only null ids is of the null type)."""
    portable, columns = portable_grammar(grammar), columns or Columns()

    def parse_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        parser = TableParser(portable, columns=columns, prefix=prefix, tools=tools, strict=strict)
        for batch in batches:
            parsed = parser(batch)
            if id_type is not None and parsed.schema.field("id").type != id_type:
                schema = parsed.schema.set(0, pa.field("id", id_type))
                parsed = pa.RecordBatch.from_arrays([parsed.column(0).cast(id_type), *parsed.columns[1:]],
                                                    schema=schema)
            yield parsed

    return parse_partition


def parse_dataframe(df: Any, grammar: Any, *, columns: Columns | None = None, prefix: str = "", tools: Any = None,
                    strict: bool = False, id_type: DataType | None = None) -> Any:
    """``df`` (a ``pyspark.sql.DataFrame``) parsed into result rows, one per row (:func:`result_struct`).
    ``columns``, ``prefix``, ``tools`` and ``strict`` are :func:`~grammar_parse.batch.parse_table`'s. The id
    keeps the id column's type; ``id_type`` types ids read by a JMESPath expression (default string).
    Lazy, as Spark is: nothing is parsed before an action."""
    columns = columns or Columns()
    if id_type is None and columns.id is not None:
        id_type = df.schema[columns.id].dataType if columns.id in df.columns else StringType()
    spark_schema = result_struct(id_type)
    parse = partition_parser(grammar, columns=columns, prefix=prefix, tools=tools, strict=strict,
                             id_type=to_arrow_schema(spark_schema).field("id").type)
    return df.select(*columns.roots()).mapInArrow(parse, spark_schema)


__all__ = ["parse_dataframe", "partition_parser", "result_struct"]
