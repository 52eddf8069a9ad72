"""Delimiter matchers: the fast paths find exactly what the regex module finds, and the streaming
decisions never commit a match that more input could change."""

from __future__ import annotations

import json

import pytest
import regex
from hypothesis import example, given
from hypothesis import strategies as st

from grammar_parse._engine.delimiters import REGEX_SPACE, LiteralMatcher, RegexMatcher, Repeat
from grammar_parse._engine.reading import JsonEnd
from grammar_parse._engine.regex_shape import (UNBOUNDED, always_captured, behind_texts, first_chars,
                                                first_chars_past_start, pattern_shape, required_text,
                                                space_then_chars)

ALPHABET = " \n\t\x1c<>|/abtx_"
texts = st.text(alphabet=ALPHABET, max_size=40)
literal_sets = st.lists(st.text(alphabet="<>|abx", min_size=1, max_size=4), min_size=1, max_size=3, unique=True)


def span(hit):
    return None if hit is None else hit[:2]


@given(literal_sets, texts, st.integers(min_value=0, max_value=40))
def test_literal_search_is_the_longest_first_alternation(literals, text, pos):
    pos = min(pos, len(text))
    matcher = LiteralMatcher(tuple(literals))
    reference = regex.compile("|".join(regex.escape(s) for s in sorted(literals, key=len, reverse=True)))
    m = reference.search(text, pos)
    assert span(matcher.search(text, pos)) == (None if m is None else m.span())


LOWERED = [r"\s*<tool_call>", r"</think>\s*", r"\s*(?:<\|im_end\|>|<\|endoftext\|>)", r"\s*(?:<a|<ab)\s*",
           r"\s*(?:<ab|<a|b<)", r"<\|im_end\|>\s*", r"\s*(?:x\||\|x)", "\n\\s*", r"(?:\n\n|\n)\s*"]


@given(st.sampled_from(LOWERED), texts, st.integers(min_value=0, max_value=40))
def test_lowered_whitespace_literal_search_equals_regex(pattern, text, pos):
    pos = min(pos, len(text))
    matcher = RegexMatcher(pattern)
    assert matcher.lowered is not None
    m = matcher.compiled.search(text, pos)
    assert span(matcher.search(text, pos)) == (None if m is None else m.span())


@given(literal_sets, texts, st.text(alphabet=ALPHABET, max_size=10))
def test_literal_commit_is_final(literals, text, more):
    """A hit the matcher lets the scanner commit is still the leftmost hit after more text arrives."""
    matcher = LiteralMatcher(tuple(literals))
    hit, pending = matcher.probe(text, 0, matcher.search(text, 0))
    if hit is not None:
        assert span(matcher.search(text + more, 0)) == span(hit)
    if pending != -1:
        assert hit is None


PATTERNS = [r"\s*<tool_call>", r"\)(?:\]<\|e\|>)?\s*", r"<\|u\|>\s*|$", r"(?:<t\|>|<e>)\s*|$", r"a.*?b",
            r"<t>\s*<f=(?P<n>\w+)>", r"\n?</r>", r"[^<]*<c>", r"x$|y",
            # (a closing tag or an opener's '>' that ends the buffer, a greedy or optional tail, alternatives)
            r"(?:</f>\s*)?</t>", r"<f=(?P<k>[^<>\n]+)>", r"(?:\n?\]\])?<e>", r"ab|abc", r"a+", r"a(?=b)|ab"]


@given(st.sampled_from(PATTERNS), st.text(alphabet=" \n<>|/abtxfcreu)]=_", max_size=24),
       st.text(alphabet=" \n<>|/abtxfcreu)]=_", max_size=8))
@example(r"a+", "xa", "a")
@example(r"ab|abc", "xab", "c")
@example(r"(?:</f>\s*)?</t>", "x</f>", " </t>")
@example(r"a(?=b)|ab", "xa", "b")
def test_regex_commit_is_final(pattern, text, more):
    """The guards (hidden partials, `$` before a final newline, preferred longer matches): whatever is
    committed, and every byte released before ``hold``, stays so once more text arrives."""
    matcher = RegexMatcher(pattern)
    hit, pending = matcher.probe(text, 0, matcher.search(text, 0))
    full = matcher.compiled.search(text + more, 0)
    if hit is not None:
        assert full is not None and full.span() == hit[:2]
    hold = len(text) if pending == -1 else pending
    if hit is None and full is not None:
        assert full.start() >= hold, "released text that belongs to a delimiter"


