"""Pick the grammar from the model: the built-in grammar that reads the chat template's own renderings back.

Every probe conversation (grammar_parse.templates._probes) is rendered with the template and parsed by each built-in
grammar after the rendered prompt; a grammar fits when it reads every informative rendering back exactly.
Grammars that tie are told apart by the model's name (config ``model_type``, the directory or file name),
then by the reasoning key the template reads, the tokenizer vocabulary (the grammar's markers that are
single tokens), the grammar's number of aliases (the format's main grammar, which servers name most), the
share of its markers the template writes, and last by name. A template
no grammar reads back is reported with the closest grammar and what differs; :func:`load_model_grammar`
then derives one (grammar_parse.templates._derive) and never guesses silently.

A lone template file comes without the tokenizer config that holds its special tokens: the ones it reads
(``bos_token``, ``eos_token``, ...) are given placeholders (:data:`PLACEHOLDER_TOKENS`), so it renders. A
template that still renders no probe (it needs a variable such as firefunction-v2's ``functions``) cannot
be checked; when the model's name matches a grammar, that grammar is chosen by name with a
:class:`DetectionWarning` saying which variable to pass.
"""

from __future__ import annotations

import copy
import os
import re
import warnings
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._engine.arguments import caller_stacklevel, template_source_problem
from .._engine.grammar import Grammar
from .._engine.json_input import load_user_json
from .._engine.library import list_grammars, load_grammar, normalise_name
from .._engine.session import START_ANCHOR_LIMIT
from ..errors import ArgumentError, ChatTemplateError, GrammarError
from ._chat_template import ChatTemplate
from ._probes import HOSTILE, PROBES, Rendering, read_back, render_probe, render_probes

#: Template kwargs whose generation prompts are compared, to say where reasoning opens.
THINKING_SWITCHES: tuple[Mapping[str, Any], ...] = (
    {}, {"enable_thinking": True}, {"enable_thinking": False}, {"thinking": True}, {"thinking": False},
)
_REASONING_READ = re.compile(r"""(?:\.|\[\s*['"]|\bget\(\s*['"])(reasoning_content|thinking|reasoning)\b""")

#: Stand-ins for the special tokens a template reads when none came with it (the SentencePiece spellings,
#: which the built-in grammars read after a turn as the probes expect).
PLACEHOLDER_TOKENS: Mapping[str, str] = {
    "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "sep_token": "<sep>", "pad_token": "<pad>",
    "cls_token": "<cls>", "mask_token": "<mask>",
}
_SPECIAL_READ = re.compile(r"\b(" + "|".join(PLACEHOLDER_TOKENS) + r")\b")
_UNDEFINED = re.compile(r"'(\w+)' is undefined")
#: The shortest grammar name or alias a model's name must hold for a choice by name alone.
_MIN_NAME_MATCH = 3


class DetectionWarning(UserWarning):
    """A grammar chosen by the model's name alone (code ``detect.by_name``): the chat template renders none
    of the probe conversations, so no grammar could be checked against it."""

    code = "detect.by_name"


@dataclass(frozen=True)
class Candidate:
    """How one grammar reads the probes back: ``differences`` maps a probe to what differs."""

    name: str
    read: int
    of: int
    differences: Mapping[str, list[str]]

    @property
    def exact(self) -> bool:
        return self.of > 0 and self.read == self.of


@dataclass(frozen=True)
class ReasoningMode:
    """Where the model's reasoning opens, as the template shows it.

    ``rendered``: the template writes a turn's reasoning back (many drop it from past turns).
    ``prefilled``: per template-kwargs switch (``"default"``, ``"enable_thinking=False"``, ...), what the
    generation prompt writes after the assistant header: ``""`` when the model writes its own opener,
    ``"<think>\\n"`` when the prompt opens reasoning for it, ``"<think>\\n\\n</think>\\n\\n"`` when it closes
    an empty block (thinking off). ``keys``: the message keys the template reads reasoning from."""

    rendered: bool
    prefilled: Mapping[str, str]
    keys: tuple[str, ...]

    def describe(self) -> str:
        """One line for a table: who writes the opener, under which kwargs."""
        default = self.prefilled.get("default", "")
        parts = ["pre-filled " + repr(default) if default.strip() else "written by the model"]
        parts += [f"{label}: {tail!r}" for label, tail in self.prefilled.items() if label != "default" and tail != default]
        if not self.rendered:
            parts.append("not rendered in past turns")
        return "; ".join(parts)


