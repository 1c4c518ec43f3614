"""`wakeful bench --plot`: the throughput line counts every finished task once, in its second, and
shows a stall as zeros; the file is a PNG; without matplotlib the run is refused before it starts."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from wakeful.bench import plot as bench_plot
from wakeful.core.errors import ConfigError


@pytest.mark.parametrize(
    ("done_at", "series"),
    [
        ([], []),
        ([100.2], [(0.0, 1.0)]),
        ([100.1, 100.9, 101.5], [(0.0, 2.0), (1.0, 1.0)]),
        ([100.5, 103.2], [(0.0, 1.0), (1.0, 0.0), (2.0, 0.0), (3.0, 1.0)]),  # a stall is a dip to 0
        ([99.0], [(0.0, 1.0)]),  # a clock a little behind the sender's counts as the first second
    ],
)
def test_throughput_counts_each_finished_task_once_in_its_second(
    done_at: list[float], series: list[tuple[float, float]]
) -> None:
    assert bench_plot.throughput(done_at, started=100.0) == series
    assert sum(n for _, n in bench_plot.throughput(done_at, started=100.0)) == len(done_at)


def test_the_plot_is_a_png_with_both_panels_drawn(tmp_path: Path) -> None:
    done_at = [100.0 + i * 0.01 for i in range(500)]
    latencies = [float(20 + i % 80) for i in range(500)]
    marks = {"p50": 60.0, "p95": 96.0, "p99": 99.0}
    out = bench_plot.draw(
        tmp_path / "sub" / "bench.png", done_at, 100.0, latencies, "wakeful bench: test", marks=marks
    )
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_without_matplotlib_a_plot_is_refused_before_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a)
    )
    with pytest.raises(ConfigError, match=r"pip install 'wakeful\[plot\]'"):
        bench_plot.require()