def test_pattern_shape():
    assert pattern_shape(r"<a>").max_width == 3
    assert pattern_shape(r"x$").end_reach == 1
    assert pattern_shape(r"(?!abc)x").end_reach == 3
    assert pattern_shape(r"^x").context == 1
    assert pattern_shape(r"(?<=ab)x").context == 2
    assert pattern_shape(r"\p{L}+x").max_width > 1000
    # how far a match attempt reads: its width and its lookaheads' text (the streaming probe's partial window)
    assert pattern_shape(r"<a>[^<]{0,5}(?=</a>)").reads == 12
    assert pattern_shape(r"x(?!yz)").reads == 3
    assert pattern_shape(r"(?=\{\s*x)").reads == UNBOUNDED
    assert pattern_shape(r"(a)\1").reads == UNBOUNDED  # (a backreference's width is its group's)


@pytest.mark.parametrize("pattern, expected", [
    (r"<tool_call>(?=\s*[{\[])", "<"),     # a literal start: the quiet fast path applies
    (r"(?:<a>|\[b)+", "<["),
    (r"[xy]z|w", "wxy"),
    (r"(?=\s*\{)", None),                  # zero-width: no first character
    (r"\s*<x>", None),                     # whitespace first (handled by the \s* lowering instead)
    (r"x?y", "xy"),                        # an optional first item: it, or what follows
    (r"(?:</f>\s*)?</tool_call>", "<"),      # (qwen3_coder's call close)
    (r"x?", None),                         # it may match empty
    (r"(?:a*)?b", None),                   # an optional item that may itself match empty
    (r"(?i)abc", None),                    # case-insensitive
    (r"[^a]b", None),
    (r"\p{L}x", None),
])
def test_first_chars_of_a_pattern(pattern, expected):
    assert first_chars(pattern) == expected
    if expected:  # every match, complete or partial, really starts with one of them
        compiled = regex.compile(pattern, regex.DOTALL)
        starts = [text[m.start()] for text in ["a <tool_call> { xz <a>[b yz w <a", "q[b<tool_c", "<tool_call>  ",
                                                 "a y xy </f> </tool_call> </f"]
                  for m in compiled.finditer(text, partial=True) if m.end() > m.start()]
        assert starts and set(starts) <= set(expected)


@pytest.mark.parametrize("pattern, expected", [
    (r"(?:>>>|^)all\n", ">"),                              # functionary v3.2's openers
    (r"(?:>>>|^)(?P<name>\w+)\n", ">"),
    (r"(?:^|<think>\s*)", "<"),                             # zero-width at the start only (ERNIE 4.5)
    (r"^[^<]{1,128}<\|x\|>", ""),                            # at the start only: no other match
    (r"\Aa|b", "b"),
    (r"x|y", "xy"),                                       # no start anchor: the first characters
    (r"(?m)^x|y", None),                                  # a line's start: anywhere
    (r"(?:^|\n)x", "\n"),                                 # the start of the text or of a line
    (r"(?:^|a*)b", None),                                 # an alternative that may match empty
])
def test_first_chars_of_the_matches_past_the_text_start(pattern, expected):
    """regex_shape.first_chars_past_start: the characters every match not at the text's start begins with."""
    assert first_chars_past_start(pattern) == expected
    if expected is not None:  # every match, complete or partial, not at 0 really starts with one of them
        compiled = regex.compile(pattern, regex.DOTALL)
        starts = [text[m.start()] for text in ["all\n>>>all\nx>>>f\n <think> b", "bb a<|x|>", "q>>>al", " <thi"]
                  for m in compiled.finditer(text, partial=True) if m.start() > 0 and m.end() > m.start()]
        assert set(starts) <= set(expected)
        assert not expected or starts


