"""A call's parts coalesced (``coalesce_calls=True``, what the wire adapters stream from): a piece of output that
completes no delimiter and only adds text to a call's component (or to a call its components make) waits, and is
read with the next piece.

Held against the same parse without it, for every built-in grammar whose calls have parts, on goldens, transcripts
and generated outputs in any chunking: piece by piece the same call events and the same events of every other
field, the same text of each part in all, the same message and discarded spans; and the Chat Completions and LMSP
adapters' output piece by piece the same. A parse where nothing waits would pass that too, so how many pieces wait
is held as well.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import grammar_parse as gp
from grammar_parse._engine import oneshot, session
from grammar_parse._engine.grammar import Grammar, build_grammar
from grammar_parse.adapters import _stream
from grammar_parse.adapters.chat_completions import ChatCompletionsStream
from grammar_parse.adapters.lmsp import ResponseStream
from grammar_parse.errors import ArgumentError
from goldens import Golden, goldens
from strategies import chunkings, examples, grammar_outputs
from test_specialised import DEEP, outputs
from test_transcripts import CASES as TRANSCRIPTS

PARTS = sorted(name for name in gp.list_grammars()
               if any(r.parent is not None or r.is_call and r.shape.kind == "components"
                      for r in gp.load_grammar(name).regions.values()))
SAMPLES = [g for name in PARTS for g in goldens(name) if "error" not in g.expected] + \
    [t for t in TRANSCRIPTS if t.grammar in PARTS]


@pytest.fixture(autouse=True)
def asked_everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every state stays asked (the per-process give-up, session.WAIT_TRIES, would leave a test nothing to
    compare), from a clean slate."""
    monkeypatch.setattr(session, "WAIT_TRIES", 10 ** 9)
    monkeypatch.setattr(oneshot, "SPECIALISED", True)  # (whatever GRAMMAR_PARSE_SPECIALISED says: see below)
    for name in PARTS:
        gp.load_grammar(name).tables.shared.pop("waits", None)


def _parse(name: Any, chunks: list[str], prefix: str, tools: Any, coalesce: bool,
           strict: bool = False) -> tuple[list[list[dict[str, Any]]], dict[str, Any], list[Any]]:
    parser = gp.ResponseParser(name, prefix, tools=tools, strict=strict, extended_events=True, call_events=True,
                               coalesce_calls=coalesce)
    pieces = [parser.feed(chunk) for chunk in chunks]
    message, last = parser.finalize()
    return pieces + [last], message, list(parser.discarded_spans)


def _parts(event: dict[str, Any], calls: frozenset[str]) -> bool:
    """Whether ``event`` is the text of a call's part (what may come later, cut otherwise)."""
    return event["type"] == "region_chunk" and ("path" in event or event["field"] in calls)


def compare(name: Any, chunks: list[str], prefix: str = "", tools: Any = None) -> int:
    """Hold the coalescing parse of ``chunks`` by grammar ``name`` (or a Grammar) to the plain one; the number of
    pieces that waited."""
    grammar = name if isinstance(name, Grammar) else gp.load_grammar(name)
    calls = frozenset(r.field for r in grammar.regions.values() if r.is_call)
    want, want_message, want_spans = _parse(name, chunks, prefix, tools, False)
    got, message, spans = _parse(name, chunks, prefix, tools, True)
    assert message == want_message and spans == want_spans
    waited = 0
    for i, (a, b) in enumerate(zip(want, got)):
        assert [e for e in b if not _parts(e, calls)] == [e for e in a if not _parts(e, calls)], (chunks[:i + 1], a, b)
        waited += not b and any(_parts(e, calls) for e in a)
    part_text = [e["text"] for piece in want for e in piece if _parts(e, calls)]
    assert "".join(e["text"] for piece in got for e in piece if _parts(e, calls)) == "".join(part_text)
    return waited


