"""The grammar workbench: write a model's format, see every sample parse live, and ship it to the engines
from one local web page (``grammar-parse workbench``; docs/workbench.md).

:func:`open_workbench` gathers a session: the grammar (a ``.lark`` or template ``.json`` file, a new file to
start, or a built-in, read-only), the samples (a golden-layout folder or a JSONL log read with the batch's
:class:`~grammar_parse.batch.Columns`) and the model whose chat template a grammar can start from.
:func:`serve_workbench` serves it on 127.0.0.1 with the gateway's server stack; the page and its JSON API are
described in docs/workbench.md. The modules, one per stage: ``_files`` (where writes may go, atomically),
``_source`` (the grammar's text, compiled or its load errors; starting points; engine registration),
``_samples`` (reading samples within limits, their statuses, golden files), ``_result`` (the result pane of
one sample), ``_api`` (the session and what each API call does), ``_app`` (the ASGI app and its guards),
``static/`` (the page: plain HTML, CSS and JavaScript, nothing fetched from elsewhere).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .._engine.library import looks_like_path
from ..batch import Columns
from ..errors import ArgumentError
from ._api import PROBLEM_CODES, Workbench, WorkbenchLimits
from ._app import WorkbenchApp
from ._samples import SampleLimits, Samples, load_folder, load_jsonl
from ._source import KINDS, Source, builtin_source, chat_template_source, skeleton_source


def _file_source(path: Path, model: Path | None, limits: WorkbenchLimits) -> Source:
    """The grammar in ``path``, or a new one to be saved there (from the model's chat template, else a skeleton).
    A path that is no grammar file (a model directory, a chat template) is a model to start from, as
    ``load_grammar`` reads one."""
    if path.exists() and (path.is_dir() or path.suffix.lower() not in KINDS.values()):
        return chat_template_source(path)
    kind = "json" if path.suffix.lower() == ".json" else "lark"
    if not path.exists():
        made = chat_template_source(model) if model is not None and kind == "lark" else skeleton_source()
        if kind == "json":
            made = Source('{\n  "start_anchor": "<|im_start|>assistant\\n",\n  "fields": {"content": {}}\n}\n', "json")
        made.path, made.name = path.resolve(), path.stem
        return made
    try:
        if path.stat().st_size > limits.max_source_chars * 4:
            raise ArgumentError(f"{path} is larger than the workbench takes ({limits.max_source_chars} characters).",
                                code="usage.file", hint="A grammar is a few kilobytes: is this the right file?")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ArgumentError(f"cannot read the grammar {path}: {e}.", code="usage.file",
                            hint="Give a .lark grammar or a .json template, saved as UTF-8.") from None
    return Source(text, kind, path.resolve(), None, path.stem)


def _samples(given: str | os.PathLike[str] | None, columns: Columns | None, limits: SampleLimits) -> Samples:
    if given is None:
        return Samples()
    path = Path(given)
    if path.is_dir():
        return load_folder(path, limits)
    if path.is_file() and path.suffix.lower() in (".jsonl", ".json", ".ndjson"):
        return load_jsonl(path, columns or Columns(), limits)
    raise ArgumentError(f"the samples {path} are neither a folder nor a JSONL file.", code="usage.file",
                        hint="Give a folder of .txt outputs (with .prefix.txt, .tools.json, .json beside them) or "
                             "a .jsonl log.")


def open_workbench(grammar: str | os.PathLike[str] | None = None, *, samples: str | os.PathLike[str] | None = None,
                   model_dir: str | os.PathLike[str] | None = None, columns: Columns | None = None,
                   root: str | os.PathLike[str] | None = None, limits: WorkbenchLimits | None = None) -> Workbench:
    """A workbench session. ``grammar``: a ``.lark`` or ``.json`` path (a missing file is made when saved, and
    starts from the model's chat template or a skeleton), a built-in name (read-only: saved under a new path),
    or None (start from the model, else a skeleton). ``samples``: a golden-layout folder or a JSONL log, read
    with ``columns``. ``root``: the folder new files may be written in (default: the working directory)."""
    limits = limits or WorkbenchLimits()
    model = Path(model_dir) if model_dir is not None else None
    if model is not None and not model.exists():
        raise ArgumentError(f"the model {model} does not exist.", code="usage.file",
                            hint="Give the model's directory or its chat template file.")
    if grammar is None:
        source = chat_template_source(model) if model is not None else skeleton_source()
    elif isinstance(grammar, os.PathLike) or looks_like_path(str(grammar)):
        source = _file_source(Path(grammar), model, limits)
    else:
        source = builtin_source(str(grammar))
    return Workbench(source, _samples(samples, columns, limits.samples), root=Path(root or Path.cwd()), model=model,
                     limits=limits)


def serve_workbench(bench: Workbench, *, port: int = 0, on_ready: Callable[[str], None] | None = None,
                    token: str | None = None, log_level: str = "warning", **options: Any) -> None:
    """Serve the workbench on 127.0.0.1 (loopback only) and ``port`` (0: a free one) until interrupted;
    ``on_ready(url)`` gets the page's address, token included, once the port is bound."""
    from ..serving._server import serve

    app = WorkbenchApp(bench, token=token)
    serve(app, "127.0.0.1", port, log_level=log_level,
          on_ready=(lambda base: on_ready(app.url(base))) if on_ready else None, **options)


__all__ = ["KINDS", "PROBLEM_CODES", "SampleLimits", "Workbench", "WorkbenchApp", "WorkbenchLimits", "open_workbench",
           "serve_workbench"]
