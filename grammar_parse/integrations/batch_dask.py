"""Parsing a Dask DataFrame of generation logs (``pip install 'grammar-parse[dask]'``).

::

    import dask.dataframe as dd
    from grammar_parse.batch import Columns
    from grammar_parse.integrations.batch_dask import parse_dataframe

    logs = dd.read_parquet("rollouts/")             # columns: id, completion, prompt, ...
    parsed = parse_dataframe(logs, "qwen3", columns=Columns(id="id", prompt="prompt"))
    parsed.to_parquet("parsed/")

:func:`parse_dataframe` selects the columns the rows are read from and maps :class:`PartitionParser` over
the partitions, with the result's ``meta``. Dask keeps no state per worker for ``map_partitions``, so the
parser keeps it: the first partition a process parses builds the
:class:`~grammar_parse.batch.TableParser` (the grammar and the tools' schemas compiled once), and the
process's later partitions reuse it. Parsing is pure Python and holds the GIL: more threads parse no
faster; the processes scheduler or ``dask.distributed`` workers parse in parallel.
"""

from __future__ import annotations

import pickle
import threading
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from grammar_parse.batch import Columns, TableParser, portable_grammar, rows_to_arrow

#: The parsers this process has built, by their settings; the oldest goes beyond _KEEP (a long-lived worker
#: may serve many jobs).
_built: dict[bytes, TableParser] = {}
_KEEP = 8
#: Threads parsing their first partitions at once build one parser between them.
_building = threading.Lock()


@dataclass(frozen=True)
class PartitionParser:
    """A pandas partition's parser, as the task graph carries it: the settings (which pickle, unlike a
    built grammar: ``grammar`` is a name, a path, a template dict or a
    :func:`~grammar_parse.batch.portable_grammar`), and the TableParser they stand for, built once per
    process."""

    grammar: Any
    columns: Columns
    prefix: str = ""
    tools: Any = None
    strict: bool = False

    def __call__(self, partition: Any) -> Any:
        """A pandas partition's result rows, on its index."""
        return self.parser()(partition)

    def parser(self) -> TableParser:
        """This process's TableParser for these settings (built on first use)."""
        key = pickle.dumps(self)
        with _building:
            parser = _built.get(key)
            if parser is None:
                while len(_built) >= _KEEP:
                    del _built[next(iter(_built))]
                parser = _built[key] = TableParser(self.grammar, columns=self.columns,
                                                   prefix=self.prefix, tools=self.tools, strict=self.strict)
        return parser


def result_meta(frame: Any, columns: Columns) -> Any:
    """The empty pandas frame the result partitions look like (Dask's ``meta``): the id typed as the id
    column of ``frame`` (a Dask DataFrame), null without one or for an id read by JMESPath."""
    empty = frame._meta
    id_type = None
    if columns.id is not None and columns.id in empty.columns:
        id_type = pa.Schema.from_pandas(empty[[columns.id]], preserve_index=False).field(columns.id).type
    return rows_to_arrow([], id_type).to_pandas()


def parse_dataframe(ddf: Any, grammar: Any, *, columns: Columns | None = None, prefix: str = "", tools: Any = None,
                    strict: bool = False) -> Any:
    """``ddf`` (a ``dask.dataframe.DataFrame``) parsed into result rows, one per row, partition for
    partition (each result partition keeps its input's index, so it joins back on the index or the id).
    ``columns``, ``prefix``, ``tools`` and ``strict`` are :func:`~grammar_parse.batch.parse_table`'s; the
    grammar is compiled once and travels compiled (a plain picklable value). Lazy, as Dask is."""
    columns = columns or Columns()
    frame = ddf[columns.roots()]
    parse = PartitionParser(portable_grammar(grammar), columns, prefix, tools, strict)
    return frame.map_partitions(parse, meta=result_meta(frame, columns))


__all__ = ["PartitionParser", "parse_dataframe", "result_meta"]
