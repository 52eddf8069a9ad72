"""The streaming scan written out per set of live delimiters (``Scanner.fast_scan``), held to the reference
``Scanner.scan`` call by call: for every built-in grammar, on goldens, transcripts and generated outputs in
several chunkings, each call of the written scan gives the delimiter, the hit and the hold the reference gives
for the same buffer and notes, and leaves the same notes (``SearchCache``: its memoised searches and each
delimiter's progress) behind. A written scan that never ran would pass that too, so how many calls each
grammar's parses make of it is held as well.
"""

from __future__ import annotations

import pickle
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from goldens import goldens
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import chunkings, examples, grammar_outputs
from test_transcripts import CASES as TRANSCRIPTS

import grammar_parse as gp
from grammar_parse._engine import oneshot, scanner
from grammar_parse._engine.delimiters import Progress

GRAMMARS = sorted(gp.list_grammars())


def _notes(cache: scanner.SearchCache) -> tuple[Any, Any]:
    """What a scan leaves behind, comparable: each memoised search's (from, span) and each progress note."""
    hits = {key: (pos, None if hit is None else hit[:2]) for key, (_, pos, hit) in cache.hits.items()}
    progress = {name: (p.end, p.pos, p.pending, p.found, p.state) for name, p in cache.progress.items()}
    return hits, progress


def _copy(cache: scanner.SearchCache) -> scanner.SearchCache:
    out = scanner.SearchCache()
    out.hits.update(cache.hits)
    out.progress.update({name: Progress(p.end, p.pos, p.pending, p.found, p.state) for name, p in cache.progress.items()})
    return out


def _outcome(scan: Any, *args: Any) -> tuple[Any, Any]:
    """(what a scan gives, comparable; what it gives: its result, or the error it raised)."""
    try:
        result = scan(*args)
    except gp.GrammarParseError as e:  # (a delimiter past its time limit: the same error from both)
        return ("error", e.code, str(e)), e
    term, hit, hold = result
    return (None if term is None else term.name, None if hit is None else hit[:2], hold), result


@contextmanager
def _checking() -> Iterator[Counter[str]]:
    """Every streaming scan runs the written one and the reference on copies of the same notes, and compares."""
    written: dict[int, Any] = {}
    calls = Counter[str]()

    def fast_scan(self: scanner.Scanner) -> Any:
        if id(self) not in written:
            fast = scanner._written_scan(self)
            written[id(self)] = self.scan if fast is None else _both(self, fast, calls)
        return written[id(self)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(oneshot, "SPECIALISED", True)
        patch.setattr(scanner.Scanner, "fast_scan", property(fast_scan))
        yield calls


def _both(reference: scanner.Scanner, fast: Any, calls: Counter[str]) -> Any:
    def both(buf: str, pos: int, eos: bool, cache: scanner.SearchCache, value_end: int = -1) -> Any:
        notes = _copy(cache)
        want, _ = _outcome(reference.scan, buf, pos, eos, notes, value_end)
        got, result = _outcome(fast, buf, pos, eos, cache, value_end)
        assert got == want, (buf[pos:pos + 200], got, want)
        assert _notes(cache) == _notes(notes), buf[pos:pos + 200]
        calls["scan"] += 1
        if isinstance(result, Exception):
            raise result
        return result
    return both


def _stream(name: str, chunks: list[str], prefix: str, tools: Any) -> None:
    parser = gp.ResponseParser(name, prefix, tools=tools, strict=False, extended_events=True, call_events=True,
                               coalesce_calls=True)
    for chunk in chunks:
        parser.feed(chunk)
    parser.finalize()


def _pieces(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


@pytest.mark.parametrize("name", GRAMMARS)
def test_written_scan_equals_the_reference(name: str) -> None:
    samples = [*goldens(name), *(t for t in TRANSCRIPTS if t.grammar == name)]
    with _checking() as checked:
        for sample in samples:
            for size in (1, 4, 9):
                _stream(name, _pieces(sample.text, size), sample.prefix, sample.tools)
    # (every built-in grammar has states whose delimiters are all searched: its streams use the written scan)
    assert checked["scan"] >= 5 * len(samples), checked


@settings(max_examples=examples(0.25), deadline=None)
@given(data=st.data(), name=st.sampled_from(GRAMMARS))
def test_written_scan_equals_the_reference_on_generated_outputs(data: st.DataObject, name: str) -> None:
    text = data.draw(grammar_outputs(name))
    with _checking():
        _stream(name, data.draw(chunkings(text)), "", None)


def test_a_grammar_pickles_after_its_written_scans_ran() -> None:
    grammar = gp.load_grammar("qwen3_coder")
    stream = gp.ResponseParser(grammar, "", extended_events=True)
    stream.feed("<tool_call>\n<function=f>\n<parameter=a>\n1\n</par")
    assert any("fast_scan" in info.scanner.__dict__ for info in grammar.tables.states.values())
    again = pickle.loads(pickle.dumps(grammar))
    assert gp.parse_response("<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>",
                             again, prefix="")["tool_calls"][0]["function"] == {"name": "f", "arguments": {"a": "1"}}


def test_off_switch_scans_with_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    """GRAMMAR_PARSE_SPECIALISED=0 (oneshot.SPECIALISED): the session asks ``Scanner.scan`` itself."""
    monkeypatch.setattr(oneshot, "SPECIALISED", False)
    asked = Counter[str]()
    reference = scanner.Scanner.scan

    def counted(self: scanner.Scanner, *args: Any) -> Any:
        asked["scan"] += 1
        return reference(self, *args)
    monkeypatch.setattr(scanner.Scanner, "scan", counted)
    monkeypatch.setattr(scanner.Scanner, "fast_scan", property(lambda self: pytest.fail("the written scan ran")))
    _stream("qwen3_coder", _pieces("<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n", 3), "", None)
    assert asked["scan"] > 3
