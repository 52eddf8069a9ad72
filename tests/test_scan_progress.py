"""A streaming scan that resumes where the last feed's scan stopped decides exactly what a scan from
scratch decides, for every live-delimiter set of every built-in grammar: same delimiter to commit, same
match, same hold position, whatever the chunking.

(Resuming is what keeps a long pending run, such as whitespace after ``<tool_call>`` that
``(?=\\s*[{\\[])`` must see past, linear to stream: see ``delimiters.Progress``.)
"""

from __future__ import annotations

from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import grammar_parse as gp
from grammar_parse.regex_shape import trailing_lookahead_as_text as _trailing_lookahead_as_text
from grammar_parse.scanner import Scanner, SearchCache
from strategies import chunkings, examples, grammar_outputs


@cache
def scanners(name: str) -> list[Scanner]:
    grammar = gp.load_grammar(name)
    seen: dict[int, Scanner] = {}
    for info in grammar.tables.states.values():
        seen.setdefault(id(info.scanner), info.scanner)
    return list(seen.values())


def decision(scanner: Scanner, buf: str, pos: int, cache: SearchCache) -> tuple[object, object, int]:
    term, hit, hold = scanner.scan(buf, pos, False, cache)
    return (None if term is None else term.name), (None if hit is None else hit[:2]), hold


@pytest.mark.parametrize("name", sorted(gp.list_grammars()))
@settings(max_examples=examples(0.3))
@given(data=st.data())
def test_a_resumed_scan_decides_as_a_fresh_one(name, data):
    text = data.draw(grammar_outputs(name), label="text") + data.draw(st.sampled_from(["", " " * 40, "\n" * 9]))
    scanner = data.draw(st.sampled_from(scanners(name)), label="scanner")
    chunks = data.draw(chunkings(text), label="chunks")
    memo, buf, pos = SearchCache(), "", 0
    for chunk in chunks:
        buf += chunk
        resumed = decision(scanner, buf, pos, memo)
        assert resumed == decision(scanner, buf, pos, SearchCache()), (buf, pos)
        term, hit, hold = resumed
        if term is not None:
            # the session would shift the delimiter and scan on from its end, under another state
            buf, pos, memo = buf[hit[1]:], 0, SearchCache()
        else:
            pos = hold  # the text before the hold goes out as text


@pytest.mark.parametrize("pattern, expected", [
    (r"<tool_call>(?=\s*[{\[])", r"<tool_call>(?:\s*[{\[])"),
    (r"(?=\[\s*\{)", r"(?:\[\s*\{)"),
    (r"a(?=(b|c)d)", r"a(?:(b|c)d)"),
    (r"a(?=[)])", r"a(?:[)])"),
    (r"a(?=b)c", None),  # not at the end
    (r"(?<=x)a(?=b)", None),  # another lookaround
    (r"a(?!b)", None),
    (r"a(?=b)|c", None),  # the lookahead is not the whole tail
    (r"abc", None),
])
def test_a_trailing_lookahead_reads_as_text_for_the_automaton(pattern, expected):
    assert _trailing_lookahead_as_text(pattern) == expected