@pytest.mark.parametrize("pattern, expected", [
    (r"<parameter=(?P<key>[^<>\n]+)>", True),                 # qwen3_coder's parameter opener
    (r"<tool_call>\s*<function=(?P<name>[^<>\n]+)>", True),
    (r"a(?:(?P<x>b)c)d", True),                              # inside a group that always matches
    (r"(?:a(?P<x>b))?c", False),                              # an optional group
    (r"a(?P<x>b)|c", False),                                  # one alternative
    (r"(?P<x>a)(?P<y>b)*", False),                            # a repeat
    (r"(?=(?P<x>a))", False),                                 # an assertion
    (r"(?P<x>a)|(?P<x>b)", False),                            # a name only the regex module reads
    ("no groups", True),
])
def test_named_groups_that_take_part_in_every_match(pattern, expected):
    """always_captured: a match's groupdict() holds no None (the compiled walk takes it as the captures)."""
    assert always_captured(pattern) is expected
    if expected:
        for text in ["<parameter=city>", "<tool_call>\n<function=f>", "abcd", "no groups"]:
            for m in regex.finditer(pattern, text, regex.DOTALL):
                assert None not in m.groupdict().values()


def searched_as_the_regex_module(matcher: RegexMatcher, buf: str, pos: int) -> bool:
    """Whether the matcher's search (its own form of it) finds the span the compiled pattern's search finds."""
    expected = matcher.compiled.search(buf, pos)
    hit = matcher.search(buf, pos)
    return (None if hit is None else hit[:2]) == (None if expected is None else expected.span())


#: Patterns whose matches are a whitespace run then one of a few characters, with those characters and the
#: run's longest length (space_then_chars); None: not such a pattern.
SPACED = [
    (r'\s{0,64};\s*(?=\{\s*"name")', ((";",), 64)),     # llama3_json's separator between calls, once
    (r'(?:\s{0,64};\s*|[ \t\r]{0,64}\n\s{0,64})(?=\{\s*"name")', (("\n", ";"), 64)),   # ... and with newlines
    (r'(?:\s{0,64};\s{0,64}|[ \t\r]{0,64}\n\s{0,64})(?=\{\s{0,64}"name")', (("\n", ";"), 64)),   # ... bounded
    (r"\s{0,8}to=(?P<name>[^\s<]+)", (("to=",), 8)),     # beam's call opener
    (r"\s+(?:<a>|\[b)", (("<a>", "[b"), UNBOUNDED)),
    (r"[ \t]*;", ((";",), UNBOUNDED)),                   # a run of some whitespace characters
    (r"x|\s{0,3}y", (("x", "y"), 3)),                    # an alternative without a run
    (r"(?<![^\n])[ \t]{0,16}(?=\[\s*f\()", (("[",), 16)),  # a lookbehind reads none of the match
    (r"\s{0,4}[ab]c", (("a", "b"), 4)),                  # a class after the run: its characters
    (r"\s*", None),                                     # nothing after the run
    (r"<x>\s*", None),                                  # no leading run
    (r"x|y", None),                                     # no run at all (first_chars' case)
    (r"[ \tx]*;", None),                                # a run of more than whitespace
    (r"(?i:\s*a)", None),                               # inline flags
]


@pytest.mark.parametrize("pattern, expected", SPACED)
def test_first_chars_after_a_leading_whitespace_run(pattern, expected):
    """Where a match may start with whitespace, the characters right after it: a chunk without them can
    only start a match in its trailing whitespace, which the fast path holds back."""
    assert space_then_chars(pattern) == expected
    if expected:
        compiled = regex.compile(pattern, regex.DOTALL)
        for text in [';  ;{ "name"', ' \n;\t{"name"', "  to=f<x> to=g", " <a> [b\n<a>", " x  y\t;", "\n  [ f(", " bc"]:
            for m in compiled.finditer(text, partial=True):
                rest = text[m.start():].lstrip(REGEX_SPACE)
                assert m.partial or any(rest.startswith(head) for head in expected[0])
                assert len(text) - m.start() - len(rest) <= expected[1] or m.partial


