"""Import paths that moved when the package took its sub-package layout (0.2; the README's changelog).

An old path still imports, for one release: it gives a stand-in module whose every name is the new module's
(the same objects, so ``isinstance`` checks and pickles made before keep working), and says once, with a
:class:`DeprecationWarning`, where the module lives now.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
import warnings
from collections.abc import Callable, Sequence
from typing import Any

#: Each old import path, to the module that now holds what it held.
MOVED: dict[str, str] = {
    "grammar_parse.arguments": "grammar_parse._engine.arguments",
    "grammar_parse.backends": "grammar_parse.serving._backends",
    "grammar_parse.chat_completions": "grammar_parse.adapters.chat_completions",
    "grammar_parse.chat_template": "grammar_parse.templates._chat_template",
    "grammar_parse.cli": "grammar_parse._cli",
    "grammar_parse.compiler": "grammar_parse._engine.compiler",
    "grammar_parse.constrain.cache": "grammar_parse.constrain._cache",
    "grammar_parse.constrain.forms": "grammar_parse.constrain._forms",
    "grammar_parse.constrain.lark": "grammar_parse.constrain._lark",
    "grammar_parse.constrain.pythonic": "grammar_parse.constrain._pythonic",
    "grammar_parse.constrain.regexes": "grammar_parse.constrain._regexes",
    "grammar_parse.constrain.schemas": "grammar_parse.constrain._schemas",
    "grammar_parse.constrain.tagged": "grammar_parse.constrain._tagged",
    "grammar_parse.delimiters": "grammar_parse._engine.delimiters",
    "grammar_parse.derive": "grammar_parse.templates._derive",
    "grammar_parse.detect": "grammar_parse.templates._detect",
    "grammar_parse.drafts": "grammar_parse._engine.drafts",
    "grammar_parse.events": "grammar_parse._engine.events",
    "grammar_parse.format": "grammar_parse._engine.format",
    "grammar_parse.grammar": "grammar_parse._engine.grammar",
    "grammar_parse.json_input": "grammar_parse._engine.json_input",
    "grammar_parse.library": "grammar_parse._engine.library",
    "grammar_parse.linear_regex": "grammar_parse._engine.linear_regex",
    "grammar_parse.lmsp": "grammar_parse.adapters.lmsp",
    "grammar_parse.probes": "grammar_parse.templates._probes",
    "grammar_parse.regex_safety": "grammar_parse._engine.regex_safety",
    "grammar_parse.regex_shape": "grammar_parse._engine.regex_shape",
    "grammar_parse.regions": "grammar_parse._engine.regions",
    "grammar_parse.salvage": "grammar_parse._engine.salvage",
    "grammar_parse.scanner": "grammar_parse._engine.scanner",
    "grammar_parse.server": "grammar_parse.serving._server",
    "grammar_parse.session": "grammar_parse._engine.session",
    "grammar_parse.shapes": "grammar_parse._engine.shapes",
    "grammar_parse.store": "grammar_parse.serving.store",
    "grammar_parse.symbols": "grammar_parse._engine.symbols",
    "grammar_parse.tables": "grammar_parse._engine.tables",
    "grammar_parse.template": "grammar_parse._engine.template",
    "grammar_parse.tools": "grammar_parse._engine.tools",
    "grammar_parse.toolstream": "grammar_parse._engine.toolstream",
    "grammar_parse.values": "grammar_parse._engine.values",
    "grammar_parse.wire": "grammar_parse._engine.wire",
    "grammar_parse.wire_stream": "grammar_parse.adapters._stream",
}


#: Where the names of an old module went when it was split (the content parsers and the limits they share
#: left ``values``; the JSON walker left ``toolstream``; the reasoning field names left ``symbols`` and
#: ``wire_stream``).
SPLIT: dict[str, tuple[str, ...]] = {
    "grammar_parse.values": ("grammar_parse._engine.reading", "grammar_parse._engine.content",
                             "grammar_parse._engine.content.xml", "grammar_parse._engine.content.text"),
    "grammar_parse.toolstream": ("grammar_parse._engine.reading",),
    "grammar_parse.symbols": ("grammar_parse._engine.shapes",),
    "grammar_parse.wire_stream": ("grammar_parse._engine.shapes",),
}
#: Names that moved and changed (the call shape, ``CallPlan`` in 0.1; the JSON value end, ``JsonWalk``).
RENAMED: dict[tuple[str, str], tuple[str, str]] = {
    ("grammar_parse.toolstream", "CallPlan"): ("grammar_parse._engine.content.base", "CallShape"),
    ("grammar_parse.delimiters", "JsonWalk"): ("grammar_parse._engine.reading", "JsonEnd"),
}


#: Functions of 0.1 that a region's own attributes replaced.
GONE: dict[tuple[str, str], Callable[[Any], Any]] = {
    ("grammar_parse.toolstream", "plan_for"): lambda region: region.shape,
    ("grammar_parse.salvage", "is_call_region"): lambda region: region.is_call,
}


class _Alias(types.ModuleType):
    """An old path's stand-in: every attribute is the new module's (or, for a module that was split, the
    module's its name went to)."""

    def __getattr__(self, name: str) -> Any:
        if (self.__name__, name) in GONE:
            return GONE[self.__name__, name]
        if (self.__name__, name) in RENAMED:
            module, new_name = RENAMED[self.__name__, name]
            return getattr(importlib.import_module(module), new_name)
        for module in (MOVED[self.__name__], *SPLIT.get(self.__name__, ())):
            found = importlib.import_module(module)
            if hasattr(found, name):
                return getattr(found, name)
        raise AttributeError(f"module {self.__name__!r} has no attribute {name!r} (it moved to {MOVED[self.__name__]})")

    def __dir__(self) -> list[str]:
        return sorted({n for m in (MOVED[self.__name__], *SPLIT.get(self.__name__, ()))
                       for n in dir(importlib.import_module(m))})


class _Package(types.ModuleType):
    """The package's own module: importing an old path binds the stand-in as an attribute of its parent,
    which must not hide a facade name spelled the same (``grammar_parse.detect``, the function, was also the
    0.1 module)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, _Alias) and name in self.__dict__:
            return
        super().__setattr__(name, value)


class _MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old paths (only those) and loads each as an :class:`_Alias`."""

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        return importlib.util.spec_from_loader(fullname, self) if fullname in MOVED else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _Alias(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        warnings.warn(f"{module.__name__} moved to {MOVED[module.__name__]}: import it from there (the old path "
                      "goes in the next release)", DeprecationWarning, stacklevel=2)  # (the import machinery's frames are skipped)


def install(package: types.ModuleType) -> None:
    """Put the finder first on ``sys.meta_path`` (once): it answers only for the old paths; and keep the
    package's own names from being hidden by them."""
    package.__class__ = _Package
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _MovedFinder())


__all__ = ["MOVED", "install"]
