"""Grammar text: delimiters survive the trip through Lark's grammar syntax, and bad grammars are
reported with their line and column."""

from __future__ import annotations

import lark
import pytest
import regex
from hypothesis import assume, example, given
from hypothesis import strategies as st

import grammar_parse
from grammar_parse._engine.compiler import lark_regex, lark_string
from grammar_parse._engine.grammar import build_grammar

NO_LEXER = "grammar_parse._engine.grammar._ScannerLexer"


def lark_terminal(body: str):
    from grammar_parse._engine.grammar import _ScannerLexer

    parser = lark.Lark(f"start: T\nT: {body}\n", parser="lalr", lexer=_ScannerLexer, regex=True)
    return parser.terminals[0].pattern


@given(st.text(min_size=1, max_size=30))
def test_string_literals_round_trip(s):
    pattern = lark_terminal(lark_string(s))
    assert pattern.value == s


REGEX_TOKENS = st.sampled_from([
    "a", "b", "/", "\\/", "\\\\", "\\x2a", "\\x41", "\\u00e9", "\\n", "\n", "\\t", '"', "'", "\\'", '\\"',
    "\\|", "|", "(?:", ")", "*", "?", "[/]", "[^/]", "\\s", "\\d", ".", "é", "\x00", "\\x00", "\\U0001F600",
    "(?P<n>x)", "{2}", "$", "^", "\\b", "\u2028",
])


@example('\\\\"', [])  # an escaped backslash, then a quote: Lark's own unescaping drops the backslash
@example('\\\\\\x22', ['\\"'])
@given(st.lists(REGEX_TOKENS, min_size=1, max_size=12).map("".join), st.lists(st.text(max_size=12), max_size=8))
def test_regex_literals_round_trip_to_an_equivalent_regex(pattern, probes):
    try:
        original = regex.compile(pattern, regex.DOTALL)
    except regex.error:
        assume(False)
    value = lark_terminal(lark_regex(pattern)).value
    back = regex.compile(value, regex.DOTALL)
    for probe in probes + [pattern, "a*b", "/", "é", "\n"]:
        a, b = original.search(probe), back.search(probe)
        assert (a and (a.span(), a.groupdict())) == (b and (b.span(), b.groupdict()))


def test_syntax_error_points_at_line_and_column():
    with pytest.raises(grammar_parse.GrammarError) as info:
        build_grammar("start: A\nA: \"x\"\nB: ( \n", source_name="bad.lark")
    assert info.value.code == "grammar.syntax"
    assert info.value.line == 3 and info.value.column is not None
    assert "bad.lark:3" in str(info.value)


def test_lalr_conflict_is_a_load_error():
    text = 'start: a | b\na: X Y\nb: X Y\nX: "x"\nY: "y"\n'
    with pytest.raises(grammar_parse.GrammarError) as info:
        build_grammar(text)
    assert info.value.code == "grammar.conflict"


@pytest.mark.parametrize("text, code, line", [
    ('//@ region x {"content": oops}\nstart: x\nx: X\nX: "x"\n', "grammar.directive", 1),
    ('start: x\nx: X\nX: "x"\n//@ region y {}\n', "grammar.directive", 4),
    ('//@ frobnicate 1\nstart: X\nX: "x"\n', "grammar.directive", 1),
    ('//@ region x {"content": "nope"}\nstart: x\nx: X\nX: "x"\n', "grammar.directive", 1),
])
def test_directive_errors_name_the_line(text, code, line):
    with pytest.raises(grammar_parse.GrammarError) as info:
        build_grammar(text)
    assert (info.value.code, info.value.line) == (code, line)


def test_text_terminal_without_region_is_rejected():
    with pytest.raises(grammar_parse.GrammarError) as info:
        build_grammar("start: X STRAY_TEXT*\nX: \"x\"\n%declare STRAY_TEXT\n")
    assert info.value.code == "grammar.region"


def test_compiled_grammar_exposes_lark_source_with_named_terminals():
    from conformance import load

    grammar = grammar_parse.compile_template(load("transformers_model_templates.json")[0]["template"])
    src = grammar.lark_source
    assert "TOOL_CALLS_OPEN.1: /\\s*<tool_call>/s" in src
    assert "%declare" in src and "__ANON" not in src
    again = build_grammar(src)
    assert again.fields == grammar.fields
