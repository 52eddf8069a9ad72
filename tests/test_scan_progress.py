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
from grammar_parse._engine.regex_shape import trailing_lookahead_as_text as _trailing_lookahead_as_text
from grammar_parse._engine.scanner import Scanner, SearchCache
from strategies import chunkings, examples, grammar_outputs


@cache
def scanners(name: str) -> list[Scanner]:
    grammar = gp.load_grammar(name)
    seen: dict[int, Scanner] = {}
    for info in grammar.tables.states.values():
        seen.setdefault(id(info.scanner), info.scanner)
    return list(seen.values())


@cache
def pieces_of(name: str) -> list[str]:
    """Strings that match each of the grammar's delimiters (worked out once per grammar, not per example)."""
    from strategies import delimiter_examples

    return delimiter_examples(gp.load_grammar(name))


def decision(scanner: Scanner, buf: str, pos: int, cache: SearchCache) -> tuple[object, object, int]:
    term, hit, hold = scanner.scan(buf, pos, False, cache)
    return (None if term is None else term.name), (None if hit is None else hit[:2]), hold


@pytest.mark.parametrize("name", sorted(gp.list_grammars()))
@settings(max_examples=examples(0.3))
@given(data=st.data())
def test_a_resumed_scan_decides_as_a_fresh_one(name, data):
    text = data.draw(grammar_outputs(name), label="text") + data.draw(st.sampled_from(["", " " * 40, "\n" * 9]))
    scanner = data.draw(st.sampled_from(scanners(name)), label="scanner")
    resumes_as_fresh(scanner, data.draw(chunkings(text), label="chunks"))


def resumes_as_fresh(scanner: Scanner, chunks: list[str]) -> None:
    """Feed ``chunks`` as a session would, checking each resumed scan against one from scratch."""
    memo, buf, pos = SearchCache(), "", 0
    for chunk in chunks:
        buf += chunk
        resumed = decision(scanner, buf, pos, memo)
        assert resumed == decision(scanner, buf, pos, SearchCache()), (buf, pos)
        term, hit, hold = resumed
        # where a run is held, every note covers the whole buffer: the next scan reads only the text after it,
        # however long the run grows (a note left behind was read again from there at every feed: quadratic)
        assert term is not None or hold == len(buf) or all(known.end == len(buf) for known in memo.progress.values())
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


#: Runs held at the edge while they grow (issue 32, item 6): a call name, spaces after a fence, a name at the
#: start of the output (a leading ``^``). A resumed scan reads only the new text of such a run.
GROWING = [("gemma4", "<|tool_call>call:f", "x"), ("function_gemma", "<start_function_call>call:f", "x"),
           ("iquest_q1", "<iquest_tool_call>f", "x"), ("command_r_plus", "Action:\n```\t", " "),
           ("functionary_v32", "", "x"), ("inkling", "<|message_model|>", "x"), ("minimax_m1", "<tool_calls>", " ")]


@pytest.mark.parametrize("name, head, unit", GROWING)
@settings(max_examples=examples(0.5))
@given(data=st.data())
def test_a_growing_run_resumed_decides_as_a_fresh_scan(name, head, unit, data):
    from strategies import FILLER

    tail = data.draw(st.lists(st.sampled_from(FILLER + pieces_of(name)), max_size=3))
    text = head + unit * data.draw(st.integers(0, 300)) + "".join(tail)
    chunks = data.draw(chunkings(text), label="chunks")
    for scanner in scanners(name):
        resumes_as_fresh(scanner, chunks)


# ---------------------------------------------------------------------------- a pending run left unscanned
def _left_pending(scanner: Scanner, run: str) -> bool:
    """Whether the session leaves ``run`` unscanned (ResponseParser.feed: a delimiter's start that grows)."""
    heads = scanner.pending_heads
    return heads is not None and heads.stays_pending(run)


