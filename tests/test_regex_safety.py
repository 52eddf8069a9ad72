"""Hostile template regexes: which patterns load, and where those that could backtrack for ever are refused
(templates, grammar terminals, start anchors, content-parser patterns, legacy x-regex).

Costs are counted, not timed: the analysis' work units against its caps, a backtracking matcher's steps and
the linear matcher's (``test_linear_regex.linear_steps``)."""

from __future__ import annotations

import functools
from typing import Any

import pytest
import regex

import grammar_parse as gp
from grammar_parse._engine import regex_safety
from grammar_parse._engine.grammar import build_grammar
from grammar_parse._engine.linear_regex import LinearRegex
from grammar_parse._engine.regex_safety import (MAX_AMBIGUITY, MAX_DEGREE, MAX_EDGES, MAX_POSITIONS, MAX_REPEAT,
                                        RegexSafetyError, analyse, choice_points, parse_pattern, refusal)
from test_linear_regex import linear_steps

# (pattern, code suffix): each backtracks practically for ever on a short near miss in the regex module
# (the first three hang on a 42-character output), or inflates automata.
REFUSED = [
    (r"(a+){1,30}b", "backtracking"),            # a bounded outer repeat around an unbounded one
    (r"(?:a{1,50}){1,50}b", "backtracking"),     # bounded around bounded: counts above 16 loop
    (r"(.*?,){11}P", "backtracking"),            # 11 lazy loops in a row: degree 10
    (r"(.*?,){6}P", "backtracking"),             # degree 5: one above the limit
    (r"(a|a)*b", "backtracking"),                # overlapping alternatives in a repeat
    (r"(?:[a-z]|[a-m])*!", "backtracking"),
    (r"(\w|\d)+x", "backtracking"),
    (r"(?i)(A|a)*b", "backtracking"),            # overlap through case folding
    (r"(\p{L}|[a-z])*!", "backtracking"),        # overlap through a regex-only class
    (r"(\w+\s?)*$", "backtracking"),             # nested quantified groups
    (r"(a+)+b", "backtracking"),
    (r"(a*)*b", "backtracking"),
    (r"(?:\d*)*;", "backtracking"),
    (r"([a-z]+)*$", "backtracking"),
    (r"(\d+|\d+\.\d+)*$", "backtracking"),
    (r"(?:\s*,\s*)*x", "backtracking"),
    (r"^(([a-z])+.)+[A-Z]([a-z])+$", "backtracking"),
    (r"(?>a+)+b", "backtracking"),               # atomic and possessive forms are analysed as written
    (r"(?=(a+)+b)a", "backtracking"),            # inside a lookahead
    (r"(?!(a|a)*b)c", "backtracking"),
    (r"\s*\s*x", "backtracking"),                # adjacent repeats of one class
    (r".*.*X", "backtracking"),
    (r"\s+\s*", "backtracking"),
    (r"\p{L}+\p{L}+x", "backtracking"),
    (r"(?:a{1,16}){1,16}b", "backtracking"),     # finite, but more than 64 ways
    (r"(?:a|a){1,16}b", "backtracking"),
    (r"(a?){30}a{30}", "backtracking"),
    (r"a{1000000}", "size"),                     # above MAX_REPEAT
    (r"a{1001}", "size"),
    (r"x{2,5000}", "size"),
    # searched under a time limit, with more than MAX_CHOICE_POINTS places for the linear matcher to read at
    # every character past it (three runs of 900 on a newline flood: 1.3 s per KB)
    (r"(.*?)[ \t]{0,300}\n", "size"),
    (r'(?:\s{0,900};\s*|[ \t]{0,900}\n\s{0,900})(?=\{\s*"name")', "size"),
]