@dataclass(frozen=True)
class Detection:
    """What :func:`detect` found. ``grammar`` is the fitting built-in's name, or None when none fits;
    ``candidates`` are ranked, closest first; ``alternatives`` are other grammars that fit as well."""

    grammar: str | None
    candidates: tuple[Candidate, ...]
    alternatives: tuple[str, ...]
    reasoning: ReasoningMode
    renders_calls: bool
    renderings: tuple[Rendering, ...] = field(repr=False)
    template: ChatTemplate = field(repr=False)
    #: Why the template rendered no probe at all (the first probe's error), when it did not.
    failure: str | None = None
    #: Special tokens the template reads that came without values, and the placeholders rendered for them.
    placeholders: Mapping[str, str] = field(default_factory=dict)
    #: The template rendered no probe and ``grammar`` was chosen by the model's name alone (DetectionWarning).
    by_name: bool = False

    @property
    def closest(self) -> Candidate | None:
        return self.candidates[0] if self.candidates else None

    def explain(self) -> str:
        """A paragraph for an error or a log: what fits, or the closest grammar and what differs."""
        tokens = ""
        if self.placeholders:
            tokens = ("; rendered with placeholder special tokens " +
                      ", ".join(f"{k}={v!r}" for k, v in self.placeholders.items()) +
                      " (none came with the template: give its tokenizer_config.json for the real ones)")
        if not self.renderings:
            failed = f"the chat template renders none of the probe conversations ({self.failure}{_pass(self.failure)})"
            if self.by_name and self.grammar is not None:
                return f"{self.grammar}, chosen by the model's name alone: {failed}{tokens}"
            return failed + tokens
        if self.grammar is not None:
            more = f" (as do {', '.join(self.alternatives)})" if self.alternatives else ""
            calls = "" if self.renders_calls else "; the template renders no tool calls, so only text was checked"
            return (f"{self.grammar} reads every probe rendering back{more}{calls}; reasoning "
                    f"{self.reasoning.describe()}{tokens}")
        closest = self.closest
        assert closest is not None
        lines = [f"no built-in grammar reads this template's renderings back; the closest is {closest.name} "
                 f"({closest.read} of {closest.of} probes){tokens}:"]
        lines += [f"  {probe}: {'; '.join(d)[:300]}" for probe, d in closest.differences.items()]
        return "\n".join(lines)


def _names(names: Iterable[str] | str, argument: str) -> list[str]:
    """A list of names: one given as a string is one name (not one name per letter)."""
    if isinstance(names, str):
        return [names]
    if not isinstance(names, Iterable) or isinstance(names, (bytes, bytearray, Mapping)):
        raise ArgumentError(f"`{argument}` should be a list of names, but got {type(names).__name__}.",
                            code="usage.argument", hint=f'Pass e.g. {argument}=["qwen3"].')
    return [str(name) for name in names]


def _pass(failure: str | None) -> str:
    """What to do about a render failure that names an undefined variable."""
    missing = _UNDEFINED.search(failure or "")
    if missing is None:
        return ""
    return (f"; pass {missing[1]!r} in template_kwargs (--template-kwargs on the command line), or the "
            "tokenizer_config.json that defines it")


def _with_placeholders(template: ChatTemplate, given: Collection[str]) -> tuple[ChatTemplate, dict[str, str]]:
    """``template`` with placeholders for the special tokens its source reads and nobody gave (neither its
    tokenizer config nor ``given``, the template kwargs), and those placeholders."""
    read = set(_SPECIAL_READ.findall(template.source + (template.tool_use or "")))
    missing = {key: PLACEHOLDER_TOKENS[key] for key in PLACEHOLDER_TOKENS
               if key in read and key not in template.special_tokens and key not in given}
    if not missing:
        return template, {}
    filled = copy.copy(template)  # (the compiled template is shared: only the variables differ)
    filled.special_tokens = {**template.special_tokens, **missing}
    return filled, missing


def _anchor_misses(rendering: Rendering, grammar: Grammar) -> bool:
    anchor = grammar.start_anchor
    if anchor is None or not rendering.prompt:
        return False
    return anchor.last_end(rendering.prompt, None if anchor.literals is not None else START_ANCHOR_LIMIT) is None


def score(grammar: Grammar, name: str, renderings: Iterable[Rendering]) -> Candidate:
    """How ``grammar`` reads the informative ``renderings`` back."""
    renderings = [r for r in renderings if r.informative]
    template_renders_reasoning = any(r.reasoning_rendered for r in renderings)
    differences: dict[str, list[str]] = {}
    for rendering in renderings:
        if _anchor_misses(rendering, grammar):
            differences[rendering.probe.name] = ["the prompt holds none of the grammar's start anchors"]
            continue
        found = read_back(rendering, grammar, template_renders_reasoning=template_renders_reasoning)
        if found:
            differences[rendering.probe.name] = found
    return Candidate(name, len(renderings) - len(differences), len(renderings), differences)


