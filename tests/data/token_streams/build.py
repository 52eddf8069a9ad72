"""Rebuild the token-stream fixtures (``<vocabulary>.json`` next to this file) from real vocabularies.

Opt-in, never run by the test suite: it needs the network (PyPI) and two build-only packages::

    pip install gguf mistral-common
    python tests/data/token_streams/build.py            # [--work DIR] keeps the downloads between runs

Each model output (the project's goldens of the families that use the vocabulary, plus a few written
outputs with multi-byte text) is tokenized with the vocabulary's own tokenizer, markers such as
``<tool_call>`` or ``[TOOL_CALLS]`` as their single special ids (checked), and written with the decoding
table of only the ids used. Every output is checked to decode back to its text with the real tokenizer
and with the table; one that does not is listed under ``skipped`` with the reason, as is one whose
markers have no id in the vocabulary. README.md says where each vocabulary comes from.
"""

from __future__ import annotations

import argparse
import base64
import json
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
TESTS = HERE.parents[1]
sys.path.insert(0, str(TESTS))

from goldens import goldens  # noqa: E402  (tests/ on the path first)

LLAMA_CPP = "llama-cpp-python"
MISTRAL_COMMON = "mistral-common"

# The placeholders of the base vocabularies that the released chat models name. llama.cpp's test
# vocabularies are the base models' (Qwen2, Llama 3.0); the chat models keep every merge and id and only
# name these slots. Values: (token, special) as in the models' tokenizer_config.json added_tokens_decoder
# (special=False: kept by decode(skip_special_tokens=True), as <think> is in Qwen3).
QWEN3_ADDED = {
    151646: ("<|object_ref_start|>", True), 151647: ("<|object_ref_end|>", True),
    151648: ("<|box_start|>", True), 151649: ("<|box_end|>", True), 151650: ("<|quad_start|>", True),
    151651: ("<|quad_end|>", True), 151652: ("<|vision_start|>", True), 151653: ("<|vision_end|>", True),
    151654: ("<|vision_pad|>", True), 151655: ("<|image_pad|>", True), 151656: ("<|video_pad|>", True),
    151657: ("<tool_call>", False), 151658: ("</tool_call>", False), 151659: ("<|fim_prefix|>", False),
    151660: ("<|fim_middle|>", False), 151661: ("<|fim_suffix|>", False), 151662: ("<|fim_pad|>", False),
    151663: ("<|repo_name|>", False), 151664: ("<|file_sep|>", False), 151665: ("<tool_response>", False),
    151666: ("</tool_response>", False), 151667: ("<think>", False), 151668: ("</think>", False),
}
LLAMA31_ADDED = {128004: ("<|finetune_right_pad_id|>", True), 128008: ("<|eom_id|>", True),
                 128010: ("<|python_tag|>", True)}