# (pattern, degree): accepted. Degree 0 runs free; above 0 the pattern runs bounded. The degrees are the
# chains of loops that can take the same text, counted by hand.
ACCEPTED = [
    (r"<t>(.*?)</t>", 0),
    (r"<(?P<key>\w+)>(?P<value>.*?)</(?P=key)>", 0),
    (r"(?:<b>(?:(?!</b>)[\s\S])*</b>\s*)+", 0),  # the tempered dot cannot take the close it refuses
    (r"([^<]|<(?!/x>))*</x>", 0),
    (r"(a|ab)*c", 0),
    (r"a{1000}", 0),
    (r"\s{0,16}(?P<name>[^\s<{]{1,256})(?=\s{0,16}<)", 0),
    (r"<\|channel\|>commentary to=functions\.(?P<name>\w+).*?<\|message\|>", 1),  # \w+ then .*?
    (r".*?\S.*?</think>", 1),
    (r"[\s\S]*?\n\s*x", 1),
    (r"(a|b)*(a|c)*d", 1),
    (r"\s*(?P<value>.*?)\s*</parameter>", 2),   # transformers' Qwen3 tag pattern: three whitespace loops
    (r"(.*?,){4}P", 3),
    (r"(.*?,){5}P", MAX_DEGREE),
    (r"(?:\s{0,64};\s*|[ \t\r]{0,64}\n\s{0,64})(?=\{\s*\"name\")", 0),  # 201 choice points, under the bound
    (r"(?:\s{0,900};\s{0,900}|[ \t]{0,900}\n\s{0,900})(?=\{)", 0),  # 4,502, but bounded runs need no time limit
]


@pytest.mark.parametrize("pattern, kind", REFUSED, ids=[p for p, _ in REFUSED])
def test_refused_patterns(pattern, kind):
    found = refusal(pattern)
    assert found is not None and found.kind == kind


@pytest.mark.parametrize("pattern, degree", ACCEPTED, ids=[p for p, _ in ACCEPTED])
def test_accepted_patterns_and_their_degree(pattern, degree):
    assert refusal(pattern) is None
    assert analyse(pattern).degree == degree


