"""The serving gateway: an LMSP and Chat Completions server in front of a model (``grammar-parse serve``).

Its parts are internal (``_server``: the app and its limits; ``_backends``: where the text comes from) but for
:mod:`grammar_parse.serving.store`, the responses a follow-up continues (in memory, or Redis shared by
replicas), which a deployment may configure itself.
"""

from __future__ import annotations

from .store import RedisResponseStore, ResponseStorage, ResponseStore, open_store

__all__ = ["RedisResponseStore", "ResponseStorage", "ResponseStore", "open_store"]