# Outputs written here: multi-byte text (CJK, emoji, accents, and characters rare enough to be cut
# into bytes) in content, reasoning and tool-call arguments. (grammar, name, prefix, text)
QWEN3_WRITTEN = [
    ("qwen3", "written/cjk_call", "",
     '<think>\n用户想知道东京的天气 🌤️，还有 naïve café。\n</think>\n\n<tool_call>\n{"name": "get_weather", '
     '"arguments": {"city": "東京", "note": "雨 ☔ 𠜎 𓀀"}}\n</tool_call><|im_end|>'),
    ("qwen3", "written/emoji_content", "<|im_start|>assistant\n<think>\n",
     "Ça coûte 5 € — voilà 😀🎉.\n</think>\n\nΓειά σου κόσμε! Привет 👋🏽 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 🇯🇵<|im_end|>"),
    ("qwen3_coder", "written/unicode_parameters", "",
     "<tool_call>\n<function=write_file>\n<parameter=path>\ndocs/说明.md\n</parameter>\n<parameter=content>\n"
     "# Überblick 🚀\nZoë’s naïve façade 𐍈\n</parameter>\n</function>\n</tool_call><|im_end|>"),
]
LLAMA3_WRITTEN = [
    ("llama3_json", "written/unicode_arguments", "",
     '<|python_tag|>{"name": "translate", "parameters": {"text": "Grüße aus München 🍺", '
     '"target": "日本語 𠜎"}}<|eom_id|>'),
    ("llama3_json", "written/unicode_content", "",
     "Crème brûlée 🍮 est délicieuse. 東京は晴れです。 𓀀 🇫🇷<|eot_id|>"),
    ("llama3_pythonic", "written/unicode_call", "",
     '[translate(text="Señor 🌮 ñandú", target="中文 𝔘")]<|eot_id|>'),
]
GEMMA4_WRITTEN = [
    ("gemma4", "written/unicode_call", "",
     "<|channel>thought\n用户问苏黎世的天气 🌧️ 𓀀<channel|><|tool_call>call:get_weather{city:<|\"|>Zürich<|\"|>,"
     "note:<|\"|>雨 ☔ 𠜎<|\"|>}<tool_call|><|tool_response>"),
    ("gemma4", "written/unicode_content", "",
     "Crème brûlée 🍮, 東京は晴れです。 𝔘𝔫𝔦 𐍈 🇯🇵<turn|>"),
]
TEKKEN_WRITTEN = [
    ("mistral", "written/unicode_call", "",
     '[TOOL_CALLS] [{"name": "translate", "arguments": {"text": "Ça va? 😊 𠜎", "to": "中文"}}]</s>'),
    ("mistral", "written/unicode_content", "",
     "Привет, мир! 你好 👋🏽 naïve 𓀀 𝔘</s>"),
]


@dataclass
class Vocabulary:
    """One fixture: where its tokenizer comes from, the families it serves, its markers."""

    name: str
    source: dict[str, str]
    grammars: list[str]
    markers: list[str]  # must each be one special id
    written: list[tuple[str, str, str, str]]
    load: Callable[[Path], "Tokenizer"]
    skipped_grammars: dict[str, str] = field(default_factory=dict)  # grammar -> why it is left out


class Tokenizer:
    """What the build needs from a real tokenizer."""

    def encode(self, text: str) -> list[int]:
        raise NotImplementedError

    def decode(self, ids: list[int]) -> str:
        raise NotImplementedError

    def token_bytes(self, token_id: int) -> bytes:
        raise NotImplementedError

    def is_special(self, token_id: int) -> bool:
        """Whether decode(skip_special_tokens=True) drops it."""
        raise NotImplementedError

    def marker_ids(self, marker: str) -> list[int]:
        return self.encode(marker)


# ------------------------------------------------------------------------------------------ sources
def fetch(work: Path, package: str, binary: bool) -> Path:
    """The package's distribution from PyPI (the source distribution when ``binary`` is False)."""
    found = sorted(work.glob(f"{package.replace('-', '_')}-*"))
    found = [p for p in found if p.suffix in (".gz", ".whl")]
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(work),
                        *(["--only-binary", ":all:"] if binary else ["--no-binary", ":all:"]), package],
                       check=True)
        found = [p for p in sorted(work.glob(f"{package.replace('-', '_')}-*")) if p.suffix in (".gz", ".whl")]
    return found[-1]


def version_of(archive: Path) -> str:
    return archive.name.split("-")[1].removesuffix(".tar.gz")


def gguf_file(work: Path, name: str) -> tuple[Path, str]:
    sdist = fetch(work, LLAMA_CPP, binary=False)
    version = version_of(sdist)
    member = f"llama_cpp_python-{version}/vendor/llama.cpp/models/{name}"
    target = work / member
    if not target.exists():
        with tarfile.open(sdist) as tar:
            tar.extract(member, work, filter="data")
    return target, version