# Near misses by length: an opener never closed, closes without the final one, a run of one letter.
NEAR_MISSES = [lambda n: "<t>" + " " * n, lambda n: "<b>" + "</b> <b>" * (n // 8) + "x", lambda n: "a" * n]


@pytest.mark.parametrize("pattern", [p for p, d in ACCEPTED if d == 0 and "a{1000}" not in p])
def test_accepted_linear_patterns_fail_a_long_near_miss_quickly(pattern):
    """A pattern of degree 0 reads a near miss once from a start, however long: a backtracking matcher's
    steps grow as the text does. The regex module's steps cannot be counted; the linear matcher without
    its memory of failures backtracks in the same order (its steps are counted), and the regex module
    gives its answer."""
    compiled = regex.compile(pattern, regex.DOTALL)
    backtracker = LinearRegex(pattern)
    for near_miss in NEAR_MISSES:
        small, _ = linear_steps(lambda: backtracker.match(near_miss(10_000)), memo=False)
        large, found = linear_steps(lambda: backtracker.match(near_miss(40_000)), limit=4.4 * small, memo=False)
        assert large <= 4.4 * small, (near_miss(8), small, large)  # (4x the text: 4x the steps)
        expected = compiled.match(near_miss(40_000))
        assert (found and found.span()) == (expected and expected.span())


def _template(key, pattern):
    fields = {"x": {"open": "<x>", "close": "</x>"}, "content": {}}
    if key == "start_anchor_pattern":
        return {"start_anchor_pattern": pattern, "fields": fields}, "start_anchor_pattern"
    if key == "tag_pattern":
        fields["x"] = {"open": "<x>", "close": "</x>", "content": "xml-inline",
                       "content_args": {"tag_pattern": f"(?P<key>k){pattern}"}}
        return {"start_anchor": "A", "fields": fields}, "fields.x.content_args.tag_pattern"
    fields["x"] = {"open": "<x>", "close_pattern": pattern} if key == "close_pattern" else \
        {"open_pattern": pattern, "close": "</x>"}
    return {"start_anchor": "A", "fields": fields}, f"fields.x.{key}"


@pytest.mark.parametrize("key", ["open_pattern", "close_pattern", "start_anchor_pattern", "tag_pattern"])
@pytest.mark.parametrize("pattern, kind", REFUSED[::3], ids=[p for p, _ in REFUSED[::3]])
def test_templates_refuse_them_naming_the_field_and_key(key, pattern, kind):
    template, path = _template(key, pattern)
    with pytest.raises(gp.TemplateError) as info:
        gp.compile_template(template)
    assert info.value.code == f"template.regex_{kind}" and info.value.path == path
    assert info.value.hint


@pytest.mark.parametrize("pattern, kind", REFUSED[1::3], ids=[p for p, _ in REFUSED[1::3]])
def test_grammars_refuse_them_naming_the_terminal(pattern, kind):
    escaped = pattern.replace("/", "\\/")
    with pytest.raises(gp.GrammarError) as info:
        build_grammar(f"//@ region x {{}}\nstart: x\nx: X_OPEN X_TEXT* X_CLOSE\nX_OPEN: /{escaped}/\n"
                      f'X_CLOSE: "</x>"\n%declare X_TEXT\n')
    assert info.value.code == f"grammar.regex_{kind}" and "X_OPEN" in str(info.value)


# (legacy schemas use Python's re syntax: \p{..}, and (?>...) before Python 3.11, are errors there first)
LEGACY_REFUSED = [(p, kind) for p, kind in REFUSED if "\\p" not in p and "(?>" not in p]


@pytest.mark.parametrize("pattern, kind", LEGACY_REFUSED, ids=[p for p, _ in LEGACY_REFUSED])
def test_legacy_schemas_refuse_them_naming_the_node(pattern, kind):
    from grammar_parse.compat import legacy_grammar

    schema = {"type": "object", "properties": {"content": {"type": "string", "x-regex": pattern}}}
    with pytest.raises(gp.TemplateError) as info:
        legacy_grammar(schema)
    assert info.value.code == f"template.regex_{kind}"
    assert info.value.path == "(root).properties.content.x-regex"


def test_the_counted_repeat_cap_is_exactly_max_repeat():
    assert refusal(f"a{{{MAX_REPEAT}}}") is None
    assert refusal(f"a{{0,{MAX_REPEAT + 1}}}") is not None


def _analysis_within_its_caps(pattern: str) -> tuple[RegexSafetyError | None, str | None]:
    """The refusal of ``pattern`` (uncached) and the cap that stopped its analysis (None: it finished),
    counting the work the analysis caps as it goes: positions and transitions of each automaton
    (MAX_POSITIONS, MAX_EDGES), product states of each ambiguity test (its work limit). The test fails as
    soon as one passes its cap, which also stops an analysis whose cap is gone."""
    positions: dict[int, int] = {}
    transitions: dict[int, int] = {}
    states: dict[int, int] = {}
    capped: list[str] = []
    automaton, analysis = regex_safety._Automaton, regex_safety._Analysis
    position, link, spend = automaton.position, automaton.link, analysis._spend
    work_limit = regex_safety._WORK_LIMIT

    def count(work: dict[int, int], owner: object, amount: int, cap: int, what: str) -> None:
        work[id(owner)] = work.get(id(owner), 0) + amount
        assert work[id(owner)] <= cap, f"more than {cap} {what}"

    def counted_position(self: Any, mask: int) -> Any:
        try:
            found = position(self, mask)
        except RegexSafetyError:
            capped.append("positions")
            raise
        count(positions, self, 1, MAX_POSITIONS, "positions in one automaton")
        return found

    def counted_link(self: Any, frm: Any, to: set[int]) -> None:
        frm = list(frm)
        try:
            link(self, frm, to)
        except RegexSafetyError:
            capped.append("transitions")
            raise
        count(transitions, self, len(frm) * len(to), MAX_EDGES, "transitions in one automaton")

    def counted_spend(self: Any, amount: int = 1) -> None:
        try:
            spend(self, amount)
        except RegexSafetyError:
            capped.append("product states")
            raise
        count(states, self, amount, work_limit, "product states in one ambiguity test")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(automaton, "position", counted_position)
        patch.setattr(automaton, "link", counted_link)
        patch.setattr(analysis, "_spend", counted_spend)
        try:
            analyse.__wrapped__(pattern)
        except RegexSafetyError as e:
            return e, capped[0] if capped else None
    return None, None


# (pattern, code suffix or None, the cap that stops its analysis or None, the reason it gives): patterns
# built to make the analysis itself slow (dense transitions, thousands of positions, nested lookarounds);
# it took 95 s on the second before its work was capped.
HARD_TO_ANALYSE = [
    ("(?:(?:(?:a?){15}){15}){15}", "size", "transitions", f"more than {MAX_EDGES} transitions"),
    ("a?" * 3000, "size", "transitions", f"more than {MAX_EDGES} transitions"),
    ("(?:x?){16}" * 30, "backtracking", None, f"more than {MAX_AMBIGUITY} ways"),
    ("(?:a|b|c|d|e|f|g|h|i|j|k|l|m|n|o|p)" * 200, None, None, None),
    ("(?:a*b)*" * 50, "backtracking", "product states", "too many interlocking repeats to analyse"),
    ("(?:" * 90 + "a" + ")*" * 90, "backtracking", None, "exponentially many ways"),
    ("(?=" * 50 + "a" + ")" * 50, "backtracking", None, "lookarounds nested too deeply"),
]


@pytest.mark.parametrize("pattern, kind, cap, reason", HARD_TO_ANALYSE, ids=[p[:30] for p, *_ in HARD_TO_ANALYSE])
def test_the_analysis_itself_is_bounded(pattern, kind, cap, reason):
    """Within its caps on work, the analysis comes to a verdict, or the cap that bounds it refuses the pattern."""
    found, capped = _analysis_within_its_caps(pattern)
    assert (found and found.kind) == kind and capped == cap
    if reason is not None:
        assert reason in found.reason, found.reason


def test_a_refused_pattern_does_not_hang_at_load():
    """Each refused pattern is refused for what it is: its analysis comes to a verdict before any cap on its
    work stops it."""
    for pattern, kind in REFUSED:
        found, capped = _analysis_within_its_caps(pattern + "(?:)")  # (a pattern no cache holds)
        assert found is not None and found.kind == kind and capped is None, (pattern, found, capped)


# ---------------------------------------------------------------------------- start anchors on hostile prompts
def _reference_truncation(pattern, prompt):
    """Where the output starts after the prompt, as transformers finds it (Python's re, last match)."""
    import re

    ends = [m.end() for m in re.finditer(pattern, prompt, re.DOTALL)]
    return prompt[ends[-1]:] if ends else prompt


# (anchor pattern, a prompt on which the regex module searches for seconds: each start scans to the end)
HOSTILE_PROMPTS = [
    (r"<\|im_start\|>assistant[^\n]*\n", "<|im_start|>assistant" * 20_000),
    (r"<\|im_start\|>assistant\n(?:<think>\s*.*?</think>)?", "<|im_start|>assistant\n<think>" * 12_000),
    (r"<\|im_start\|>assistant\s*(.*?)\s*\n", "<|im_start|>assistant" + " " * 3_000),  # degree 2: 3 KB, 14 s+
]


@pytest.mark.parametrize("pattern, prompt", HOSTILE_PROMPTS, ids=[p for p, _ in HOSTILE_PROMPTS])
@pytest.mark.filterwarnings("ignore::grammar_parse.AnchorWarning")  # (some hostile prompts hold no anchor)
def test_a_start_anchor_pattern_searches_a_hostile_prompt_in_bounded_time(pattern, prompt, monkeypatch):
    """Past its limit the search hands over to the linear matcher: the output starts where Python's re
    says, and the matcher's steps grow as the prompt does (the regex module alone: 16 s on the first)."""
    from grammar_parse._engine import session

    template = {"start_anchor_pattern": pattern, "fields": {"content": {}}}
    small = prompt[:len(prompt) // 10]  # (Python's re takes under a second on a tenth)
    expected = gp.parse_response(_reference_truncation(pattern, small) + "Hi",
                                 {"start_anchor": "\x00", "fields": {"content": {}}}, prefix="")
    assert gp.parse_response("Hi", template, prefix=small) == expected
    monkeypatch.setattr(session, "START_ANCHOR_LIMIT", 0.0)  # (every prompt search hands over at once)
    assert gp.parse_response("Hi", template, prefix=small) == expected
    half, _ = linear_steps(lambda: gp.parse_response("Hi", template, prefix=prompt[:len(prompt) // 2]))
    whole, message = linear_steps(lambda: gp.parse_response("Hi", template, prefix=prompt), limit=2.2 * half)
    assert 0 < half and whole <= 2.2 * half, (half, whole)  # (twice the prompt: twice the steps)
    assert message["content"].endswith("Hi")


# ---------------------------------------------------------------------------- content-parser patterns
def test_a_cubic_tag_pattern_on_a_hostile_call_gives_the_same_message_in_any_chunking(monkeypatch):
    """transformers' Qwen3.5 tag pattern (\\s*(?P<value>.*?)\\s*, degree 2) took past its 1 s limit on 1,000
    spaces and failed with parse.timeout, depending on the machine; past the limit the linear matcher now
    finishes the scan, with the regex module's message, in steps that grow as the text does."""
    from conformance import load
    from grammar_parse._engine import delimiters
    from grammar_parse._engine import toolstream
    from grammar_parse._engine.content import xml

    template = next(e["template"] for e in load("transformers_model_templates.json") if "qwen3.5" in e["model_family"])

    def call(spaces):
        return "<tool_call>\n<function=f>\n<parameter=a>" + " " * spaces + "x\n</function>\n</tool_call>"

    def streamed(text):
        parser = gp.ResponseParser(template, "")
        for i in range(0, len(text), 7):
            parser.feed(text[i:i + 7])
        return parser.finalize()[0]

    # no </parameter>: the tag pattern matches nothing, and the call has no arguments
    expected = {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {}}}]}
    assert gp.parse_response(call(20), template, prefix="") == expected  # (the regex module, within its limit)
    # every scan of the tag pattern hands over at once (a limit of zero), and no delimiter search does (no
    # limit): the steps counted are the tag pattern's
    monkeypatch.setattr(xml, "search_budget", lambda chars: 0.0)
    monkeypatch.setattr(toolstream, "search_budget", lambda chars: 0.0)
    monkeypatch.setattr(delimiters, "search_budget", lambda chars, rate=0.0: None)
    for run in (lambda text: gp.parse_response(text, template, prefix=""), streamed):
        assert run(call(20)) == expected
        small, message = linear_steps(lambda: run(call(1_000)))
        large, _ = linear_steps(lambda: run(call(2_000)), limit=2.2 * small)
        assert message == expected
        assert 0 < small and large <= 2.2 * small, (small, large)  # (twice the spaces: twice the steps)


# A search makes an attempt at each start of a match. Where no unbounded repeat can read over the start of
# another attempt (a character of the literal every match starts with that it cannot read), an attempt reads
# past boundedly many starts and the search reads each character boundedly often, however many repeats
# there are: such patterns search with no time limit (it costs about 1 µs a search). Each text is many
# starts, each followed by long runs the repeats take, with no match.
STARTS_APART = [
    (r"<tool_call>\s*<function=(?P<name>[^<>\n]+)>", "<tool_call>" + " " * 40 + "<function=" + "a" * 40),
    (r'<s n="[^"]*"\s*>', '<s n="' + "<s" * 40),
    (r"\[T\](?P<name>[^\[\]]+)(?:\[I\](?P<id>[^\[\]]+))?\[A\]", "[T]" + "x" * 30 + "[I]" + "y" * 30),
    (r"(?:</f>\s*)?</t>", "</f>" + " " * 60),
]
# ... and where one can, the same kind of text costs quadratic steps: these keep their limit.
RESCANNING = [
    (r"<a>\s*x[^y]*y", "<a>x"),
    # (mimo's parameter opener before its key left "<" out: one repeat was enough)
    (r"<[ \t]{0,8}parameter[ \t]{0,8}=[ \t]{0,8}(?P<key>[^>\s]+)[ \t]{0,8}>", "<parameter="),
    (r"<a>\s*.*b", "<a> "),
]


@functools.cache
def _linear(pattern: str, flags: int) -> LinearRegex:
    return LinearRegex(pattern, flags)  # (it keeps nothing from one search to the next)


def _search_steps(pattern: str, unit: str, n: int, limit: float = 1e9, flags: int = regex.DOTALL) -> int:
    """The linear matcher's steps, backtracking as the regex module does, to search ``unit`` repeated to about
    ``n`` characters."""
    text = unit * (n // len(unit))
    matcher = _linear(pattern, flags)
    steps, _ = linear_steps(lambda: matcher.search(text), limit=limit, memo=False)
    return steps


@pytest.mark.parametrize("pattern, unit", STARTS_APART)
def test_a_search_whose_repeats_cannot_read_over_a_start_reads_each_character_boundedly_often(pattern, unit):
    from grammar_parse._engine.regex_shape import backtracking_risk

    assert not analyse(pattern).rescans and backtracking_risk(pattern) == (None, False, False)
    small = _search_steps(pattern, unit, 5_000)
    assert _search_steps(pattern, unit, 20_000, limit=4.4 * small) <= 4.4 * small  # (4x the text: 4x the steps)


@pytest.mark.parametrize("pattern, unit", RESCANNING)
def test_a_search_whose_repeat_reads_over_a_start_rescans_and_keeps_its_limit(pattern, unit):
    from grammar_parse._engine.regex_shape import backtracking_risk

    profile = analyse(pattern)
    assert profile.rescans and backtracking_risk(pattern)[1:] == (True, not profile.linear)
    small = _search_steps(pattern, unit, 400)
    assert _search_steps(pattern, unit, 1_600) > 10 * small  # (4x the text: about 16x the steps)
    if profile.linear:  # ... while one match attempt reads the text once: it needs no limit (search_spaced's tries)
        matcher = _linear(pattern, regex.DOTALL)
        one = [linear_steps(lambda n=n: matcher.match(unit * (n // len(unit))), memo=False)[0] for n in (400, 1_600)]
        assert one[1] <= 4.4 * one[0]


def test_every_built_in_delimiter_searched_without_a_limit_reads_cut_matches_in_linear_steps():
    """The attack that found a quadratic search in a built-in grammar (mimo's parameter opener on
    ``<parameter=`` written over and over: 75 s at 176 KB): a match of a delimiter cut short, repeated. Every
    built-in delimiter pattern that searches without a time limit searches such texts in linear steps: four
    times the text, at most about four times the steps."""
    from goldens import goldens
    from grammar_parse._engine.delimiters import RegexMatcher
    from grammar_parse._engine.library import list_grammars, load_grammar

    matchers = {}
    for name in list_grammars():
        for info in load_grammar(name).tables.states.values():
            for _, matcher, *_ in info.scanner.entries:
                if isinstance(matcher, RegexMatcher) and not matcher.limit and matcher.lowered is None:
                    matchers[matcher.pattern] = matcher
    texts = [g.text for name in list_grammars() for g in goldens(name)]
    checked = 0
    for pattern, matcher in matchers.items():
        found = {m.group(0) for text in texts for m in matcher.compiled.finditer(text) if len(m.group(0)) > 1}
        for match in sorted(found, key=len)[-3:]:  # (its longest matches in the goldens)
            for cut in {len(match) - 1, len(match) - 2, len(match) // 2} - {0}:
                unit = match[:cut]
                small = _search_steps(pattern, unit, 1_000, flags=matcher.flags)
                large = _search_steps(pattern, unit, 4_000, limit=4.4 * small + 100, flags=matcher.flags)
                assert large <= 4.4 * small + 100, (pattern, unit, small, large)
                checked += 1
    assert checked >= 100


@pytest.mark.parametrize("pattern, points", [
    (r"a{3,5}", 2), (r"a*", 1), (r"(?:ab|c|d)x", 2), (r"(?:ab|c){2}", 2), (r"(?:a|b){2}", 0), (r"\s{0,4}(?=x?y)", 5), (r"abc", 0),
])
def test_choice_points_are_the_linear_matchers(pattern, points):
    """choice_points counts the places the linear matcher may choose a path, as it compiles the pattern."""
    from grammar_parse._engine.linear_regex import LinearRegex, _LOOK

    def splits(program):  # type: ignore[no-untyped-def]
        return program.splits + sum(splits(ins[1]) for ins in program.code if ins[0] == _LOOK)

    parsed = list(parse_pattern(pattern, regex.DOTALL, keep_alternatives=False)[0])  # (as the linear matcher parses)
    assert choice_points(parsed) == points == splits(LinearRegex(pattern).program)