def _adapters(name: str, chunks: list[str], prefix: str, tools: Any, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    out: list[Any] = []
    for coalesce in (False, True):
        monkeypatch.setattr(_stream, "COALESCE_CALLS", coalesce)
        chat = ChatCompletionsStream(name, prefix, tools=tools, ids=lambda kind: f"{kind}_1", strict=False)
        lmsp = ResponseStream(name, prefix, tools=tools, ids=lambda kind: f"{kind}_1", strict=False)
        got = [(chat.feed(c), lmsp.feed(c)) for c in chunks]
        got.append((chat.finish(), lmsp.complete()))
        out.append((got, chat.message))
    return out


@pytest.mark.parametrize("size", [1, 4, 9])
@pytest.mark.parametrize("sample", SAMPLES, ids=[f"{s.grammar}/{s.name}" for s in SAMPLES])
def test_a_coalescing_parse_gives_what_the_plain_one_does(sample: Golden, size: int) -> None:
    chunks = [sample.text[i:i + size] for i in range(0, len(sample.text), size)]
    compare(sample.grammar, chunks, sample.prefix, sample.tools)


@pytest.mark.parametrize("sample", SAMPLES, ids=[f"{s.grammar}/{s.name}" for s in SAMPLES])
def test_the_adapters_send_the_same_deltas_piece_by_piece(sample: Golden, monkeypatch: pytest.MonkeyPatch) -> None:
    chunks = [sample.text[i:i + 4] for i in range(0, len(sample.text), 4)]
    plain, coalesced = _adapters(sample.grammar, chunks, sample.prefix, sample.tools, monkeypatch)
    assert coalesced == plain


@pytest.mark.parametrize("name", PARTS)
def test_mutated_outputs(name: str) -> None:
    """The goldens, transcripts and the goldens' mutants (a span removed, a span repeated, or the output cut
    short: test_specialised.outputs; drift rewrites too in the deep profile), in 4- and 7-character pieces."""
    for text, prefix, tools in outputs(name, drift=DEEP):
        for size in (4, 7):
            compare(name, [text[i:i + size] for i in range(0, len(text), size)], prefix, tools)


@pytest.mark.parametrize("name", PARTS)
@settings(max_examples=examples(0.5))
@given(data=st.data())
def test_any_output_in_any_chunking(name: str, data: st.DataObject) -> None:
    text = data.draw(grammar_outputs(name), label="text")
    compare(name, data.draw(chunkings(text), label="chunks"))


def test_pieces_wait_in_every_format_with_parts() -> None:
    """The comparison above holds for parses where pieces wait: in 4-character pieces (about a token each) of the
    goldens and transcripts, a share of every such grammar's pieces wait."""
    waited: dict[str, int] = {}
    for sample in SAMPLES:
        chunks = [sample.text[i:i + 4] for i in range(0, len(sample.text), 4)]
        waited[sample.grammar] = waited.get(sample.grammar, 0) + compare(sample.grammar, chunks, sample.prefix,
                                                                          sample.tools)
    assert sum(waited.values()) > 500, waited
    assert sum(1 for n in waited.values() if n) >= len(PARTS) - 3, waited


def test_a_piece_that_would_pass_the_region_limit_does_not_wait() -> None:
    """Text past a region's size limit is reported when it arrives (a parse_error event): such a piece is read
    at once."""
    text = "<tool_call>\n<function=f>\n<parameter=a>\n" + "x" * 40
    chunks = [text[:-30], "x" * 10, "x" * 10, "x" * 10, "\n</parameter>\n</function>\n</tool_call>"]
    parser = gp.ResponseParser("qwen3_coder", "", extended_events=True, call_events=True, coalesce_calls=True,
                               max_region_chars=25, strict=False)  # (the parameter's text: 11 + 10 + 10)
    got = [parser.feed(c) for c in chunks]
    assert got[1] == []  # (within the limit: it waits)
    assert any(e["type"] == "parse_error" for e in got[2])


def test_what_waits_is_read_at_the_end() -> None:
    parser = gp.ResponseParser("qwen3_coder", "", extended_events=True, call_events=True, coalesce_calls=True)
    assert [e["type"] for e in parser.feed("<tool_call>\n<function=f>\n<parameter=a>\n")
            if e["type"].startswith("call_")] == ["call_open"]
    assert parser.feed("tex") == [] and parser.feed("t") == []  # (a part's text: it waits)
    message, events = parser.finalize()
    assert message["tool_calls"][0]["function"]["arguments"] == {"a": "text"}
    assert [e["type"] for e in events if e["type"].startswith("call_")][-1] == "call_close"


@pytest.mark.parametrize("last, value", [("", "te"), ("xt", "text"), ("t</parameter></function></tool_call>", "tet")])
def test_nothing_waits_once_the_parse_is_finalized(last: str, value: str) -> None:
    """A prompt that leaves a part open (the output goes on inside it): pieces may wait from the start, and once the
    parse is finalized (one-shot with a last piece, or not) a piece is refused as for any parser."""
    prefix = "<|im_start|>assistant\n<tool_call>\n<function=f>\n<parameter=a>\n"
    parser = gp.ResponseParser("qwen3_coder", prefix, extended_events=True, call_events=True, coalesce_calls=True)
    assert parser.feed("te") == []
    message, _ = parser.finalize(last)
    assert message["tool_calls"][0]["function"]["arguments"] == {"a": value}
    with pytest.raises(gp.FinalizedError):
        parser.feed("x")
    fresh = gp.ResponseParser("qwen3_coder", prefix, extended_events=True, call_events=True, coalesce_calls=True)
    fresh.finalize(last)
    with pytest.raises(gp.FinalizedError):
        fresh.feed("x")


def test_the_specialised_switch_turns_coalescing_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """``GRAMMAR_PARSE_SPECIALISED=0`` (oneshot.SPECIALISED) is the escape hatch for the fast paths: with it the
    adapters' parser reads each piece as it comes."""
    pieces = ["<tool_call>\n<function=f>\n<parameter=a>\n", "tex", "t"]
    for on in (True, False):
        monkeypatch.setattr(oneshot, "SPECIALISED", on)
        parser = _stream.open_stream("qwen3_coder", "").parser
        got = [parser.feed(piece) for piece in pieces]
        assert (got[1] == [] and got[2] == []) == on, got


def test_coalescing_needs_call_events() -> None:
    with pytest.raises(ArgumentError, match="call_events"):
        gp.ResponseParser("qwen3_coder", "", coalesce_calls=True)


def test_a_state_where_nothing_waits_is_given_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """GLM's held runs hold a delimiter's start and end (``<arg_key>city</arg_key>``), and what waits there is text
    the fast path reads anyway: after WAIT_TRIES scans of such a state with no piece waiting that a scan would have
    read, it is not asked again, and once no state is, new parsers do not coalesce. What they give is the same."""
    monkeypatch.setattr(session, "WAIT_TRIES", 8)
    call = "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Hanoi</arg_value>\n</tool_call>"
    text = "<think>Weather.</think>" + call * 3
    chunks = [c for piece in text.replace(">", ">\0").replace("<", "\0<").split("\0") if piece
              for c in (piece[i:i + 4] for i in range(0, len(piece), 4))]  # (markup whole, text in 4s)
    first = compare("glm45", chunks, "<|assistant|>")
    for _ in range(6):
        compare("glm45", chunks, "<|assistant|>")
    assert first and compare("glm45", chunks, "<|assistant|>") == 0


#: A call of parts whose part closes only after text (``#``), or is written empty (``!?``): the close is live only
#: once text has moved the parser on, so a piece's end characters are those of both states.
AFTER_TEXT = r"""//@ grammar_parse 1
//@ region content {"content": "text"}
//@ region tool_calls {"repeats": true, "scope": {"arguments": {}}, "transform": {"type": "function", "function": {"name": "{name}", "arguments": "{arguments}"}}}
//@ region parameter {"parent": "tool_calls", "key": "arguments", "entry_key": "{key}", "content": "text"}
start: content?
content: (CONTENT_TEXT | tool_calls)+
tool_calls: TOOL_CALLS_OPEN (TOOL_CALLS_TEXT | parameter)* TOOL_CALLS_CLOSE
parameter: PARAMETER_OPEN (PARAMETER_TEXT+ PARAMETER_CLOSE | PARAMETER_EMPTY)
TOOL_CALLS_OPEN: /<call (?P<name>\w+)>/
TOOL_CALLS_CLOSE: "</call>"
PARAMETER_OPEN: /<p (?P<key>\w+)>/
PARAMETER_CLOSE: "#"
PARAMETER_EMPTY: "!?"
%declare CONTENT_TEXT TOOL_CALLS_TEXT PARAMETER_TEXT
"""


@pytest.mark.parametrize("chunks", [
    ["hi <call f>", "<p a>!", "ab#", "</call>"],  # (the part's text starts with the empty one's start)
    ["hi <call f>", "<p a>!", "a", "b", "#</call>"],
    ["hi <call f>", "<p a>", "!?", "</call>"],
])
def test_a_close_live_only_after_text_is_told(chunks: list[str]) -> None:
    """Held at ``<p a>!``, nothing of the part's text has gone to the parser yet: its close (``#``) is not live
    there, but it is once text moves the parser on, so a piece holding it is read at once."""
    compare(build_grammar(AFTER_TEXT, source_name="after_text.lark"), chunks)