@given(st.sampled_from([p for p, expected in SPACED if expected]),
       st.lists(st.sampled_from([" ", "\t", "\n", "\u3000", ";", "{", '"name"', "to=", "f", "<a>", "[b", "x", "y", "[",
                                 "(", "bc"]), max_size=24).map("".join),
       st.integers(min_value=0, max_value=24))
@example(r'(?:\s{0,64};\s*|[ \t\r]{0,64}\n\s{0,64})(?=\{\s*"name")', " \n \n;{" + '"name"', 0)
@example(r'\s{0,64};\s*(?=\{\s*"name")', ";" * 40 + ' {"name"', 0)  # heads too dense: the regex search takes over
@example(r"\s{0,8}to=(?P<name>[^\s<]+)", "to= " * 40 + "to=f", 3)
def test_a_search_by_the_characters_after_the_run_finds_the_regex_match(pattern, buf, pos):
    """Such a pattern is searched by those texts, then the run before them (delimiters.search_spaced): the
    same leftmost match as the regex module's own search, which tries every whitespace character."""
    assert searched_as_the_regex_module(RegexMatcher(pattern), buf, pos)


@given(st.sampled_from([r"\s*<tool_call>", r"\s*(?:<a>|<ab>|\[X)", r"(?:<x>|</x>)\s*", r"\s*<\|im_end\|>\s*"]),
       st.text(alphabet=" \n\u3000<>tool_cabX[/|imend", max_size=16), st.integers(min_value=0, max_value=16))
def test_lowered_patterns_find_the_partial_match_the_regex_finds(pattern, buf, pos):
    """``\\s*<lit>`` delimiters are searched with str.find; where nothing matches yet, the pending start
    they report is the one a partial regex search gives (which is quadratic on long whitespace)."""
    matcher = RegexMatcher(pattern)
    assert matcher.lowered is not None
    pos = min(pos, len(buf))
    if matcher.search(buf, pos) is None:
        m = matcher.compiled.search(buf, pos, partial=True)
        assert matcher.probe(buf, pos, None)[1] == (-1 if m is None or m.start() >= len(buf) else m.start())


#: (text, where the JSON value that starts it ends; None: it does not end in the text, or is not one).
JSON_ENDS = [
    ('{"a": 1} tail', 8),
    ('  [{"a": [1, {"b": 2}]}]\nI will', 24),
    ('{"a": "}]{[\\"" } x', 16),          # brackets and an escaped quote inside a string
    ('{"a": "\\\\"} x', 11),             # an escaped backslash: the quote after it ends the string
    ('"just a string" then', 15),
    ('{"a": {"b": 1}', None),                # cut off
    ('get_weather{"a": 1}', None),           # not a JSON value: never ends, nothing is cut
    ('', None),
    ('   ', None),
]


@pytest.mark.parametrize("text, end", JSON_ENDS)
def test_json_walk_finds_where_the_value_ends(text, end):
    walk = JsonEnd(0)
    assert walk.advance(text, 0) == end
    if end is not None and text.lstrip()[0] in "{[":
        json.loads(text[:end])  # the end is where a JSON parser's value ends


@given(st.sampled_from([t for t, _ in JSON_ENDS]), st.lists(st.integers(min_value=1, max_value=5), max_size=20),
       st.integers(min_value=0, max_value=5))
def test_json_walk_end_is_independent_of_the_chunking(text, sizes, base):
    """Fed in pieces (as a stream arrives, with the buffer trimmed from the front), the walk finds the same
    end as on the whole text, at the same absolute offset."""
    expected = JsonEnd(base).advance(text, base)
    walk, got, i, dropped = JsonEnd(base), None, 0, 0
    for size in [*sizes, len(text)]:
        i = min(len(text), i + size)
        got = walk.advance(text[dropped:i], base + dropped)
        dropped = max(dropped, min(i, walk.at - base) - 2)  # the session trims consumed text
        if got is not None:
            break
    assert got == expected


REPEATED = [LiteralMatcher(("<think>",)), LiteralMatcher(("<a", "<ab")), RegexMatcher(r"<t(?::\w+)?>")]


