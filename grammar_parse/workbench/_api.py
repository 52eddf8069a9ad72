"""The workbench's state and what each API call does to it: plain methods taking and returning JSON data,
raising :class:`Refusal` (a problem code and what to change) for a request it will not serve. The ASGI app
(``_app``) routes requests here, one at a time, each within the time bound; nothing here does HTTP."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._engine.library import looks_like_path
from ..errors import GrammarParseError
from ._files import PathRefused, atomic_write, folder_inside, inside
from ._result import result
from ._samples import STATUSES, SampleLimits, Samples, status_of, statuses, write_golden
from ._source import (KINDS, Source, builtin_names, builtin_source, chat_template_source, registration,
                      skeleton_source)

#: Every problem code the workbench answers with: code -> (HTTP status, the situation it names).
PROBLEM_CODES: dict[str, tuple[int, str]] = {
    "invalid_request": (400, "the body is not JSON, not of the shape the endpoint takes, or past a size limit"),
    "path_refused": (400, "a path outside the working directory or the samples folder, or of the wrong kind"),
    "forbidden": (403, "the Host or Origin header is not this workbench's, or the token is missing or wrong"),
    "not_found": (404, "no endpoint, sample or built-in grammar by that name"),
    "method_not_allowed": (405, "the endpoint exists but not for this method"),
    "request_timeout": (408, "the body did not arrive within the body read timeout"),
    "read_only": (409, "the grammar is a built-in or has no path yet: save it under a path"),
    "no_grammar": (409, "the grammar does not compile (its load errors say why), so nothing can be parsed"),
    "no_folder": (409, "the samples come from no folder: say where the golden files go"),
    "no_model": (409, "the workbench was started without --model-dir"),
    "start_failed": (422, "the starting point could not be made (the model's chat template fits no grammar)"),
    "request_too_large": (413, "the body is larger than the limit"),
    "unsupported_media_type": (415, "the body is not declared as application/json"),
    "internal_error": (500, "the workbench failed (its log has the error)"),
    "busy": (503, "the last parse is still running past the time bound: retry shortly"),
}


class Refusal(Exception):
    """A request the workbench will not serve: a code of :data:`PROBLEM_CODES` and what to change."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code, self.detail, self.status = code, detail, PROBLEM_CODES[code][0]


@dataclass(frozen=True)
class WorkbenchLimits:
    """What the workbench accepts: a grammar's source, a sample's and the samples' sizes, a page of samples,
    the time checking all samples may take, and the time one request's parse may take (past it the request is
    answered ``busy`` and the next waits for the parse to end)."""

    max_source_chars: int = 256_000
    samples: SampleLimits = field(default_factory=SampleLimits)
    max_page: int = 500
    check_seconds: float = 10.0
    parse_seconds: float = 20.0


def _text(body: dict[str, Any], key: str, limit: int, *, default: str | None = None) -> str:
    value = body.get(key, default)
    if not isinstance(value, str):
        raise Refusal("invalid_request", f"{key}: must be text")
    if len(value) > limit:
        raise Refusal("invalid_request", f"{key}: at most {limit} characters are accepted (this one has {len(value)})")
    return value


def _tools(body: dict[str, Any]) -> Any:
    tools = body.get("tools")
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
        raise Refusal("invalid_request", "tools: must be a list of tool definitions, or null")
    return tools


