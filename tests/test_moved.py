"""The import paths of 0.1 still work for one release (grammar_parse._moved): each gives the module at its new
place, names for names, and says where that is with a DeprecationWarning."""

from __future__ import annotations

import importlib
import pickle
import sys
from pathlib import Path

import pytest

import grammar_parse as gp
from grammar_parse._moved import MOVED


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_imports_the_new_module_with_a_warning(old: str) -> None:
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=rf"{old} moved to {MOVED[old]}"):
        alias = importlib.import_module(old)
    new = importlib.import_module(MOVED[old])
    names = getattr(new, "__all__", None) or [n for n in vars(new) if not n.startswith("_")]
    assert names
    assert all(getattr(alias, name) is getattr(new, name) for name in names)


def test_an_old_module_path_does_not_hide_the_facade_name_spelled_the_same() -> None:
    sys.modules.pop("grammar_parse.detect", None)
    with pytest.warns(DeprecationWarning):
        importlib.import_module("grammar_parse.detect")
    assert callable(gp.detect) and gp.detect is gp.templates.detect


def test_a_from_import_of_an_old_path_names_the_users_line() -> None:
    sys.modules.pop("grammar_parse.session", None)
    with pytest.warns(DeprecationWarning) as caught:
        from grammar_parse.session import ResponseParser  # noqa: F401 - the import is the test
    assert caught[0].filename == __file__


def test_every_new_path_is_a_module_of_the_package_and_no_old_one_is() -> None:
    package = Path(gp.__file__).parent
    for old, new in MOVED.items():
        assert (package / (new.removeprefix("grammar_parse.").replace(".", "/") + ".py")).is_file(), new
        assert not (package / (old.removeprefix("grammar_parse.").replace(".", "/") + ".py")).exists(), old


def test_a_grammar_pickled_under_the_old_paths_loads() -> None:
    """A pickle names its classes' modules: one written before the move names grammar_parse.grammar."""
    data = pickle.dumps(gp.load_grammar("qwen3"), protocol=2)  # (class paths as text lines)
    old = data.replace(b"grammar_parse._engine.grammar", b"grammar_parse.grammar")
    assert old != data
    sys.modules.pop("grammar_parse.grammar", None)
    with pytest.warns(DeprecationWarning):
        grammar = pickle.loads(old)
    assert gp.parse_response("<think>a</think>b", grammar, prefix="") == {
        "role": "assistant", "reasoning_content": "a", "content": "b"}


@pytest.mark.parametrize(("old", "names"), [
    ("grammar_parse.values", ["parse_content", "CONTENT_PARSERS", "load_json", "json_depth", "sub_parse",
                              "without_separators", "ValueSpec", "fill"]),
    ("grammar_parse.toolstream", ["JsonWalker", "CallPlan", "ToolCallStreamer"]),
    ("grammar_parse.delimiters", ["JsonWalk", "LiteralMatcher"]),
    ("grammar_parse.symbols", ["REASONING_FIELDS", "Region"]),
    ("grammar_parse.wire_stream", ["REASONING_FIELDS", "open_stream"]),
    ("grammar_parse.salvage", ["is_call_region", "salvage_calls"]),
])
def test_the_names_of_a_split_module_are_found_where_they_went(old: str, names: list[str]) -> None:
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning):
        module = importlib.import_module(old)
    assert all(getattr(module, name) is not None for name in names)
    if old.endswith("toolstream"):
        region = gp.load_grammar("qwen3").regions["tool_calls"]
        assert module.CallPlan is gp._engine.content.CallShape and module.plan_for(region) is region.call
    with pytest.raises(AttributeError, match="moved to"):
        module.no_such_name  # noqa: B018 - the lookup is the test