@pytest.mark.parametrize("name", sorted(gp.list_grammars()))
def test_every_proper_prefix_of_a_head_is_held_by_the_scan(name):
    """Each text a live delimiter's matches start with (``<parameter=``), cut anywhere short of its end: the
    session leaves it unscanned, and a scan would commit nothing and hold all of it."""
    checked = 0
    for scanner in scanners(name):
        if scanner.pending_heads is None:
            continue
        for head in scanner.pending_heads.heads:
            for cut in range(1, len(head)):
                run = head[:cut]
                if _left_pending(scanner, run):
                    checked += 1
                    assert decision(scanner, "ab" + run, 2, SearchCache()) == (None, None, 2), (scanner, run)
    assert checked or not any(s.pending_heads for s in scanners(name))


@pytest.mark.parametrize("name", sorted(gp.list_grammars()))
@settings(max_examples=examples(0.3))
@given(data=st.data())
def test_a_run_left_pending_is_one_the_scan_holds_whole(name, data):
    """Streaming real outputs in any chunking: wherever the session would leave the buffer's run unscanned,
    a scan of it from scratch commits nothing and holds it from its start (so skipping the scan changes no
    event)."""
    text = data.draw(grammar_outputs(name), label="text")
    pieces = pieces_of(name)
    if pieces:  # (delimiters cut short, as a stream's last chunk leaves them)
        piece = data.draw(st.sampled_from(pieces))
        text += piece[:data.draw(st.integers(0, len(piece)))]
    chunks = data.draw(chunkings(text), label="chunks")
    for scanner in scanners(name):
        if scanner.pending_heads is None:
            continue
        buf, pos = "", 0
        for chunk in chunks:
            if _left_pending(scanner, buf[pos:] + chunk):
                buf += chunk
                assert decision(scanner, buf, pos, SearchCache()) == (None, None, pos), (buf, pos)
                continue
            buf += chunk
            term, hit, hold = decision(scanner, buf, pos, SearchCache())
            buf, pos = (buf[hit[1]:], 0) if term is not None else (buf, hold)


# ---------------------------------------------------------------------------- a chunk quiet by its heads
@pytest.mark.parametrize("name", sorted(gp.list_grammars()))
@settings(max_examples=examples(0.3))
@given(data=st.data())
def test_a_chunk_quiet_by_its_heads_is_all_text_to_the_scan(name, data):
    """The fast path's finer test (HeadsTest): a chunk with a trigger character that holds no delimiter's
    start whole and ends in none is one a scan from scratch finds nothing in and holds nothing of."""
    from strategies import FILLER

    pieces = FILLER + pieces_of(name) + ["t", "to", "to=", "\n", " ", "H", "A", ";", "f"]
    text = "".join(data.draw(st.lists(st.sampled_from(pieces), min_size=1, max_size=6), label="pieces"))
    cut = data.draw(st.integers(0, len(text)), label="cut")
    for scanner in scanners(name):
        heads = scanner.quiet_heads
        if heads is None:
            continue
        for chunk in (text, text[:cut], text[cut:]):
            if chunk and heads.quiet(chunk):
                assert decision(scanner, chunk, 0, SearchCache()) == (None, None, len(chunk)), (scanner, chunk)


def test_common_trigger_characters_are_looked_past():
    """gpt-oss's reasoning watches ``to=functions.``: chunks with a ``t`` are text unless one could start it."""
    found = [s.quiet_heads for s in scanners("gpt_oss") if s.quiet_heads is not None and "t" in s.quiet.triggers]
    assert found
    for heads in found:
        assert heads.quiet("the weather") and heads.quiet("tool") and heads.quiet("at 3")
        assert not heads.quiet("abot") and not heads.quiet("go to") and not heads.quiet("x to=functions.f")


# ---------------------------------------------------------------------------- text with no trigger character
@pytest.mark.parametrize("name", sorted(gp.list_grammars()))
@settings(max_examples=examples(0.3))
@given(data=st.data())
def test_a_scan_of_text_without_triggers_decides_as_the_full_loop(name, data):
    """A scan whose text holds none of the live delimiters' first characters answers without asking each
    delimiter (``Scanner.none_from``): the same answer as the loop over them, for real outputs with the
    trigger characters taken out and left in, from any position."""
    import copy

    text = data.draw(grammar_outputs(name), label="text")
    for scanner in scanners(name):
        if scanner.none_from is None:
            continue
        full = copy.copy(scanner)
        full.none_from = None
        stripped = text.translate({ord(c): None for c in scanner.quiet.triggers})
        for buf in (text, stripped):
            pos = data.draw(st.integers(0, len(buf)), label="pos")
            assert decision(scanner, buf, pos, SearchCache()) == decision(full, buf, pos, SearchCache()), (buf, pos)


