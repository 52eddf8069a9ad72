"""Where the workbench may write, and how: only inside the folders it was given (the working directory, the
samples folder), never through ``..`` or a link out of them, and whole or not at all."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

class PathRefused(ValueError):
    """A path the workbench will not write: outside its folders, or of a kind it does not write."""


def _within(root: Path, given: str | Path) -> Path:
    """``given`` (relative to ``root``, or absolute) resolved, links followed, if it is ``root`` or below it."""
    if not isinstance(given, (str, Path)) or not str(given).strip() or "\x00" in str(given):
        raise PathRefused("the path is empty or not text")
    base = root.resolve()
    target = (base / given).resolve()
    if not target.is_relative_to(base):
        raise PathRefused(f"{given} is outside {base}: the workbench writes only inside it")
    return target


def inside(root: Path, given: str | Path, *, suffixes: tuple[str, ...]) -> Path:
    """``given`` resolved, if it is a file inside ``root`` with one of ``suffixes``; links are followed before
    the check, so a link out of ``root`` is refused too."""
    target = _within(root, given)
    if target == root.resolve():
        raise PathRefused(f"{given} is the working directory itself, not a file in it")
    if target.suffix.lower() not in suffixes:
        raise PathRefused(f"{given} does not end in {' or '.join(suffixes)}")
    if target.exists() and not target.is_file():
        raise PathRefused(f"{given} is not a file")
    return target


def folder_inside(root: Path, given: str | Path) -> Path:
    """``given`` resolved, if it is ``root`` or a folder inside it (made when missing); as :func:`inside`."""
    target = _within(root, given)
    if target.exists() and not target.is_dir():
        raise PathRefused(f"{given} is not a folder")
    return target


def safe_name(name: str) -> str:
    """``name`` as a file stem: characters other than letters, digits, ``_``, ``.``, ``-`` become ``_``, the
    ends trimmed, at most 128 characters (``sample`` when nothing is left)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name).strip("._-")[:128] or "sample"


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder, renamed over it: a reader (an
    editor, a test run) sees the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as out:
            out.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


__all__ = ["PathRefused", "atomic_write", "folder_inside", "inside", "safe_name"]
