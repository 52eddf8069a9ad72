"""Reading JSON a user hands in (tokenizer configs, chat_template.json, tools files, template files, options)
with a bounded nesting depth.

Python's ``json.loads`` raises a bare RecursionError on a document nested some thousands deep (a hostile
``tokenizer_config.json`` 200,000 deep did), which no caller expects. Real files nest a few levels (a
tool's parameter schema perhaps a dozen), so :data:`MAX_FILE_JSON_DEPTH` is far above any of them and far
below where Python's parser gives up; each caller turns :class:`JSONLimitError` into its own error class.
The limits are the ones model output's JSON is read with (``reading.load_json``).
"""

from __future__ import annotations

from typing import Any

from ..errors import ParseError
from .reading import JSON_MAX_DEPTH, json_depth_limit, load_json

#: Deepest nesting of lists and objects accepted in a user's JSON file or option.
MAX_FILE_JSON_DEPTH = JSON_MAX_DEPTH


class JSONLimitError(ValueError):
    """The document is JSON but past a limit: it nests deeper than the bound, or holds an integer longer than
    Python converts. A ValueError, as json's own errors are."""


def load_user_json(text: str, *, max_depth: int = MAX_FILE_JSON_DEPTH) -> Any:
    """``json.loads(text)``, raising ``json.JSONDecodeError`` for text that is not JSON and
    :class:`JSONLimitError` past a limit (nesting deeper than ``max_depth``), never RecursionError."""
    try:
        with json_depth_limit(max_depth):
            return load_json(text)
    except ParseError as exc:  # (not model output: the message names no region)
        if exc.code == "parse.json_depth":
            raise JSONLimitError(f"the JSON nests deeper than {max_depth} levels") from None
        raise JSONLimitError(exc.detail) from None


__all__ = ["MAX_FILE_JSON_DEPTH", "JSONLimitError", "load_user_json"]
