"""The peer benchmark's outputs (benchmarks/bench_peers.py: every family both engines serve, written in
its exact format) give back the calls they were written from, one-shot and streamed token by token, and
the same reasoning and content both ways: the benchmark times real work, and none of it is lost."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import grammar_parse  # noqa: F401 - the package as installed, before the benchmark puts the checkout on the path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import bench_peers  # noqa: E402


@pytest.mark.parametrize("name", sorted(bench_peers.FAMILIES))
def test_each_benchmark_output_gives_its_calls(name):
    family = bench_peers.FAMILIES[name]
    ours = bench_peers.Ours(family)
    for text, calls in (bench_peers.workload(family, 2_000), bench_peers.big_argument(family, 3_000)):
        work = bench_peers.Workload("test", text, calls, bench_peers.Tokens(family.specials).chunks(text))
        assert "".join(work.chunks) == text
        streamed, one_shot = ours.stream(work), ours.oneshot(work)
        assert bench_peers.describe_mismatch(calls, streamed.calls) == ""
        assert bench_peers.describe_mismatch(calls, one_shot.calls) == ""
        assert (streamed.reasoning, streamed.content) == (one_shot.reasoning, one_shot.content)
        assert len(calls) >= 1 and (one_shot.content or one_shot.reasoning or not (family.content or family.reasoning))


@pytest.mark.parametrize("name", bench_peers.FLOORS)
@pytest.mark.parametrize("size", [4, 1])
def test_the_hand_written_floor_reads_what_we_read(name, size):
    """The floor (benchmarks/floors.py) is timed only for the same work: the calls, reasoning and content
    ours gives, streamed token by token or in ``size``-character pieces, and one-shot."""
    family = bench_peers.FAMILIES[name]
    ours, floor = bench_peers.Ours(family), bench_peers.Floor(family)
    for text, calls in (bench_peers.workload(family, 2_000), bench_peers.big_argument(family, 3_000)):
        chunks = bench_peers.Tokens(family.specials).chunks(text) if size == 4 else list(text)
        work = bench_peers.Workload("test", text, calls, chunks)
        expected = ours.oneshot(work)
        for got in (floor.stream(work), floor.oneshot(work)):
            assert bench_peers.describe_mismatch(calls, got.calls) == ""
            assert (got.reasoning, got.content) == (expected.reasoning, expected.content)