class HFTokenizer(Tokenizer):
    """A ``tokenizers`` tokenizer built from a GGUF file's metadata by transformers' GGUF converter
    (its reader needs torch; the gguf package reads the metadata here), with the chat model's names for
    the base vocabulary's placeholders."""

    def __init__(self, path: Path, added: dict[int, tuple[str, bool]], cache: Path) -> None:
        from tokenizers import Tokenizer as Raw

        if not cache.exists():  # (the converter takes a minute or two on a large sentencepiece vocabulary)
            cache.write_text(self._convert(path), encoding="utf-8")
        spec = json.loads(cache.read_text(encoding="utf-8"))
        vocab = spec["model"]["vocab"]
        by_id = {v: k for k, v in vocab.items()} if isinstance(vocab, dict) else {}
        entries = {t["id"]: t for t in spec["added_tokens"]}
        for token_id, (content, special) in added.items():
            old = entries[token_id]["content"] if token_id in entries else by_id.get(token_id)
            if isinstance(vocab, dict) and old in vocab:
                del vocab[old]
                vocab[content] = token_id
            entries[token_id] = {"id": token_id, "content": content, "single_word": False, "lstrip": False,
                                 "rstrip": False, "normalized": False, "special": special}
        spec["added_tokens"] = sorted(entries.values(), key=lambda t: t["id"])
        self.raw = Raw.from_str(json.dumps(spec))
        self.added = {t["id"]: t for t in spec["added_tokens"]}
        self.byte_level = spec["model"]["type"] == "BPE" and not spec["model"].get("byte_fallback")

    @staticmethod
    def _convert(path: Path) -> str:
        from gguf import GGUFReader
        from transformers.integrations.gguf.gguf_tokenizer_mapping import (GGUF_TOKENIZER_MAPPING,
                                                                             convert_gguf_tokenizer)

        reader = GGUFReader(str(path))
        metadata = {name: f.contents() for name, f in reader.fields.items() if name.startswith(("tokenizer.", "general."))}
        tokenizer = {name: metadata[f"tokenizer.{key}"] for key, name in GGUF_TOKENIZER_MAPPING["tokenizer"].items()
                     if f"tokenizer.{key}" in metadata}
        backend, _ = convert_gguf_tokenizer(metadata["general.architecture"], tokenizer)
        return str(backend.to_str())

    def encode(self, text: str) -> list[int]:
        return list(self.raw.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: list[int]) -> str:
        return str(self.raw.decode(ids, skip_special_tokens=False))

    def is_special(self, token_id: int) -> bool:
        return bool(token_id in self.added and self.added[token_id]["special"])

    def token_bytes(self, token_id: int) -> bytes:
        if token_id in self.added:
            return str(self.added[token_id]["content"]).encode("utf-8")
        piece = self.raw.id_to_token(token_id)
        if self.byte_level:
            from transformers.convert_slow_tokenizer import bytes_to_unicode

            byte_of = {c: b for b, c in bytes_to_unicode().items()}
            return bytes(byte_of[c] for c in piece)
        if m := re.fullmatch(r"<0x([0-9A-F]{2})>", piece):  # sentencepiece byte fallback
            return bytes([int(m.group(1), 16)])
        return piece.replace("\u2581", " ").encode("utf-8")


class TekkenTokenizer(Tokenizer):
    """mistral-common's Tekkenizer; text is cut at the special tokens' strings, as the model emits them
    as their own ids (its encode() would spell them out)."""

    def __init__(self, path: Path) -> None:
        from mistral_common.tokens.tokenizers.base import SpecialTokenPolicy
        from mistral_common.tokens.tokenizers.tekken import Tekkenizer

        self.tok = Tekkenizer.from_file(str(path))
        self.keep = SpecialTokenPolicy.KEEP
        self.specials = {self.tok.id_to_piece(i): i for i in range(self.tok.num_special_tokens)}
        self.split = re.compile("(" + "|".join(map(re.escape, sorted(self.specials, key=len, reverse=True))) + ")")

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        for i, part in enumerate(self.split.split(text)):
            if i % 2:
                ids.append(self.specials[part])
            elif part:
                ids += self.tok.encode(part, bos=False, eos=False)
        return ids

    def decode(self, ids: list[int]) -> str:
        return str(self.tok.decode(ids, special_token_policy=self.keep))

    def is_special(self, token_id: int) -> bool:
        return token_id < self.tok.num_special_tokens

    def token_bytes(self, token_id: int) -> bytes:
        return bytes(self.tok.id_to_byte_piece(token_id, special_token_policy=self.keep))