@given(st.sampled_from(range(len(REPEATED))), st.text(alphabet=" \n<>:abtx", max_size=30),
       st.text(alphabet=" \n<>:abtx", max_size=8))
def test_repeat_is_the_opener_after_a_little_space_at_the_scan_position(which, text, more):
    """A repeated opener matches as ``\\s{0,4}(?:opener)`` anchored where the scan is; what it lets the
    scanner commit stays the match once more text arrives, and text it releases holds no match."""
    opener = REPEATED[which]
    matcher = Repeat(opener, 4)
    body = "|".join(regex.escape(lit) for lit in opener.literals) if isinstance(opener, LiteralMatcher) \
        else opener.pattern
    reference = regex.compile(rf"\s{{0,4}}(?:{body})")
    m = reference.match(text)
    assert span(matcher.search(text, 0)) == (None if m is None else m.span())
    hit, pending = matcher.probe(text, 0, matcher.search(text, 0))
    full = reference.match(text + more)
    if hit is not None:
        assert full is not None and full.span() == hit[:2]
    if hit is None and pending == -1:
        assert full is None, "released text that is a repeated opener"


_JSON_LEAVES = st.none() | st.booleans() | st.integers() | st.text(alphabet='ab"\\{}[] \n', max_size=5)
_JSON_TOPS = st.recursive(_JSON_LEAVES, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    st.text(alphabet='ab"{}[', max_size=3), inner, max_size=3), max_leaves=12).filter(
    lambda v: isinstance(v, (list, dict, str)))


@given(_JSON_TOPS, st.text(alphabet=' ]}"x{\\', max_size=6), st.integers(min_value=-1, max_value=60),
       st.sampled_from(["", " ", "\n  "]))
def test_json_walk_on_a_whole_text_agrees_with_the_walk_char_by_char(value, tail, drop, lead):
    """On the whole text the walk's first step lets the C decoder read the value; fed one character at
    a time it walks brackets and strings. Both find the same end, for valid JSON and for text with one
    character dropped (where the decoder fails and the walk decides)."""
    text = lead + json.dumps(value) + tail
    if 0 <= drop < len(text):
        text = text[:drop] + text[drop + 1:]
    whole = JsonEnd(0).advance(text, 0)
    walk, stepped = JsonEnd(0), None
    for i in range(1, len(text) + 1):
        stepped = walk.advance(text[:i], 0)
        if stepped is not None:
            break
    assert whole == stepped


@given(st.lists(st.text(alphabet="ab<", min_size=1, max_size=4), min_size=1, max_size=2, unique=True),
       st.text(alphabet="ab<x", max_size=30))
def test_the_last_start_anchor_ends_where_the_last_search_match_ends(literals, text):
    """A prompt is cut after its last start anchor: one literal that cannot overlap itself is found with
    rfind, any other anchor by searching; both as the regex's non-overlapping matches from the start."""
    from grammar_parse._engine.template import Delimiter

    anchor = Delimiter(literals=tuple(literals))
    ends = [m.end() for m in anchor.compile().finditer(text)]
    assert anchor.last_end(text, None) == (ends[-1] if ends else None)


def test_a_copied_json_end_walks_on_alone():
    """A frame's copy (a draft read two ways) walks its own text: the original's state is not shared."""
    head = '{"a": [1, {"b": "x'
    walk = JsonEnd(0)
    assert walk.advance(head, 0) is None
    twin = walk.copy()
    assert twin.advance('"}]}', len(head)) == len(head) + 4
    assert walk.advance('\\"y"}]', len(head)) is None  # an escaped quote: still in the string, then 1 deep
    assert walk.advance('}', len(head) + 6) == len(head) + 7


@given(st.sampled_from(["<parameter=(?P<k>[^<>\\n]+)>", r"<t>\s*<f=(?P<n>\w+)>", r"(?:</f>\s*)?</t>"]),
       st.lists(st.text(alphabet="<>/=ftkparmeto \n_x", max_size=12), min_size=1, max_size=30))
