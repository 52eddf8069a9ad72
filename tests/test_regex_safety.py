"""Hostile template regexes: which patterns load, and where those that could backtrack for ever are refused
(templates, grammar terminals, start anchors, content-parser patterns, legacy x-regex)."""

from __future__ import annotations

import time

import pytest
import regex

import grammar_parse as gp
from grammar_parse.grammar import build_grammar
from grammar_parse.regex_safety import MAX_DEGREE, MAX_REPEAT, analyse, refusal

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
]


@pytest.mark.parametrize("pattern, kind", REFUSED, ids=[p for p, _ in REFUSED])
def test_refused_patterns(pattern, kind):
    found = refusal(pattern)
    assert found is not None and found.kind == kind


@pytest.mark.parametrize("pattern, degree", ACCEPTED, ids=[p for p, _ in ACCEPTED])
def test_accepted_patterns_and_their_degree(pattern, degree):
    assert refusal(pattern) is None
    assert analyse(pattern).degree == degree


@pytest.mark.parametrize("pattern", [p for p, d in ACCEPTED if d == 0 and "a{1000}" not in p])
def test_accepted_linear_patterns_fail_a_long_near_miss_quickly(pattern):
    """A pattern of degree 0 reads a near miss once from a start, however long."""
    compiled = regex.compile(pattern, regex.DOTALL)
    for near_miss in ("<t>" + " " * 200_000, "<b>" + "</b> <b>" * 30_000 + "x", "a" * 200_000):
        started = time.perf_counter()
        compiled.match(near_miss)
        assert time.perf_counter() - started < 1.0


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


# (pattern, code suffix or None): patterns built to make the analysis itself slow (dense transitions,
# thousands of positions, nested lookarounds); it took 95 s on the second before its work was capped.
HARD_TO_ANALYSE = [
    ("(?:(?:(?:a?){15}){15}){15}", "size"),
    ("a?" * 3000, "size"),
    ("(?:x?){16}" * 30, "backtracking"),
    ("(?:a|b|c|d|e|f|g|h|i|j|k|l|m|n|o|p)" * 200, None),
    ("(?:a*b)*" * 50, "backtracking"),
    ("(?:" * 90 + "a" + ")*" * 90, "backtracking"),
    ("(?=" * 50 + "a" + ")" * 50, "backtracking"),
]


@pytest.mark.parametrize("pattern, kind", HARD_TO_ANALYSE, ids=[p[:30] for p, _ in HARD_TO_ANALYSE])
def test_the_analysis_itself_is_bounded(pattern, kind):
    started = time.perf_counter()
    found = refusal(pattern)
    assert time.perf_counter() - started < 3.0
    assert (found and found.kind) == kind


def test_a_refused_pattern_does_not_hang_at_load():
    started = time.perf_counter()
    for pattern, _ in REFUSED:
        refusal(pattern + "(?:)")  # (uncached)
    assert time.perf_counter() - started < 5.0


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
def test_a_start_anchor_pattern_searches_a_hostile_prompt_in_bounded_time(pattern, prompt):
    template = {"start_anchor_pattern": pattern, "fields": {"content": {}}}
    small = prompt[:len(prompt) // 10]  # (Python's re takes under a second on a tenth)
    assert gp.parse_response("Hi", template, prefix=small) == \
        gp.parse_response(_reference_truncation(pattern, small) + "Hi", {"start_anchor": "\x00", "fields": {"content": {}}},
                          prefix="")
    started = time.perf_counter()
    message = gp.parse_response("Hi", template, prefix=prompt)
    assert time.perf_counter() - started < 10.0  # (the regex module alone: 16 s for the first)
    assert message["content"].endswith("Hi")


# ---------------------------------------------------------------------------- content-parser patterns
def test_a_cubic_tag_pattern_on_a_hostile_call_gives_the_same_message_in_any_chunking():
    """transformers' Qwen3.5 tag pattern (\\s*(?P<value>.*?)\\s*, degree 2) took past its 1 s limit on 1,000
    spaces and failed with parse.timeout, depending on the machine; past the limit the linear matcher now
    finishes the scan."""
    from conformance import load

    template = next(e["template"] for e in load("transformers_model_templates.json") if "qwen3.5" in e["model_family"])
    text = "<tool_call>\n<function=f>\n<parameter=a>" + " " * 1_000 + "x\n</function>\n</tool_call>"
    started = time.perf_counter()
    message = gp.parse_response(text, template, prefix="")
    assert time.perf_counter() - started < 8.0
    # no </parameter>: the tag pattern matches nothing, and the call has no arguments
    assert message["tool_calls"] == [{"type": "function", "function": {"name": "f", "arguments": {}}}]
    parser = gp.ResponseParser(template, "")
    for i in range(0, len(text), 7):
        parser.feed(text[i:i + 7])
    assert parser.finalize()[0] == message
