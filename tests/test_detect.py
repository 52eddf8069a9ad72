"""Picking the grammar from the model: every vendored chat template (tests/data/chat_templates) against the
family each belongs to, the documented table in docs/chat-templates.md, and the places that use it
(load_grammar on a model directory, the tokenizer glue, the command line).

FAMILY is written from what each model family is known to emit (the vendor's docs, the servers'
parser choice), not from detect's output: detect must agree with it. The model name a directory or repo
would carry is the template's file name, passed as the hint.
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import pytest

import grammar_parse as gp
from grammar_parse._cli import main
from grammar_parse.compat.tokenizer import grammar_for
from grammar_parse.templates._probes import TOOLS

pytest.importorskip("jinja2")

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = ROOT / "tests" / "data" / "chat_templates"
DOCS = ROOT / "docs" / "chat-templates.md"
TOKENS = {"bos_token": "<s>", "eos_token": "</s>"}

#: template file -> the built-in grammar of its model family.
FAMILY = {
    "Apertus-8B-Instruct": "apertus", "Apriel-1.6-15b-Thinker-fixed": "apriel", "unsloth-Apriel-1.5": "apriel",
    "ByteDance-Seed-OSS": "seed_oss", "Cohere2MoE": "cohere2", "CohereForAI-c4ai-command-r7b-12-2024-tool_use": "cohere2",
    "CohereForAI-c4ai-command-r-plus-tool_use": "command_r_plus",
    "GLM-4.6": "glm45", "GLM-4.7-Flash": "glm47",
    "GigaChat3-10B-A1.8B": "gigachat3", "GigaChat3.1-10B-A1.8B": "gigachat3",
    "HuggingFaceTB-SmolLM3-3B": "smollm3",
    "Kimi-K2-Instruct": "kimi_k2", "Kimi-K2-Thinking": "kimi_k2", "moonshotai-Kimi-K2": "kimi_k2", "Kimi-K3": "kimi_k3",
    "LFM2-8B-A1B": "lfm2", "LFM2.5-8B-A1B": "lfm2", "LFM2.5-Instruct": "lfm2",
    "MiMo-VL": "qwen3",  # (MiMo-VL writes Hermes calls; the mimo grammar is MiMo-V2's XML format)
    "MiniMax-M1": "minimax_m1", "MiniMax-M2": "minimax_m2", "MiniMax-M3": "minimax_m3",
    "Mistral-Small-3.2-24B-Instruct-2506": "mistral_v11", "mistralai-Ministral-3-14B-Reasoning-2512": "mistral_v11",
    "unsloth-mistral-Devstral-Small-2507": "mistral_v11", "mistralai-Mistral-Nemo-Instruct-2407": "mistral",
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": "qwen3_coder", "NVIDIA-Nemotron-Nano-v2": "nemotron_nano_v2",
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use": "qwen3", "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": "qwen3",
    "Qwen-QwQ-32B": "qwen3", "Qwen-Qwen2.5-7B-Instruct": "qwen3", "Qwen-Qwen3-0.6B": "qwen3",
    "Qwen3-Coder": "qwen3_coder", "Qwen3.5-4B": "qwen3_5", "StepFun3.5-Flash": "qwen3_coder",
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": "deepseek_r1", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": "deepseek_r1",
    "deepseek-ai-DeepSeek-V3.1": "deepseek_v31", "deepseek-ai-DeepSeek-V3.2": "deepseek_v32",
    "deepseek-ai-DeepSeek-V4-Flash-0731": "deepseek_v4", "deepseek-ai-DeepSeek-V4": "deepseek_v4",
    "google-gemma-4-31B-it-interleaved": "gemma4", "google-gemma-4-31B-it": "gemma4",
    "ibm-granite-granite-3.3-2B-Instruct": "granite", "ibm-granite-granite-4.0": "granite4",
    "ibm-granite-granite-4.1": "granite4", "inclusionai-ling-3.0-flash": "ling3",
    "fireworks-ai-llama-3-firefunction-v2": "firefunction_v2",
    "meetkai-functionary-medium-v3.1": "functionary_v31", "meetkai-functionary-medium-v3.2": "functionary_v32",
    "meta-llama-Llama-3.1-8B-Instruct": "llama3_json", "meta-llama-Llama-3.2-3B-Instruct": "llama3_json",
    "meta-llama-Llama-3.3-70B-Instruct": "llama3_json", "muse-glimmer": "muse_glimmer",
    "openai-gpt-oss-120b": "gpt_oss", "openbmb-MiniCPM5-1B": "minicpm5", "poolside-Laguna-S-2.1": "poolside_v1",
    "llama-cpp-deepseek-r1": "deepseek_r1",  # (by name: see BY_NAME)
    "poolside-Laguna-XS-2.1": "poolside_v1", "poolside-Laguna-XS.2": "poolside_v1", "tencent-Hy3": "hunyuan_v3",
}

#: Templates whose family has a grammar that does not read them back: the closest grammar, and why.
MISSES: dict[str, tuple[str, str]] = {}

#: Templates that render no probe at all (a variable they need is not given, or they fail as transformers does),
#: whose grammar is chosen by the model's name alone, with a DetectionWarning: the name, and what the explanation
#: says of the failure.
BY_NAME = {
    "llama-cpp-deepseek-r1": "generator",  # tojson on a generator: transformers raises too
}

#: Templates of families without a built-in grammar: what detect says of them.
NO_FAMILY = {
    "Bielik-11B-v3.0-Instruct": "qwen3",  # Hermes-style calls
    "google-gemma-2-2b-it": "function_gemma",  # no tool calls; the Gemma turn markers
    "microsoft-Phi-3.5-mini-instruct": "phi4_mini",  # no tool calls; the Phi turn markers
    "llama-cpp-rwkv-world": "ernie4_5",  # no tool calls; "Assistant:" turns
    "Reka-Edge": None, "Spark2.5": None, "upstage-Solar-Open-100B": None,  # formats we have no grammar for
}


#: Variables a template needs beyond the standard ones (firefunction-v2 reads its tools as a JSON string).
TEMPLATE_KWARGS = {
    "fireworks-ai-llama-3-firefunction-v2": {"functions": json.dumps([t["function"] for t in TOOLS]),
                                             "datetime": "2026-12-02"},
}


def template(name: str) -> gp.ChatTemplate:
    return gp.ChatTemplate((TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8"), special_tokens=TOKENS,
                           origin=f"{name}.jinja")


_detections: dict[str, gp.Detection] = {}


def detection(name: str) -> gp.Detection:
    if name not in _detections:
        with warnings.catch_warnings():  # (a template chosen by name says so: test_by_path checks the warning)
            warnings.simplefilter("ignore", gp.DetectionWarning)
            _detections[name] = gp.detect(template(name), hints=[name], template_kwargs=TEMPLATE_KWARGS.get(name))
    return _detections[name]


def test_every_vendored_template_is_classified():
    vendored = {p.stem for p in TEMPLATES.glob("*.jinja")}
    assert vendored == FAMILY.keys() | MISSES.keys() | NO_FAMILY.keys()
    assert not (FAMILY.keys() & MISSES.keys()) and not (FAMILY.keys() & NO_FAMILY.keys())
    assert BY_NAME.keys() <= FAMILY.keys()
    assert set(FAMILY.values()) | {g for g, _ in MISSES.values()} <= set(gp.list_grammars())


@pytest.mark.parametrize("name", sorted(FAMILY))
def test_detect_names_the_family_grammar(name):
    found = detection(name)
    assert found.grammar == FAMILY[name], found.explain()
    if name in BY_NAME:
        assert found.by_name and not found.renderings and BY_NAME[name] in found.explain()
        return
    closest = found.closest
    assert closest is not None and closest.exact and closest.differences == {}


# ---------------------------------------------------------------------------- a lone template file, by path
@pytest.mark.parametrize("name", sorted(FAMILY))
def test_by_path_a_lone_template_names_its_family(name):
    """As a user runs `grammar-parse detect x.jinja`: no tokenizer config beside it (so no special tokens) and
    no template kwargs. A template that reads bos_token / eos_token is rendered with placeholders and read
    back; one that needs another variable (firefunction-v2's `functions`) is named by its file name, with a
    DetectionWarning that says which variable to pass. Before, 57 of these 62 gave no grammar."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = gp.detect(str(TEMPLATES / f"{name}.jinja"))
    assert found.grammar == FAMILY[name], found.explain()
    said = [w.message for w in caught if issubclass(w.category, gp.DetectionWarning)]
    if found.by_name:
        assert len(said) == 1 and said[0].code == "detect.by_name" and found.grammar in str(said[0])
        assert found.grammar in found.explain() and "name" in found.explain()
    else:
        assert not said
        closest = found.closest
        assert closest is not None and closest.exact


READS_SPECIAL_TOKENS = {  # (read from each template's source: the variables it uses)
    "mistralai-Mistral-Nemo-Instruct-2407": {"bos_token", "eos_token"},
    "meetkai-functionary-medium-v3.1": {"bos_token"},
    "unsloth-Apriel-1.5": {"bos_token", "eos_token"},
    "Qwen-Qwen3-0.6B": set(),
}


@pytest.mark.parametrize("name", sorted(READS_SPECIAL_TOKENS))
def test_placeholders_fill_only_the_special_tokens_a_template_reads_and_lacks(name):
    source = (TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8")
    assert {t for t in ("bos_token", "eos_token") if t in source} == READS_SPECIAL_TOKENS[name]  # (the table's premise)
    found = gp.detect(str(TEMPLATES / f"{name}.jinja"))
    assert set(found.placeholders) == READS_SPECIAL_TOKENS[name]
    assert all(token in found.explain() for token in found.placeholders)
    given = gp.detect(gp.ChatTemplate(source, special_tokens=TOKENS))  # (given tokens are never replaced)
    assert not given.placeholders and given.grammar == FAMILY[name]


def test_by_name_the_warning_names_the_variable_to_pass():
    path = TEMPLATES / "fireworks-ai-llama-3-firefunction-v2.jinja"
    with pytest.warns(gp.DetectionWarning, match=r"'functions'.*template_kwargs") as caught:
        found = gp.detect(str(path))
    assert found.grammar == "firefunction_v2" and found.by_name and caught[0].message.code == "detect.by_name"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        given = gp.detect(str(path), template_kwargs=TEMPLATE_KWARGS["fireworks-ai-llama-3-firefunction-v2"])
    assert given.grammar == "firefunction_v2" and not given.by_name and given.closest.exact


def test_one_name_as_a_string_is_one_hint():
    """hints="smollm3" was read as seven one-letter names, none of which names a grammar."""
    smollm3 = template("HuggingFaceTB-SmolLM3-3B")
    assert gp.detect(smollm3).grammar != "smollm3"  # (no name: several grammars read its renderings equally)
    assert gp.detect(smollm3, hints="SmolLM3-3B").grammar == gp.detect(smollm3, hints=["SmolLM3-3B"]).grammar == "smollm3"
    assert gp.detect(smollm3, grammars="smollm3").grammar == "smollm3"


@pytest.mark.parametrize(("argument", "value"), [("template_kwargs", ["enable_thinking"]), ("hints", 3),
                                                 ("grammars", 3)])
def test_detect_names_its_argument_of_the_wrong_type(argument, value):
    with pytest.raises(gp.ArgumentError) as info:
        gp.detect(template("Qwen-Qwen3-0.6B"), **{argument: value})
    assert info.value.code == "usage.argument" and f"`{argument}`" in str(info.value)


def test_a_template_that_renders_nothing_and_matches_no_name_stays_unnamed(tmp_path):
    lone = tmp_path / "some-model.jinja"
    lone.write_text("{{ raise_exception('no') }}", encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        found = gp.detect(str(lone))
    assert found.grammar is None and not found.by_name


@pytest.mark.parametrize("name", sorted(MISSES))
def test_a_template_no_grammar_reads_back_is_reported_with_the_closest(name):
    found = detection(name)
    closest, reason = MISSES[name]
    assert found.grammar is None
    assert found.closest is not None and found.closest.name == closest
    assert reason in found.explain(), found.explain()


@pytest.mark.parametrize("name", sorted(NO_FAMILY))
def test_templates_of_families_without_a_grammar(name):
    found = detection(name)
    assert found.grammar == NO_FAMILY[name], found.explain()
    if found.grammar is None:
        assert "no built-in grammar reads this template's renderings back; the closest is" in found.explain()


def test_without_a_name_the_reasoning_key_and_the_format_s_main_grammar_decide():
    assert gp.detect(template("Qwen-Qwen3-0.6B")).grammar == "qwen3"  # reads reasoning_content; smollm3 reads thinking
    assert gp.detect(template("Qwen-Qwen2.5-7B-Instruct")).grammar == "qwen3"  # Hermes' main grammar
    assert gp.detect(template("meta-llama-Llama-3.1-8B-Instruct")).grammar == "llama3_json"  # only one reads it


def test_reasoning_modes():
    """Who writes the reasoning opener: the model (Qwen3), the generation prompt (Qwen3.5's '<think>\\n'),
    and what the thinking switch pre-fills (an empty block when thinking is off)."""
    qwen3 = detection("Qwen-Qwen3-0.6B").reasoning
    assert qwen3.rendered and qwen3.keys == ("reasoning_content",)
    assert qwen3.prefilled["default"] == "" and qwen3.prefilled["enable_thinking=False"] == "<think>\n\n</think>\n\n"
    qwen35 = detection("Qwen3.5-4B").reasoning
    assert qwen35.prefilled["default"] == "<think>\n" and qwen35.describe().startswith("pre-filled '<think>\\n'")
    gpt_oss = detection("openai-gpt-oss-120b").reasoning
    assert gpt_oss.keys == ("thinking",) and gpt_oss.describe() == "written by the model"
    assert not detection("Qwen-Qwen2.5-7B-Instruct").reasoning.rendered


# ---------------------------------------------------------------------------- the documented table
def _doc_rows() -> dict[str, tuple[str, str]]:
    rows = {}
    for line in DOCS.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^\| `([^`]+)` \| (`[a-z0-9_]+`|none) \| ((?:[^|\\]|\\.)*) \|", line)
        if match:
            rows[match[1]] = (match[2].strip("`"), match[3].strip())
    return rows


def test_the_docs_table_is_what_detect_says():
    rows = _doc_rows()
    assert set(rows) == FAMILY.keys() | MISSES.keys() | NO_FAMILY.keys()
    for name, (grammar, mode) in rows.items():
        found = detection(name)
        assert grammar == (found.grammar or "none"), name
        assert mode == found.reasoning.describe().replace("|", "\\|"), name


# ---------------------------------------------------------------------------- where it is used
def _model_dir(tmp_path: Path, name: str, **config: object) -> Path:
    directory = tmp_path / name
    directory.mkdir()
    tokenizer_config = {"chat_template": (TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8"), **TOKENS, **config}
    (directory / "tokenizer_config.json").write_text(json.dumps(tokenizer_config), encoding="utf-8")
    return directory


def test_load_grammar_reads_a_model_directory(tmp_path):
    assert gp.load_grammar(_model_dir(tmp_path, "Qwen3.5-4B")).name == "qwen3_5"
    assert gp.load_grammar(str(_model_dir(tmp_path, "openai-gpt-oss-120b"))).name == "gpt_oss"
    jinja = tmp_path / "chat_template.jinja"
    jinja.write_text((TEMPLATES / "GLM-4.7-Flash.jinja").read_text(encoding="utf-8"), encoding="utf-8")
    assert gp.load_grammar(str(jinja)).name == "glm47"


def test_a_response_template_in_the_model_directory_wins(tmp_path):
    authored = {"start_anchor": "<|im_start|>assistant\n", "fields": {"content": {}}}
    directory = _model_dir(tmp_path, "Qwen-Qwen3-0.6B", response_template=authored)
    assert gp.load_grammar(directory).fields == ["content"]


def test_the_model_name_in_config_json_breaks_ties(tmp_path):
    directory = _model_dir(tmp_path, "HuggingFaceTB-SmolLM3-3B")
    renamed = directory.rename(tmp_path / "some-model")
    assert gp.detect(renamed).grammar != "smollm3"  # (no name: several grammars read its renderings equally)
    (renamed / "config.json").write_text(json.dumps({"model_type": "smollm3"}), encoding="utf-8")
    assert gp.detect(renamed).grammar == "smollm3"


def test_the_tokenizer_glue_falls_back_to_the_chat_template():
    class Tokenizer:  # (the attributes grammar_for reads of a transformers tokenizer)
        chat_template = (TEMPLATES / "deepseek-ai-DeepSeek-V3.1.jinja").read_text(encoding="utf-8")
        bos_token, eos_token = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
        name_or_path = "deepseek-ai/DeepSeek-V3.1"

        def get_vocab(self) -> dict[str, int]:
            return {"<｜tool▁calls▁begin｜>": 1}

    assert grammar_for(Tokenizer()).name == "deepseek_v31"


def test_the_command_line_detects_and_renders(tmp_path, capsys):
    directory = _model_dir(tmp_path, "Qwen-Qwen3-0.6B")
    assert main(["detect", str(directory)]) == 0
    assert capsys.readouterr().out.startswith("qwen3 reads every probe rendering back")
    messages = tmp_path / "messages.json"
    messages.write_text(json.dumps([{"role": "user", "content": "Hi"}]), encoding="utf-8")
    assert main(["render", "--model-dir", str(directory), "--messages-file", str(messages),
                 "--template-kwargs", '{"enable_thinking": false}']) == 0
    assert capsys.readouterr().out == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    output = tmp_path / "out.txt"
    output.write_text("<think>hm</think>Hello.<|im_end|>", encoding="utf-8")
    assert main(["parse", "--model-dir", str(directory), "--messages-file", str(messages), "--compact", str(output)]) == 0
    assert json.loads(capsys.readouterr().out) == {"role": "assistant", "reasoning_content": "hm", "content": "Hello."}


def test_the_command_line_reports_a_template_nothing_reads(tmp_path, capsys):
    bare = tmp_path / "plain.jinja"
    bare.write_text("{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}", encoding="utf-8")
    assert main(["detect", str(bare)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("grammar-parse: error [detect.no_match]: ") and "the closest is" in err


def test_a_hostile_template_stops_detection_at_its_first_probe():
    """A template that runs out its time on every render is not tried once per probe and switch: the
    first timeout ends detection (with the template's own error)."""
    renders = []

    class Counting(gp.ChatTemplate):
        def render(self, *args, **kwargs):  # (counts the renders detect asks for)
            renders.append(1)
            return super().render(*args, **kwargs)

    loops = "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}"
    with pytest.raises(gp.ChatTemplateError) as info:
        gp.detect(Counting(loops, time_limit=0.1))
    assert info.value.code == "chat_template.timeout" and len(renders) == 1
