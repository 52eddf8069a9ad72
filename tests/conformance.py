"""Loading the transformers conformance corpus (tests/data/conformance, or the folder named by
GRAMMAR_PARSE_CONFORMANCE) and replaying a case through grammar_parse the way the corpus verifier replays it
through transformers."""

from __future__ import annotations

import copy
import json
import warnings
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

import grammar_parse

CORPUS = Path(os.environ.get("GRAMMAR_PARSE_CONFORMANCE") or Path(__file__).resolve().parent / "data" / "conformance")

_BUILTIN_ERRORS = {"ValueError": ValueError, "KeyError": KeyError, "TypeError": TypeError, "RuntimeError": RuntimeError}


def strict_equal(a: Any, b: Any) -> bool:
    """Deep equality where True is not 1 and 7 is not 7.0 (the corpus compares values this way), and NaN is
    NaN (Python's JSON reads ``NaN``: two parses that both give it agree)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(strict_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(strict_equal(x, y) for x, y in zip(a, b))
    return a == b or isinstance(a, float) and a != a and b != b


def jsonable(x: Any) -> Any:
    return json.loads(json.dumps(x))


@lru_cache(maxsize=None)
def load(name: str) -> Any:
    path = CORPUS / name
    if not path.exists():
        raise FileNotFoundError(
            f"conformance corpus file not found: {path}; the project ships it in tests/data/conformance "
            "(GRAMMAR_PARSE_CONFORMANCE, when set, must name a folder holding the three corpus files)"
        )
    return json.loads(path.read_text(encoding="utf-8"))


def response_template_cases() -> list[dict[str, Any]]:
    return load("transformers_response_template.json")


def model_template_samples(fmt: str) -> list[dict[str, Any]]:
    """Samples of the model-templates file as cases, each carrying its entry's template."""
    out = []
    for entry in load("transformers_model_templates.json"):
        if entry["format"] != fmt:
            continue
        for sample in entry["samples"]:
            out.append({**sample, "id": f"{entry['model_family']}::{sample['id']}", "template": entry["template"],
                        "notes": entry["notes"]})
    return out


def check_error(case: dict[str, Any], exc: BaseException) -> list[str]:
    expect = case["expect"]
    problems = []
    if not isinstance(exc, _BUILTIN_ERRORS[expect["error"]]):
        problems.append(f"{type(exc).__name__} is not a {expect['error']}: {exc}")
    if not isinstance(exc, grammar_parse.GrammarParseError):
        problems.append(f"{type(exc).__name__} is not a GrammarParseError: {exc}")
    subs = expect.get("error_contains")
    for s in [subs] if isinstance(subs, str) else (subs or []):
        if s.lower() not in str(exc).lower():
            problems.append(f"message lacks {s!r}: {exc}")
    return problems


def stream(case: dict[str, Any], chunks: list[str]) -> dict[str, Any]:
    """Feed ``chunks`` one by one; record events per feed and the final message."""
    parser = grammar_parse.ResponseParser(copy.deepcopy(case["template"]), prefix=case["prefix"],
                                          tools=copy.deepcopy(case["tools"]))
    got: dict[str, Any] = {"initial_events": jsonable(parser.initial_events)}
    events, counts = [], []
    for c in chunks:
        evs = jsonable(parser.feed(c))
        counts.append(len(evs))
        events.extend(evs)
    message, final = parser.finalize()
    events.extend(jsonable(final))
    got.update(events=events, feed_event_counts=counts, message=jsonable(message))
    got["_parser"] = parser
    return got


def oneshot(case: dict[str, Any], text: str | None = None) -> Any:
    return jsonable(grammar_parse.parse_response(case["text"] if text is None else text,
                                                 copy.deepcopy(case["template"]),
                                                 prefix=case["prefix"], tools=copy.deepcopy(case["tools"])))


#: Cases whose prefix holds none of the template's start anchors: transformers logs that at info level and
#: reads the whole prefix as output; we read it the same way and say so with an AnchorWarning.
ANCHORLESS_PREFIX = {"test_prefix_anchor_not_found_falls_back"}


def run_case(case: dict[str, Any]) -> list[str]:
    """Replay a corpus case; return a list of problems (empty when it conforms)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("error")
        warnings.simplefilter("always", grammar_parse.AnchorWarning)
        problems = _run_case(case)
    warned = any(issubclass(w.category, grammar_parse.AnchorWarning) for w in caught)
    if warned != (case["id"] in ANCHORLESS_PREFIX):
        problems.append(f"AnchorWarning {'given' if warned else 'not given'} for this prefix")
    return problems


def _run_case(case: dict[str, Any]) -> list[str]:
    expect = case["expect"]
    try:
        if case["chunks"] is None:
            got = {"message": oneshot(case)}
        else:
            got = stream(case, case["chunks"])
    except Exception as exc:  # noqa: BLE001 - every failure is reported as a problem
        if "error" in expect:
            return check_error(case, exc)
        return [f"unexpected {type(exc).__name__}: {exc}"]
    if "error" in expect:
        return [f"expected {expect['error']} but parsing succeeded with {got['message']}"]
    problems = []
    for key in ("initial_events", "events", "feed_event_counts", "message"):
        if key in expect and not strict_equal(expect[key], got[key]):
            problems.append(f"{key}: expected {json.dumps(expect[key])[:400]}\n   got {json.dumps(got[key])[:400]}")
    if "after_finalize" in expect:
        parser = got["_parser"]
        after = {}
        for name, fn in (("feed", lambda: parser.feed("more")), ("finalize", parser.finalize)):
            try:
                fn()
                after[name] = None
            except Exception as exc:  # noqa: BLE001
                after[name] = "RuntimeError" if isinstance(exc, RuntimeError) else type(exc).__name__
        if after != expect["after_finalize"]:
            problems.append(f"after_finalize: expected {expect['after_finalize']} got {after}")
    if "oneshot_message" in expect and not strict_equal(expect["oneshot_message"], oneshot(case)):
        problems.append("oneshot_message differs")
    return problems
