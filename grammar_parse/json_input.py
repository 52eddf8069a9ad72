"""Reading JSON a user hands in (tokenizer configs, chat_template.json, tools files, template files, options)
with a bounded nesting depth.

Python's ``json.loads`` raises a bare RecursionError on a document nested some thousands deep (a hostile
``tokenizer_config.json`` 200,000 deep did), which no caller expects. Real files nest a few levels (a
tool's parameter schema perhaps a dozen), so :data:`MAX_FILE_JSON_DEPTH` is far above any of them and far
below where Python's parser gives up; each caller turns :class:`JSONDepthError` into its own error class.
"""

from __future__ import annotations

import json
from typing import Any

from .values import _nests_deeper  # (the walk model output's JSON is checked with)

#: Deepest nesting of lists and objects accepted in a user's JSON file or option.
MAX_FILE_JSON_DEPTH = 256


class JSONDepthError(ValueError):
    """The document nests deeper than the limit (``limit``); a ValueError, as json's own errors are."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        super().__init__(f"the JSON nests deeper than {limit} levels")


def load_user_json(text: str, *, max_depth: int = MAX_FILE_JSON_DEPTH) -> Any:
    """``json.loads(text)``, raising ``json.JSONDecodeError`` for text that is not JSON and
    :class:`JSONDepthError` for nesting past ``max_depth``, never RecursionError."""
    # (brackets in strings count too: a document under the bound by this count is shallow for sure)
    deep = text.count("[") + text.count("{") > max_depth
    try:
        value = json.loads(text)
    except RecursionError:
        raise JSONDepthError(max_depth) from None
    if deep and _nests_deeper(value, max_depth):
        raise JSONDepthError(max_depth)
    return value


__all__ = ["MAX_FILE_JSON_DEPTH", "JSONDepthError", "load_user_json"]