def load_gguf(name: str, added: dict[int, tuple[str, bool]]) -> Callable[[Path], Tokenizer]:
    def load(work: Path) -> Tokenizer:
        path, _ = gguf_file(work, name)
        return HFTokenizer(path, added, work / f"{name}.tokenizer.json")
    return load


def load_tekken(name: str) -> Callable[[Path], Tokenizer]:
    def load(work: Path) -> Tokenizer:
        wheel = fetch(work, MISTRAL_COMMON, binary=True)
        target = work / "mistral_common" / name
        if not target.exists():
            with zipfile.ZipFile(wheel) as z:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(z.read(f"mistral_common/data/{name}"))
        return TekkenTokenizer(target)
    return load


LLAMA_CPP_SOURCE = {"package": LLAMA_CPP + " (source distribution, PyPI)", "package_licence": "MIT"}
VOCABULARIES = [
    Vocabulary(
        "qwen3", {**LLAMA_CPP_SOURCE, "file": "vendor/llama.cpp/models/ggml-vocab-qwen2.gguf",
                  "licence": "Apache-2.0 (Qwen2 / Qwen3)",
                  "note": "Qwen2 base vocabulary; ids 151646-151668 named as in Qwen3's tokenizer_config.json"},
        ["qwen3", "qwen3_coder"], ["<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>"],
        QWEN3_WRITTEN, load_gguf("ggml-vocab-qwen2.gguf", QWEN3_ADDED)),
    Vocabulary(
        "llama3", {**LLAMA_CPP_SOURCE, "file": "vendor/llama.cpp/models/ggml-vocab-llama-bpe.gguf",
                   "licence": "Llama 3 Community License (Llama 3.1 Community License for the named ids)",
                   "note": "Llama 3 base vocabulary; ids 128004, 128008, 128010 named as in Llama 3.1"},
        ["llama3_json", "llama3_pythonic"], ["<|python_tag|>", "<|eom_id|>", "<|eot_id|>", "<|start_header_id|>"],
        LLAMA3_WRITTEN, load_gguf("ggml-vocab-llama-bpe.gguf", LLAMA31_ADDED)),
    Vocabulary(
        "gemma4", {**LLAMA_CPP_SOURCE, "file": "vendor/llama.cpp/models/ggml-vocab-gemma-4.gguf",
                   "licence": "Gemma Terms of Use"},
        ["gemma4"], ["<|tool_call>", "<tool_call|>", "<|\"|>", "<|tool_response>", "<tool_response|>",
                     "<|channel>", "<channel|>", "<|turn>", "<turn|>", "<bos>"],
        GEMMA4_WRITTEN, load_gguf("ggml-vocab-gemma-4.gguf", {})),
    Vocabulary(
        "tekken", {"package": MISTRAL_COMMON + " (wheel, PyPI)", "package_licence": "Apache-2.0",
                   "file": "mistral_common/data/tekken_240911.json", "licence": "Apache-2.0 (Mistral)"},
        ["mistral", "mistral_v11"], ["[TOOL_CALLS]", "</s>", "[INST]", "[/INST]", "[TOOL_RESULTS]"],
        TEKKEN_WRITTEN, load_tekken("tekken_240911.json"),
        skipped_grammars={"mistral_v11": "its [ARGS], [CALL_ID], [THINK] markers have no special id in the "
                                         "packaged tekken vocabularies (v3); tokenized as text they would not "
                                         "be what a v11 model emits"}),
]


# ------------------------------------------------------------------------------------------ the build
def split_characters(data: bytes, pieces: list[bytes]) -> int:
    """How many token boundaries fall inside a multi-byte character."""
    starts = {i for i in range(len(data)) if data[i] & 0xC0 != 0x80}
    offset, count = 0, 0
    for piece in pieces[:-1]:
        offset += len(piece)
        count += offset not in starts and offset < len(data)
    return count


