"""The grammars as decoding constraints (grammar_parse.constrain), checked byte by byte with llguidance's
and xgrammar's matchers over a byte-level vocabulary (no model needed).

For every supported grammar and golden sample: the output (cut at its end-of-turn marker, which the
constraint leaves to the server's stop token) is accepted; cut inside a call it is a live prefix that is
not complete; a malformed call (unknown tool, wrong argument type, missing required argument, broken JSON)
is rejected; ``tool_choice="required"`` rejects a text-only answer and accepts reasoning then a call;
``"none"`` rejects every call. Samples without a tools file get tools inferred from their expected calls.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

import grammar_parse as gp
from goldens import Golden, called_tools, goldens
from grammar_parse import constrain
from grammar_parse._engine.session import ResponseParser
from grammar_parse._engine.toolstream import call_regions

llguidance = pytest.importorskip("llguidance")
xgrammar = pytest.importorskip("xgrammar")

# (drive_llguidance and drive_xgrammar: for the other engine tests, which import them from here)
from constrain_engines import (EOS, LLG_TOKENIZER, XGR_COMPILER, XGR_INFO, drive_llguidance,  # noqa: E402, F401
                               drive_xgrammar, run_llguidance, run_xgrammar)



def _exports(name: str) -> bool:
    try:
        tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
        constrain.to_structural_tag(gp.load_grammar(name), tools=tools)
        constrain.to_llguidance(gp.load_grammar(name), tools=tools)
        return True
    except gp.GrammarParseError as e:
        assert e.code == "constrain.unsupported", e
        return False


#: Every built-in grammar the exports take; the others are UNSUPPORTED, each with its reason.
SUPPORTED = [n for n in sorted(gp.list_grammars()) if _exports(n)]
#: Samples in a form the grammar reads but the constraint does not offer (it writes the canonical form).
NOT_OFFERED = {
    ("kimi_k2", "section_ends_reasoning"): "a call section that ends an unclosed reasoning",
    **{(g, n): "prose holding a bare call's usual spelling, which xgrammar (no regex exclusion) keeps out of all "
       "free text (llguidance accepts it: test_call_forms)" for g, n in (("llama3_json", "json_in_prose"),
                                                                         ("xlam", "array_in_prose"),
                                                                         ("xlam", "json_example_in_text"))},
    ("poolside_v1", "prose_mentions_the_tag"): "prose holding the call's trigger (<tool_call>): it starts a call",
    ("minimax_m3", "repeated_and_raw_values"): "a list written as the key repeated: the constraint writes <item> "
                                               "elements, as the template does",
    ("minimax_m3", "nested_arguments"): "objects and lists as elements where the schema declares no properties or "
                                        "items (tools inferred from the values): a free key's closer repeats it, "
                                        "which neither engine can match, so such a value is offered as JSON",
    ("apertus", "two_blocks"): "its first call is inside the reasoning: free text there, not a checked call",
    ("command_r_plus", "turn_ends_in_fence"): "a call block the turn's end closes, with no closing fence",
    ("phi4_mini", "marker_in_prose"): "prose holding the call's trigger (functools): the trigger starts a call",
    # Call syntax: the constraint writes the call between the region's own delimiters.
    ("llama4_pythonic", "bare_list"): "a call list without <|python_start|>/<|python_end|> is not offered",
    ("gemma4", "call_closed_by_turn_end"): "a call ended by <turn|> instead of <tool_call|>",
    # Tagged arguments: the constraint writes each parameter with its closer, in the documented spelling.
    ("qwen3_5", "call_in_unclosed_reasoning"): "a call inside a reasoning that the turn never closes",
    **{(g, n): "a parameter without its closer (ended by the next parameter or the call's end)"
       for g, n in (("qwen3_5", "missing_parameter_close"), ("mimo", "missing_parameter_close"),
                    ("minicpm5", "malformed"), ("iquest_q1", "malformed"), ("beam", "malformed"))},
    **{(g, "json_body"): "JSON arguments inside the invoke: the constraint writes DSML parameters"
       for g in ("deepseek_v32", "deepseek_v4", "deepseek_v41")},
    **{(g, "self_closing_invoke"): "a self-closing <invoke .../> for a call with no arguments"
       for g in ("deepseek_v32", "deepseek_v4", "deepseek_v41")},
    ("kimi_k3", "json_arguments"): "the arguments as one JSON object: the constraint writes argument tags",
    ("kimi_k3", "type_mismatch"): 'a string value under type="number": a string is written with type="string"',
    ("mimo", "spaced_tags"): "spaces inside the parameter tags (< parameter = k >, </ parameter >)",
    ("minicpm5", "wrappers"): "the <tool_call> and <arguments> wrappers and single-quoted names",
    ("ling3", "prose_mention"): "prose that writes the call opener: the opener always starts a call there",
    **{(g, "reasoning_ends_turn"): "a turn that ends inside its reasoning: the constraint closes it first"
       for g in ("seed_oss", "step3")},
}
#: Samples holding a model's mistake that the parser tolerates and the constraint writes right: each is
#: refused in both engines (test_a_tolerated_mistake_is_refused), so a constraint that starts letting the
#: mistake through fails there.
MISTAKES = {
    **{(g, "key_without_value"): "an argument key written with no value (the parser reports parse.missing_value): "
       "the constraint writes a value for every key" for g in (
           "deepseek_v32", "deepseek_v4", "deepseek_v41", "dots", "gigachat35", "glm45", "glm47", "hunyuan_v3",
           "iquest_q1", "k2_horizon", "kimi_k3", "ling3", "mimo", "minicpm5", "minimax_m2", "poolside_v1",
           "qwen3_5", "qwen3_coder", "seed_oss", "step3")},
    ("kimi_k3", "typed_text_verbatim"): 'a text value (count: "all of them") under type="number": a string is '
                                        'written with type="string"',
    ("olmo3", "space_around_newlines"): "calls separated by spaces and tabs around the newline: the constraint "
                                        "writes the template's one newline between calls",
}
#: Sample names that are a form no constraint offers, in every grammar that has them.
NOT_OFFERED_ANYWHERE = {
    "call_after_unclosed_reasoning": "a call that ends a reasoning left open: the constraint closes it first",
    "eos_in_reasoning": "a turn that ends inside the reasoning: the constraint closes it first",
    "call_in_reasoning": "a call inside the reasoning is free text there, not a checked call",
}
UNSUPPORTED = ["llama3_pythonic"]

BACKENDS = {
    "llguidance": (constrain.to_llguidance, run_llguidance),
    "xgrammar": (constrain.to_structural_tag, run_xgrammar),
}


def verdict(backend: str, grammar: gp.Grammar, text: str, tools: Any, **options: Any) -> str:
    export, run = BACKENDS[backend]
    return run(export(grammar, tools=tools, **options), text)


# ---------------------------------------------------------------------------- samples and tools
def tools_for(sample: Golden) -> list[dict[str, Any]]:
    """The sample's tools, or a schema per called tool from its expected calls (each argument typed as
    written, required where every call of the tool has it); and a tool the model did not call."""
    # (cut inside an argument's name, the argument is not in the expected calls: others are allowed)
    truncated = sample.name.startswith("truncated")
    tools = list(sample.tools) if sample.tools else called_tools(sample, open_arguments=truncated)
    # A tool the model did not call, so the constraint chooses between several.
    tools.append({"type": "function", "function": {"name": "unused_tool", "parameters": {
        "type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}}})
    return tools


def cut(grammar: gp.Grammar, text: str) -> str:
    """The output up to its end-of-turn marker (the server's stop token ends the constrained turn): the
    first marker before which the output parses into the same message (gigachat3's <|message_sep|> also
    starts a call)."""
    ends = sorted(i for e in constrain.end_of_turn(grammar) for i in _find_all(text, e))
    whole = _parsed(grammar, text)
    return next((text[:i] for i in ends if _parsed(grammar, text[:i]) == whole), text)


def _parsed(grammar: gp.Grammar, text: str) -> Any:
    try:
        return gp.parse_response(text, grammar, prefix="")
    except gp.GrammarParseError as e:
        return e.code


def _find_all(text: str, part: str) -> list[int]:
    at, out = text.find(part), []
    while at >= 0:
        out.append(at)
        at = text.find(part, at + 1)
    return out


def cases(wanted: Any = None) -> list[Any]:
    out = []
    for name in SUPPORTED:
        for sample in goldens(name):
            if "error" in sample.expected or (wanted is not None and not wanted(sample)):
                continue
            out.append(pytest.param(name, sample, id=f"{name}-{sample.name}"))
    return out


def has_calls(sample: Golden) -> bool:
    return bool(sample.expected.get("tool_calls")) and not sample.name.startswith("truncated")


def complete(sample: Golden) -> bool:
    """A whole output in a form the constraint offers (a truncated one ends inside a region)."""
    return not sample.name.startswith("truncated") and not_offered(sample) is None


def not_offered(sample: Golden) -> str | None:
    """Why the constraint does not offer the sample's form (None: it does)."""
    if _in_another_region(sample) and sample.grammar in ("dots", "functionary_v31"):
        return "calls in another of the grammar's call regions, which the constraint does not offer"
    return (NOT_OFFERED.get((sample.grammar, sample.name)) or MISTAKES.get((sample.grammar, sample.name))
            or NOT_OFFERED_ANYWHERE.get(sample.name))


def _in_another_region(sample: Golden) -> bool:
    """Whether the sample's calls are written in a call region other than the one the constraint offers
    (lfm2's JSON calls beside its Python list, xLAM's bare array beside its tagged one)."""
    grammar = gp.load_grammar(sample.grammar)
    if len(call_regions(grammar)) < 2 or not sample.expected.get("tool_calls"):
        return False
    offered = constrain._call_format(grammar).region
    parser = ResponseParser(grammar, prefix=sample.prefix, trace=True, strict=False)
    parser.feed(sample.text)
    parser.finalize()
    used = [grammar.terminals[span["terminal"]].region for span in parser.spans if span["kind"] == "delimiter"]
    return not any(region is offered for region in used)


@pytest.fixture(params=list(BACKENDS))
def backend(request: Any) -> str:
    return str(request.param)


# ---------------------------------------------------------------------------- the tests
@pytest.mark.parametrize(("name", "sample"), cases(complete))
def test_valid_output_is_accepted(backend: str, name: str, sample: Golden) -> None:
    grammar = gp.load_grammar(name)
    text = cut(grammar, sample.text)
    assert verdict(backend, grammar, text, tools_for(sample), prefix=sample.prefix) == "accept", text


@pytest.mark.parametrize(("name", "sample"), cases(lambda s: (s.grammar, s.name) in MISTAKES))
def test_a_tolerated_mistake_is_refused(backend: str, name: str, sample: Golden) -> None:
    """The mistakes in MISTAKES are refused: the constraint offers the canonical form, not every slip the
    parser reads."""
    grammar = gp.load_grammar(name)
    text = cut(grammar, sample.text)
    assert verdict(backend, grammar, text, tools_for(sample), prefix=sample.prefix).startswith("reject@"), \
        MISTAKES[(name, sample.name)]


def test_every_golden_with_a_reported_error_is_a_listed_mistake() -> None:
    """A golden whose message carries parse_errors is a mistake the parser tolerates: it is listed in
    MISTAKES (with why the constraint refuses it), so a new one is not sampled as a valid output."""
    reported = {(n, s.name) for n in SUPPORTED for s in goldens(n)
                if s.expected.get("parse_errors") and "error" not in s.expected and not s.name.startswith("truncated")}
    assert reported - set(MISTAKES) - set(NOT_OFFERED) == set()
    samples = {(n, s.name) for n in SUPPORTED for s in goldens(n)}
    assert set(MISTAKES) - samples == set()  # (no stale entry: each names a golden of a supported grammar)


@pytest.mark.parametrize(("name", "sample"), cases(lambda s: s.name.startswith("truncated")))
def test_truncated_output_is_a_live_prefix(backend: str, name: str, sample: Golden) -> None:
    grammar = gp.load_grammar(name)
    tools = tools_for(sample) if sample.expected.get("tool_calls") else _weather_tools()
    assert verdict(backend, grammar, sample.text, tools, prefix=sample.prefix) == "prefix"


@pytest.mark.parametrize(("name", "sample"), cases(lambda s: has_calls(s) and complete(s)))
def test_output_cut_inside_a_call_is_a_live_prefix(backend: str, name: str, sample: Golden) -> None:
    grammar = gp.load_grammar(name)
    text = cut(grammar, sample.text)
    inside = _first_args(sample, text) + 1
    assert verdict(backend, grammar, text[:inside], tools_for(sample), prefix=sample.prefix) == "prefix"


def _first_args(sample: Golden, text: str) -> int:
    """Where the first call's arguments start in the text: their JSON object's "{", or the end of the tool's
    name where they are not one JSON value (tagged parameters, call syntax)."""
    first = sample.expected["tool_calls"][0]["function"]
    at = text.find(first["name"])
    assert at >= 0
    if not constrain._call_format(gp.load_grammar(sample.grammar)).plan.mode.startswith("json"):
        return at + len(first["name"])
    return text.index("{", at + len(first["name"]) + 1) if first["arguments"] or "{}" in text[at:] else at


def _weather_tools() -> list[dict[str, Any]]:
    """The tools the truncated samples call (which have no expected calls to infer them from)."""
    return [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"]}}},
            {"type": "function", "function": {"name": "get_time", "parameters": {
                "type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]}}}]


def _malformed(kind: str, sample: Golden, text: str) -> tuple[str, list[dict[str, Any]]]:
    """A malformed version of a sample with calls: (text, tools)."""
    tools = tools_for(sample)
    first = sample.expected["tool_calls"][0]["function"]
    if kind == "unknown_tool":
        return text, [t for t in tools if t["function"]["name"] != first["name"]]
    tools = copy.deepcopy(tools)
    params = next(t["function"]["parameters"] for t in tools if t["function"]["name"] == first["name"])
    if kind == "wrong_type":
        if not first["arguments"]:
            pytest.skip("the call has no arguments to mistype")
        for key, value in first["arguments"].items():
            params["properties"][key] = {"type": "boolean" if not isinstance(value, bool) else "string"}
        return text, tools
    if kind == "missing_required":
        params.setdefault("properties", {})["must_have"] = {"type": "string"}
        params["required"] = [*params.get("required", []), "must_have"]
        return text, tools
    assert kind == "broken_json"
    at = _first_args(sample, text)
    if text[at] not in "{(":  # (a JSON object, or a Python call's argument list)
        pytest.skip("no arguments object to break")
    return text[:at + 1] + "," + text[at + 1:], tools


@pytest.mark.parametrize("kind", ["unknown_tool", "wrong_type", "missing_required", "broken_json"])
@pytest.mark.parametrize(("name", "sample"), cases(lambda s: has_calls(s) and complete(s)))
def test_malformed_call_is_rejected(backend: str, name: str, sample: Golden, kind: str) -> None:
    grammar = gp.load_grammar(name)
    text, tools = _malformed(kind, sample, cut(grammar, sample.text))
    assert verdict(backend, grammar, text, tools, prefix=sample.prefix).startswith("reject@")


@pytest.mark.parametrize(("name", "sample"), cases(lambda s: not s.expected.get("tool_calls")
                                                   and not s.name.startswith("truncated")))
def test_required_rejects_a_text_only_answer(backend: str, name: str, sample: Golden) -> None:
    grammar = gp.load_grammar(name)
    got = verdict(backend, grammar, cut(grammar, sample.text), _weather_tools(), tool_choice="required",
                  prefix=sample.prefix)
    assert got != "accept"


@pytest.mark.parametrize(("name", "sample"), cases(lambda s: has_calls(s) and complete(s)))
def test_required_and_named_accept_the_calls(backend: str, name: str, sample: Golden) -> None:
    grammar = gp.load_grammar(name)
    text, tools = cut(grammar, sample.text), tools_for(sample)
    assert verdict(backend, grammar, text, tools, tool_choice="required", prefix=sample.prefix) == "accept"
    called = {c["function"]["name"] for c in sample.expected["tool_calls"]}
    if len(called) == 1:
        named = {"type": "function", "function": {"name": called.pop()}}
        assert verdict(backend, grammar, text, tools, tool_choice=named, prefix=sample.prefix) == "accept"
        other = {"type": "function", "function": {"name": "unused_tool"}}
        assert verdict(backend, grammar, text, tools, tool_choice=other, prefix=sample.prefix) != "accept"


@pytest.mark.parametrize(("name", "sample"), cases(lambda s: has_calls(s) and complete(s)))
def test_none_rejects_every_call(backend: str, name: str, sample: Golden) -> None:
    grammar = gp.load_grammar(name)
    got = verdict(backend, grammar, cut(grammar, sample.text), tools_for(sample), tool_choice="none",
                  prefix=sample.prefix)
    assert got.startswith("reject@")


@pytest.mark.parametrize("name", [n for n in SUPPORTED if any(
    "reasoning_content" in s.expected for s in goldens(n))])
def test_required_accepts_reasoning_then_a_call(backend: str, name: str) -> None:
    grammar = gp.load_grammar(name)
    sample = next(s for s in goldens(name) if has_calls(s) and complete(s))
    call = cut(grammar, sample.text)
    opens, closes = _reasoning_literals(grammar)
    prefix = sample.prefix
    text = (f"{opens[0]}\nI should call a tool.\n{closes[0]}\n\n" if "reasoning_content" not in sample.expected
            else "") + call
    if name == "deepseek_v31":  # its reasoning opener is in the prompt
        prefix, text = "<｜Assistant｜><think>", "I should call a tool.</think>" + call.split("</think>")[-1]
    assert verdict(backend, grammar, text, tools_for(sample), tool_choice="required", prefix=prefix) == "accept"
    close = next((c for c in closes if c in text), None)
    thinking_only = text[:text.index(close) + len(close)] if close is not None else text
    assert verdict(backend, grammar, thinking_only, tools_for(sample), tool_choice="required",
                   prefix=prefix) == "prefix"


def _reasoning_literals(grammar: gp.Grammar) -> tuple[tuple[str, ...], tuple[str, ...]]:
    reasoning = constrain._call_format(grammar).reasoning
    assert reasoning is not None
    return reasoning.opens, reasoning.closes


def test_single_call_when_parallel_calls_are_off(backend: str) -> None:
    grammar = gp.load_grammar("qwen3")
    sample = next(s for s in goldens("qwen3") if s.name == "parallel_calls")
    text = cut(grammar, sample.text)
    assert verdict(backend, grammar, text, tools_for(sample), parallel_tool_calls=False).startswith("reject@")
    one = next(s for s in goldens("qwen3") if s.name == "one_call")
    assert verdict(backend, grammar, cut(grammar, one.text), tools_for(one), parallel_tool_calls=False) == "accept"


@pytest.mark.parametrize("name", UNSUPPORTED)
def test_unsupported_grammar_raises_a_coded_error(name: str) -> None:
    grammar = gp.load_grammar(name)
    for export in (constrain.to_llguidance, constrain.to_structural_tag):
        with pytest.raises(gp.GrammarParseError) as info:
            export(grammar, tools=_weather_tools())
        assert info.value.code == "constrain.unsupported"


def test_bad_tool_choice_raises() -> None:
    grammar = gp.load_grammar("qwen3")
    with pytest.raises(gp.GrammarParseError) as info:
        constrain.to_llguidance(grammar, tools=_weather_tools(), tool_choice={"name": "nope"})
    assert info.value.code == "constrain.tool_choice"


# ---------------------------------------------------------------------------- round trip: sample, then parse
class _Drawing:
    """One engine's matcher for drawing: the tokens it allows next, and taking one."""

    def __init__(self, backend: str, grammar: gp.Grammar, tools: Any) -> None:
        self.backend = backend
        if backend == "llguidance":
            self.matcher = llguidance.LLMatcher(
                LLG_TOKENIZER, constrain.to_llguidance(grammar, tools=tools, tool_choice="required"), log_level=0)
        else:
            compiled = XGR_COMPILER.compile_structural_tag(json.dumps(
                constrain.to_structural_tag(grammar, tools=tools, tool_choice="required")))
            self.matcher = xgrammar.GrammarMatcher(compiled, terminate_without_stop_token=False)
            self.bitmask = xgrammar.allocate_token_bitmask(1, XGR_INFO.vocab_size)

    def allowed(self) -> list[int]:
        if self.backend == "llguidance":
            mask = self.matcher.compute_bitmask()
            return [t for t in range(EOS + 1) if mask[t // 8] >> (t % 8) & 1]
        self.matcher.fill_next_token_bitmask(self.bitmask)
        words = self.bitmask[0].tolist()
        return [t for t in range(EOS + 1) if words[t // 32] >> (t % 32) & 1]

    def take(self, token: int) -> bool:
        if self.backend == "llguidance":
            return bool(self.matcher.consume_token(token))
        return bool(self.matcher.accept_token(token))

    def write(self, word: bytes) -> bool:
        """Take ``word`` whole if the matcher allows each of its bytes in turn, else nothing."""
        for i, byte in enumerate(word):
            if byte not in self.allowed():
                self.matcher.rollback(i)
                return False
            assert self.take(byte)
        return True


def delimiter_texts(grammar: gp.Grammar) -> list[bytes]:
    """The texts of the delimiters of the grammar's argument regions (a draw writes one whole now and
    then: random bytes would seldom spell the closer that ends a free-text value). Only theirs: a call's
    closer written inside a JSON string would end the call for the parser, which neither engine's JSON
    Schema can exclude (listed in docs/constraints.md)."""
    out = set()
    for terminal in grammar.terminals.values():
        if terminal.region is None or terminal.region.parent is None:
            continue
        try:
            texts = constrain._regexes.delim_of(terminal).canonical()
        except constrain._regexes.Unsupported:
            continue
        out.update(t.encode() for t in texts if t)
    return sorted(out)


def sample_from(drawing: _Drawing, start: str, rng: Any, *, words: list[bytes] = [],
                limit: int = 400) -> str | None:
    """Text the matcher allows: ``start`` (the free text up to a call's trigger), then bytes drawn from its
    mask, with a lean to the bytes that close (quotes, brackets, the stop token) so that a call ends
    within ``limit`` bytes. None when it does not (a draw that never closes)."""
    out = bytearray()
    for byte in start.encode():
        assert drawing.take(byte), start
        out.append(byte)
    closing = set(b'"}]>|') | {EOS}
    for _ in range(limit):
        allowed = drawing.allowed()
        assert allowed, bytes(out)
        if EOS in allowed and rng.random() < 0.5:
            return out.decode("utf-8", "replace")
        printable = [t for t in allowed if t != EOS and 0x20 <= t < 0x7f] or [t for t in allowed if t != EOS]
        closers = [t for t in printable if t in closing]
        pool = closers if closers and rng.random() < 0.3 else printable or allowed
        if words and rng.random() < 0.1:
            word = rng.choice(words)
            if drawing.write(word):
                out += word
                continue
        pick = rng.choice(pool)
        if pick == EOS:
            return out.decode("utf-8", "replace")
        assert drawing.take(pick)
        out.append(pick)
    return None


@pytest.mark.parametrize("name", SUPPORTED)
def test_sampled_calls_parse_into_calls_that_validate(backend: str, name: str) -> None:
    """What the constraint lets a model write parses, with the same grammar, into calls naming the tools
    with arguments their schemas accept: 20 draws a grammar, from the trigger of a golden call on."""
    import random

    import jsonschema

    grammar = gp.load_grammar(name)
    # (a call in a form not offered still shows where a call starts: the draw begins after its trigger)
    # (one whose call starts at a trigger: a bare call at the answer's start has none to begin the draw after)
    triggers = constrain._call_format(grammar).trigger
    sample = sorted((s for s in goldens(name) if has_calls(s)),
                    key=lambda s: (not any(t in s.text for t in triggers), not complete(s),
                                   s.name in NOT_OFFERED_ANYWHERE))[0]
    tools = tools_for(sample)
    text = cut(grammar, sample.text)
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    rng = random.Random(name)
    # (the free text before the first call, and the call's trigger: the draw starts inside the call)
    triggers = [t for t in constrain._call_format(grammar).trigger if t in text]
    first = min(triggers, key=text.find)
    start = text[:text.find(first) + len(first)]
    parsed_calls = 0
    for _ in range(20):
        drawn = sample_from(_Drawing(backend, grammar, tools), start, rng, words=delimiter_texts(grammar))
        if drawn is None:
            continue
        # (lenient: free text is not held to a content region's own delimiters, kimi_k3's response block)
        message = gp.parse_response(drawn, grammar, prefix=sample.prefix, tools=tools, strict=False)
        assert message.get("tool_calls"), drawn
        for call in message["tool_calls"]:
            assert not call.get("errors"), (drawn, call)
            function = call["function"]
            jsonschema.validate(function["arguments"], schemas[function["name"]])
            parsed_calls += 1
    assert parsed_calls >= 10, parsed_calls