class Workbench:
    """One author's session: the grammar, the samples and their statuses, the folders it may write in.

    ``root`` is the working directory (grammars are saved inside it), ``model`` the model directory or chat
    template the "start from the chat template" action reads."""

    def __init__(self, source: Source, samples: Samples | None = None, *, root: Path, model: Path | None = None,
                 limits: WorkbenchLimits | None = None) -> None:
        self.source, self.samples = source, samples or Samples()
        self.root, self.model = root.resolve(), model
        self.limits = limits or WorkbenchLimits()
        self.lock = threading.Lock()  # (held by the thread doing a request's work: one at a time)
        self.status: dict[int, str] = {}
        if self.source.grammar is None and not self.source.errors:
            self.source.compile()
        self.recheck()

    # ------------------------------------------------------------------ reading
    def recheck(self) -> None:
        """Check every sample against the grammar (after it changed), within ``check_seconds``."""
        self.status = statuses(self.source.grammar, self.samples.items, self.limits.check_seconds)

    def state(self, offset: int = 0, limit: int = 100, only: str | None = None) -> dict[str, Any]:
        """The grammar and one page of samples (``only``: of one status), with the count of each status."""
        limit = max(1, min(limit, self.limits.max_page))
        chosen = [s for s in self.samples.items if only is None or self.status.get(s.id) == only]
        counts = {name: 0 for name in STATUSES}
        for value in self.status.values():
            counts[value] += 1
        source = self.source
        return {"grammar": {"source": source.text, "kind": source.kind, "name": source.name,
                            "path": str(source.path) if source.path else None, "builtin": source.builtin,
                            "read_only": source.read_only, "errors": source.errors, "note": source.note,
                            "compiled": source.grammar is not None,
                            # (the message's fields and their roles, as the compiled format says: a
                            # component region, such as an XML argument, is no field of the message)
                            "fields": dict(source.grammar.format.field_roles) if source.grammar else {}},
                "samples": {"total": len(chosen), "offset": offset, "limit": limit, "counts": counts,
                            "source": self.samples.source, "folder": str(self.samples.folder) if self.samples.folder
                            else None, "truncated": self.samples.truncated,
                            "items": [s.summary(self.status.get(s.id, "unchecked"))
                                      for s in chosen[max(0, offset):max(0, offset) + limit]]},
                "root": str(self.root), "model": str(self.model) if self.model else None, "builtins": builtin_names()}

    def sample(self, sample_id: int) -> dict[str, Any]:
        """One sample as its editor shows it, with its status."""
        return {**self._sample(sample_id).detail(), "status": self.status.get(sample_id, "unchecked")}

    def result(self, sample_id: int, chunk: int) -> dict[str, Any]:
        """The result pane of one sample, streamed in chunks of ``chunk`` characters (``_result``)."""
        found = result(self._grammar(), self._sample(sample_id), chunk)
        self.status[sample_id] = found["status"]  # (this parse checked it: the list shows it from now on)
        return found

    def registration(self) -> dict[str, Any]:
        """The vLLM and SGLang snippets that serve the grammar (``_source.registration``)."""
        return registration(self.source)

    # ------------------------------------------------------------------ changing
    def set_grammar(self, body: dict[str, Any]) -> dict[str, Any]:
        """New grammar text (the author typing): compiled, and every sample checked again."""
        text = _text(body, "source", self.limits.max_source_chars)
        kind = body.get("kind", self.source.kind)
        if kind not in KINDS:
            raise Refusal("invalid_request", f"kind: must be one of {', '.join(KINDS)}")
        self.source.text, self.source.kind, self.source.note = text, kind, ""
        self.source.compile()
        self.recheck()
        return self.state(*_page(body))

    def start(self, body: dict[str, Any]) -> dict[str, Any]:
        """Replace the grammar with a starting point: a built-in, the model's chat template, a skeleton. The
        path to save to is kept (the file the command line named); a built-in opens read-only."""
        kind = body.get("from")
        try:
            if kind == "builtin":
                name = _text(body, "name", 200)
                if looks_like_path(name):  # (a built-in only: this call reads no file a page names)
                    raise Refusal("not_found", f"{name[:80]!r} is not a built-in grammar's name")
                made = builtin_source(name)
            elif kind == "chat_template":
                if self.model is None:
                    raise Refusal("no_model", "start the workbench with --model-dir to start from its chat template")
                made = chat_template_source(self.model)
            elif kind == "skeleton":
                made = skeleton_source()
            else:
                raise Refusal("invalid_request", "from: must be builtin, chat_template or skeleton")
        except GrammarParseError as e:
            code = "not_found" if e.code == "grammar.not_found" else "start_failed"
            raise Refusal(code, f"[{e.code}] {str(e)[:1500]}") from None
        if made.builtin is None and self.source.path is not None and self.source.kind == "lark":
            made.path = self.source.path
        self.source = made
        if made.grammar is None:
            made.compile()
        self.recheck()
        return self.state(*_page(body))

    def put_sample(self, sample_id: int, body: dict[str, Any]) -> dict[str, Any]:
        """Edit a sample (its output, prompt, tools) and check it again; nothing is written to disk."""
        sample = self._sample(sample_id)
        limit = self.limits.samples.max_chars
        sample.text = _text(body, "text", limit, default=sample.text)
        sample.prefix = _text(body, "prefix", limit, default=sample.prefix)
        if "tools" in body:
            sample.tools = _tools(body)
        sample.problem, sample.edited = None, True
        self.status.update(statuses(self.source.grammar, [sample], self.limits.check_seconds))
        return self.sample(sample_id)

    def add_sample(self, body: dict[str, Any]) -> dict[str, Any]:
        """A pasted output, added as a sample."""
        if len(self.samples.items) >= self.limits.samples.max_samples:
            raise Refusal("invalid_request", f"at most {self.limits.samples.max_samples} samples are kept")
        limit = self.limits.samples.max_chars
        name = _text(body, "name", 128, default=f"pasted_{len(self.samples.items)}") or "pasted"
        sample = self.samples.add(name, _text(body, "text", limit), prefix=_text(body, "prefix", limit, default=""),
                                  tools=_tools(body), origin="pasted")
        self.status.update(statuses(self.source.grammar, [sample], self.limits.check_seconds))
        return self.sample(sample.id)

    def save(self, body: dict[str, Any]) -> dict[str, Any]:
        """Write the grammar to its file, or to ``path`` (inside the working directory; the file is then the
        grammar's from now on), whole or not at all."""
        given = body.get("path")
        if given is None:
            if self.source.path is None or self.source.read_only:
                raise Refusal("read_only", "this grammar has no file to save to (a built-in is read-only): give a "
                                           "path inside the working directory")
            target = self.source.path
        else:
            try:
                target = inside(self.root, given, suffixes=(KINDS[self.source.kind],))
            except PathRefused as e:
                raise Refusal("path_refused", str(e)) from None
        atomic_write(target, self.source.text)
        if target != self.source.path:  # (saved as: the grammar is the file's from now on, named by it)
            self.source.path, self.source.builtin, self.source.name = target, None, target.stem
        return {"path": str(target), "chars": len(self.source.text)}

    def golden(self, sample_id: int, body: dict[str, Any]) -> dict[str, Any]:
        """Write the sample's current parse as its golden ``.json`` (in the samples folder, or ``folder``
        inside the working directory for a log's or a pasted sample)."""
        sample, grammar = self._sample(sample_id), self._grammar()
        folder = self.samples.folder
        if body.get("folder") is not None:
            try:
                folder = folder_inside(self.root, _text(body, "folder", 1000))
            except PathRefused as e:
                raise Refusal("path_refused", str(e)) from None
        if folder is None:
            raise Refusal("no_folder", "these samples come from no folder: give folder, a path inside the working "
                                       "directory")
        written = write_golden(sample, grammar, folder, self.samples.folder)
        self.status[sample_id] = status_of(sample, sample.expected)  # (its golden is its parse: a pass)
        return {"written": [str(p) for p in written], **self.sample(sample_id)}

    # ------------------------------------------------------------------ helpers
    def _sample(self, sample_id: int) -> Any:
        found = self.samples.get(sample_id)
        if found is None:
            raise Refusal("not_found", f"no sample has id {sample_id}")
        return found

    def _grammar(self) -> Any:
        if self.source.grammar is None:
            raise Refusal("no_grammar", "the grammar does not compile: fix its load errors first")
        return self.source.grammar


def _page(body: dict[str, Any]) -> tuple[int, int]:
    offset, limit = body.get("offset", 0), body.get("limit", 100)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (offset, limit)):
        raise Refusal("invalid_request", "offset and limit: must be whole numbers")
    return offset, limit


__all__ = ["PROBLEM_CODES", "Refusal", "Workbench", "WorkbenchLimits"]