def test_a_remembered_walk_is_the_walk(pattern, texts):
    """``Automaton.walk`` remembers short walks (a stream walks the same delimiter pieces again and again):
    what it answers, first or again, is what walking the text answers, from every state met."""
    automaton = RegexMatcher(pattern)._automaton
    assert automaton is not None
    states = [automaton.initial]
    for text in texts + texts:
        for state in list(states):
            got = automaton.walk(state, text)
            assert got == automaton._walk(state, text)
            if got is not None and len(states) < 50:
                states.append(got)


def test_remembered_walks_stay_bounded():
    from grammar_parse._engine import delimiters

    automaton = RegexMatcher(r"<f=(?P<n>[^<>]+)>")._automaton
    assert automaton is not None
    for i in range(3 * delimiters._WALKS_KEPT):
        automaton.walk(automaton.initial, f"<f={i}")
    assert len(automaton._walks) <= delimiters._WALKS_KEPT
    long = "<f=" + "x" * (2 * delimiters._WALKS_TEXT)
    assert automaton.walk(automaton.initial, long) == automaton._walk(automaton.initial, long)
    assert (automaton.initial, long) not in automaton._walks
    for i in range(3 * delimiters._WALKS_KEPT):  # (Automaton.completion's answers too)
        automaton.completion(f"<f={i}")
    assert len(automaton._completions) <= delimiters._WALKS_KEPT
    long = "<f=" + "x" * (2 * delimiters._COMPLETIONS_TEXT)
    assert automaton.completion(long) == ">" and long not in automaton._completions


@given(st.sampled_from([r"<f>(?P<n>[^\n<]+)\n(?:`{3}(?:json)?\n)?", r"<t>\s*<f=(?P<n>\w+)>", r"(?:</f>\s*)?</t>",
                        r"a[^b]*b?c?"]),
       st.lists(st.text(alphabet="<>/=ftabcjson`\n x", min_size=1, max_size=14), min_size=1, max_size=12))
def test_a_completion_is_alive_exactly_where_a_longer_path_is(pattern, tails):
    """``Automaton.completion`` (one forward walk, remembered per tail): False exactly where no path reading
    the tail stays alive (the reverse walk's answer), else a string that completes a match of the regex; the
    same asked first or again."""
    matcher = RegexMatcher(pattern)
    automaton = matcher._automaton
    assert automaton is not None
    for tail in tails + tails:
        got = automaton.completion(tail)
        assert (got is False) == (automaton.first_alive(tail, 0, 1) == -1)
        if isinstance(got, str):
            assert got and matcher.compiled.fullmatch(tail + got) is not None


def _live_partial_by_position(matcher: LiteralMatcher, buf: str, lo: int, hi: int) -> int:
    """The definition: the first position in [lo, hi) whose suffix is a proper prefix of a literal."""
    for i in range(lo, min(hi, len(buf))):
        if any(len(buf) - i < len(lit) and lit.startswith(buf[i:]) for lit in matcher.literals):
            return i
    return -1


@given(st.lists(st.text(alphabet="</ab", max_size=5), min_size=1, max_size=3), st.booleans(),
       st.text(alphabet="<</ab ", max_size=16), st.integers(0, 18), st.integers(0, 18))
@example(["aa"], True, "<<", 0, 2)  # (a start that is no prefix, then one that is, both in the window)
@example(["/ab"], True, "x</a<", 0, 9)
@example(["ab", "b"], False, "aab", 1, 3)
def test_a_literal_partial_at_the_edge_is_the_first_by_definition(tails, one_first, buf, lo, hi):
    """(Literals that all start with one character take the str.find route; others the loop.)"""
    literals = ["<" + t for t in tails] if one_first else [t or "b" for t in tails]
    matcher = LiteralMatcher(tuple(literals))
    assert matcher.live_partial(buf, lo, hi) == _live_partial_by_position(matcher, buf, lo, hi)