def build(vocabulary: Vocabulary, work: Path) -> dict[str, Any]:
    tok = vocabulary.load(work)
    markers = {}
    for marker in vocabulary.markers:
        ids = tok.marker_ids(marker)
        if len(ids) != 1:
            raise SystemExit(f"{vocabulary.name}: {marker!r} is {ids}, not one id")
        markers[marker] = ids[0]
    outputs: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    samples = [(g, f"{g}/{s.name}", s.prefix, s.text) for g in vocabulary.grammars for s in goldens(g)]
    for grammar, name, prefix, text in [*samples, *vocabulary.written]:
        if grammar in vocabulary.skipped_grammars:
            skipped.append({"name": name, "grammar": grammar, "reason": vocabulary.skipped_grammars[grammar]})
            continue
        ids = tok.encode(text)
        pieces = [tok.token_bytes(i) for i in ids]
        if tok.decode(ids) != text:
            skipped.append({"name": name, "grammar": grammar, "reason": "the tokenizer does not decode its ids "
                                                                      f"back to the text: {tok.decode(ids)!r}"})
            continue
        if b"".join(pieces) != text.encode("utf-8"):
            raise SystemExit(f"{vocabulary.name}: the table does not give {name}'s text")
        outputs.append({"name": name, "grammar": grammar, "prefix": prefix, "text": text, "ids": ids,
                        "split_characters": split_characters(text.encode("utf-8"), pieces)})
    used = sorted({i for o in outputs for i in o["ids"]} | set(markers.values()))
    return {
        "vocabulary": vocabulary.name,
        "source": vocabulary.source,
        "tokens": {str(i): base64.b64encode(tok.token_bytes(i)).decode("ascii") for i in used},
        "special": [i for i in used if tok.is_special(i)],
        "markers": markers,
        "outputs": outputs,
        "skipped": skipped,
    }


def dump(fixture: dict[str, Any]) -> str:
    """JSON with one line per output and per table entry: small, and a rebuild diffs by output."""
    def line(value: Any) -> str:
        return json.dumps(value, ensure_ascii=False)

    tokens = ",\n".join(f"  {line(k)}: {line(v)}" for k, v in fixture["tokens"].items())
    outputs = ",\n".join(f"  {line(o)}" for o in fixture["outputs"])
    skipped = ",\n".join(f"  {line(o)}" for o in fixture["skipped"])
    return (f'{{"vocabulary": {line(fixture["vocabulary"])},\n"source": {line(fixture["source"])},\n'
            f'"markers": {line(fixture["markers"])},\n"special": {line(fixture["special"])},\n'
            f'"tokens": {{\n{tokens}\n}},\n"outputs": [\n{outputs}\n],\n"skipped": [\n{skipped}\n]}}\n')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, help="where downloads are kept (a temporary folder otherwise)")
    parser.add_argument("names", nargs="*", help="vocabularies to build (all by default)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        versions = {LLAMA_CPP: version_of(fetch(work, LLAMA_CPP, binary=False))}
        for vocabulary in VOCABULARIES:
            if args.names and vocabulary.name not in args.names:
                continue
            package = MISTRAL_COMMON if vocabulary.name == "tekken" else LLAMA_CPP
            if package not in versions:
                versions[package] = version_of(fetch(work, package, binary=True))
            vocabulary.source["version"] = versions[package]
            fixture = build(vocabulary, work)
            out = HERE / f"{vocabulary.name}.json"
            out.write_text(dump(fixture), encoding="utf-8")
            splits = sum(o["split_characters"] > 0 for o in fixture["outputs"])
            print(f"{out.name}: {len(fixture['outputs'])} outputs ({splits} with split characters), "
                  f"{len(fixture['skipped'])} skipped, {len(fixture['tokens'])} ids, {out.stat().st_size} bytes")


if __name__ == "__main__":
    main()