# ---------------------------------------------------------------------------- a long run's pieces kept aside
@pytest.mark.parametrize("name", sorted(gp.list_grammars()))
@settings(max_examples=examples(0.3))
@given(data=st.data())
def test_what_holds_on_keeps_a_scan_would_hold_again(name, data):
    """Streaming real outputs and delimiters cut short, then grown by a repeated character, in any chunking:
    wherever Scanner.holds_on takes a piece (the session keeps it aside, unjoined, for a run held past HELD_RUN),
    a scan from scratch of the grown buffer commits nothing and holds at the same place, and the scans that go on
    from the notes it moved decide as fresh ones."""
    text = data.draw(grammar_outputs(name), label="text")
    pieces = pieces_of(name)
    if pieces:
        piece = data.draw(st.sampled_from(pieces))
        text += piece[:data.draw(st.integers(0, len(piece)))]
    text += data.draw(st.sampled_from(["x", " ", "\n", "a.", "<", "0"])) * data.draw(st.integers(0, 60))
    chunks = data.draw(chunkings(text), label="chunks")
    scanner = data.draw(st.sampled_from(scanners(name)), label="scanner")
    memo, buf, pos, held = SearchCache(), "", 0, False
    for chunk in chunks:
        if held and scanner.holds_on(memo.progress, pos, len(buf), chunk):
            buf += chunk
            assert decision(scanner, buf, pos, SearchCache()) == (None, None, pos), (buf, pos)
            continue
        buf += chunk
        resumed = decision(scanner, buf, pos, memo)
        assert resumed == decision(scanner, buf, pos, SearchCache()), (buf, pos)
        term, hit, hold = resumed
        if term is not None:
            buf, pos, memo, held = buf[hit[1]:], 0, SearchCache(), False
        else:
            pos, held = hold, hold < len(buf)


def test_holds_on_keeps_a_growing_call_name():
    """gemma4's ``<|tool_call>call:NAME``, held whole at the edge while the name grows: its pieces are kept; a
    character the name cannot hold is not."""
    scanner = next(s for s in scanners("gemma4") if any(t.name == "TOOL_CALLS_OPEN" for t, *_ in s.entries))
    memo, buf = SearchCache(), "<|tool_call>call:get_w"
    assert decision(scanner, buf, 0, memo) == (None, None, 0)
    assert scanner.holds_on(memo.progress, 0, len(buf), "eath")
    assert scanner.holds_on(memo.progress, 0, len(buf) + 4, "er")
    assert not scanner.holds_on(memo.progress, 0, len(buf) + 6, "{")


def test_a_start_inside_a_kept_piece_is_found_once_the_run_dies():
    """A delimiter may start inside a piece holds_on keeps (minimax_m2's ``[e~[`` within a call name, which may
    hold ``[``): its note moves on only where the piece holds none of its first characters, so once the run dies
    the scan finds it, as a fresh one does."""
    scanner = next(s for s in scanners("minimax_m2") if {t.name for t, *_ in s.entries} >=
                   {"TOOL_CALLS_OPEN", "END_OF_TURN"})
    memo, buf = SearchCache(), '<invoke name="a'
    assert decision(scanner, buf, 0, memo) == (None, None, 0)
    assert not scanner.holds_on(memo.progress, 0, len(buf), "[e~[b")  # (END_OF_TURN may start in it)
    assert scanner.holds_on(memo.progress, 0, len(buf), "bc")
    buf += "bc[e~[b\n"  # (the name ends at the newline: the run dies)
    assert decision(scanner, buf, 0, memo) == decision(scanner, buf, 0, SearchCache()) == \
        ("END_OF_TURN", (17, 21), 23)
