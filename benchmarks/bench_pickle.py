"""Benchmark: a compiled grammar travels as a value. Building each built-in grammar from its Lark text
against unpickling the compiled grammar, each in a fresh process (so neither finds the regex module's
compile cache or Lark's warm), as a batch worker or a distributed recipe's task receives it; the garbage
collector paused while timing, as timeit does.

    python benchmarks/bench_pickle.py            # every built-in grammar
    python benchmarks/bench_pickle.py -g qwen3   # some

Prints per grammar the milliseconds to build and to unpickle, the pickle's size, and the ratio; then the
smallest and the median ratio.
"""

from __future__ import annotations

import argparse
import json
import pickle
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

# One fresh process per mode: it imports the package, then times each grammar once.
_RUN = r"""
import gc, json, pickle, sys, time
from grammar_parse._engine.grammar import build_grammar
mode, path = sys.argv[1], sys.argv[2]
warm, items = pickle.load(open(path, "rb"))
build_grammar(warm[1], name=warm[0]) if mode == "build" else pickle.loads(warm[2])  # (first-use costs, not timed)
out = {}
gc.disable()  # (as timeit does: a collection of what came before is no cost of the grammar at hand)
for name, source, data in items:
    gc.collect()
    started = time.perf_counter()
    build_grammar(source, name=name) if mode == "build" else pickle.loads(data)
    out[name] = time.perf_counter() - started
print(json.dumps(out))
"""


def main() -> None:
    import grammar_parse as gp

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-g", "--grammar", action="append", help="a built-in grammar (default: all)")
    args = parser.parse_args()
    names = args.grammar or gp.list_grammars()
    items = [(n, (g := gp.load_grammar(n)).source, pickle.dumps(g)) for n in names]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "grammars.pickle"
        warm = gp.compile_template({"version": 1, "start_anchor": "<|assistant|>", "fields": {"content": {}}})
        path.write_bytes(pickle.dumps(((warm.name, warm.source, pickle.dumps(warm)), items)))
        times = {mode: json.loads(subprocess.run([sys.executable, "-c", _RUN, mode, str(path)], check=True,
                                                 capture_output=True, text=True).stdout)
                 for mode in ("build", "unpickle")}
    print(f"{'grammar':<20} {'build ms':>9} {'unpickle ms':>12} {'bytes':>8} {'ratio':>7}")
    ratios = []
    for name, _, data in items:
        build, load = times["build"][name], times["unpickle"][name]
        ratios.append(build / load)
        print(f"{name:<20} {build * 1e3:>9.2f} {load * 1e3:>12.2f} {len(data):>8,} {build / load:>6.1f}x")
    print(f"\nunpickling is {min(ratios):.1f}x (smallest) / {statistics.median(ratios):.1f}x (median) cheaper "
          "than building")


if __name__ == "__main__":
    main()