def _hint_score(aliases: Iterable[str], hints: Iterable[str]) -> int:
    """The length of the grammar's longest name or alias found in the model's names (0: none)."""
    spelled = [normalise_name(h) for h in hints if h]
    names = [n for n in map(normalise_name, aliases) if n]
    return max((len(n) for n in names for h in spelled if n in h), default=0)


def _literals(grammar: Grammar) -> set[str]:
    """The grammar's literal markers (the delimiters written as fixed strings)."""
    return {lit for terminal in grammar.terminals.values() for lit in (getattr(terminal.matcher, "literals", None) or ())}


def _vocab_score(literals: set[str], vocab: Collection[str] | None) -> int:
    """How many of the grammar's literal markers are tokens of the vocabulary."""
    return sum(1 for lit in literals if lit in vocab) if vocab else 0


def _reasoning_key_score(grammar: Grammar, keys: Collection[str]) -> int:
    """1 when the grammar's reasoning field is a key the template reads (``reasoning_content`` for Qwen,
    ``thinking`` for gpt-oss), so the parsed message renders back through other renderers too."""
    return int(any(field in keys for field in grammar.format.reasoning_fields))


def _marker_share(literals: set[str], source: str) -> float:
    """The share of the grammar's literal markers that the template's source writes: of two grammars that
    read the probes equally, the one with fewer markers foreign to the template is the family's."""
    markers = [lit.strip() for lit in literals if len(lit.strip()) > 1]
    return sum(1 for m in markers if m in source) / len(markers) if markers else 0.0


def reasoning_mode(template: ChatTemplate, grammar: Grammar | None, renderings: Iterable[Rendering],
                   template_kwargs: Mapping[str, Any] | None = None) -> ReasoningMode:
    """Where reasoning opens under each thinking switch: what the generation prompt writes after the
    grammar's start anchor (after the common prompt when there is no grammar)."""
    from ._probes import TOOLS, USER

    prompts: dict[str, str] = {}
    for switch in THINKING_SWITCHES:
        label = ", ".join(f"{k}={v}" for k, v in switch.items()) or "default"
        try:
            prompts[label] = template.render([{"role": "user", "content": USER}], tools=TOOLS,
                                             add_generation_prompt=True, **{**(template_kwargs or {}), **switch})
        except ChatTemplateError as exc:  # a switch the template refuses is one it does not have
            if exc.code in HOSTILE:
                raise
            continue
    prefilled: dict[str, str] = {}
    anchor = grammar.start_anchor if grammar is not None else None
    for label, prompt in prompts.items():
        end = anchor.last_end(prompt, START_ANCHOR_LIMIT) if anchor is not None else None
        prefilled[label] = prompt[end:] if end is not None else ""
    return ReasoningMode(any(r.reasoning_rendered for r in renderings), prefilled, reasoning_keys(template))


def reasoning_keys(template: ChatTemplate) -> tuple[str, ...]:
    """The message keys the template reads reasoning from (``message.reasoning_content``, ...)."""
    return tuple(sorted(set(_REASONING_READ.findall(template.source))))