#: Patterns that are a lookbehind of texts alone, with the texts (regex_shape.behind_texts); None: other patterns.
BEHIND = [
    (r"(?<=\)\])", (")]",)),                   # llama3_pythonic's call close
    (r"(?<=a|bc)", ("a", "bc")),
    (r"(?<=(?:ab|c)d)", ("abd", "cd")),
    (r"(?<=a)x", None),                         # more than the lookbehind
    (r"(?<=a\w)", None),                        # a class inside
    (r"(?<!a)", None),                          # a negative lookbehind
    (r"(?=a)", None),                           # a lookahead
]


@pytest.mark.parametrize("pattern, expected", BEHIND)
def test_a_lookbehind_of_texts_alone_is_read_as_those_texts(pattern, expected):
    assert behind_texts(pattern) == expected


@given(st.sampled_from([p for p, expected in BEHIND if expected]),
       st.lists(st.sampled_from(["a", "b", "c", "d", ")", "]", ")]", "x", " "]), max_size=20).map("".join),
       st.integers(min_value=0, max_value=20))
def test_a_lookbehind_of_texts_is_searched_as_the_regex_module_does(pattern, buf, pos):
    """Such a pattern is searched with str.find (the regex module tries it at every position): the same
    first place, also where the text it looks behind at starts before the search's start."""
    pos = min(pos, len(buf))  # (the engine searches from within the buffer)
    assert searched_as_the_regex_module(RegexMatcher(pattern), buf, pos)


#: The longest literal text every match reads, with the furthest place after the match's start it may begin at
#: (regex_shape.required_text): a search by a pattern's heads skips to where it is.
REQUIRED = [
    (r'(?:\s{0,64};\s{0,64}|[ \t\r]{0,64}\n\s{0,64})(?=\{\s{0,64}"name")', ('"name"', 194)),  # in the lookahead
    (r"\s{0,8}to=(?P<name>[^\s<]+)(?=<x>)", ("to=", 8)),      # (the text after an unbounded run is not placed)
    (r"ab(?:cde)+f", ("cde", 2)),                              # a repeat's first pass
    (r"(?<=x)\s{0,3}yz", ("yz", 3)),                            # a lookbehind reads before the match
    (r"(?:ab|cd)e", ("e", 2)),                                 # (an alternative's text is not in every match)
    (r"(a)\1x", ("a", 0)),                                     # (nothing placed after a backreference)
    (r"a*b", None),
    (r"(?:a|b)", None),
]


@pytest.mark.parametrize("pattern, expected", REQUIRED)
def test_the_text_every_match_reads(pattern, expected):
    assert required_text(pattern) == expected
    if expected:
        text, reach = expected
        for probe in ['; {"name"', '\n  {  "name"', "  to=f<x>", "abcdecdef", "x  yz", "cde", "bb"]:
            for m in regex.finditer(pattern, probe, regex.DOTALL):
                assert text in probe[m.start():m.start() + reach + len(text)]


@given(st.sampled_from([r'(?:\s{0,4};\s{0,4}|[ \t]{0,4}\n\s{0,4})(?=\{\s{0,4}"name")', r"<a>[^<]{0,5}(?=</a>)",
                        r"x(?!yz)", r"\s{0,3}to=(?P<n>\w{1,4})(?=<c>)"]),
       st.lists(st.sampled_from([" ", "\n", ";", "{", '"name"', "<a>", "</a>", "x", "yz", "to=", "ab", "<c>"]),
                max_size=24).map("".join),
       st.integers(min_value=0, max_value=24))
@example(r"<a>[^<]{0,5}(?=</a>)", "<a>ab ab", 0)
@example(r'(?:\s{0,4};\s{0,4}|[ \t]{0,4}\n\s{0,4})(?=\{\s{0,4}"name")', 'x ;\n {  "na', 0)
def test_a_bounded_pattern_is_pending_where_the_whole_buffer_says(pattern, buf, pos):
    """A streaming probe of a pattern whose attempts read a bounded length (PatternShape.reads, lookaheads'
    text counted) asks for a partial match only that far from the end: the same pending start as asking
    the whole buffer from the scan position."""
    pos = min(pos, len(buf))
    matcher = RegexMatcher(pattern)
    if matcher.search(buf, pos) is None:
        assert matcher.probe(buf, pos, None)[1] == matcher._partial_search(buf, pos)
