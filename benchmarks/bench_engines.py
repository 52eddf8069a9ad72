"""grammar_parse's plugins inside vLLM and SGLang against each engine's own parser for the family.

The same outputs and the same token deltas as bench_peers.py, in the same process and interleaved, but
both sides run inside the engine: vLLM composes the parsers with its ParserManager and streams them
through its ChatStreamProcessor (one-shot: Parser.parse); SGLang runs its ReasoningParser and
FunctionCallParser as serving_chat does. One side is the engine's own parsers for the family (for
example ``--tool-call-parser hermes --reasoning-parser qwen3``), the other ours (``gp_qwen3`` for both).
Per-delta CPU time at 1 KB, 16 KB and 128 KB (the engines' own streaming parsers re-scan the growing
text at every delta), and one-shot time. Every side's calls are checked against the calls the output was
written from; a cell that disagrees is marked ✗ and not timed.

Needs the peers' virtual environment (see bench_peers.py and the README); about 8 minutes in full,
``--quick`` (1 KB and 16 KB) about 2 minutes. One-shot is timed as bench_peers.py times it (calls for a quarter of a
CPU second, the time per call).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_peers as bp  # noqa: E402 - the families, workloads, engine drivers and harness

SIDES = ("vLLM", "vLLM+gp", "SGLang", "SGLang+gp")


LOADED: set[str] = set()  # the engines our plugin loaded into ("vllm", "sglang")


def engines_for(fam: bp.Family, tokenizer_dir: str, prompt_ids: list[int], problems: list[str]) -> list[Any]:
    """The four sides for one family (None where one cannot run here)."""
    ours = (f"gp_{fam.name}", f"gp_{fam.name}")
    makers = [
        ("vLLM", lambda: bp.VLLM(fam, tokenizer_dir, prompt_ids)),
        ("vLLM+gp", lambda: bp.VLLM(fam, tokenizer_dir, prompt_ids, names=ours, label="vLLM+gp")),
        ("SGLang", lambda: bp.SGLang(fam, tokenizer_dir)),
        ("SGLang+gp", lambda: bp.SGLang(fam, tokenizer_dir, names=ours, label="SGLang+gp")),
    ]
    out: list[Any] = []
    for label, make in makers:
        peer = label.split("+")[0]
        if "+" in label and peer.lower() not in LOADED:
            out.append(None)  # (said once, at the start)
            continue
        if "+" not in label and peer in dict(fam.skip):
            problems.append(f"{fam.name}: {label} not run: {dict(fam.skip)[peer]}")
            out.append(None)
            continue
        try:
            with bp.quiet():
                out.append(make())
        except Exception as e:  # noqa: BLE001 - reported; the column stays empty for this family
            problems.append(f"{fam.name}: {label} cannot be set up here: {type(e).__name__}: {e}")
            out.append(None)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1 KB and 16 KB only, fewer repeats")
    ap.add_argument("--family", action="append", choices=sorted(bp.FAMILIES), help="repeatable; default: all")
    ap.add_argument("--json", metavar="FILE", help="write the raw figures here")
    ap.add_argument("--limit", type=float, default=None, help="CPU seconds after which a streamed run is cut off")
    args = ap.parse_args()
    started = time.perf_counter()
    for plugin in ("vllm", "sglang"):  # (importing registers gp_* with the engine's managers)
        try:
            with bp.quiet():
                module = importlib.import_module(f"grammar_parse.integrations.{plugin}")
                getattr(module, "install", lambda: None)()
            LOADED.add(plugin)
        except ImportError as e:
            print(f"{plugin}: our plugin cannot be loaded here ({e}); its column stays empty", file=sys.stderr)
    gc.collect()
    gc.freeze()
    sizes = [1_000, 16_000] if args.quick else [1_000, 16_000, 128_000]
    repeats = {"1 KB": 3 if args.quick else 5, "16 KB": 2 if args.quick else 3, "128 KB": 2}
    budget, limit = (2.0, 10.0) if args.quick else (10.0, args.limit or 30.0)
    rows: list[dict[str, Any]] = []
    problems: list[str] = []
    for fam_name in args.family or list(bp.FAMILIES):
        fam = bp.FAMILIES[fam_name]
        tokens = bp.Tokens(fam.specials)
        loads = []
        for size in sizes:
            text, calls = bp.workload(fam, size)
            w = bp.Workload(f"{size // 1000} KB", text, calls)
            w.chunks = tokens.chunks(text)
            w.ids = tokens.ids(w.chunks)
            w.flat_ids = [i for ids in w.ids for i in ids]
            loads.append(w)
        prompt_ids = [i for ids in tokens.ids(tokens.chunks(fam.prefix)) for i in ids]
        with tempfile.TemporaryDirectory() as tmp:
            tokens.save(tmp)
            engines = engines_for(fam, tmp, prompt_ids, problems)
        gc.collect()
        gc.freeze()
        for w in loads:
            row: dict[str, Any] = {"family": fam.name, "workload": w.label, "deltas": len(w.chunks)}
            for mode in ("stream", "oneshot"):
                cells = bp.run_interleaved(engines, mode, w, repeats[w.label], budget, limit)
                for eng, cell in zip(engines, cells):
                    if eng is not None and cell is not None:
                        row[f"{eng.label}_{mode}"], problem = bp.judge(cell, mode, w)
                        if problem:
                            problems.append(f"{fam.name} {w.label}: {eng.label} {mode}{problem}")
            rows.append(row)
            print(f"  {fam.name} {w.label} done ({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)
    print_table(rows, sizes)
    if problems:
        print("\nMismatches and failures (their cells are marked ✗ or -):")
        for p in problems:
            print(f"- {p}")
    print(f"\n{len(rows)} workloads in {time.perf_counter() - started:.0f} s (wall); versions: {bp.versions()}")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "problems": problems, "versions": bp.versions()}, indent=2))
    sys.stdout.flush()
    os._exit(0)  # (xgrammar's nanobind module reports "leaked" objects at exit: not ours to show)


def print_table(rows: list[dict[str, Any]], sizes: list[int]) -> None:
    big = f"{sizes[-1] // 1000} KB"

    def cell(r: dict[str, Any] | None, key: str, field: str = "us_per_delta") -> float | None:
        c = (r or {}).get(key) or {}
        return c.get(field)

    def show(v: float | None, r: dict[str, Any] | None, key: str, scale: float = 1.0, digits: int = 1) -> str:
        if v is not None:
            return f"{v * scale:.{digits}f}"
        c = (r or {}).get(key) or {}
        if "us_per_delta_at_least" in c:
            return f"≥ {c['us_per_delta_at_least']:.0f}"
        return "✗" if c else "-"

    def ratio(a: float | None, b: float | None) -> str:
        return "-" if a is None or b is None or b == 0 else f"{a / b:.1f}"

    by = {(r["family"], r["workload"]): r for r in rows}
    print(f"\nPer delta at {big} (µs; own ÷ ours above 1 favours ours), ours {big} ÷ 1 KB, one-shot at {big} (ms):\n")
    print("| family | vLLM own | vLLM + gp | own ÷ gp | gp flat | one-shot own | one-shot gp "
          "| SGLang own | SGLang + gp | own ÷ gp | gp flat | one-shot own | one-shot gp |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for fam in dict.fromkeys(r["family"] for r in rows):
        r, small = by.get((fam, big)), by.get((fam, "1 KB"))
        parts = [fam]
        for engine in ("vLLM", "SGLang"):
            own, gp = cell(r, f"{engine}_stream"), cell(r, f"{engine}+gp_stream")
            gp_small = cell(small, f"{engine}+gp_stream")
            own_shot, gp_shot = cell(r, f"{engine}_oneshot", "cpu_s"), cell(r, f"{engine}+gp_oneshot", "cpu_s")
            parts += [show(own, r, f"{engine}_stream"), show(gp, r, f"{engine}+gp_stream"), ratio(own, gp),
                      ratio(gp, gp_small), show(own_shot, r, f"{engine}_oneshot", 1e3),
                      show(gp_shot, r, f"{engine}+gp_oneshot", 1e3)]
        print("| " + " | ".join(parts) + " |")


if __name__ == "__main__":
    main()