def detect(config_or_template: Any, *, vocab: Collection[str] | None = None, hints: Iterable[str] = (),
           grammars: Iterable[str] | None = None, template_kwargs: Mapping[str, Any] | None = None) -> Detection:
    """The built-in grammar that reads the model's chat template back.

    ``config_or_template``: a :class:`ChatTemplate`, Jinja source, a ``tokenizer_config.json`` dict, or a
    path (a model directory, tokenizer_config.json, chat_template.jinja or .json). ``vocab``: the
    tokenizer's tokens, to tell apart grammars that read the probes equally (the one whose markers are
    single tokens wins). ``hints``: model names (``model_type``, the repository name; a string is one name)
    for the same; read from a model directory's config.json and its name when a path is given. ``grammars``:
    the built-in names to try (all by default). ``template_kwargs``: variables a template needs beyond the standard ones
    (firefunction-v2's reads its tools as a ``functions`` string, and a ``datetime``).

    >>> detect("path/to/Qwen3-8B").grammar  # doctest: +SKIP
    'qwen3'
    """
    hints, grammars = _names(hints, "hints"), _names(grammars, "grammars") if grammars is not None else None
    if template_kwargs is not None and not isinstance(template_kwargs, Mapping):
        raise ArgumentError(f"`template_kwargs` should be a dict of template variables, but got "
                            f"{type(template_kwargs).__name__}.", code="usage.argument",
                            hint='Pass e.g. template_kwargs={"enable_thinking": False}.')
    template, found_hints = _load(config_or_template)
    template, placeholders = _with_placeholders(template, template_kwargs or {})
    hints = [*hints, *found_hints]
    renderings = tuple(render_probes(template, PROBES, **(template_kwargs or {})))
    library = list_grammars()  # (once: it copies the library's table)
    names = list(grammars) if grammars is not None else list(library)
    keys = reasoning_keys(template)
    ranked: list[tuple[tuple[float, ...], str, Candidate]] = []
    named: list[tuple[int, str]] = []  # (how long a name of the grammar the model's names hold, grammar)
    for name in names:
        grammar = load_grammar(name)
        candidate = score(grammar, name, renderings)
        aliases, literals = library.get(name, []), _literals(grammar)
        rank = (-candidate.read, -_hint_score([name, *aliases], hints), -_reasoning_key_score(grammar, keys),
                -_vocab_score(literals, vocab), -len(aliases), -_marker_share(literals, template.source))
        ranked.append((rank, name, candidate))
        named.append((_hint_score([name, *aliases], hints), name))
    ranked.sort(key=lambda item: (item[0], item[1]))
    candidates = tuple(c for _, _, c in ranked)
    best = candidates[0] if candidates else None
    fits = best is not None and best.exact
    alternatives = tuple(c.name for c in candidates[1:] if fits and c.exact)
    chosen = best.name if fits and best is not None else None
    failure = None
    if not renderings:
        try:
            render_probe(template, PROBES[0], **(template_kwargs or {}))
        except ChatTemplateError as exc:
            failure = exc.detail
    by_name = False
    if not renderings and named:
        # Nothing to check a grammar against: the model's name is all there is, and it is said.
        length, name = max(named, key=lambda item: (item[0], -names.index(item[1])))
        if length >= _MIN_NAME_MATCH:
            chosen, by_name = name, True
            warnings.warn(DetectionWarning(
                f"the chat template renders none of the probe conversations ({failure}"
                f"{_pass(failure)}), so grammar {name} was chosen by the model's name alone, unchecked."),
                stacklevel=caller_stacklevel())
    mode = reasoning_mode(template, load_grammar(chosen) if chosen else None, renderings, template_kwargs)
    return Detection(chosen, candidates, alternatives, mode, any(r.calls_rendered for r in renderings),
                     renderings, template, failure, placeholders, by_name)


def _load(source: Any) -> tuple[ChatTemplate, list[str]]:
    """The template and the model names a source carries (config.json's model_type, the directory name)."""
    if isinstance(source, ChatTemplate):
        return source, []
    from ._chat_template import load_chat_template

    if not isinstance(source, (str, os.PathLike, Mapping)):
        raise template_source_problem(source, "config_or_template")
    hints: list[str] = []
    if isinstance(source, (str, os.PathLike)) and not _is_jinja(source):
        path = Path(source)
        hints.append(path.name if path.is_dir() else path.parent.name)
        if not path.is_dir():
            hints.append(path.stem)
        config = (path if path.is_dir() else path.parent) / "config.json"
        if config.is_file():
            try:
                data = load_user_json(config.read_text(encoding="utf-8"))
            except (OSError, ValueError):  # (JSONLimitError too: only names are read from it)
                data = {}
            if isinstance(data, dict):
                hints += [str(data.get("model_type") or ""), *map(str, data.get("architectures") or [])]
    elif isinstance(source, Mapping):
        hints.append(str(source.get("name_or_path") or ""))
    template: ChatTemplate = load_chat_template(source)
    return template, hints


def _is_jinja(source: str | os.PathLike[str]) -> bool:
    return isinstance(source, str) and ("{%" in source or "{{" in source)


def load_model_grammar(source: Any, *, vocab: Collection[str] | None = None, hints: Iterable[str] = ()) -> Grammar:
    """The grammar for a model, from its chat template (any source :func:`detect` takes): the built-in that
    reads it back, else a grammar derived from it and checked by the same round trip; a template neither
    fits raises GrammarError ``detect.no_match`` naming the closest grammar and what differs."""
    detection = detect(source, vocab=vocab, hints=hints)
    if detection.grammar is not None:
        return load_grammar(detection.grammar)
    from ._derive import derive_grammar

    try:
        derived = derive_grammar(detection.template, renderings=list(detection.renderings))
    except GrammarError as exc:
        raise GrammarError(
            f"{detection.explain()}\nno grammar could be derived from it either: {exc}", code="detect.no_match",
            source=detection.template.origin,
            hint="Name a grammar explicitly (--grammar NAME, list_grammars()), or author one "
                 "(docs/grammar-authoring.md).") from exc
    grammar: Grammar = derived.grammar
    return grammar


__all__ = ["PLACEHOLDER_TOKENS", "Candidate", "Detection", "DetectionWarning", "ReasoningMode", "detect",
           "load_model_grammar", "reasoning_keys"]
